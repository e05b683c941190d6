"""Matrix elements (``X``, layers, ``obsp``...) read in row bands and column bands.

A sparse matrix is three arrays: ``indptr`` (one entry per major index, plus
one), ``indices`` and ``data``. A band along the major axis (rows of a CSR,
columns of a CSC) is a slice of ``indptr`` and one contiguous slice of
``indices`` and ``data``: read directly, never the whole matrix. A band
along the minor axis (rows of a CSC) touches every major index, so it is
served from a transposed copy spilled to a temporary directory once
(:mod:`.transposed`), in bounded memory. Dense arrays are sliced either way.

Every element counts what it reads (:class:`BandStats`), so tests assert
that memory stays bounded by the band asked for, not the matrix.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import zarr
from zarr.core.array import AsyncArray
from zarr.core.sync import sync

from cytearc_vfs.errors import SourceUnavailableError
from cytearc_vfs.read.direct_chunks import ChunkDecodeError
from cytearc_vfs.read.sparse_chunk_presence import (
    check_stored_chunks,
    listed_absence,
    stored_keys,
)

from .encodings import Encoding
from .errors import DAMAGED_REMEDY, MalformedElementError
from .fetched_once import KeptObjects, keeps_fetched, kept_array, kept_whole
from .nodes import attribute, child, is_group, read_values
from .transposed import TransposedSpill, least_spill_bytes, spill_entries

__all__ = [
    "BandStats",
    "DenseMatrixElement",
    "MatrixElement",
    "SparseMatrixElement",
    "element_label",
    "matrix_element",
]

Axis = Literal["rows", "columns"]


@dataclass(slots=True)
class BandStats:
    """What a matrix element has read so far."""

    bands: int = 0
    """Bands served."""
    largest_band_entries: int = 0
    """Most stored entries (non-zeros, or dense values) read for one band."""
    entries_read: int = 0
    """Stored entries read in all."""
    bytes_read: int = 0
    """Bytes of values and indices read (decoded sizes)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, entries: int, nbytes: int) -> None:
        """Count one band of ``entries`` stored entries and ``nbytes`` bytes."""
        with self._lock:
            self.bands += 1
            self.entries_read += entries
            self.bytes_read += nbytes
            self.largest_band_entries = max(self.largest_band_entries, entries)


class MatrixElement:
    """A two-dimensional matrix element, read in bands.

    ``element[start:stop]`` is the row band as CSR, so an element can be
    handed to ``write_counts`` as a row-sliceable matrix.
    """

    path: str
    where: str
    encoding: Encoding
    shape: tuple[int, int]
    dtype: np.dtype
    stats: BandStats

    @property
    def label(self) -> str:
        """The element as errors name it: the container's location and the element's path."""
        return element_label(self.where, self.path)

    @property
    def nnz(self) -> int | None:
        """Stored entries, where known from metadata (sparse), else ``None``."""
        return None

    def row_band(self, start: int, stop: int) -> sp.csr_array:
        """Rows ``start:stop`` as CSR (as stored: duplicates and order not normalised)."""
        raise NotImplementedError

    def _arrays(self) -> dict[str, Any]:
        """The element's stored arrays by attribute name."""
        raise NotImplementedError

    def fetch_once(self) -> KeptObjects | None:
        """Read every chunk object of the element from its store at most once from now
        on, however many passes read it (:mod:`.fetched_once`): for an element on
        object storage read whole more than once, as ``write_counts`` reads it, until
        :meth:`release`. ``None`` for an element read in place (HDF5, a local
        directory)."""
        kept: KeptObjects | None = getattr(self, "_kept", None)
        if kept is not None:
            kept.start()
            return kept
        arrays = self._arrays()
        if not all(keeps_fetched(array) for array in arrays.values()):
            return None
        whole = [array.store_path.path for array in arrays.values() if kept_whole(array)]
        # shards too large to keep whole: their indexes are kept
        indexed = [array.store_path.path for array in arrays.values() if not kept_whole(array)]
        kept = KeptObjects(next(iter(arrays.values())).store_path.store, whole, indexed)
        for name, array in arrays.items():
            setattr(self, name, kept_array(array, kept))
        self._kept = kept
        return kept

    def release(self) -> None:
        """Remove what was kept for a write's passes: the objects :meth:`fetch_once`
        kept (later reads fetch anew)."""
        kept: KeptObjects | None = getattr(self, "_kept", None)
        if kept is not None:
            kept.discard()

    def column_band(self, start: int, stop: int) -> sp.csc_array:
        """Columns ``start:stop`` as CSC (as stored)."""
        raise NotImplementedError

    def iter_bands(self, axis: Axis, size: int) -> Iterator[tuple[int, int, Any]]:
        """Consecutive ``(start, stop, band)`` of at most ``size`` rows or columns."""
        length = self.shape[0] if axis == "rows" else self.shape[1]
        read = self.row_band if axis == "rows" else self.column_band
        for start in range(0, length, max(1, size)):
            stop = min(length, start + max(1, size))
            yield start, stop, read(start, stop)

    def __getitem__(self, rows: slice) -> sp.csr_array:
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError(f"{self.label}: only contiguous row slices are read, not {rows!r}")
        start, stop, _ = rows.indices(self.shape[0])
        return self.row_band(start, max(start, stop))

    def to_scipy(self) -> sp.csr_array | sp.csc_array:
        """The whole matrix in memory, in its stored orientation (for small elements)."""
        if isinstance(self, SparseMatrixElement) and self.format == "csc":
            return self.column_band(0, self.shape[1])
        return self.row_band(0, self.shape[0])

    def _check_range(self, start: int, stop: int, length: int, what: str) -> None:
        if not 0 <= start <= stop <= length:
            raise IndexError(
                f"{self.label}: {what} {start}:{stop} outside 0:{length} of a {self.shape} matrix"
            )


class SparseMatrixElement(MatrixElement):
    """A ``csr_matrix`` or ``csc_matrix`` group, read band by band."""

    def __init__(self, group: Any, path: str, encoding: Encoding, *, where: str = "") -> None:
        self.path, self.where = path, where
        self.encoding = encoding
        self.format: Literal["csr", "csc"] = "csr" if encoding.type == "csr_matrix" else "csc"
        arrays = {}
        for name in ("data", "indices", "indptr"):
            member = child(group, name)
            if member is None or is_group(member):
                raise MalformedElementError(
                    f"{self.label}: a {encoding.type} needs an array {name!r}, which is "
                    f"{'missing' if member is None else 'a group'}"
                )
            arrays[name] = member
        self._data, self._indices, self._indptr = (
            arrays["data"],
            arrays["indices"],
            arrays["indptr"],
        )
        shape = attribute(group, "shape", attribute(group, "h5sparse_shape"))
        if (
            not isinstance(shape, list)
            or len(shape) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        ):
            raise MalformedElementError(
                f"{self.label}: a {encoding.type} needs a 'shape' attribute of two "
                f"non-negative integers, found {shape!r}"
            )
        self.shape = (shape[0], shape[1])
        major = self.shape[0] if self.format == "csr" else self.shape[1]
        if tuple(self._indptr.shape) != (major + 1,):
            raise MalformedElementError(
                f"{self.label}: indptr has shape {tuple(self._indptr.shape)}, but a "
                f"{encoding.type} of shape {self.shape} needs ({major + 1},)"
            )
        if self._data.shape != self._indices.shape or len(self._data.shape) != 1:
            raise MalformedElementError(
                f"{self.label}: data {tuple(self._data.shape)} and indices "
                f"{tuple(self._indices.shape)} must be one-dimensional and of one length"
            )
        self.dtype = np.dtype(self._data.dtype)
        self.stats = BandStats()
        self._transposed: Any = None
        self._transpose_lock = threading.Lock()
        self._spill_entries: int | None = None

    def reserve_memory(self, nbytes: int) -> int:
        """Keep the row-major spill of a CSC element (built for its first row band)
        within ``nbytes``, and return the bytes a writer reserves for it: ``nbytes``,
        ``0`` for a CSR element (its row bands are read as stored), or more than
        ``nbytes`` (the least the spill needs) when it cannot fit, left unchanged."""
        if self.format == "csr":
            return 0
        entries = spill_entries(self.shape, self.format, nbytes)
        if entries == 0:
            return least_spill_bytes(self.shape, self.format)
        self._spill_entries = entries
        return nbytes

    @property
    def nnz(self) -> int:
        return int(self._data.shape[0])

    def _arrays(self) -> dict[str, Any]:
        return {"_indptr": self._indptr, "_indices": self._indices, "_data": self._data}

    def _async_members(self) -> dict[str, AsyncArray[Any]] | None:
        """The member arrays as zarr's async arrays; ``None`` for HDF5 (no chunk files)."""
        members = {"indptr": self._indptr, "indices": self._indices, "data": self._data}
        if not all(isinstance(array, zarr.Array) for array in members.values()):
            return None
        return {
            name: AsyncArray(metadata=array.metadata, store_path=array.store_path)
            for name, array in members.items()
        }

    def check_listed_chunks(self) -> None:
        """Refuse a Zarr element whose chunk listing alone shows a chunk its entries need
        missing (:func:`~cytearc_vfs.read.sparse_chunk_presence.listed_absence`): one
        listing of the element, no chunk read (``anndata ls``). A subset of
        :meth:`check_stored_chunks`, which reads ``indptr`` to tell the rest."""
        arrays = self._async_members()
        if arrays is None:
            return
        major = self.shape[0] if self.format == "csr" else self.shape[1]
        absence = listed_absence(arrays, sync(stored_keys(arrays)), major=major)
        if absence is not None:
            raise MalformedElementError(f"{self.label}: {absence}")

    def check_stored_chunks(self) -> None:
        """Refuse a Zarr element lacking a chunk its entries need (a partial copy:
        :func:`cytearc_vfs.read.sparse_chunk_presence.check_stored_chunks`, the check
        composite creation makes). An HDF5 element has no chunk files: nothing to do.
        A shard index that does not decode is refused as any value that does not."""
        arrays = self._async_members()
        if arrays is None:
            return
        minor = self.shape[1] if self.format == "csr" else self.shape[0]
        try:
            sync(
                check_stored_chunks(
                    arrays,
                    minor=minor,
                    keys=None,
                    source=self.where or "the AnnData container",
                    element=self.path,
                )
            )
        except ChunkDecodeError as exc:
            # the reader's own words (the shard and what fails), under this element's label
            detail = exc.__cause__ or exc
            raise MalformedElementError(
                f"{self.label}: stored values cannot be decoded ({detail}): the container is "
                f"damaged; {DAMAGED_REMEDY}"
            ) from exc
        except SourceUnavailableError as exc:
            # the store, not the container, is at fault (a server ignoring byte ranges)
            raise SourceUnavailableError(f"{self.label}: {exc}") from exc

    def read_indptr(self, start: int, stop: int) -> npt.NDArray[np.int64]:
        """``indptr[start : stop + 1]``, checked to be a non-decreasing range of entries."""
        indptr = np.asarray(read_values(self._indptr, slice(start, stop + 1)), dtype=np.int64)
        low, high = int(indptr[0]), int(indptr[-1])
        if low > high or np.any(np.diff(indptr) < 0) or high > self.nnz or low < 0:
            raise MalformedElementError(
                f"{self.label}: indptr[{start}:{stop + 1}] runs from {low} to {high}, "
                f"not a non-decreasing range within the {self.nnz} stored entries: the "
                f"container is damaged; {DAMAGED_REMEDY}"
            )
        return indptr

    def major_band(
        self, start: int, stop: int, *, with_data: bool = True
    ) -> tuple[npt.NDArray[Any], ...]:
        """``(indptr, indices, data)`` of major indices ``start:stop`` (indptr from 0).

        With ``with_data=False`` the values are not read (``data`` is empty).
        """
        indptr = self.read_indptr(start, stop)
        low, high = int(indptr[0]), int(indptr[-1])
        indices = np.asarray(read_values(self._indices, slice(low, high)))
        data = (
            np.asarray(read_values(self._data, slice(low, high)))
            if with_data
            else np.empty(0, dtype=self.dtype)
        )
        minor = self.shape[1] if self.format == "csr" else self.shape[0]
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= minor):
            raise MalformedElementError(
                f"{self.label}: indices of entries {low}:{high} leave 0:{minor}: the "
                f"container is damaged; {DAMAGED_REMEDY}"
            )
        self.stats.record(high - low, indices.nbytes + data.nbytes)
        return indptr - low, indices, data

    def row_band(self, start: int, stop: int) -> sp.csr_array:
        self._check_range(start, stop, self.shape[0], "rows")
        if self.format == "csr":
            indptr, indices, data = self.major_band(start, stop)
            return sp.csr_array((data, indices, indptr), shape=(stop - start, self.shape[1]))
        indptr, indices, data = self._transposed_copy().band(start, stop)
        return sp.csr_array((data, indices, indptr), shape=(stop - start, self.shape[1]))

    def column_band(self, start: int, stop: int) -> sp.csc_array:
        self._check_range(start, stop, self.shape[1], "columns")
        if self.format == "csc":
            indptr, indices, data = self.major_band(start, stop)
            return sp.csc_array((data, indices, indptr), shape=(self.shape[0], stop - start))
        indptr, indices, data = self._transposed_copy().band(start, stop)
        return sp.csc_array((data, indices, indptr), shape=(self.shape[0], stop - start))

    def release(self) -> None:
        """Remove the kept objects and the transposed copy (a later row band of a CSC
        builds it anew)."""
        super().release()
        with self._transpose_lock:
            if self._transposed is not None:
                self._transposed.close()
                self._transposed = None

    def _transposed_copy(self) -> Any:
        with self._transpose_lock:
            if self._transposed is None:
                self._transposed = TransposedSpill(self, self._spill_entries)
            return self._transposed


class DenseMatrixElement(MatrixElement):
    """A two-dimensional dense ``array`` element, sliced either way."""

    def __init__(self, array: Any, path: str, encoding: Encoding, *, where: str = "") -> None:
        self.path, self.where = path, where
        if array.shape is None or len(array.shape) != 2:
            raise MalformedElementError(
                f"{self.label}: a matrix must be two-dimensional, found shape {array.shape}"
            )
        self._array = array
        self.encoding = encoding
        self.shape = (int(array.shape[0]), int(array.shape[1]))
        # values are given in native byte order: scipy.sparse takes no other, and an
        # .h5ad or Zarr v2 array may be stored big-endian ('>f4')
        self.dtype = np.dtype(array.dtype).newbyteorder("=")
        self.stats = BandStats()
        self._blocks: tuple[int, int] | None = None

    def _arrays(self) -> dict[str, Any]:
        return {"_array": self._array}

    def _dense(self, selection: tuple[slice, slice]) -> npt.NDArray[Any]:
        values = np.asarray(read_values(self._array, selection))
        self.stats.record(values.size, values.nbytes)
        # scipy.sparse has no float16; float32 holds every float16 exactly
        return values.astype(np.float32) if values.dtype == np.float16 else values

    def reserve_memory(self, nbytes: int) -> int:
        """Read each row band in blocks of whole chunks (pieces of chunk rows cut at
        chunk boundaries, a chunk's columns at a time) that fit ``nbytes``; the bytes
        a writer reserves for them, or more (the least that reads one chunk) when
        even one does not fit, left unchanged."""
        chunks = getattr(self._array, "chunks", None)
        rows, columns = (max(1, int(chunks[0])), max(1, int(chunks[1]))) if chunks else (1, 0)
        # an unchunked (contiguous HDF5) array is read whole rows at a time; at least one
        # column, so that a matrix of no features still advances through its rows
        columns = columns or max(1, self.shape[1])
        # per chunk of a block: the decoded chunk, the block's values beside it,
        # then the non-zero mask and the CSR made from them
        per_chunk = 3 * rows * max(1, columns) * max(1, self.dtype.itemsize)
        pieces = nbytes // per_chunk
        if pieces < 1:
            return per_chunk
        self._blocks = (pieces * rows, columns)
        return pieces * per_chunk

    def row_band(self, start: int, stop: int) -> sp.csr_array:
        self._check_range(start, stop, self.shape[0], "rows")
        if self._blocks is None:
            return sp.csr_array(self._dense((slice(start, stop), slice(None))))
        step, width = self._blocks
        # cut at multiples of step: each block decodes only its own chunks
        edges = [start, *range((start // step + 1) * step, stop, step), stop]
        parts = [
            sp.hstack(
                [
                    sp.csr_array(
                        self._dense(
                            (slice(low, high), slice(left, min(self.shape[1], left + width)))
                        )
                    )
                    for left in range(0, max(1, self.shape[1]), width)
                ],
                format="csr",
            )
            for low, high in pairwise(edges)
        ]
        return sp.csr_array(sp.vstack(parts, format="csr"))

    def column_band(self, start: int, stop: int) -> sp.csc_array:
        self._check_range(start, stop, self.shape[1], "columns")
        return sp.csc_array(self._dense((slice(None), slice(start, stop))))


def element_label(where: str, path: str) -> str:
    """An element as errors name it: ``where`` (the container's location, if known) and
    its path.

    >>> element_label("/data/a.zarr", "X")
    '/data/a.zarr: element X'
    >>> element_label("", "layers/counts")
    'element layers/counts'
    """
    return f"{where}: element {path}" if where else f"element {path}"


def matrix_element(node: Any, path: str, encoding: Encoding, *, where: str = "") -> MatrixElement:
    """The matrix element of ``node`` (a sparse group or a 2-D dense array); ``where``, the
    container's location, is named in its errors."""
    if encoding.type in ("csr_matrix", "csc_matrix"):
        return SparseMatrixElement(node, path, encoding, where=where)
    if encoding.type == "array":
        return DenseMatrixElement(node, path, encoding, where=where)
    raise MalformedElementError(
        f"{element_label(where, path)}: a count matrix must be a csr_matrix, csc_matrix or "
        f"dense array, found {encoding.label}"
    )
