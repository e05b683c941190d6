"""Identities of counts, axes and datasets.

A fingerprint is ``sha256:`` and 64 hex digits. Each depends only on stored
values, never on how they were written: the content hash is fed the
canonical CSR of the counts row by row (three streams that concatenate the
same whatever the band boundaries), so input form, index order, band size and
layout cannot change it. Only :func:`layout_fingerprint` differs between
layouts.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

__all__ = [
    "ContentHasher",
    "combine",
    "dataset_fingerprint_of",
    "ids_fingerprint",
    "layout_fingerprint",
]


def _digest(domain: str, payload: bytes) -> str:
    return "sha256:" + hashlib.sha256(domain.encode() + b"\0" + payload).hexdigest()


def combine(domain: str, fields: dict[str, Any]) -> str:
    """Fingerprint of a JSON-serialisable record, domain-separated.

    >>> combine("x", {"a": 1}) == combine("x", {"a": 1})
    True
    >>> combine("x", {"a": 1}) == combine("y", {"a": 1})
    False
    """
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _digest(domain, canonical.encode())


class ContentHasher:
    """Accumulates ``content_fingerprint`` over row bands written in order.

    Feed it the canonical CSR (sorted column indices, summed duplicates, no
    explicit zeros) of consecutive row bands in the storage dtype.
    """

    def __init__(self, shape: tuple[int, int], dtype: np.dtype) -> None:
        self._shape = shape
        self._dtype = np.dtype(dtype).newbyteorder("<")
        # column indices are hashed in the narrowest width that the shape fixes
        self._index_dtype = np.dtype("<u4") if shape[1] < 2**32 else np.dtype("<u8")
        self._row_nnz = hashlib.sha256()
        self._indices = hashlib.sha256()
        self._values = hashlib.sha256()
        self._rows = 0

    def update(self, band: sp.csr_array | sp.csr_matrix) -> None:
        """Add the next row band (canonical CSR, storage dtype)."""
        if band.shape[1] != self._shape[1]:
            raise ValueError(f"band has {band.shape[1]} columns, expected {self._shape[1]}")
        self._row_nnz.update(np.diff(band.indptr).astype("<u8").data)
        indices = band.indices
        if (
            indices.dtype.itemsize == self._index_dtype.itemsize
            and indices.dtype.isnative
            and sys.byteorder == "little"
        ):
            # non-negative int32 column indices are their own little-endian u4 bytes
            indices = indices.view(self._index_dtype)
        else:
            indices = indices.astype(self._index_dtype)
        self._indices.update(np.ascontiguousarray(indices).data)
        self._values.update(
            np.ascontiguousarray(np.asarray(band.data).astype(self._dtype, copy=False)).data
        )
        self._rows += band.shape[0]

    def hexdigest(self) -> str:
        """The fingerprint; every row must have been fed."""
        if self._rows != self._shape[0]:
            raise ValueError(f"fingerprint fed {self._rows} rows of {self._shape[0]}")
        return combine(
            "cytearc:content",
            {
                "shape": list(self._shape),
                "dtype": self._dtype.str,
                "rowNnz": self._row_nnz.hexdigest(),
                "indices": self._indices.hexdigest(),
                "values": self._values.hexdigest(),
            },
        )


def ids_fingerprint(ids: Sequence[str] | Iterable[str] | npt.NDArray[Any]) -> str:
    """Fingerprint of an ordered axis of ids (cell or feature ids).

    >>> ids_fingerprint(["a", "b"]) == ids_fingerprint(np.array(["a", "b"]))
    True
    >>> ids_fingerprint(["a", "b"]) == ids_fingerprint(["b", "a"])
    False
    """
    if isinstance(ids, np.ndarray) and ids.dtype.kind == "U" and ids.ndim == 1:
        fast = _ascii_ids_fingerprint(ids)
        if fast is not None:
            return fast
    items = [str(item) for item in ids]
    hasher = hashlib.sha256(b"cytearc:ids\0")
    hasher.update(len(items).to_bytes(8, "little"))
    encoded = [item.encode("utf-8") for item in items]
    hasher.update(np.fromiter((len(e) for e in encoded), dtype="<u8", count=len(encoded)).tobytes())
    hasher.update(b"".join(encoded))
    return "sha256:" + hasher.hexdigest()


def _ascii_ids_fingerprint(ids: npt.NDArray[np.str_], block: int = 1 << 18) -> str | None:
    """:func:`ids_fingerprint` of a fixed-width text array of ASCII ids, without a
    Python string per id (opens check a million ids in a fraction of a second);
    ``None`` when an id is not ASCII (the general path then encodes it).

    UTF-32 code points below 128 are their own UTF-8 bytes, and numpy ends each
    fixed-width item at its trailing NULs exactly as ``str(item)`` does.
    """
    width = ids.dtype.itemsize // 4
    codes = np.ascontiguousarray(ids).view(np.dtype(np.uint32).newbyteorder(ids.dtype.byteorder))
    codes = codes.reshape(len(ids), width)
    if codes.size and int(codes.max()) >= 128:
        return None
    lengths = np.strings.str_len(ids).astype("<u8")
    hasher = hashlib.sha256(b"cytearc:ids\0")
    hasher.update(len(ids).to_bytes(8, "little"))
    hasher.update(lengths.tobytes())
    columns = np.arange(width)
    for start in range(0, len(ids), block):
        part = codes[start : start + block].astype(np.uint8)
        stop = lengths[start : start + block]
        if len(stop) and int(stop.min()) == width:  # no padding to drop
            hasher.update(part.tobytes())
        else:
            hasher.update(part[columns < stop[:, None].astype(np.int64)].tobytes())
    return "sha256:" + hasher.hexdigest()


def layout_fingerprint(layout_json: dict[str, Any]) -> str:
    """Fingerprint of a ``cytearc:countMatrixLayout`` record (differs between layouts)."""
    return combine("cytearc:layout", layout_json)


def dataset_fingerprint_of(counts_fp: str, cells_fp: str, features_fp: str) -> str:
    """The dataset fingerprint: counts plus the ordered identities of both axes."""
    return combine(
        "cytearc:dataset", {"counts": counts_fp, "cells": cells_fp, "features": features_fp}
    )
