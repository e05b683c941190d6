"""No writer writes inside, over or around a store it reads, however it is spelled.

An audit deleted sources three ways: ``s3://bkt//a.zarr`` passed the textual
overlap check for ``s3://bkt/a.zarr`` (obstore drops the empty segment) and
``overwrite=True`` then emptied the source; a Store object as destination was
never compared; and ``repack`` of a mount compared the destination with the
mount but not with the mount's source, so a mount repacked into its own source
wiped it. And the command line's ``--overwrite`` removed the old destination
before the writer had checked its inputs, so a refused command (exit 2,
"nothing changed") had deleted it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from cli_harness import run_main, tree_digest
from conftest import realistic_counts
from cytearc_vfs_adapters.anndata_output import export_anndata
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs.remote.addresses import StoreAddress, store_address
from cytearc_vfs.remote.locations import open_location


def _write(location: Any, *, seed: int = 0, **options: Any) -> None:
    cv.write_counts(location, realistic_counts(40, 12, seed=seed), **options)


def _keys(url: str, options: dict[str, Any]) -> list[str]:
    store = open_location(url, read_only=True, storage_options=options)

    async def listed() -> list[str]:
        return sorted([key async for key in store.list()])

    return sync(listed())


# ---------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("s3://bkt/a.zarr", "s3://bkt//a.zarr"),
        ("s3://bkt/a.zarr", "S3://bkt/a.zarr/"),
        ("s3://bkt/a.zarr", "s3a://bkt/./a.zarr"),
        ("s3://bkt/a.zarr", "s3://bkt/a.zarr/inside.zarr"),
        ("gs://bkt/a%2Ezarr", "gcs://bkt/a.zarr"),
        ("http://Host:80/a", "http://host/a/b"),
        ("az://c/a.zarr", "abfs://c/a.zarr"),
    ],
)
def test_spellings_of_one_place_overlap(first: str, second: str) -> None:
    a, b = store_address(first), store_address(second)
    assert a is not None and b is not None
    assert a.overlaps(b) and b.overlaps(a)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("s3://bkt/a.zarr", "s3://bkt/a.zarr2"),
        ("s3://bkt/a.zarr", "s3://other/a.zarr"),
        ("s3://bkt/a.zarr", "gs://bkt/a.zarr"),
        ("http://host:8080/a", "http://host/a"),
    ],
)
def test_different_places_do_not_overlap(first: str, second: str) -> None:
    a, b = store_address(first), store_address(second)
    assert a is not None and b is not None
    assert not a.overlaps(b)


def test_one_bucket_name_on_two_servers_is_two_places() -> None:
    minio = store_address("s3://bkt/a.zarr", {"endpoint": "http://127.0.0.1:9000"})
    aws = store_address("s3://bkt/a.zarr", {"endpoint_url": "https://s3.example.org/"})
    default = store_address("s3://bkt/a.zarr")
    assert minio is not None and aws is not None and default is not None
    assert not minio.overlaps(aws)
    # a server named on one side only may be the default one: refused, to be safe
    assert minio.overlaps(default)


def test_a_store_object_has_the_address_of_its_url(tmp_path: Path) -> None:
    from obstore.store import S3Store

    client = S3Store("bkt", prefix="a.zarr", endpoint="http://127.0.0.1:9", skip_signature=True)
    assert store_address(zarr.storage.ObjectStore(client)) == StoreAddress(
        "s3", "bkt", ("a.zarr",), "http://127.0.0.1:9"
    )
    local = zarr.storage.LocalStore(tmp_path / "x" / ".." / "a.zarr")
    assert store_address(local) == store_address(tmp_path / "a.zarr")
    assert store_address(zarr.storage.MemoryStore()) is None


# ---------------------------------------------------------------- writers


@pytest.mark.remote
def test_a_second_spelling_of_a_remote_source_is_refused(s3_backend: Any) -> None:
    options = s3_backend.storage_options()
    bucket = s3_backend.new_root()[0]
    source = f"{bucket}/victim.zarr"
    _write(source, storage_options=options)
    before = _keys(source, options)
    bucket_name = bucket.removeprefix("s3://")
    from obstore.store import S3Store

    as_store = zarr.storage.ObjectStore(
        S3Store(
            bucket_name,
            prefix="victim.zarr",
            endpoint=options["endpoint"],
            access_key_id=options["access_key_id"],
            secret_access_key=options["secret_access_key"],
            region=options.get("region", "us-east-1"),
            client_options={"allow_http": True},
        )
    )
    writes = [
        lambda: cv.mount_datastore(
            source,
            f"s3://{bucket_name}//victim.zarr",
            source_storage_options=options,
            storage_options=options,
            overwrite=True,
        ),
        lambda: cv.create_composite(
            f"S3://{bucket_name}/victim.zarr/",
            {"a": source},
            source_storage_options={"a": options},
            storage_options=options,
            overwrite=True,
        ),
        lambda: cv.create_composite(
            as_store, {"a": source}, source_storage_options={"a": options}, overwrite=True
        ),
        lambda: cv.repack(
            source,
            f"s3://{bucket_name}/victim.zarr/inside.zarr",
            storage_options=options,
            destination_storage_options=options,
            overwrite=True,
        ),
    ]
    for write in writes:
        with pytest.raises(ValueError, match="overlaps source"):
            write()
    assert _keys(source, options) == before
    cv.open_store(source, storage_options=options)


def test_a_mount_is_never_repacked_into_its_source(tmp_path: Path) -> None:
    source, mount = tmp_path / "src.zarr", tmp_path / "mine.zarr"
    _write(source)
    cv.mount_datastore(source, mount)
    before = tree_digest(source)
    for destination in (source, source / "inside.zarr"):
        with pytest.raises(ValueError, match='overlaps source "the mount\'s source"'):
            cv.repack(mount, destination, overwrite=True)
    with pytest.raises(ValueError, match="overlaps source"):
        cv.repack(mount, tmp_path, overwrite=True)  # around both
    assert tree_digest(source) == before
    cv.open_store(mount)  # the mount still opens over it


@pytest.mark.remote
def test_a_mount_is_never_repacked_into_its_remote_source(s3_backend: Any, tmp_path: Path) -> None:
    options = s3_backend.storage_options()
    source = f"{s3_backend.new_root()[0]}/src.zarr"
    _write(source, storage_options=options)
    cv.mount_datastore(source, tmp_path / "mine.zarr", source_storage_options=options)
    before = _keys(source, options)
    with pytest.raises(ValueError, match="the mount's source"):
        cv.repack(
            tmp_path / "mine.zarr",
            f"{source}/rp.zarr",
            source_storage_options=options,
            destination_storage_options=options,
        )
    assert _keys(source, options) == before


# ---------------------------------------------------------------- --overwrite


@pytest.mark.parametrize(
    "refused",
    [
        ["mount", "{src}", "{old}", "--overwrite", "--assay", "BOGUS"],
        ["mount", "{src}", "{old}", "--overwrite", "--workspace", "nows"],
        ["composite", "{old}", "a={src}", "--assay", "ADT", "--overwrite"],
        ["repack", "{src}", "{old}", "--overwrite", "--mem-budget", "1"],
    ],
    ids=["mount-assay", "mount-workspace", "composite-assay", "repack-budget"],
)
def test_a_refused_overwrite_leaves_the_old_destination(tmp_path: Path, refused: list[str]) -> None:
    src, old = tmp_path / "src.zarr", tmp_path / "old.zarr"
    _write(src)
    _write(old, seed=1)
    before = tree_digest(old)
    args = [part.format(src=src, old=old) for part in refused]
    result = run_main(*args)
    assert result.returncode == 2, result.stderr
    assert tree_digest(old) == before, result.stderr


def test_overwrite_replaces_a_composite_after_the_checks(tmp_path: Path) -> None:
    a, b, comp = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "comp.zarr"
    _write(a)
    _write(b, seed=1)
    cv.create_composite(comp, {"a": a, "b": b})
    before = tree_digest(comp)
    refused = run_main("composite", str(comp), f"a={a}", "--assay", "ADT", "--overwrite")
    assert refused.returncode == 2 and tree_digest(comp) == before, refused.stderr
    done = run_main("composite", str(comp), f"a={a}", "--overwrite")
    assert done.returncode == 0, done.stderr
    assert cv.open_store(comp).reader().shape == (40, 12)
    # the library's overwrite=True still never replaces a composite
    with pytest.raises(FileExistsError, match="is a composite"):
        cv.mount_datastore(a, comp, overwrite=True)


def test_write_overwrite_replaces_a_composite_after_the_checks(tmp_path: Path) -> None:
    # cli.md: write, composite, mount and repack replace a composite with --overwrite;
    # write refused it, with a message whose remedy was the --overwrite just given
    import anndata as ad

    a, comp, h5ad = tmp_path / "a.zarr", tmp_path / "comp.zarr", tmp_path / "in.h5ad"
    _write(a)
    cv.create_composite(comp, {"a": a})
    ad.AnnData(X=np.arange(6, dtype=np.float32).reshape(3, 2)).write_h5ad(h5ad)
    before = tree_digest(comp)
    refused = run_main("write", str(h5ad), str(comp), "--layer", "nope", "--overwrite")
    assert refused.returncode == 2 and tree_digest(comp) == before, refused.stderr
    plain = run_main("write", str(h5ad), str(comp))
    assert plain.returncode == 2 and "--overwrite" in plain.stderr, plain.stderr
    done = run_main("write", str(h5ad), str(comp), "--overwrite")
    assert done.returncode == 0, done.stderr
    counts = zarr.open_array(cv.open_store(comp), path="RNA/counts", mode="r")
    assert counts.shape == (3, 2) and counts[0, 1] == 1
    # a mount target is refused in the command line's words, not Python's
    cv.mount_datastore(a, tmp_path / "m.zarr")
    for args in ([], ["--overwrite"]):
        mount = run_main("write", str(h5ad), str(tmp_path / "m.zarr"), *args)
        assert mount.returncode == 2 and "(--overwrite neither)" in mount.stderr, mount.stderr
        assert "overwrite=True" not in mount.stderr


def test_an_export_stays_out_of_what_the_store_reads(tmp_path: Path) -> None:
    src, mount, comp = tmp_path / "src.zarr", tmp_path / "mine.zarr", tmp_path / "comp.zarr"
    _write(src)
    cv.mount_datastore(src, mount)
    cv.create_composite(comp, {"a": src})
    before = tree_digest(src)
    for store, what in ((mount, "the mount's source"), (comp, "source 'a'")):
        with pytest.raises(ValueError, match=f'overlaps source "?{what}'):
            export_anndata(store, src / "RNA" / "x.h5ad")
        refused = run_main("export", str(store), str(src / "x.h5ad"))
        assert refused.returncode == 2 and "overlaps" in refused.stderr, refused.stderr
    assert tree_digest(src) == before


@pytest.mark.parametrize("exists", [False, True])
def test_a_read_only_store_as_destination_is_refused_by_name(tmp_path: Path, exists: bool) -> None:
    _write(tmp_path / "src.zarr")
    if exists:
        (tmp_path / "out.zarr").mkdir()
    read_only = zarr.storage.LocalStore(tmp_path / "out.zarr", read_only=True)
    writes = [
        lambda: cv.mount_datastore(tmp_path / "src.zarr", read_only),
        lambda: cv.repack(tmp_path / "src.zarr", read_only),
        lambda: cv.create_composite(read_only, {"a": tmp_path / "src.zarr"}),
        lambda: cv.write_counts(read_only, realistic_counts(5, 3)),
    ]
    for write in writes:
        with pytest.raises(ValueError, match=r"is a read-only Store.*read_only=False"):
            write()
    assert not (tmp_path / "out.zarr").exists() or not any((tmp_path / "out.zarr").iterdir())


@pytest.mark.remote
@pytest.mark.parametrize("name", ["sample#1.zarr", "run?v=1.zarr"])
def test_a_url_with_a_query_or_fragment_is_refused(
    s3_backend: Any, tmp_path: Path, name: str
) -> None:
    """obstore dropped what follows '#' or '?': two such URLs wrote one store."""
    options = s3_backend.storage_options()
    bucket = s3_backend.new_root()[0]
    mark = "#" if "#" in name else "?"
    for attempt in (
        lambda: cv.write_counts(
            f"{bucket}/{name}", realistic_counts(5, 3), storage_options=options
        ),
        lambda: cv.open_store(f"{bucket}/{name}", storage_options=options),
        lambda: cv.create_composite(f"{bucket}/{name}", {"a": f"{bucket}/{name}"}),
        lambda: cv.write_counts(f"file://{tmp_path}/{name}", realistic_counts(5, 3)),
    ):
        with pytest.raises(ValueError, match=f"holds '\\{mark}'"):
            attempt()
    assert _keys(bucket, options) == []
    assert list(tmp_path.iterdir()) == []


def test_a_file_url_is_percent_decoded(tmp_path: Path) -> None:
    """RFC 8089: ``file:///d/a%20b.zarr`` is the directory ``a b.zarr`` (and ``%23``
    writes a '#', which a URL cannot hold as itself)."""
    counts = realistic_counts(5, 3)
    for name, encoded in (("a b.zarr", "a%20b.zarr"), ("run#1.zarr", "run%231.zarr")):
        url = f"file://{tmp_path}/{encoded}"
        cv.write_counts(url, counts)
        assert (tmp_path / name / "zarr.json").is_file()
        assert not (tmp_path / encoded).exists()
        reader = cv.VirtualArrayReader(url)
        np.testing.assert_array_equal(reader.read(), counts.toarray())
        with pytest.raises(FileExistsError):
            cv.write_counts(tmp_path / name, counts)
