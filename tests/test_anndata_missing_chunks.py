"""AnnData sources with a chunk of their sparse matrix missing (a partial copy) are refused.

zarr reads a chunk without an object as zeros, so a copy interrupted before
every chunk of ``X`` arrived would read wrong counts. ``create_composite`` and
``write_counts`` from the container refuse a missing chunk of ``data`` or
``indices`` inside the stored entries and a missing chunk of ``indptr``
(:mod:`cytearc_vfs.read.sparse_chunk_presence`), naming the source, the array,
the chunk's key and its entries, and nothing is written. The chunks zarr
itself leaves out (``indices`` of a one-column matrix, the ``indptr`` of a
matrix without entries) are accepted and read right.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr

import cytearc_vfs as cv
from cytearc_vfs.errors import MissingChunkError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

N_CELLS, N_GENES = 60, 8
CHUNK = 50  # entries of a chunk of indices and data
SHARD = 100  # entries of a shard (two inner chunks)
INDPTR_CHUNK = 4
LAYOUTS = ["v2", "v3", "v3-sharded"]


def matrix(encoding: str, n_genes: int = N_GENES, density: float = 0.5) -> Any:
    rng = np.random.default_rng(0)
    counts = sp.random(N_CELLS, n_genes, density=density, format="csr", random_state=1)
    counts.data = rng.integers(1, 9, counts.nnz).astype(np.float32)
    return counts if encoding == "csr" else sp.csc_matrix(counts)


def write(path: Path, x: Any, layout: str, *, layers: tuple[str, ...] = ()) -> Path:
    """``x`` as an AnnData store (``X`` and the ``layers``) whose sparse arrays are cut
    in small chunks (and shards), so that a chunk can go missing."""
    data = ad.AnnData(
        X=x,
        layers={name: x.copy() for name in layers},
        obs=pd.DataFrame(index=[f"c{i}" for i in range(x.shape[0])]),
        var=pd.DataFrame(index=[f"g{i}" for i in range(x.shape[1])]),
    )
    write_anndata_zarr(data, path, 2 if layout == "v2" else 3)
    for element in ("X", *(f"layers/{name}" for name in layers)):
        rechunk(path / element, layout)
    return path


def rechunk(element: Path, layout: str) -> None:
    """Write the sparse ``element``'s arrays again in small chunks (shards)."""
    group = zarr.open_group(element, mode="r+", zarr_format=2 if layout == "v2" else 3)
    for name, chunk in (("indptr", INDPTR_CHUNK), ("indices", CHUNK), ("data", CHUNK)):
        values = group[name][:]
        attrs = dict(group[name].attrs)
        del group[name]
        array = group.create_array(
            name,
            shape=values.shape,
            dtype=values.dtype,
            chunks=(chunk,),
            shards=(chunk * 2,) if layout == "v3-sharded" else None,
            fill_value=0,
        )
        array[:] = values
        array.attrs.update(attrs)


def chunk_key(layout: str, name: str, number: int) -> str:
    return f"X/{name}/{number}" if layout == "v2" else f"X/{name}/c/{number}"


def refused(tmp_path: Path, source: Path, pattern: str) -> None:
    """Both ways in refuse ``source`` with ``pattern``, and write nothing."""
    with pytest.raises(MissingChunkError, match=pattern) as caught:
        cv.create_composite(tmp_path / "c.zarr", {"s": str(source)})
    message = str(caught.value)
    assert message.startswith("source 's' at ") and str(source) in message, message
    assert "partial or interrupted copy" in message and "write it again with anndata" in message
    assert not (tmp_path / "c.zarr").exists()
    with pytest.raises(MissingChunkError, match=pattern) as caught:
        cv.write_counts(tmp_path / "w.zarr", str(source))
    assert str(caught.value).startswith(str(source)), caught.value
    assert not (tmp_path / "w.zarr").exists()


def accepted(tmp_path: Path, source: Path, x: Any) -> None:
    """Both ways in accept ``source`` and read ``x``."""
    expected = sp.csr_matrix(x).toarray()
    cv.create_composite(tmp_path / "c.zarr", {"s": str(source)}).close()
    cv.write_counts(tmp_path / "w.zarr", str(source))
    for made in ("c.zarr", "w.zarr"):
        read = cv.to_anndata(tmp_path / made, lazy=False).X
        np.testing.assert_array_equal(sp.csr_matrix(read).toarray(), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("encoding", ["csr", "csc"])
@pytest.mark.parametrize("name", ["data", "indices"])
def test_a_missing_entries_chunk_is_refused(
    tmp_path: Path, layout: str, encoding: str, name: str
) -> None:
    x = matrix(encoding)
    assert x.nnz > 2 * SHARD  # the second shard holds stored entries
    source = write(tmp_path / "s.zarr", x, layout)
    number = 1
    (source / chunk_key(layout, name, number)).unlink()
    outer = SHARD if layout == "v3-sharded" else CHUNK
    start, stop = number * outer, min(x.nnz, (number + 1) * outer)
    key = chunk_key(layout, name, number)
    pattern = rf"lacks the chunk '{key}' of its {name} \(entries {start}:{stop}\)"
    if name == "data":
        pattern += r".*eliminate_zeros\(\)"
    refused(tmp_path, source, pattern)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("encoding", ["csr", "csc"])
@pytest.mark.parametrize("number", [0, 1])
def test_a_missing_indptr_chunk_is_refused(
    tmp_path: Path, layout: str, encoding: str, number: int
) -> None:
    """A middle chunk, or the first one (the rows after it then begin at an entry no
    single row reaches)."""
    x = matrix(encoding)
    source = write(tmp_path / "s.zarr", x, layout)
    (source / chunk_key(layout, "indptr", number)).unlink()
    key = chunk_key(layout, "indptr", number)
    refused(tmp_path, source, rf"lacks the chunk '{key}' of its indptr \(positions \d+:\d+\)")


def test_a_chunk_past_the_stored_entries_may_be_absent(tmp_path: Path) -> None:
    """Chunks past ``nnz`` hold nothing stored: a store whose arrays are longer than
    its entries (anndata allows it) reads without them."""
    x = matrix("csr")
    source = write(tmp_path / "s.zarr", x, "v3")
    for name in ("indices", "data"):
        group = zarr.open_group(source / "X", mode="r+")
        group[name].resize((x.nnz + 3 * CHUNK,))
    last = -(-(x.nnz + 3 * CHUNK) // CHUNK) - 1
    for name in ("indices", "data"):
        (source / chunk_key("v3", name, last)).unlink(missing_ok=True)
    cv.create_composite(tmp_path / "c.zarr", {"s": str(source)}).close()
    read = cv.to_anndata(tmp_path / "c.zarr", lazy=False).X
    np.testing.assert_array_equal(sp.csr_matrix(read).toarray(), x.toarray())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("encoding", ["csr", "csc"])
def test_a_one_column_matrix_whose_indices_zarr_left_out_is_accepted(
    tmp_path: Path, layout: str, encoding: str
) -> None:
    """Every stored index is 0: zarr writes no chunk of ``indices`` at all."""
    x = matrix_one_minor(encoding)
    source = write(tmp_path / "s.zarr", x, layout)
    assert not list((source / "X" / "indices").rglob("c/*")) and not list(
        (source / "X" / "indices").glob("[0-9]*")
    )
    accepted(tmp_path, source, x)


def matrix_one_minor(encoding: str) -> Any:
    """A matrix whose minor axis has length one (one gene of a CSR, one cell of a CSC)."""
    rng = np.random.default_rng(3)
    if encoding == "csr":
        dense = rng.integers(0, 3, (N_CELLS, 1)).astype(np.float32)
        dense[:3] = 1
        return sp.csr_matrix(dense)
    dense = rng.integers(0, 3, (1, N_CELLS)).astype(np.float32)
    dense[0, :3] = 1
    return sp.csc_matrix(dense)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_missing_indices_chunk_of_entries_not_all_at_zero_is_refused(
    tmp_path: Path, layout: str
) -> None:
    """The same absence in a matrix of several columns: rows hold two or more entries
    in the chunk's range, which cannot all be in column 0."""
    x = matrix("csr")
    source = write(tmp_path / "s.zarr", x, layout)
    (source / chunk_key(layout, "indices", 0)).unlink()
    refused(tmp_path, source, rf"lacks the chunk '{chunk_key(layout, 'indices', 0)}'")


def test_a_matrix_without_entries_is_accepted(tmp_path: Path) -> None:
    """Its ``indptr`` is all zeros and zarr stores none of its chunks."""
    x = sp.csr_matrix((N_CELLS, N_GENES), dtype=np.float32)
    source = write(tmp_path / "s.zarr", x, "v3")
    assert not list((source / "X" / "indptr").rglob("c/*"))
    accepted(tmp_path, source, x)


def test_an_inner_chunk_absent_from_its_shard_is_refused(tmp_path: Path) -> None:
    """A shard whose index marks an inner chunk of stored entries absent: here zarr
    left out a chunk of explicit zeros, refused with the remedy to drop them."""
    x = matrix("csr")
    x.data[CHUNK : 2 * CHUNK] = 0  # explicit zeros: the second inner chunk of shard 0
    source = write(tmp_path / "s.zarr", x, "v3-sharded")
    assert (source / "X" / "data" / "c" / "0").exists()
    refused(
        tmp_path,
        source,
        rf"lacks the chunk 'X/data/c/0 \(inner chunk 1\)' of its data \(entries {CHUNK}:"
        rf"{2 * CHUNK}\).*eliminate_zeros\(\) and write the matrix again",
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_layer_is_checked_as_x_is(tmp_path: Path, layout: str) -> None:
    x = matrix("csr")
    source = write(tmp_path / "s.zarr", x, layout, layers=("counts",))
    key = chunk_key(layout, "data", 1).replace("X/", "layers/counts/", 1)
    (source / key).unlink()
    pattern = rf"element 'layers/counts' lacks the chunk '{key}' of its data"
    with pytest.raises(MissingChunkError, match=pattern):
        cv.create_composite(tmp_path / "c.zarr", {"s": str(source)}, source_layers={"s": "counts"})
    assert not (tmp_path / "c.zarr").exists()
    with pytest.raises(MissingChunkError, match=pattern):
        cv.write_counts(tmp_path / "w.zarr", str(source), layer="counts")
    assert not (tmp_path / "w.zarr").exists()
    accepted(tmp_path, source, x)  # X is whole


def test_the_check_lists_nothing_at_creation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creation already walked the source for its versions: the check reuses that
    listing and reads only ``indptr[-1]`` beside what creation reads anyway."""
    from zarr.storage import LocalStore

    x = matrix("csr")
    source = write(tmp_path / "s.zarr", x, "v2")
    listed: collections.Counter[str] = collections.Counter()
    original = LocalStore.list_prefix

    def list_prefix(store: LocalStore, prefix: str) -> Any:
        if Path(store.root) == source:
            listed[prefix] += 1
        return original(store, prefix)

    monkeypatch.setattr(LocalStore, "list_prefix", list_prefix)
    cv.create_composite(tmp_path / "c.zarr", {"s": str(source)}).close()
    assert not [p for p in listed if p.startswith("X")], listed


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_indptr_lost_whole_is_refused_when_entries_are_stored(
    tmp_path: Path, layout: str
) -> None:
    """Every chunk of ``indptr`` missing reads as a matrix without entries: refused
    when ``data`` holds stored chunks (most stores keep ``indptr`` in one chunk)."""
    x = matrix("csr")
    source = write(tmp_path / "s.zarr", x, layout)
    for chunk in list((source / "X" / "indptr").rglob("*")):
        if chunk.is_file() and chunk.name not in ("zarr.json", ".zarray", ".zattrs"):
            chunk.unlink()
    refused(tmp_path, source, r"of its indptr .*every chunk of indptr, while entries are stored")


def _upload(raw: Any, local: Path, name: str) -> None:
    import obstore

    for file in local.rglob("*"):
        if file.is_file():
            obstore.put(raw, f"{name}/{file.relative_to(local).as_posix()}", file.read_bytes())


@pytest.mark.remote
# v3 unsharded reads as v2 does here (one object a chunk); both are checked locally
@pytest.mark.parametrize("layout", ["v2", "v3-sharded"])
def test_a_remote_source_is_checked_from_the_creation_listing(
    s3_server: Any, s3_proxy: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """On object storage the check lists nothing: the listing creation takes for the
    versions names the stored chunks. What else it reads (the chunk of ``indptr[-1]``,
    the shard indexes) creation reads anyway: the check adds no request."""
    from obstore.store import from_url

    from cytearc_vfs.read import anndata_sources

    bucket = s3_server.new_bucket()
    raw = from_url(f"s3://{bucket}", **s3_server.storage_options())
    x = matrix("csr")
    _upload(raw, write(tmp_path / "whole.zarr", x, layout), "whole.zarr")
    broken = write(tmp_path / "broken.zarr", x, layout)
    (broken / chunk_key(layout, "indices", 1)).unlink()
    _upload(raw, broken, "broken.zarr")
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}

    def requests(destination: Path) -> list[str]:
        s3_proxy.take()
        cv.create_composite(
            destination,
            {"s": f"s3://{bucket}/whole.zarr"},
            source_storage_options={"s": options},
        ).close()
        return [f"{r.method} {r.path.split('?')[0]}" for r in s3_proxy.take()]

    with_check = requests(tmp_path / "checked.zarr")
    with monkeypatch.context() as patch:

        async def unchecked(*args: Any, **kwargs: Any) -> None:
            return None

        patch.setattr(anndata_sources, "check_stored_chunks", unchecked)
        without = requests(tmp_path / "unchecked.zarr")
    extra = collections.Counter(with_check) - collections.Counter(without)
    # none: the indptr chunk and the shard indexes it reads are read by creation
    # anyway, and kept (the source cache, the element's kept indexes)
    assert not extra and len(with_check) == len(without), extra
    read = cv.to_anndata(
        tmp_path / "checked.zarr", lazy=False, source_storage_options={"s": options}
    ).X
    np.testing.assert_array_equal(sp.csr_matrix(read).toarray(), x.toarray())
    key = chunk_key(layout, "indices", 1)
    with pytest.raises(MissingChunkError, match=rf"^source 's' at s3://.*lacks the chunk '{key}'"):
        cv.create_composite(
            tmp_path / "c.zarr",
            {"s": f"s3://{bucket}/broken.zarr"},
            source_storage_options={"s": options},
        )
    assert not (tmp_path / "c.zarr").exists()
    s3_proxy.take()
    with pytest.raises(MissingChunkError, match=rf"lacks the chunk '{key}'"):
        cv.write_counts(
            tmp_path / "w.zarr", f"s3://{bucket}/broken.zarr", source_storage_options=options
        )
    assert not (tmp_path / "w.zarr").exists()
    # the check's one listing, of the element; besides it write_counts lists only the
    # tables it fetches at once (obs, var, uns/cytearc), never another element
    listings = [r.path for r in s3_proxy.take() if "list-type" in r.path]
    element = [path for path in listings if "prefix=broken.zarr%2FX%2F" in path]
    assert len(element) == 1, listings
    tables = ("obs%2F", "var%2F", "uns%2Fcytearc%2F")
    assert all(path.endswith(tables) for path in listings if path not in element), listings


def test_the_command_line_exits_3_naming_the_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cytearc_vfs.cli import main

    source = write(tmp_path / "s.zarr", matrix("csr"), "v2")
    (source / "X" / "data" / "1").unlink()
    for command in (
        ["composite", str(tmp_path / "c.zarr"), f"s={source}", "--json"],
        ["write", str(source), str(tmp_path / "w.zarr"), "--json"],
    ):
        assert main(command) == 3
        answer = json.loads(capsys.readouterr().out)
        assert answer["category"] == "damaged" and answer["error"] == "MissingChunkError"
        assert "lacks the chunk 'X/data/1' of its data (entries 50:100)" in answer["message"]
    assert not (tmp_path / "c.zarr").exists() and not (tmp_path / "w.zarr").exists()


def test_a_store_that_cannot_list_is_checked_chunk_by_chunk(tmp_path: Path) -> None:
    """``write_counts`` from a Store without listing asks for each chunk instead."""
    from zarr.storage import LocalStore, WrapperStore

    class Unlisted(WrapperStore[LocalStore]):
        @property
        def supports_listing(self) -> bool:
            return False

        def list_prefix(self, prefix: str) -> Any:
            if prefix.startswith("X"):
                raise AssertionError(f"listed {prefix!r}")
            return super().list_prefix(prefix)

    whole = write(tmp_path / "whole.zarr", matrix("csr"), "v3")
    broken = write(tmp_path / "broken.zarr", matrix("csr"), "v3")
    (broken / chunk_key("v3", "indices", 2)).unlink()
    with pytest.raises(MissingChunkError, match=r"lacks the chunk 'X/indices/c/2'"):
        cv.write_counts(tmp_path / "b.zarr", Unlisted(LocalStore(broken, read_only=True)))
    assert not (tmp_path / "b.zarr").exists()
    info = cv.write_counts(tmp_path / "w.zarr", Unlisted(LocalStore(whole, read_only=True)))
    assert info.not_imported is None  # names cannot be told without listing (docs/anndata.md)
    read = cv.to_anndata(tmp_path / "w.zarr", lazy=False).X
    np.testing.assert_array_equal(sp.csr_matrix(read).toarray(), matrix("csr").toarray())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_leading_empty_rows_whose_indptr_chunks_zarr_left_out_are_accepted(
    tmp_path: Path, layout: str
) -> None:
    """Rows 0-8 empty: the first two chunks of ``indptr`` are zeros, not stored."""
    x = matrix("csr").tolil()
    x[:9] = 0
    x = sp.csr_matrix(x)
    x.eliminate_zeros()
    source = write(tmp_path / "s.zarr", x, layout)
    # two chunks of 4 positions, or the first shard (two inner chunks)
    leading = 1 if layout == "v3-sharded" else 2
    for number in range(leading):
        assert not (source / chunk_key(layout, "indptr", number)).exists()
    assert (source / chunk_key(layout, "indptr", leading)).exists()
    accepted(tmp_path, source, x)


# ``cytearc-vfs anndata ls`` reads no chunk: it marks what one listing of the element
# proves lost (listed_absence), exits 3, and says nothing of what only values tell.


def listed(source: Path | str, *options: str) -> tuple[int, dict[str, Any]]:
    """``anndata ls --json`` of ``source``: its exit code and the entry of ``/X``."""
    from cli_harness import run_main

    done = run_main("anndata", "ls", str(source), "--json", *options)
    answer = json.loads(done.stdout)
    entry = next(e for e in answer["elements"] if e["path"] == "/X")
    return done.returncode, {**entry, "damagedElements": answer["damagedElements"]}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("name", "number"), [("data", 1), ("indices", 1), ("indptr", 1), ("data", 0)]
)
def test_ls_marks_a_chunk_the_listing_proves_lost(
    tmp_path: Path, layout: str, name: str, number: int
) -> None:
    """Before, ``ls`` exited 0 on a partial copy that ``write`` then refused with exit 3."""
    x = matrix("csr")
    assert x.nnz > 2 * SHARD  # a stored chunk after the lost one
    source = write(tmp_path / "s.zarr", x, layout)
    key = chunk_key(layout, name, number)
    (source / key).unlink()
    code, entry = listed(source)
    if name == "indices" and layout != "v3-sharded":
        # 50 entries, fewer than the 60 rows: they may be one per row, all at index 0,
        # which zarr leaves out; only indptr's values tell (write reads them)
        assert code == 0 and not entry["damaged"], entry
        with pytest.raises(MissingChunkError, match=f"lacks the chunk '{key}'"):
            cv.write_counts(tmp_path / "w.zarr", str(source))
        return
    assert code == 3 and entry["damaged"] and entry["damagedElements"] == 1, entry
    assert f"the chunk '{key}' of its {name}" in entry["note"], entry
    assert "partial or interrupted copy" in entry["note"]
    with pytest.raises(MissingChunkError, match=f"lacks the chunk '{key}'"):
        cv.write_counts(tmp_path / "w.zarr", str(source))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ls_marks_an_indptr_lost_whole_and_entries_without_their_indices(
    tmp_path: Path, layout: str
) -> None:
    x = matrix("csr")
    source = write(tmp_path / "s.zarr", x, layout)
    for chunk in list((source / "X" / "indptr").rglob("*")):
        if chunk.is_file() and chunk.name not in ("zarr.json", ".zarray", ".zattrs"):
            chunk.unlink()
    code, entry = listed(source)
    assert code == 3 and "nor any chunk of indptr, while entries are stored" in entry["note"]
    # every chunk of indices lost (data proves 240 entries stored): more entries than
    # rows cannot all be zeros zarr left out, one per row
    other = write(tmp_path / "o.zarr", x, layout)
    for chunk in list((other / "X" / "indices").rglob("*")):
        if chunk.is_file() and chunk.name not in ("zarr.json", ".zarray", ".zattrs"):
            chunk.unlink()
    code, entry = listed(other)
    assert code == 3 and f"'{chunk_key(layout, 'indices', 0)}' of its indices" in entry["note"]


def test_ls_accepts_what_zarr_leaves_out(tmp_path: Path) -> None:
    """The absences ``write`` accepts: indices of one column, the indptr of a matrix
    without entries, leading empty rows, chunks past the stored entries."""
    sources = [write(tmp_path / "one.zarr", matrix_one_minor("csr"), "v3")]
    sources.append(write(tmp_path / "none.zarr", sp.csr_matrix((N_CELLS, N_GENES)), "v3"))
    leading = matrix("csr").tolil()
    leading[:9] = 0
    leading = sp.csr_matrix(leading)
    leading.eliminate_zeros()
    sources.append(write(tmp_path / "leading.zarr", leading, "v2"))
    x = matrix("csr")
    longer = write(tmp_path / "longer.zarr", x, "v3")
    group = zarr.open_group(longer / "X", mode="r+")
    for name in ("indices", "data"):
        group[name].resize((x.nnz + 3 * CHUNK,))
    sources.append(longer)
    for source in sources:
        code, entry = listed(source)
        assert code == 0 and not entry["damaged"], (source, entry)
        cv.write_counts(tmp_path / f"w-{source.name}", str(source))


def test_ls_leaves_what_only_values_tell_to_write(tmp_path: Path) -> None:
    """The last chunk of data lost (nnz is a value of indptr), and an inner chunk a
    shard's index marks absent, are not seen by a listing: ``ls`` exits 0 (as
    docs/anndata.md says), ``write`` refuses them."""
    x = matrix("csr")
    source = write(tmp_path / "s.zarr", x, "v3")
    last = -(-x.nnz // CHUNK) - 1
    (source / chunk_key("v3", "data", last)).unlink()
    (source / chunk_key("v3", "indices", last)).unlink()
    assert listed(source)[0] == 0
    with pytest.raises(MissingChunkError):
        cv.write_counts(tmp_path / "w.zarr", str(source))
    zeros = matrix("csr")
    zeros.data[CHUNK : 2 * CHUNK] = 0
    sharded = write(tmp_path / "sharded.zarr", zeros, "v3-sharded")
    assert listed(sharded)[0] == 0
    with pytest.raises(MissingChunkError):
        cv.write_counts(tmp_path / "w2.zarr", str(sharded))


@pytest.mark.remote
@pytest.mark.parametrize("layout", ["v2", "v3-sharded"])
def test_ls_on_object_storage_lists_the_element_once_and_reads_no_chunk(
    s3_server: Any, s3_proxy: Any, tmp_path: Path, layout: str
) -> None:
    from obstore.store import from_url

    bucket = s3_server.new_bucket()
    raw = from_url(f"s3://{bucket}", **s3_server.storage_options())
    x = matrix("csr")
    _upload(raw, write(tmp_path / "whole.zarr", x, layout), "whole.zarr")
    broken = write(tmp_path / "broken.zarr", x, layout)
    key = chunk_key(layout, "data", 1)
    (broken / key).unlink()
    _upload(raw, broken, "broken.zarr")
    options = json.dumps({**s3_server.storage_options(), "endpoint": s3_proxy.endpoint})
    for name, expected in (("whole.zarr", 0), ("broken.zarr", 3)):
        s3_proxy.take()
        code, entry = listed(f"s3://{bucket}/{name}", "--storage-options", options)
        assert code == expected, entry
        seen = s3_proxy.take()
        reads = [
            r.path.split("?")[0] for r in seen if r.method == "GET" and "list-type" not in r.path
        ]
        documents = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")
        chunks = [p for p in reads if not p.endswith(documents)]
        assert not chunks, chunks  # metadata documents only
        listings = [r.path for r in seen if "list-type" in r.path and "X%2F" in r.path]
        assert len(listings) == 1 and f"prefix={name}%2FX%2F" in listings[0], listings
    assert f"the chunk '{key}' of its data" in entry["note"]
