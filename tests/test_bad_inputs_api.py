"""Bad inputs a user passes to the public functions: a clear refusal, and nothing written.

Each case is what a real caller writes by mistake (a URL short of a slash, a
bytes path, an empty variable, one assay name where a list belongs, a set of
feature ids). The refusal names the problem and the remedy, comes before
anything is read or created, and leaves the folder as it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from cli_harness import run_main

import cytearc_vfs as cv
from cytearc_vfs.remote.failures import BackendOptionsError


@pytest.fixture
def source(tmp_path: Path) -> str:
    counts = np.arange(12, dtype=np.int64).reshape(4, 3)
    return cv.write_counts(tmp_path / "a.zarr", counts, features=["g0", "g1", "g2"]).location


def _listing(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


# ------------------------------------------------------------------ locations

#: (location, error, message): what each malformed location is refused with
LOCATIONS: list[tuple[object, type[Exception], str]] = [
    # obstore's "Generic URL error" with a Rust debug dump, or advice to check credentials
    ("s3:/bucket/a.zarr", ValueError, r"did you mean 's3://bucket/a\.zarr'\?"),
    ("s3:///bucket/a.zarr", ValueError, r"did you mean 's3://bucket/a\.zarr'\?"),
    ("gs:bucket/a.zarr", ValueError, r"did you mean 'gs://bucket/a\.zarr'\?"),
    ("https:/host/a.zarr", ValueError, r"did you mean 'https://host/a\.zarr'\?"),
    # the ':' left out: the folder ./s3/bucket/a.zarr, which a writer created
    ("s3//bucket/a.zarr", ValueError, r"without its ':'; did you mean 's3://bucket/a\.zarr'\?"),
    ("gs//bucket/a.zarr", ValueError, r"did you mean 'gs://bucket/a\.zarr'\? \(a folder"),
    # a mistyped scheme: it said only to pip install an extra
    ("htps://host/a.zarr", ValueError, r"scheme 'htps'\); did you mean 'https://host/a\.zarr'\?"),
    ("s3a://bucket/a.zarr", ValueError, r"did you mean 's3://bucket/a\.zarr'\?"),
    # pathlib's "argument should be a str or an os.PathLike object ... not 'bytes'"
    (b"a.zarr", TypeError, r"location b'a\.zarr' is bytes; pass the path or URL as a str"),
    # os.fspath's "expected str, bytes or os.PathLike object" (bytes are not taken)
    (None, TypeError, r"location must be a path, a URL or a zarr Store, not NoneType"),
    (["a.zarr"], TypeError, r"location must be a path, a URL or a zarr Store, not list$"),
    # a Group opened on the store (zarr.open_group(path)) is not the store
    (zarr.group(), TypeError, r"not Group; pass the path or URL .*, or its store \(group\.store\)"),
    # "" was the current directory: a writer refused it as a folder of foreign keys
    ("", ValueError, r"location is an empty string; give a path or URL"),
    # the host was dropped: file://out.zarr meant the current directory, and
    # file://server/x.zarr the local /x.zarr
    ("file://out.zarr", ValueError, r"names the host 'out\.zarr'.* did you mean 'out\.zarr' \("),
    ("file://server/x.zarr", ValueError, r"names the host 'server', and a file URL reaches"),
]


def _open(source: str, location: Any, tmp_path: Path) -> object:
    return cv.open_store(location)


def _write(source: str, location: Any, tmp_path: Path) -> object:
    return cv.write_counts(location, np.ones((2, 2)))


def _compose_from(source: str, location: Any, tmp_path: Path) -> object:
    return cv.create_composite(tmp_path / "c.zarr", {"a": source, "b": location})


def _compose_into(source: str, location: Any, tmp_path: Path) -> object:
    return cv.create_composite(location, {"a": source})


def _mount_from(source: str, location: Any, tmp_path: Path) -> object:
    return cv.mount_datastore(location, tmp_path / "m.zarr")


def _mount_into(source: str, location: Any, tmp_path: Path) -> object:
    return cv.mount_datastore(source, location)


def _read(source: str, location: Any, tmp_path: Path) -> object:
    return cv.VirtualArrayReader(location)


ENTRY_POINTS: dict[str, Callable[[str, Any, Path], object]] = {
    "open_store": _open,
    "write_counts": _write,
    "create_composite source": _compose_from,
    "create_composite destination": _compose_into,
    "mount_datastore source": _mount_from,
    "mount_datastore destination": _mount_into,
    "VirtualArrayReader": _read,
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize(("location", "error", "message"), LOCATIONS)
def test_a_malformed_location_is_refused_by_name_and_writes_nothing(
    tmp_path: Path,
    source: str,
    monkeypatch: pytest.MonkeyPatch,
    entry: str,
    location: object,
    error: type[Exception],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # a location taken as a relative path would land here
    before = _listing(tmp_path)
    with pytest.raises(error, match=message):
        ENTRY_POINTS[entry](source, location, tmp_path)
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("options", ["anon", [("anon", True)], 1])
def test_storage_options_that_are_not_a_mapping_are_named(tmp_path: Path, options: object) -> None:
    # "cannot convert dictionary update sequence element #0 to a sequence"
    with pytest.raises(TypeError, match=r"storage_options of s3://bkt/a\.zarr must be a mapping"):
        cv.open_store("s3://bkt/a.zarr", storage_options=options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # obstore panicked in Rust (a PanicException, past `except Exception`)
        ({"allow_http": True}, r"'allow_http' belongs to obstore's HTTP client and goes in "),
        ({"timeout": "5s", "proxy_url": "x"}, r"'proxy_url', 'timeout' belong to .* go in"),
        # obstore's errors ended in Rust's debug dump of the error
        ({"bogus_key": 1}, r"Configuration key: 'bogus_key' is not valid for store"),
        ({"client_options": {"bogus": 1}}, r"Invalid key: bogus\. \(ValueError\)"),
    ],
    ids=["client-option", "client-options", "unknown", "unknown-client-option"],
)
def test_storage_options_obstore_cannot_take_are_refused_by_name(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    prefix = r"^s3://bkt/x\.zarr: the storage backend refused its options: "
    with pytest.raises(BackendOptionsError, match=prefix + f".*{message}.*fix the storage opt"):
        cv.open_store("s3://bkt/x.zarr", storage_options=options)
    with pytest.raises(ValueError, match=message):
        cv.write_counts("s3://bkt/x.zarr", np.ones((2, 2)), storage_options=options)
    result = run_main("info", "s3://bkt/x.zarr", "--storage-options", json.dumps(options))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert re.search(message, result.stderr), result.stderr
    assert "; fix --storage-options" in result.stderr, result.stderr


def test_a_password_in_a_url_is_never_printed(tmp_path: Path) -> None:
    """A store that could not be reached was named with the URL's password in the message."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])  # closed once the probe goes: refused at once
    options = {
        "endpoint": f"http://127.0.0.1:{port}",
        "client_options": {"allow_http": True},
        "retry_config": {"max_retries": 0},
        "access_key_id": "a",
        "secret_access_key": "b",
    }
    url = "s3://KEY:SECRET@bkt/x.zarr"
    for attempt in (
        lambda: cv.open_store(url, storage_options=options),
        lambda: cv.write_counts(url, np.ones((2, 2)), storage_options=options),
        lambda: cv.create_composite(tmp_path / "c.zarr", {"a": url}),
    ):
        with pytest.raises(Exception) as caught:
            attempt()
        assert "SECRET" not in str(caught.value) and "KEY:***@bkt" in str(caught.value)
    # obstore's own message names the URL it requested, password and all: quoted, it
    # showed it in the middle of a masked message, in Python and on the command line
    http_url = f"http://user:SECRET@127.0.0.1:{port}/x.zarr"
    http_options = {"client_options": {"allow_http": True}, "retry_config": {"max_retries": 0}}
    with pytest.raises(Exception) as caught:
        cv.open_store(http_url, storage_options=http_options)
    assert "SECRET" not in str(caught.value) and "user:***@127.0.0.1" in str(caught.value)
    # and a store object's own description, which names its URL as given
    from obstore.store import HTTPStore
    from zarr.storage import ObjectStore

    given = ObjectStore(HTTPStore.from_url(http_url, **http_options), read_only=True)  # type: ignore[arg-type]
    with pytest.raises(Exception) as caught:
        cv.open_store(given)
    assert "SECRET" not in str(caught.value) and "user:***@127.0.0.1" in str(caught.value)
    result = run_main("info", http_url, "--storage-options", json.dumps(http_options))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "SECRET" not in result.stderr and "user:***@" in result.stderr, result.stderr


def test_well_formed_urls_and_paths_still_open(tmp_path: Path, source: str) -> None:
    # file: with one slash is a valid file URL (RFC 8089), and memory:// has no host
    assert cv.open_store("file:" + source) is not None
    assert cv.open_store("file://" + source) is not None  # three slashes: no host
    assert cv.open_store("file://localhost" + source) is not None
    assert cv.open_store(Path(source)) is not None
    with pytest.raises(ValueError, match="holds no Zarr group"):
        cv.open_store("memory://nothing-here")


# ------------------------------------------------------------------ mounts


@pytest.mark.parametrize(
    ("assays", "error", "message"),
    [
        # IndexError: list index out of range, after the destination was created
        ([], ValueError, r"assays= is empty: a mount holds at least one assay"),
        # zarr's ContainsGroupError, after the destination was created
        (["RNA", "RNA"], ValueError, r"^assays names 'RNA' more than once"),
        # "assay(s) A, N, R are not in ...": the string was read letter by letter
        ("RNA", TypeError, r"assays= is one string \('RNA'\); pass a list .* assays=\['RNA'\]"),
        ([1], TypeError, r"assays= holds 1 \(int\); assay names are strings"),
        # "assay(s)  are not in ... (it holds RNA)": an empty name (--assay "$A") showed as nothing
        ([""], ValueError, r"assay\(s\) '' are not in .* \(it holds 'RNA'\); choose among"),
        (["ADT", "RNA"], ValueError, r"assay\(s\) 'ADT' are not in .* \(it holds 'RNA'\)"),
        (5, TypeError, r"assays= is a list of assay names, not int"),
    ],
)
def test_a_bad_assays_list_is_refused_before_the_mount_is_created(
    tmp_path: Path, source: str, assays: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        cv.mount_datastore(source, tmp_path / "m.zarr", assays=assays)  # type: ignore[arg-type]
    assert not (tmp_path / "m.zarr").exists()
    # and a tuple of names is a list of names
    mounted = cv.mount_datastore(source, tmp_path / "m.zarr", assays=("RNA",))
    assert cv.VirtualArrayReader(mounted).read().tolist() == np.arange(12).reshape(4, 3).tolist()


# ------------------------------------------------------------------ composites


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        # "cells= names unknown source(s) [0, 1]", after every source was read
        ({"cells": [0, 1]}, TypeError, r"cells= maps source names to values, such as \{'a': "),
        ({"source_layers": "counts"}, TypeError, r"source_layers= maps source names to values"),
        # a set's order changes between runs, and with it the composite's identity
        ({"features": {"g1", "g0"}}, TypeError, r"features= is of type set; .* ordered sequence"),
        ({"features": 3}, TypeError, r"features= is of type int"),
        # a composite of no features reads nothing
        ({"features": []}, ValueError, r"features= is an empty list"),
    ],
)
def test_composite_options_of_the_wrong_kind_are_refused_before_the_sources_are_read(
    tmp_path: Path,
    source: str,
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    import cytearc_vfs.composite.create as creating

    def unreachable(*args: object, **kwargs: object) -> None:
        raise AssertionError("a source was bound before the options were checked")

    monkeypatch.setattr(creating, "bind_sources", unreachable)
    with pytest.raises(error, match=message):
        cv.create_composite(tmp_path / "c.zarr", {"a": source}, **options)
    assert not (tmp_path / "c.zarr").exists()


def test_an_ordered_feature_list_keeps_its_order(tmp_path: Path, source: str) -> None:
    reader = cv.create_composite(tmp_path / "c.zarr", {"a": source}, features=("g2", "g0")).reader(
        "RNA"
    )
    assert reader.feature_ids.tolist() == ["g2", "g0"]
    assert reader.read().tolist() == np.arange(12).reshape(4, 3)[:, [2, 0]].tolist()


def test_sources_that_share_no_feature_id_are_refused_an_intersection(
    tmp_path: Path, source: str
) -> None:
    # symbols against the fixture's g0..g2: before, a composite of 4 + 2 cells and no features
    symbols = cv.write_counts(tmp_path / "b.zarr", np.ones((2, 2)), features=["CD3E", "CD4"])
    with pytest.raises(ValueError, match="share no feature id") as refused:
        cv.create_composite(
            tmp_path / "c.zarr", {"a": source, "b": symbols.location}, features="intersection"
        )
    assert "'a': ['g0', 'g1', 'g2']; 'b': ['CD3E', 'CD4']" in str(refused.value)
    assert "features='union'" in str(refused.value)
    assert not (tmp_path / "c.zarr").exists()


def test_one_store_as_two_sources_is_warned_of_and_listed_twice_refused(
    tmp_path: Path, source: str
) -> None:
    with pytest.warns(cv.VfsWarning, match="'x' and 'y' are the same store .* twice") as caught:
        reader = cv.create_composite(tmp_path / "c.zarr", {"x": source, "y": source}).reader()
    assert caught[0].filename == __file__  # the line that asked for it
    assert reader.shape == (8, 3)
    assert [i.split("-")[0] for i in reader.cell_ids] == ["x"] * 4 + ["y"] * 4
    # a list names both 'a': the remedy said to map two names to the same store
    with pytest.raises(ValueError, match="is listed twice; list each source once"):
        cv.create_composite(tmp_path / "d.zarr", [source, source])
    assert not (tmp_path / "d.zarr").exists()


# ------------------------------------------------------------------ small public types


@pytest.mark.parametrize(
    "sizes",
    [("64M", "1M"), (1.5, 1), (True, 1), (2**20, None)],
    ids=["str", "float", "bool", "None"],
)
def test_a_layout_policy_takes_byte_counts_and_names_parse_for_sizes(
    sizes: tuple[Any, Any],
) -> None:
    # "'<' not supported between instances of 'str' and 'int'"
    with pytest.raises(TypeError, match=r"is a byte count \(an int\), not .*LayoutPolicy\.parse"):
        cv.LayoutPolicy(*sizes)


def test_a_layout_policy_of_numpy_integers_records_python_ints() -> None:
    policy = cv.LayoutPolicy(np.int64(2**20), np.int32(2**10))
    assert type(policy.unit_bytes) is int and type(policy.chunk_bytes) is int
    assert policy == cv.LayoutPolicy(2**20, 2**10)


def test_anndata_view_names_an_unknown_option_and_the_options_it_takes(source: str) -> None:
    # "open_assay() got an unexpected keyword argument 'foo'"
    with pytest.raises(TypeError, match=r"anndata_view\(\) takes no option 'foo'; its options are"):
        cv.anndata_view(source, foo=1)  # type: ignore[call-arg]
