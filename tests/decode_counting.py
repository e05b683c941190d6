"""Shared by the chunk-encoding tests: a read, and how many bytes zstd decompressed for it."""

from __future__ import annotations

import threading
from typing import Any
from unittest import mock

import numpy as np

import cytearc_vfs as cv
from cytearc_vfs.read.chunk_decoding import ChunkDecoder


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
