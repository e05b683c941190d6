"""One array's ``zarr.json`` as stored, and the names this package keeps beside it.

The operations read and write an array's metadata document as JSON, not
through zarr's metadata classes, so that everything the document holds
(attributes, extension fields, codec configurations) survives a resize or
a promote untouched except for what the operation changes.

Beside ``zarr.json`` an operation in progress keeps three names under the
array's prefix, none of which zarr or any other Zarr reader looks at (they
are not chunk keys, and an array has no child nodes):

- ``cytearc.journal.json``: the plan (:mod:`.journal`);
- ``cytearc.journal.progress.json``: how far the plan is known to have got;
- ``cytearc.staging/``: chunks between two homes (a promote on a local
  directory, where ``c/0/1`` must stop being a file before ``c/0/1/0`` can
  be written).

While the operation runs, ``zarr.json`` carries the extension field
:data:`MARKER_FIELD` with ``"must_understand": true``, so zarr-python,
tensorstore and every other conforming reader refuse to open the array
rather than read it half-moved.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.storage import StorePath

from ..errors import REFUSED_WRITE_ERRNOS, IncompleteStoreError, RecordShapeError
from ..format.chunk_keys import ChunkKeys
from ..format.key_checked import KeyCheckedWrapperStore
from ..format.option_names import callers_form
from ..format.store_io import get_json

__all__ = [
    "JOURNAL_NAME",
    "MARKER_FIELD",
    "OPERATION_KEPT",
    "PROGRESS_NAME",
    "recover_remedy",
    "STAGING_NAME",
    "ArrayDocument",
    "array_location",
    "array_lock",
    "fill_cells",
    "marked",
    "read_document",
    "refresh",
    "refuse_unfinished",
    "require_current",
    "stored_document",
    "require_v3",
    "require_writable",
    "writes_refused",
    "view_array",
]

JOURNAL_NAME = "cytearc.journal.json"
PROGRESS_NAME = "cytearc.journal.progress.json"
STAGING_NAME = "cytearc.staging"
#: Extension field of ``zarr.json`` while an operation is under way.
MARKER_FIELD = "cytearc_unfinished_operation"


@dataclass(frozen=True, slots=True)
class ArrayDocument:
    """An array's stored ``zarr.json`` with the facts resize and promote need."""

    path: str
    """The array's path in its store (``""`` for a root array)."""
    document: dict[str, Any]
    """The document exactly as stored (parsed JSON)."""
    shape: tuple[int, ...]
    """The array's shape."""
    grid: tuple[int, ...]
    """The chunk grid's chunk shape: the shard shape of a sharded array, the
    unit that owns one store key."""
    keys: ChunkKeys
    """How the array names its chunks."""

    @classmethod
    def parse(cls, path: str, document: object, *, where: str) -> ArrayDocument:
        """Check that ``document`` is a Zarr v3 array these operations handle.

        Raises
        ------
        RecordShapeError
            Not a Zarr v3 array document.
        ValueError
            A v3 array the operations do not handle (rectilinear chunk grids,
            storage transformers).
        """
        if not isinstance(document, dict):
            raise RecordShapeError(f"{where}: zarr.json is not a JSON object")
        if document.get("zarr_format") != 3 or document.get("node_type") != "array":
            raise ValueError(
                f"{where} is not a Zarr v3 array (zarr_format {document.get('zarr_format')!r}, "
                f"node_type {document.get('node_type')!r}); these operations work on Zarr v3 "
                "arrays: convert it first (for example by copying it with zarr-python 3)"
            )
        shape = _int_tuple(document.get("shape"), "shape", where)
        grid_doc = document.get("chunk_grid")
        if not (
            isinstance(grid_doc, Mapping)
            and grid_doc.get("name") == "regular"
            and isinstance(grid_doc.get("configuration"), Mapping)
        ):
            raise ValueError(
                f"{where}: chunk grid {grid_doc!r} is not a regular grid; resize and promote "
                "move chunks on a regular grid only"
            )
        grid = _int_tuple(grid_doc["configuration"].get("chunk_shape"), "chunk_shape", where)
        if len(grid) != len(shape) or any(size < 1 for size in grid):
            raise RecordShapeError(f"{where}: chunk shape {grid} does not fit shape {shape}")
        if document.get("storage_transformers"):
            raise ValueError(
                f"{where}: storage transformers {document['storage_transformers']!r} move "
                "chunks to other keys; resize and promote refuse such arrays"
            )
        return cls(path, document, shape, grid, ChunkKeys.from_document(document, where=where))

    @property
    def prefix(self) -> str:
        """The prefix of the array's keys: ``"a/b/"``, or ``""`` for a root array."""
        return f"{self.path}/" if self.path else ""

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Chunks per dimension (integer ceiling: exact for lengths past 2**53).

        >>> ArrayDocument("", {}, (10, 0), (4, 3), ChunkKeys("default", "/")).grid_shape
        (3, 0)
        >>> ArrayDocument("", {}, (2**53 + 1,), (1,), ChunkKeys("default", "/")).grid_shape
        (9007199254740993,)
        """
        return tuple(-(-n // c) for n, c in zip(self.shape, self.grid, strict=True))

    @property
    def fill_value(self) -> object:
        """The fill value as stored in JSON (``"NaN"`` for a NaN float)."""
        return self.document.get("fill_value")


def _int_tuple(value: object, what: str, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise RecordShapeError(f"{where}: {what} {value!r} is not a list of non-negative integers")
    return tuple(value)


def marked(document: Mapping[str, Any], operation: str) -> dict[str, Any]:
    """``document`` with the in-progress marker that makes every Zarr reader refuse it.

    >>> marked({"shape": [2]}, "resize")[MARKER_FIELD]["must_understand"]
    True
    """
    return {
        **document,
        MARKER_FIELD: {
            "must_understand": True,
            "operation": operation,
            "journal": JOURNAL_NAME,
            # unchanged wording: recovery compares the stored marker with this
            # text, so arrays an earlier version left marked stay recoverable
            "remedy": "finish it with cytearc_vfs.arrays.recover(store, path) or "
            "cytearc-vfs array recover LOCATION PATH",
        },
    }


def array_location(array: zarr.Array[Any]) -> tuple[Store, str]:
    """The store and path of ``array``; refuses anything but a ``zarr.Array``."""
    if not isinstance(array, zarr.Array):
        raise TypeError(
            f"expected a zarr.Array, not {type(array).__name__}; open the array with "
            "zarr.open_array(store, path=..., mode='r+') (mode='r' to read) and pass that"
        )
    store_path = array.store_path
    return store_path.store, store_path.path


#: One lock per array location (:func:`describe`) in this process: a flush holds it
#: from its check of ``zarr.json`` to its last unit, a resize or promote throughout.
#: Unlocked, two writers each read a unit, laid their cells over it and wrote it
#: whole (the last dropped the other's cells), and a resize could move the chunks
#: between a flush's check and its writes (which then landed in the old grid).
_ARRAY_LOCKS: dict[str, threading.Lock] = {}
_ARRAY_LOCKS_GUARD = threading.Lock()


def array_lock(store: Store, path: str) -> threading.Lock:
    """The process-wide lock of the array at ``path`` in ``store`` (made on first use)."""
    with _ARRAY_LOCKS_GUARD:
        return _ARRAY_LOCKS.setdefault(describe(store, path), threading.Lock())


def describe(store: Store, path: str) -> str:
    """``store`` and ``path`` for messages."""
    return f"array {path or '/'!r} in {store}"


def require_v3(array: zarr.Array[Any], what: str) -> None:
    """Refuse a Zarr v2 array (no ``zarr.json``; its chunks are not renamed here)."""
    if array.metadata.zarr_format != 3:
        raise ValueError(
            f"{what} works on Zarr v3 arrays; {describe(*array_location(array))} is Zarr v2 "
            f"(.zarray): convert it first (for example by copying it with zarr-python 3)"
        )


def require_writable(store: Store, path: str, what: str) -> None:
    """Refuse a read-only store before anything is planned."""
    if store.read_only:
        raise ValueError(
            f"{what} needs a writable store; {describe(store, path)} is read-only: "
            "open it with mode='r+' (or read_only=False)"
        )


#: What a resize or promote refused by the file system leaves (its journal may be written).
OPERATION_KEPT = (
    "nothing was changed, or, if the array now reports an unfinished operation, finish it "
    "with recover once the folder is writable"
)


@contextmanager
def writes_refused(what: str, store: Store, path: str, kept: str) -> Iterator[None]:
    """Say a refused write as what failed, where, and what is ``kept``.

    The file system's own error names a temporary file of zarr's atomic write
    (``.../arr.zarr/c/0/0.<hex>.partial``) and no remedy; it stays chained.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in REFUSED_WRITE_ERRNOS:
            raise
        raise PermissionError(
            exc.errno,
            f"{what} of {describe(store, path)} failed: its folder refuses writes "
            f"({exc.strerror}); {kept}. Make the folder writable, or work on a writable copy",
        ) from exc


def recover_remedy() -> str:
    """What to do about an unfinished operation (:func:`refuse_unfinished`, the marker)."""
    recover = callers_form(
        "cytearc_vfs.arrays.recover(store, path)", "cytearc-vfs array recover LOCATION PATH"
    )
    return (
        "if another process is resizing or promoting it, wait for it to finish; if none is "
        f"(it crashed or was interrupted), finish the operation with {recover}"
    )


def refuse_unfinished(store: Store, path: str) -> None:
    """Refuse an array whose journal is present: an operation is live, or died unfinished.

    One ``get``. Nothing here can tell a live operation of another process
    from a dead one, so nothing here finishes it: recovery racing a live
    resize would rename chunks under it. Only :func:`~.journal.recover`,
    called by someone who knows no operation is live, finishes one.

    Raises
    ------
    IncompleteStoreError
        ``cytearc.journal.json`` exists (even torn: a writer may be writing it).
    """
    where = describe(store, path)
    key = f"{path}/{JOURNAL_NAME}" if path else JOURNAL_NAME
    try:
        present = get_json(store, key, where=where) is not None
    except RecordShapeError:  # torn, or being written right now
        present = True
    if present:
        raise IncompleteStoreError(
            f"{where}: a resize or promote is under way or was interrupted ({JOURNAL_NAME} "
            f"is present), so its chunks may be half-moved and nothing was read or written; "
            + recover_remedy()
        )


def stored_document(store: Store, path: str, *, stopped: str) -> dict[str, Any]:
    """The array's ``zarr.json`` as stored now (one ``get``), refused when it is gone or
    marks an unfinished resize or promote (``stopped``: what the refusal did not do,
    "written" or "read or written")."""
    where = describe(store, path)
    key = f"{path}/zarr.json" if path else "zarr.json"
    document = get_json(store, key, where=where)
    if not isinstance(document, dict):
        raise FileNotFoundError(f"{where}: no zarr.json at {key!r} (the array is gone)")
    if MARKER_FIELD in document:
        raise IncompleteStoreError(
            f"{where}: a resize or promote is under way or was interrupted; nothing was "
            f"{stopped}; " + recover_remedy()
        )
    return document


def require_current(array: zarr.Array[Any], store: Store, path: str) -> dict[str, Any]:
    """The array's stored ``zarr.json`` (one ``get``); refuses an ``array`` it no longer describes.

    An array object keeps the metadata it was opened with. Once another object
    or process resized or promoted the array, the chunks sit at positions of
    another grid, and reading or writing through the old metadata gives
    shifted values without an error. Attributes are not compared: they place
    no cell.

    Raises
    ------
    IncompleteStoreError
        ``zarr.json`` carries the marker of an unfinished operation.
    ValueError
        ``zarr.json`` places cells otherwise than ``array``'s metadata.
    """
    where = describe(store, path)
    document = stored_document(store, path, stopped="read or written")
    stored = ArrayV3Metadata.from_dict(dict(document))
    if stored.update_attributes({}) != array.metadata.update_attributes({}):
        raise ValueError(
            f"{where}: this array object's metadata is not the array's zarr.json (another "
            "object or process resized or promoted it since this one was opened, so its "
            "chunks are not where this object would look); open the array again "
            "(zarr.open_array) and use that"
        )
    return document


def read_document(store: Store, path: str) -> ArrayDocument:
    """The stored ``zarr.json`` of the array at ``path``, checked by :meth:`ArrayDocument.parse`.

    Raises
    ------
    FileNotFoundError
        No ``zarr.json`` at ``path``.
    IncompleteStoreError
        The document carries the in-progress marker (an operation did not finish).
    """
    where = describe(store, path)
    key = f"{path}/zarr.json" if path else "zarr.json"
    document = get_json(store, key, where=where)
    if document is None:
        raise FileNotFoundError(f"{where}: no zarr.json at {key!r}")
    if isinstance(document, dict) and MARKER_FIELD in document:
        raise IncompleteStoreError(
            f"{where}: zarr.json marks an unfinished {_operation(document)}; " + recover_remedy()
        )
    return ArrayDocument.parse(path, document, where=where)


def _operation(document: Mapping[str, Any]) -> str:
    marker = document.get(MARKER_FIELD)
    return str(marker.get("operation", "operation")) if isinstance(marker, Mapping) else "operation"


def view_array(store: Store, path: str, document: Mapping[str, Any]) -> zarr.Array[Any]:
    """A zarr array over ``store``'s keys at ``path`` described by ``document``.

    The document is not read from or written to the store: it may describe
    the array as it is not stored (a shape widened to whole chunks, to reach
    the cells an edge chunk holds beyond the shape). Every key zarr then
    reads, writes or deletes passes the package's key check
    (:class:`~cytearc_vfs.format.key_checked.KeyCheckedWrapperStore`); all-fill
    chunks are deleted rather than written, as zarr does by default.
    """
    metadata = ArrayV3Metadata.from_dict(json.loads(json.dumps(document)))
    checked = KeyCheckedWrapperStore(store)
    async_array = AsyncArray(
        metadata=metadata,
        store_path=StorePath(checked, path),
        config={"write_empty_chunks": False},
    )
    return zarr.Array(async_array)


def refresh(array: zarr.Array[Any], document: Mapping[str, Any]) -> None:
    """Give ``array`` (the caller's object) the metadata ``document`` now stored.

    zarr's own ``Array.resize`` changes the array object in place; resize and
    promote do the same, so the caller's handle never describes chunks that
    moved.
    """
    metadata = ArrayV3Metadata.from_dict(json.loads(json.dumps(document)))
    current = array.async_array
    updated = AsyncArray(metadata=metadata, store_path=current.store_path, config=current.config)
    array._async_array = cast("AsyncArray[Any]", updated)


def fill_cells(values: npt.NDArray[Any], fill: object) -> npt.NDArray[np.bool_]:
    """Which cells of ``values`` hold ``fill`` (NaN matches NaN, NaT matches NaT).

    >>> fill_cells(np.array([0.0, np.nan, 1.0]), float("nan")).tolist()
    [False, True, False]
    >>> fill_cells(np.array(["2020-01-01", "NaT"], dtype="M8[s]"), np.datetime64("NaT", "s")).tolist()
    [False, True]
    >>> fill_cells(np.array([0, 3, 0], dtype="u2"), 0).tolist()
    [True, False, True]
    """
    if fill is None:
        return np.zeros(values.shape, dtype=bool)
    if values.dtype.kind in "mM" and _is_nat(fill):
        # NaT never equals itself, as NaN does not
        return np.asarray(np.isnat(values), dtype=bool)
    if values.dtype.kind in "fc":
        fill_number = complex(cast("complex", fill))
        if math.isnan(fill_number.real) or math.isnan(fill_number.imag):
            if values.dtype.kind == "f":
                return np.isnan(values)
            real_nan = math.isnan(fill_number.real)
            imag_nan = math.isnan(fill_number.imag)
            real = np.isnan(values.real) if real_nan else values.real == fill_number.real
            imag = np.isnan(values.imag) if imag_nan else values.imag == fill_number.imag
            return np.asarray(real & imag, dtype=bool)
    found = np.asarray(values == fill)
    if found.shape != values.shape:  # numpy could not compare element by element
        return np.zeros(values.shape, dtype=bool)
    return found.astype(bool, copy=False)


def _is_nat(fill: object) -> bool:
    """Whether ``fill`` is NaT (as zarr gives it, or as JSON spells it)."""
    if isinstance(fill, str):
        return fill == "NaT"
    found = np.asarray(fill)
    return found.dtype.kind in "mM" and found.ndim == 0 and bool(np.isnat(found))


def dumps(document: Mapping[str, Any] | Sequence[Any]) -> bytes:
    """JSON bytes of a document, as zarr writes them (indented, NaN spelled by zarr)."""
    return json.dumps(document, indent=2).encode()
