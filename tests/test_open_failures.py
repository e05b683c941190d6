"""Opening a store the backend cannot reach names the store and the remedy.

obstore's own errors are not ``OSError``s and end in a page of debug text;
``open_store`` re-raises them as :class:`StoreAccessError` (an
``OSError``) whose message names the location and the remedy of the cause,
with the backend's error kept as its ``__cause__``.
"""

from __future__ import annotations

import json
import pickle
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloud_servers import free_port

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.remote.failures import StoreAccessError

pytestmark = pytest.mark.remote


@pytest.fixture(autouse=True)
def short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries of a refused connection stop after a second (obstore's backoff would
    spend several): the remedy must still name the refusal, not the time."""
    monkeypatch.setenv("CYTEARC_SOURCE_TIMEOUT", "1")


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def test_nothing_answering_at_a_url_is_named_with_its_remedy() -> None:
    url = f"http://127.0.0.1:{free_port()}/store.zarr"
    with pytest.raises(StoreAccessError) as raised:
        cv.open_store(url)
    message = str(raised.value)
    assert message.startswith(f"{url} cannot be read (")
    assert "nothing answered at that address" in message
    assert "check that the server is running and that the URL is right" in message
    assert "Debug source" not in message  # obstore's debug dump stays in the cause
    assert type(raised.value.__cause__).__module__.startswith("obstore")
    assert isinstance(raised.value, OSError) and raised.value.where == url
    # a worker process's error comes back pickled
    again = pickle.loads(pickle.dumps(raised.value))
    assert str(again) == message and again.where == url


@pytest.mark.parametrize(
    "call",
    [
        lambda url, out: cv.VirtualArrayReader(url),
        lambda url, out: cv.dataset_fingerprint(url),
        lambda url, out: cv.list_artifacts(url, "RNA/artifacts"),
        lambda url, out: cv.to_anndata(url),
        lambda url, out: cv.mount_datastore(url, out),
        lambda url, out: cv.repack(url, out),
        lambda url, out: cv.write_counts(out, url),
    ],
    ids=["reader", "fingerprint", "artifacts", "to_anndata", "mount", "repack", "write_counts"],
)
def test_every_entry_point_names_the_unreachable_store(call: Any, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/store.zarr"
    with pytest.raises(StoreAccessError) as raised:
        call(url, tmp_path / "out.zarr")
    assert str(raised.value).startswith(f"{url} cannot be read (")
    assert "nothing answered at that address" in str(raised.value)
    assert not (tmp_path / "out.zarr").exists()  # nothing was left behind


def test_an_object_store_endpoint_that_is_down_points_at_the_options() -> None:
    options = {
        "endpoint": f"http://127.0.0.1:{free_port()}",
        "access_key_id": "k",
        "secret_access_key": "s",
        "region": "us-east-1",
        "client_options": {"allow_http": True},
    }
    with pytest.raises(StoreAccessError, match="pass it \\(and credentials\\) as storage_opt"):
        cv.open_store("s3://bucket/store.zarr", storage_options=options)


def test_a_plain_http_endpoint_without_allow_http_names_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """obstore refuses an http:// endpoint unless allowed, before any request, with
    "HTTP error: builder error": the remedy said to check that the source is
    reachable, which it may well be (MinIO, a local gateway)."""
    options = {
        "endpoint": f"http://127.0.0.1:{free_port()}",
        "access_key_id": "k",
        "secret_access_key": "s",
        "region": "us-east-1",
    }
    wanted = 'add "client_options": {"allow_http": true} to storage_options'
    with pytest.raises(StoreAccessError, match=re.escape(wanted)):
        cv.open_store("s3://bucket/store.zarr", storage_options=options)
    argv = ["info", "s3://bucket/store.zarr", "--storage-options", json.dumps(options)]
    assert main(argv) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "plain http://" in err, err
    assert 'add "client_options": {"allow_http": true} to --storage-options' in err, err


def test_a_server_that_never_answers_points_at_the_timeout(silent_server: int) -> None:
    with pytest.raises(StoreAccessError, match="CYTEARC_SOURCE_TIMEOUT=SECONDS"):
        cv.open_store(f"http://127.0.0.1:{silent_server}/store.zarr")


def test_the_command_line_names_the_remedy_of_the_cause(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/store.zarr"
    assert main(["info", url]) == 4  # the system failed, not the input
    err = capsys.readouterr().err.strip()
    assert err.startswith("cytearc-vfs info: ")
    assert url in err
    assert "nothing answered at that address" in err
    assert "check that the server is running" in err
    assert len(err.splitlines()) == 1


def test_options_the_backend_refuses_pass_as_they_are() -> None:
    # a wrong option is the caller's input, not an unreachable store
    with pytest.raises(Exception) as raised:
        cv.open_store("s3://bucket/store.zarr", storage_options={"no_such_option": 1})
    assert not isinstance(raised.value, StoreAccessError)


def test_an_unreachable_source_is_named_once(tmp_path: Path) -> None:
    # the source's pinned reads name it, its key and the remedy; the composite's
    # creation says so without naming the source a second time around it. A refused
    # connection is named so even when the time limit cut its retries short
    url = f"http://127.0.0.1:{free_port()}/store.zarr"
    with pytest.raises(OSError) as raised:
        cv.create_composite(tmp_path / "c.zarr", {"a": url})
    message = str(raised.value)
    assert message.startswith(f"source 'a' at {url} cannot be read: reading ")
    assert message.count("source 'a'") == 1
    assert "nothing answered at that address" in message
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize("kind", ["ordinary", "mount"])
@pytest.mark.parametrize("document", ["zarr.json", "RNA/zarr.json"])
def test_a_damaged_metadata_document_is_named_with_its_store(
    tmp_path: Path, kind: str, document: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A root zarr.json that is not JSON was named without its store ("'zarr.json' is not
    valid JSON"), with a remedy (repack --data-only) that cannot read it either;
    `info` called it a directory without Zarr metadata."""
    import numpy as np

    cv.write_counts(tmp_path / "s.zarr", np.ones((5, 3), dtype=np.uint8))
    where = tmp_path / "s.zarr"
    if kind == "mount":
        cv.mount_datastore(where, tmp_path / "m.zarr")
        where = tmp_path / "m.zarr"
    (where / document).write_text("{not json")
    with pytest.raises(cv.RecordShapeError) as caught:
        cv.open_store(where)
    message = str(caught.value)
    assert str(where) in message and repr(document) in message
    assert "restore it from a copy of the store, or re-import the dataset" in message
    assert "repack" not in message
    assert main(["info", str(where)]) == 3
    said = capsys.readouterr().err
    assert "not valid JSON" in said and "without Zarr metadata" not in said


@pytest.mark.parametrize(
    "document",
    ["RNA/counts/zarr.json", "RNA/countSummaries/zarr.json", "RNA/featureData/ids/zarr.json"],
)
@pytest.mark.parametrize("command", ["info", "verify", "export", "repack", "mount", "composite"])
def test_a_damaged_document_of_an_assay_is_named_once_with_its_store(
    tmp_path: Path, document: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Below the root, the line named the store twice, the second time by its wrapper
    ("s.zarr: wrapping-file:///.../s.zarr: 'RNA/counts/zarr.json' is not valid JSON"),
    and added the repair "rewrite it with cytearc-vfs repack --data-only", which
    cannot read the document either."""
    import numpy as np

    cv.write_counts(tmp_path / "s.zarr", np.ones((5, 3), dtype=np.uint8))
    where = tmp_path / "s.zarr"
    (where / document).write_text("{not json")
    out = str(tmp_path / ("out.h5ad" if command == "export" else "out.zarr"))
    argv = {
        "info": ["info", str(where)],
        "verify": ["verify", str(where)],
        "export": ["export", str(where), out],
        "repack": ["repack", str(where), out],
        "mount": ["mount", str(where), out],
        "composite": ["composite", out, f"s={where}"],
    }[command]
    assert main(argv) == 3
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"cytearc-vfs {command}: {where}: '{document}' is not valid JSON"), said
    assert said.endswith("restore it from a copy of the store, or re-import the dataset"), said
    assert "file://" not in said and "repack" not in said.partition(":")[2]
    assert not (tmp_path / "out.zarr").exists() and not (tmp_path / "out.h5ad").exists()


@pytest.mark.parametrize("document", ["zarr.json", "RNA/zarr.json"])
def test_a_damaged_document_met_by_a_publish_is_named_as_the_store_was_given(
    tmp_path: Path, document: str
) -> None:
    """The reads of a store's layout named a damaged document with the store's own
    description ("file:///.../s.zarr: 'RNA/zarr.json' is not valid JSON") unless a
    caller cut it out of the message again (verification did, with removeprefix); every
    read now takes the name its caller gives the store."""
    import numpy as np

    from cytearc_vfs.artifacts.catalog import publish_artifact

    where = tmp_path / "s.zarr"
    cv.write_counts(where, np.ones((5, 3), dtype=np.uint8))
    (where / document).write_text("{not json")
    provenance = {"operation": "pca", "parameters": {}, "inputs": {}}
    with pytest.raises(cv.RecordShapeError) as caught:
        publish_artifact(str(where), "RNA/artifacts", "pca", provenance=provenance)
    message = str(caught.value)
    assert message.startswith(f"{where}: '{document}' is not valid JSON"), message
    assert "file://" not in message
    assert message.endswith("restore it from a copy of the store, or re-import the dataset")
    assert not (where / "RNA" / "artifacts").exists()
