"""Shared by the decoding tests: how many bytes zstd decompressed for a read, and the
decoding jobs a store's shards were cut in."""

from __future__ import annotations

import threading
from typing import Any
from unittest import mock

import numpy as np
import pytest

import cytearc_vfs as cv
from cytearc_vfs.read.chunk_decoding import ChunkDecoder
from cytearc_vfs.read.strip_assembly import ShardWork, StripAssembler


def inflated_bytes(reader: cv.VirtualArrayReader, *selection: Any) -> tuple[np.ndarray, int]:
    """The block read, and the bytes zstd decompressed for it (every decode path)."""
    inflated = 0
    lock = threading.Lock()
    original = ChunkDecoder.inflate

    def counting(self: ChunkDecoder, data: Any, target: memoryview, **options: Any) -> None:
        nonlocal inflated
        with lock:
            inflated += target.nbytes
        original(self, data, target, **options)

    with mock.patch.object(ChunkDecoder, "inflate", counting):
        block = reader.read(*selection)
    return np.asarray(block), inflated


def decoding_jobs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on (until ``monkeypatch`` undoes it), the row chunks of each job that
    decodes fetched chunks (a store's remote path), appended as each one starts."""
    jobs: list[int] = []
    original = StripAssembler.decode_and_place

    def counting(self: StripAssembler, work: ShardWork, blobs: Any) -> None:
        jobs.append(len(work.row_chunks))  # list.append is atomic: threads need no lock
        original(self, work, blobs)

    monkeypatch.setattr(StripAssembler, "decode_and_place", counting)
    return jobs
