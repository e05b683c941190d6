"""A backend that fails while an artifact is published is named, not dumped.

An audit published into a loopback S3 server whose answers were refused
(403): ``list_artifacts`` named the store and the remedy, but
``publish_artifact`` let obstore's own ``PermissionDeniedError`` out, with its
multi-line debug dump and no location, when the refusal came from its layout
check, from the group's creation or from an array's creation inside the block;
a URL without credentials leaked a ``GenericError`` about a cloud metadata
token. Whatever the error, nothing may be published.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cytearc_vfs as cv
from cytearc_vfs.artifacts.catalog import describe_artifacts
from cytearc_vfs.remote.failures import StoreAccessError

PROVENANCE = {"operation": "normalize", "parameters": {}, "inputs": {}}


@pytest.fixture
def proxied(s3_server: Any, s3_proxy: Any) -> tuple[str, dict[str, Any]]:
    options = {
        **s3_server.storage_options(),
        "endpoint": s3_proxy.endpoint,
        "retry_config": {"max_retries": 0},
    }
    url = f"s3://{s3_server.new_bucket()}/data.zarr"
    cv.write_counts(url, np.ones((20, 5), dtype=np.uint8), storage_options=options)
    return url, options


def _publish(store: Any, refuse: Any = None, *, when: str = "") -> None:
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        if when == "block":
            refuse()
        art.write_array("x", np.arange(20.0))
        if when == "publish":
            refuse()


def _named(error: BaseException, url: str) -> None:
    message = str(error)
    assert url in message and "credentials" in message, message
    assert "Debug source" not in message and "\n" not in message, message


@pytest.mark.parametrize("when", ["check", "block"])
def test_refused_reads_are_named_and_nothing_is_published(
    proxied: tuple[str, dict[str, Any]], s3_proxy: Any, when: str
) -> None:
    url, options = proxied
    store = cv.open_store(url, mode="r+", storage_options=options)

    def refuse() -> None:
        s3_proxy.fail(20, status=403)

    if when == "check":
        refuse()
    with pytest.raises(StoreAccessError) as raised:
        _publish(store, refuse, when=when)
    _named(raised.value, url)
    s3_proxy.clear()
    assert cv.list_artifacts(store, "RNA/artifacts") == []


def test_a_failed_publishing_write_is_named_and_never_listed(
    proxied: tuple[str, dict[str, Any]], s3_proxy: Any
) -> None:
    url, options = proxied
    store = cv.open_store(url, mode="r+", storage_options=options)
    with pytest.raises(StoreAccessError) as raised:
        _publish(store, lambda: s3_proxy.fail(20, status=503), when="publish")
    assert url in str(raised.value) and "Debug source" not in str(raised.value)
    s3_proxy.clear()
    assert cv.list_artifacts(store, "RNA/artifacts") == []


def test_a_url_without_credentials_is_named(s3_server: Any) -> None:
    url = f"s3://{s3_server.new_bucket()}/data.zarr"
    cv.write_counts(
        url, np.ones((4, 2), dtype=np.uint8), storage_options=s3_server.storage_options()
    )
    with pytest.raises(StoreAccessError) as raised:
        _publish(url)
    assert url in str(raised.value) and "Debug source" not in str(raised.value)


def test_reading_a_published_artifact_names_a_refusing_backend(
    proxied: tuple[str, dict[str, Any]], s3_proxy: Any
) -> None:
    url, options = proxied
    store = cv.open_store(url, mode="r+", storage_options=options)
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("x", np.arange(20.0))
    reader = cv.open_store(url, storage_options=options)
    read = [cv.read_artifact(reader, art.path) for _ in range(3)]
    opened = cv.read_artifact(reader, art.path)["x"]  # its document read: a slice is zarr's
    s3_proxy.fail(100, status=403)
    for attempt in (
        lambda: read[0].load("x"),
        lambda: read[1]["x"],
        lambda: read[2].names,
        lambda: opened[:5],
        lambda: describe_artifacts(reader),
    ):
        with pytest.raises(StoreAccessError) as raised:
            attempt()
        _named(raised.value, url)
