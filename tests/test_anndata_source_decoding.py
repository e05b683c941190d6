"""The direct chunk decoder of AnnData sources' sparse arrays (``read/direct_chunks.py``).

Ranges read directly equal numpy's slices for Zarr v2 (blosc, zstd, gzip,
zlib, no compressor; big-endian too) and v3 (bytes alone or with zstd, gzip,
blosc; sharded), and arrays it does not decode (filters, other codecs) are
left to zarr. Counted: a read decodes each touched chunk once, batches
included; ``indptr`` chunks are decoded once per open; remote reads make no
more requests than zarr's pipeline makes; a damaged shard index is refused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from unittest import mock

import anndata as ad
import numcodecs
import numpy as np
import pytest
import zarr
from test_anndata_sources import adata, remote_anndata, write  # noqa: F401  (fixture re-export)
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs.read import anndata_reads
from cytearc_vfs.read.direct_chunks import ChunkDecodeError, DirectChunks, direct_chunks_for

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

GENES = [f"g{i:03d}" for i in range(50)]
VALUES = np.arange(10_007, dtype=np.int32) * 7 % 1013


def stored(
    path: Path, values: np.ndarray, *, written: tuple[slice, ...] = (slice(None),), **options: Any
) -> zarr.Array:
    """``values`` in an array of 1,000-entry chunks; only the ``written`` stretches are
    stored (the rest of a chunk never written reads as the fill value)."""
    array = zarr.create_array(
        path, shape=values.shape, chunks=(1000,), dtype=values.dtype, **options
    )
    for part in written:
        array[part] = values[part]
    return array


def v2_array(path: Path, values: np.ndarray, compressor: Any) -> zarr.Array:
    return stored(path, values, zarr_format=2, compressors=compressor)


CASES: dict[str, Any] = {
    "v2 blosc": lambda p: v2_array(p, VALUES, numcodecs.Blosc(cname="lz4", shuffle=1)),
    "v2 zstd": lambda p: v2_array(p, VALUES, numcodecs.Zstd(level=1)),
    "v2 gzip": lambda p: v2_array(p, VALUES, numcodecs.GZip(level=1)),
    "v2 zlib": lambda p: v2_array(p, VALUES, numcodecs.Zlib(level=1)),
    "v2 none": lambda p: v2_array(p, VALUES, None),
    "v2 big-endian float": lambda p: v2_array(p, VALUES.astype(">f8"), numcodecs.Zstd(level=1)),
    "v3 bytes": lambda p: stored(p, VALUES, compressors=None),
    "v3 zstd": lambda p: stored(p, VALUES, compressors=ZstdCodec(level=1)),
    "v3 gzip": lambda p: stored(p, VALUES, compressors=GzipCodec(level=1)),
    "v3 blosc": lambda p: stored(p, VALUES, compressors=BloscCodec(cname="zstd")),
    "v3 big-endian": lambda p: stored(
        p, VALUES.astype(np.int64), serializer=BytesCodec(endian="big"), compressors=None
    ),
    "v3 sharded": lambda p: stored(p, VALUES, shards=(4000,), compressors=ZstdCodec()),
    # chunks (and, sharded, inner chunks) never written read as the fill value 5
    "v3 sharded, part empty": lambda p: stored(
        p, VALUES, shards=(4000,), fill_value=5, written=(slice(0, 2500), slice(7000, None))
    ),
    "v2 part empty": lambda p: stored(
        p, VALUES, zarr_format=2, fill_value=5, written=(slice(2000, 4000),)
    ),
    "v3 part empty": lambda p: stored(p, VALUES, fill_value=5, written=(slice(2000, 4000),)),
}


def expected_values(array: zarr.Array) -> np.ndarray:
    return np.asarray(array[:])


@pytest.mark.parametrize("case", list(CASES))
def test_ranges_equal_numpy_slices(tmp_path: Path, case: str) -> None:
    array = CASES[case](tmp_path / "a.zarr")
    direct = direct_chunks_for(array.async_array)
    assert isinstance(direct, DirectChunks), case
    values = expected_values(array)
    rng = np.random.default_rng(1)
    starts = np.sort(rng.choice(len(values) - 30, 60, replace=False))
    ends = np.minimum(starts + rng.integers(0, 30, 60), np.append(starts[1:], len(values)))
    got, decoded = sync(direct.read_ranges(starts, ends))
    want = np.concatenate([values[a:b] for a, b in zip(starts, ends, strict=True)])
    assert got.dtype == values.dtype
    np.testing.assert_array_equal(got, want)
    touched = {
        c
        for a, b in zip(starts, ends, strict=True)
        if b > a
        for c in range(a // 1000, (b - 1) // 1000 + 1)
    }
    assert decoded == len(touched)
    whole, decoded = sync(direct.read_ranges(np.array([0]), np.array([len(values)])))
    np.testing.assert_array_equal(whole, values)
    assert decoded == -(-len(values) // 1000)
    empty, decoded = sync(direct.read_ranges(np.array([4, 9]), np.array([4, 9])))
    assert len(empty) == 0 and decoded == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda p: stored(
            p, VALUES, zarr_format=2, compressors=numcodecs.Zstd(), filters=[numcodecs.Delta("i4")]
        ),
        lambda p: stored(p, VALUES, compressors=[ZstdCodec(), Crc32cCodec()]),
        lambda p: zarr.create_array(
            p, shape=(3, 4), chunks=(2, 2), dtype=np.int32, zarr_format=2, order="F"
        ),
        lambda p: zarr.create_array(p, shape=(2, 2, 2), chunks=(1, 1, 1), dtype=np.int32),
    ],
    ids=["v2 filter", "v3 two codecs after bytes", "v2 column-major", "three dimensions"],
)
def test_other_arrays_are_left_to_zarr(tmp_path: Path, make: Any) -> None:
    assert direct_chunks_for(make(tmp_path / "a.zarr").async_array) is None


MATRIX = (np.arange(97 * 61, dtype=np.int32).reshape(97, 61) * 5 % 89).astype(np.float32)
BLOCKS: dict[str, Any] = {
    "v2 blosc": dict(zarr_format=2, compressors=numcodecs.Blosc(), chunks=(10, 7)),
    "v2 gzip big-endian": dict(
        zarr_format=2, compressors=numcodecs.GZip(), chunks=(16, 16), dtype=">f4"
    ),
    "v3 zstd": dict(chunks=(10, 7), compressors=ZstdCodec()),
    "v3 sharded": dict(chunks=(10, 7), shards=(30, 21), compressors=ZstdCodec()),
    "v3 sharded, part empty": dict(chunks=(10, 7), shards=(30, 21), fill_value=3, empty=True),
}


@pytest.mark.parametrize("case", list(BLOCKS))
def test_blocks_of_2d_arrays_equal_numpy(tmp_path: Path, case: str) -> None:
    options = dict(BLOCKS[case])
    empty = options.pop("empty", False)
    dtype = options.pop("dtype", MATRIX.dtype)
    array = zarr.create_array(tmp_path / "a.zarr", shape=MATRIX.shape, dtype=dtype, **options)
    if empty:
        array[:40] = MATRIX[:40]  # the shards below row 60 are never written
    else:
        array[:] = MATRIX
    values = np.asarray(array[:])
    direct = direct_chunks_for(array.async_array)
    assert isinstance(direct, DirectChunks)
    rng = np.random.default_rng(4)
    for rows, cols in [
        (np.arange(97), np.arange(61)),
        (np.sort(rng.choice(97, 13, replace=False)), np.sort(rng.choice(61, 9, replace=False))),
        (np.arange(20, 45), np.sort(rng.choice(61, 30, replace=False))),
        (np.array([96]), np.arange(55, 61)),
    ]:
        out = np.full((120, 70), -1, dtype=np.float64)
        out_rows = rng.permutation(120)[: len(rows)]
        out_cols = np.arange(len(cols)) + 2
        decoded = sync(direct.read_block(rows, cols, out, out_rows, out_cols))
        np.testing.assert_array_equal(out[np.ix_(out_rows, out_cols)], values[np.ix_(rows, cols)])
        untouched = np.ones(out.shape, dtype=bool)
        untouched[np.ix_(out_rows, out_cols)] = False
        assert bool(np.all(out[untouched] == -1))
        chunks = array.chunks
        assert decoded == len(np.unique(rows // chunks[0])) * len(np.unique(cols // chunks[1]))


def test_a_damaged_shard_index_is_refused(tmp_path: Path) -> None:
    array = stored(tmp_path / "a.zarr", VALUES, shards=(4000,), compressors=ZstdCodec())
    shard = tmp_path / "a.zarr" / "c" / "0"
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF  # inside the index, before its checksum
    shard.write_bytes(bytes(data))
    direct = direct_chunks_for(array.async_array)
    assert direct is not None
    with pytest.raises(ChunkDecodeError, match="crc32c"):
        sync(direct.read_ranges(np.array([10]), np.array([20])))


@pytest.mark.parametrize("case", ["v2 zstd", "v2 blosc", "v3 gzip", "v3 sharded"])
def test_a_damaged_chunk_is_an_error_naming_it(tmp_path: Path, case: str) -> None:
    array = CASES[case](tmp_path / "a.zarr")
    files = sorted(
        f
        for f in (tmp_path / "a.zarr").rglob("*")
        if f.is_file() and not f.name.startswith((".", "zarr"))
    )
    for file in files:  # every chunk (or shard) cut short
        data = file.read_bytes()
        file.write_bytes(
            data[: len(data) // 2] if "sharded" not in case else data[:40] + data[-68:]
        )
    direct = direct_chunks_for(array.async_array)
    assert direct is not None
    with pytest.raises(ChunkDecodeError, match=r"chunk \(\d+,\) of .*restore it|shard"):
        sync(direct.read_ranges(np.array([10]), np.array([2020])))


# ------------------------------------------------------------ through a composite


def csr_or_csc(n_cells: int, prefix: str, *, seed: int, encoding: str = "csr") -> ad.AnnData:
    """An AnnData over :data:`GENES`, X as ``encoding``."""
    return adata(n_cells, GENES, prefix, seed=seed, encoding=encoding)


class DecodeCounter:
    """Counts each direct decode by (array path, chunk bytes' identity)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def wrap(self, reader: cv.VirtualArrayReader) -> None:
        for source in reader._mapping.sources:
            assert source.anndata is not None
            for name, direct in source.anndata.direct.items():
                assert direct is not None, name
                original = direct._decode

                def counting(data: Any, nbytes: int, _o: Any = original, _n: str = name) -> Any:
                    self.calls.append(_n)
                    return _o(data, nbytes)

                direct._decode = counting  # type: ignore[method-assign]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_read_in_batches_decodes_each_touched_chunk_once(
    tmp_path: Path, zarr_format: int
) -> None:
    data = csr_or_csc(3000, "a", seed=3)
    path = write(data, tmp_path / "a.zarr", zarr_format)
    group = zarr.open_group(path, mode="r")
    size = {name: group[f"X/{name}"].chunks[0] for name in ("indptr", "indices", "data")}
    cv.create_composite(tmp_path / "c.zarr", {"a": path}).close()
    reader = cv.open_store(tmp_path / "c.zarr").reader()
    counter = DecodeCounter()
    counter.wrap(reader)
    cells = np.sort(np.random.default_rng(2).choice(3000, 700, replace=False))
    indptr = data.X.indptr
    positions = np.concatenate([np.arange(indptr[c], indptr[c + 1]) for c in cells])
    touched = len(np.unique(positions // size["data"]))
    bounds = np.unique(np.concatenate([cells, cells + 1]))
    pointer_chunks = len(np.unique(bounds // size["indptr"]))
    # batches of ~1/5 of the entries: the chunks two batches share are decoded once
    with mock.patch.object(anndata_reads, "ENTRY_BATCH", len(positions) // 5):
        reader.reset_stats()
        block = reader.read(cells)
    np.testing.assert_array_equal(block, data.X.toarray()[cells].astype(block.dtype))
    assert counter.calls.count("data") == touched
    assert counter.calls.count("indices") == len(np.unique(positions // size["indices"]))
    assert counter.calls.count("indptr") == pointer_chunks
    assert reader.stats.chunks_decoded == len(counter.calls)
    # indptr is decoded once per open: a second read decodes none of it
    counter.calls.clear()
    matrix = reader.read_sparse(cells)
    np.testing.assert_array_equal(matrix.toarray(), block)
    assert "indptr" not in counter.calls
    assert counter.calls.count("data") == touched


def test_csc_sources_are_decoded_directly(tmp_path: Path) -> None:
    data = csr_or_csc(400, "b", seed=4, encoding="csc")
    path = write(data, tmp_path / "b.zarr", 2)
    cv.create_composite(tmp_path / "c.zarr", {"b": path}).close()
    reader = cv.open_store(tmp_path / "c.zarr").reader()
    counter = DecodeCounter()
    counter.wrap(reader)
    genes = [3, 17, 40]
    np.testing.assert_array_equal(
        reader.read(None, genes), data.X.toarray()[:, genes].astype(reader.dtype)
    )
    assert counter.calls  # read by the direct decoder
    np.testing.assert_array_equal(
        reader.read_sparse([5, 1, 5], genes).toarray(),
        data.X.toarray()[np.ix_([5, 1, 5], genes)].astype(reader.dtype),
    )


# ------------------------------------------------------------ remote


@pytest.mark.remote
def test_remote_reads_make_no_more_requests_than_zarr(
    remote_anndata: dict[str, Any],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    remote = remote_anndata
    location = tmp_path / "c.zarr"
    options = remote["options"]
    cv.create_composite(location, remote["sources"], source_storage_options=options).close()
    truth = remote["expected"].X.toarray()
    cells = np.sort(np.random.default_rng(3).choice(len(truth), 300, replace=False))
    requests = {}
    for route in ("zarr", "direct"):
        store = cv.open_store(location, source_storage_options=options)
        reader = store.reader()
        if route == "zarr":
            for source in reader._mapping.sources:
                assert source.anndata is not None
                source.anndata.direct.update(dict.fromkeys(source.anndata.direct))
        remote["proxy"].take()
        reader.reset_stats()
        block = reader.read(cells)
        seen = remote["proxy"].take()
        order = [list(remote["expected"].var_names).index(f) for f in reader.feature_ids]
        np.testing.assert_array_equal(block, truth[cells][:, order].astype(block.dtype))
        requests[route] = (reader.stats.requests, len(seen))
        np.testing.assert_array_equal(reader.read_sparse(cells).toarray(), block)
        store.close()
    assert requests["direct"][0] <= requests["zarr"][0]
    assert requests["direct"][1] <= requests["zarr"][1]


def test_arrays_the_decoder_does_not_take_are_read_through_zarr(tmp_path: Path) -> None:
    """A sparse ``data`` and a dense ``X`` rewritten with a filter: zarr's pipeline
    reads them, with the same values."""
    sparse_data = csr_or_csc(300, "a", seed=5)
    sparse_data.X = sparse_data.X.astype(np.int32)
    dense_data = ad.AnnData(X=sparse_data.X.toarray(), obs=sparse_data.obs, var=sparse_data.var)
    dense_data.obs_names = [f"d{i}" for i in range(dense_data.n_obs)]
    sources = {
        "sparse": write(sparse_data, tmp_path / "s.zarr", 2),
        "dense": write(dense_data, tmp_path / "d.zarr", 2),
    }
    for path, key in ((sources["sparse"], "X/data"), (sources["dense"], "X")):
        group = zarr.open_group(path, mode="r+", use_consolidated=False)
        old = group[key]
        assert isinstance(old, zarr.Array)
        values, attrs = old[...], dict(old.attrs)
        new = group.create_array(
            key,
            shape=values.shape,
            dtype=values.dtype,
            chunks=old.chunks,
            filters=[numcodecs.Delta(dtype="<i4")],
            compressors=numcodecs.Zstd(),
            overwrite=True,
        )
        new[...] = values
        new.attrs.update(attrs)
        if (path / ".zmetadata").exists():
            zarr.consolidate_metadata(path, zarr_format=2)
    cv.create_composite(tmp_path / "c.zarr", sources).close()
    reader = cv.open_store(tmp_path / "c.zarr").reader()
    bound = {source.name: source.anndata for source in reader._mapping.sources}
    assert bound["sparse"] is not None and bound["dense"] is not None
    assert bound["sparse"].direct["data"] is None  # zarr's pipeline
    assert bound["sparse"].direct["indices"] is not None
    assert bound["dense"].direct["dense"] is None
    truth = np.vstack([sparse_data.X.toarray(), dense_data.X])
    order = [GENES.index(f) for f in reader.feature_ids]
    truth = truth[:, order]
    cells = np.random.default_rng(6).choice(len(truth), 80, replace=True)
    np.testing.assert_array_equal(reader.read(), truth)
    np.testing.assert_array_equal(reader.read(cells), truth[cells])
    np.testing.assert_array_equal(
        reader.read_sparse(cells, [4, 1]).toarray(), truth[cells][:, [4, 1]]
    )


def test_local_shards_are_read_one_pread_per_touched_inner_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local source's sharded ``indices`` and ``data``: once the shard indexes are
    kept, a read makes one request per touched inner chunk, of exactly its stored
    bytes, read on the decoding threads (no hop through the event loop's executor),
    and reads the same values as zarr."""
    data = csr_or_csc(600, "a", seed=5)
    path = write(data, tmp_path / "a.zarr", 3)
    group = zarr.open_group(path / "X", mode="r+", use_consolidated=False)
    for name in ("indices", "data"):
        values = group[name][:]  # type: ignore[index]
        del group[name]
        group.create_array(name, data=values, chunks=(500,), shards=(4000,))
    zarr.consolidate_metadata(path)
    cv.create_composite(tmp_path / "c.zarr", {"a": path}).close()
    reader = cv.open_store(tmp_path / "c.zarr").reader()
    rows = np.array([3, 90, 91, 300, 599])
    expected = data.X[rows].toarray()
    np.testing.assert_array_equal(reader.read(rows), expected)  # keeps the indexes
    indptr = np.asarray(group["indptr"][:])  # type: ignore[index]
    touched = sorted(
        {c for r in rows for c in range(indptr[r] // 500, (indptr[r + 1] - 1) // 500 + 1)}
    )
    stored = 0
    for name in ("indices", "data"):
        for chunk in touched:
            shard, inner = divmod(chunk, 8)
            raw = (path / "X" / name / "c" / str(shard)).read_bytes()
            entries = np.frombuffer(raw[-(16 * 8 + 4) : -4], dtype="<u8").reshape(8, 2)
            stored += int(entries[inner, 1])
    hops: list[Any] = []
    original = asyncio.BaseEventLoop.run_in_executor

    def counting(self: Any, *args: Any) -> Any:
        hops.append(args)
        return original(self, *args)

    monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", counting)
    for read in (reader.read, reader.read_sparse):
        reader.reset_stats()
        got = read(rows)
        np.testing.assert_array_equal(
            got if isinstance(got, np.ndarray) else got.toarray(), expected
        )
        assert reader.stats.requests == 2 * len(touched)
        assert reader.stats.bytes_read == stored
        assert reader.stats.chunks_decoded == 2 * len(touched)
    assert hops == []
