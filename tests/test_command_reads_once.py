"""``info`` and ``verify`` of a store on object storage read each document and listing once.

Both commands first tell what the location holds (``require_store``), then
describe or verify it; each read the store's top on its own. Against a
loopback S3 server, ``info`` of a composite read its root ``zarr.json``
three times and its top-level listing twice (30 requests where
``open_store`` alone makes 22); ``verify`` of a mount read every document of
its source three or four times (76 requests). Each command now reads through
one view that remembers the documents and listings it read, dropped with the
command. Counted at a proxy in front of the server, as
``tests/test_info_artifacts.py`` counts.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from cli_harness import run_main
from conftest import realistic_counts

import cytearc_vfs as cv

#: Requests of each command, by kind of store (before this change: info 21, 30,
#: 47; verify 44, 82, 76).
EXPECTED = {
    ("ordinary", "info"): 16,
    ("ordinary", "verify"): 28,
    # open_store's 22, and a listing of each artifact root (the root's, the assay's)
    ("composite", "info"): 24,
    ("composite", "verify"): 74,
    ("mount", "info"): 35,
    ("mount", "verify"): 38,
}


def _stores(s3_server: Any, s3_proxy: Any, kind: str) -> tuple[str, list[str]]:
    """A store of ``kind`` on S3 (a composite's and a mount's sources on S3 too) and the
    flags that read it, through the proxy."""
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    bucket = s3_server.new_bucket()
    first, second = f"s3://{bucket}/a.zarr", f"s3://{bucket}/b.zarr"
    cv.write_counts(first, realistic_counts(40, 12, density=0.2, seed=5), storage_options=options)
    flags = ["--storage-options", json.dumps(options)]
    if kind == "ordinary":
        return first, flags
    if kind == "composite":
        cv.write_counts(
            second, realistic_counts(30, 12, density=0.2, seed=6), storage_options=options
        )
        url = f"s3://{bucket}/c.zarr"
        sources = {"a": options, "b": options}
        cv.create_composite(
            url,
            {"a": first, "b": second},
            storage_options=options,
            source_storage_options=sources,
        ).close()
        return url, [*flags, "--source-storage-options", json.dumps(sources)]
    url = f"s3://{bucket}/m.zarr"
    cv.mount_datastore(first, url, storage_options=options, source_storage_options=options).close()
    return url, [*flags, "--source-storage-options", json.dumps(options)]


@pytest.mark.parametrize("command", ["info", "verify"])
@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
def test_each_document_and_listing_is_read_once_a_command(
    s3_server: Any, s3_proxy: Any, kind: str, command: str
) -> None:
    url, flags = _stores(s3_server, s3_proxy, kind)
    s3_proxy.take()
    said = run_main(command, url, *flags)
    assert said.returncode == 0, said.stderr
    seen = s3_proxy.take()
    requests = Counter((s.method, s.path) for s in seen)
    again = {key: count for key, count in requests.items() if count > 1}
    assert again == {}, again
    assert len(seen) == EXPECTED[kind, command]
    assert said.stdout.startswith(f"{url}: ")


def test_info_of_a_composite_costs_its_open_and_its_artifact_roots(
    s3_server: Any, s3_proxy: Any
) -> None:
    """What ``info`` adds to ``open_store``: one listing of each artifact root."""
    url, flags = _stores(s3_server, s3_proxy, "composite")
    options = json.loads(flags[1])
    sources = json.loads(flags[3])
    s3_proxy.take()
    cv.open_store(url, storage_options=options, source_storage_options=sources).close()
    opened = Counter((s.method, s.path) for s in s3_proxy.take())
    said = run_main("info", url, *flags)
    assert said.returncode == 0, said.stderr
    described = Counter((s.method, s.path) for s in s3_proxy.take())
    added = described - opened
    assert sum(opened.values()) == 22
    assert not opened - described  # nothing of the open is left out, or read twice
    assert sorted(path.split("prefix=")[1] for _, path in added) == [
        "c.zarr%2FRNA%2Fartifacts%2F",
        "c.zarr%2Fartifacts%2F",
    ]


def test_a_store_changed_between_commands_is_read_anew(s3_server: Any, s3_proxy: Any) -> None:
    """The remembered reads last one command: the next one reads the store as it is now
    and refuses what changed, as before."""
    url, flags = _stores(s3_server, s3_proxy, "ordinary")
    assert run_main("info", url, *flags).returncode == 0
    options = json.loads(flags[1])
    store = cv.open_store(url, mode="r+", storage_options=options)
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    key = "RNA/counts/zarr.json"
    document = json.loads(sync(store.get(key, default_buffer_prototype())).to_bytes())
    document["attributes"] = {}
    sync(
        store.set(key, default_buffer_prototype().buffer.from_bytes(json.dumps(document).encode()))
    )
    for command in ("info", "verify"):
        said = run_main(command, url, *flags)
        assert said.returncode != 0
        assert "a.zarr" in said.stderr


def _replace_a_shard(url: str, options: dict[str, Any]) -> None:
    """The first ``counts`` shard of the store at ``url`` rewritten reversed (same size)."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from cytearc_vfs.remote.locations import open_location

    store = open_location(url, read_only=False, storage_options=options)

    async def keys() -> list[str]:
        return [key async for key in store.list_prefix("RNA/counts/c/")]

    key = sorted(sync(keys()))[0]
    value = sync(store.get(key, default_buffer_prototype())).to_bytes()
    sync(store.set(key, default_buffer_prototype().buffer.from_bytes(value[::-1])))


@pytest.mark.parametrize("kind", ["ordinary", "mount"])
def test_a_shard_replaced_after_the_open_checks_is_still_found(
    s3_server: Any, s3_proxy: Any, kind: str
) -> None:
    """The values verify reads come from the store, not from what the command
    remembered: a shard replaced since the store (or the mount's source) was
    written is found, in the words it was found in before."""
    url, flags = _stores(s3_server, s3_proxy, kind)
    options = json.loads(flags[1])
    _replace_a_shard(url.rsplit("/", 1)[0] + "/a.zarr", options)
    said = run_main("verify", url, *flags)
    assert said.returncode == 1, said.stderr
    lines = said.stdout.splitlines()
    assert lines[:2] == [f"{url}: PROBLEMS FOUND", "  RNA: FAILED (0 values read)"]
    assert lines[2].startswith(
        "    - counts rows 0-39 could not be read (ValueError: Stored and computed checksum do "
        "not match."
    )
    assert lines[2].endswith(
        "the stored data is damaged: restore the store from a copy or write it again"
    )
