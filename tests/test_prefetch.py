"""Prefetched metadata: one concurrent round, served from memory, everything else passed on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.format.paths import AssayPaths
from cytearc_vfs.format.source_store import verify_assay
from cytearc_vfs.format.store_io import get_json
from cytearc_vfs.read.prefetch import assay_documents, prefetched
from cytearc_vfs.read.read_stats import CountingStore, ReadCounters


def test_verification_reads_only_prefetched_documents(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", sp.csr_array(np.eye(5, dtype=np.float32)))
    counters = ReadCounters()
    counting = CountingStore(LocalStore(tmp_path / "s.zarr", read_only=True), counters)
    paths = AssayPaths("RNA")
    documents = prefetched(counting, assay_documents(paths))
    fetched = counters.snapshot().requests
    assert fetched == len(assay_documents(paths))
    info = verify_assay(documents, paths, where="s.zarr")
    assert info.layout.shape == (5, 5)
    # every document verification read came from memory
    assert counters.snapshot().requests == fetched


def test_absent_and_other_keys(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", sp.csr_array(np.eye(3, dtype=np.float32)))
    store = LocalStore(tmp_path / "s.zarr", read_only=True)
    documents = prefetched(store, ["nothing/zarr.json", "zarr.json"])
    prototype = default_buffer_prototype()
    assert sync(documents.get("nothing/zarr.json", prototype)) is None
    assert not sync(documents.exists("nothing/zarr.json"))
    assert get_json(documents, "zarr.json") is not None
    # keys that were not prefetched come from the store itself
    counts_doc = sync(documents.get("RNA/counts/zarr.json", prototype))
    assert counts_doc is not None and b'"node_type"' in counts_doc.to_bytes()


def test_complete_prefixes_answer_absent_keys_without_a_request(tmp_path: Path) -> None:
    """Everything under a ``complete`` prefix was fetched: another key there is absent
    (no request), while keys elsewhere still come from the store."""
    from cytearc_vfs.read.prefetch import PrefetchedStore

    cv.write_counts(tmp_path / "s.zarr", sp.csr_array(np.eye(3, dtype=np.float32)))
    counters = ReadCounters()
    store = CountingStore(LocalStore(tmp_path / "s.zarr", read_only=True), counters)
    held = {"cellData/zarr.json": b"{}"}
    view = PrefetchedStore(store, held, complete=("cellData/",))
    prototype = default_buffer_prototype()
    assert sync(view.get("cellData/ids/zarr.json", prototype)) is None
    assert not sync(view.exists("cellData/ids/mask/zarr.json"))
    assert counters.snapshot().requests == 0
    assert sync(view.get("cellData/zarr.json", prototype)) is not None
    assert sync(view.get("RNA/counts/zarr.json", prototype)) is not None
    assert counters.snapshot().requests == 1
    # a clone for another mode keeps the rule
    clone = view.with_read_only(True)
    assert sync(clone.get("cellData/names/zarr.json", prototype)) is None
    assert counters.snapshot().requests == 1
