"""Open-time checks of the tables and records a store's counts depend on.

Fingerprints bind counts to sources; these checks bind the rest of what a
reader trusts to the same identity, and run on every open:

- the ordered cell and feature ids of a composite or mount, read once and
  fingerprinted, against the fingerprint recorded at creation (the composite
  record's ``ids``, the mount source's dataset identity, and the ``fingerprint``
  attribute that every ids array carries);
- the declared assays (``assayTypes``, ``defaultAssay``) against the groups
  that carry ``is_assay: true``;
- the fill value of count arrays (0: a chunk never written reads as zeros,
  and any other fill would invent counts);
- a composite's virtual array documents against its mappings;
- a mount target that holds arrays where the source's counts are read.

Each check raises the package's errors with the path and the remedy.
:mod:`cytearc_vfs.composite.open_checks` and :mod:`cytearc_vfs.mount.open_checks` run them on composites and mounts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.abc.store import Store

from ..errors import IdentityMismatchError, IncompleteStoreError, RecordShapeError
from .chunk_keys import ChunkKeys
from .fingerprints import ids_fingerprint
from .nodes import array_at
from .paths import AssayPaths, join
from .records import parse_assay_types, requires_transpose
from .store_io import list_dir

if TYPE_CHECKING:
    pass

__all__ = [
    "check_declared_assays",
    "check_fill_value",
    "check_ids",
    "check_virtual_arrays",
    "refuse_target_counts",
]


def check_fill_value(fill_value: object, *, where: str, remedy: str) -> None:
    """Refuse a count array whose fill value is not 0.

    >>> check_fill_value(np.uint16(0), where="RNA/counts", remedy="re-import")
    >>> check_fill_value(1, where="RNA/counts", remedy="re-import")
    Traceback (most recent call last):
    ...
    cytearc_vfs.errors.RecordShapeError: RNA/counts has fill_value 1, but count arrays must fill with 0 (a chunk never written reads as its fill value, so any other value invents counts); re-import
    """
    try:
        zero = bool(fill_value == 0) and not isinstance(fill_value, str)
    except (TypeError, ValueError):
        zero = False
    if not zero:
        shown = fill_value.item() if isinstance(fill_value, np.generic) else fill_value
        raise RecordShapeError(
            f"{where} has fill_value {shown!r}, but count arrays must fill with 0 (a chunk "
            f"never written reads as its fill value, so any other value invents counts); {remedy}"
        )


def check_ids(
    root: zarr.Group,
    table: str,
    length: int,
    *,
    expected: str | None,
    recorded_in: str,
    where: str,
    remedy: str,
) -> str:
    """Read ``{table}/ids`` once and check it against ``expected`` and its own attribute.

    Parameters
    ----------
    root
        The group the table is below.
    table
        Path of the table group (``cellData``, ``RNA/featureData``, ...).
    length
        The length the counts give the axis.
    expected
        The fingerprint recorded at creation, or ``None`` for a store written
        before it was recorded (then only the ids array's own ``fingerprint``
        attribute, when present, is compared).
    recorded_in
        Names the record ``expected`` comes from, for messages.
    where
        The store, for messages.
    remedy
        What to do when the ids changed.

    Returns
    -------
    str
        The fingerprint of the ids read.
    """
    path = join(table, "ids")
    if path not in root:
        raise RecordShapeError(f"{where}: {path!r} is missing; {remedy}")
    ids = array_at(root, path)
    if tuple(ids.shape) != (length,):
        raise RecordShapeError(
            f"{where}: {path!r} has shape {tuple(ids.shape)}, but the counts have {length} "
            f"entries on that axis; {remedy}"
        )
    found = ids_fingerprint(np.asarray(ids[:]))
    attribute = ids.attrs.get("fingerprint")
    for wanted, source in (
        (expected, recorded_in),
        (attribute, f"the fingerprint attribute of {path!r}"),
    ):
        if wanted is not None and wanted != found:
            raise IdentityMismatchError(
                f"{where}: {path!r} holds ids with fingerprint {found}, but {source} records "
                f"{wanted}; the ids were changed after the store was created, so rows or "
                f"columns would be read under the wrong names. {remedy}"
            )
    return found


def check_declared_assays(
    attrs: Mapping[str, Any],
    present: Iterable[str],
    *,
    pending: Iterable[str] = (),
    container: str,
    where: str,
    remedy: str,
) -> None:
    """Refuse ``assayTypes`` naming an assay with no ``is_assay`` group, and an unknown
    ``defaultAssay``.

    ``present`` are the published assays of the container, ``pending`` its
    pending derived assays (declared, not yet published).
    """
    label = container or "/"
    published = set(present)
    types = parse_assay_types(attrs.get("assayTypes", {}), where=label)
    missing = sorted(set(types) - published - set(pending))
    if missing:
        raise IncompleteStoreError(
            f"{where}: assayTypes of {label!r} declares assay(s) {missing}, but no group there "
            f"carries is_assay: true (assays found: {sorted(published) or 'none'}); the assay "
            f"group was removed or its is_assay attribute dropped. {remedy}"
        )
    default = attrs.get("defaultAssay")
    if "defaultAssay" in attrs and (not isinstance(default, str) or default not in published):
        raise RecordShapeError(
            f"{where}: defaultAssay {default!r} of {label!r} names no assay of the store "
            f"(assays: {sorted(published) or 'none'}); {remedy}"
        )


def _document_field(document: Mapping[str, Any], *names: str) -> Any:
    value: Any = document
    for name in names:
        if not isinstance(value, Mapping) or name not in value:
            raise KeyError(".".join(names))
        value = value[name]
    return value


def check_virtual_arrays(
    arrays: Mapping[str, Mapping[str, Any]],
    assay: str,
    assay_type: str | None,
    shape: tuple[int, int],
    *,
    where: str,
) -> None:
    """Check a composite's virtual ``zarr.json`` documents against its mappings.

    ``shape`` is (cells, features) as the mappings give it; ``counts`` must have
    it and ``countsT`` (present exactly when ``assay_type`` is RNA-like, or
    either way when the type is undeclared) its transpose, with one dtype, a
    fill value of 0, and row chunks that span every column.
    """
    remedy = "the composite record was edited; recreate the composite"
    counts, counts_t = join(assay, "counts"), join(assay, "countsT")
    wanted = {counts: shape, counts_t: (shape[1], shape[0])}
    unknown = sorted(set(arrays) - set(wanted))
    if counts not in arrays or unknown:
        raise RecordShapeError(
            f"composite at {where}: the record's arrays are {sorted(arrays)}, expected "
            f"{counts!r} (and {counts_t!r} for RNA-like assays); {remedy}"
        )
    if assay_type is not None and requires_transpose(assay_type) != (counts_t in arrays):
        raise RecordShapeError(
            f"composite at {where}: assay {assay!r} is declared {assay_type}, which "
            f"{'needs' if requires_transpose(assay_type) else 'has no'} countsT, but the record "
            f"{'lacks' if counts_t not in arrays else 'holds'} one; {remedy}"
        )
    dtypes = set()
    for path, document in arrays.items():
        expected = list(wanted[path])
        try:
            found = _document_field(document, "shape")
            chunk = _document_field(document, "chunk_grid", "configuration", "chunk_shape")
            fill_value = _document_field(document, "fill_value")
            dtypes.add(str(_document_field(document, "data_type")))
            codecs = _document_field(document, "codecs")
        except KeyError as exc:
            raise RecordShapeError(
                f"composite at {where}: the virtual document of {path!r} lacks {exc}; {remedy}"
            ) from exc
        if found != expected:
            raise RecordShapeError(
                f"composite at {where}: the record gives {path!r} shape {found}, but the mappings "
                f"give {expected} (rowSources x featureColumns); reads would drop or invent rows. "
                f"{remedy}"
            )
        if (
            not isinstance(chunk, list)
            or len(chunk) != 2
            or chunk[1] != max(expected[1], 1)
            or not isinstance(chunk[0], int)
            or chunk[0] < 1
        ):
            raise RecordShapeError(
                f"composite at {where}: {path!r} has chunk shape {chunk}; computed chunks span "
                f"every column ({max(expected[1], 1)}). {remedy}"
            )
        if not isinstance(codecs, list) or [
            c.get("name") for c in codecs if isinstance(c, dict)
        ] != ["bytes"]:
            raise RecordShapeError(
                f"composite at {where}: {path!r} has codecs {codecs}; computed chunks are served "
                f"as plain little-endian bytes. {remedy}"
            )
        grid = document.get("chunk_grid")
        if not isinstance(grid, Mapping) or grid.get("name") != "regular":
            raise RecordShapeError(
                f"composite at {where}: {path!r} has chunk grid {grid!r}; computed chunks are "
                f"a regular grid. {remedy}"
            )
        # zarr asks for the keys this encoding names: one it does not know must fail
        # here, not at the first read
        ChunkKeys.from_document(document, where=f"composite at {where}: {path!r}")
        check_fill_value(fill_value, where=f"composite at {where}: {path!r}", remedy=remedy)
    if len(dtypes) != 1:
        raise RecordShapeError(
            f"composite at {where}: counts and countsT have data types {sorted(dtypes)}; they "
            f"are one matrix. {remedy}"
        )
    for path, document in arrays.items():
        _check_little_endian(document["codecs"][0], document, path=path, where=where, remedy=remedy)


def _check_little_endian(
    codec: Mapping[str, Any], document: Mapping[str, Any], *, path: str, where: str, remedy: str
) -> None:
    """Refuse a ``bytes`` codec that would decode the served little-endian chunks otherwise.

    Computed chunks are always little-endian; a document declaring
    ``endian: big`` made plain zarr read a ``uint16`` 1 as 256. Creation
    writes ``endian: little`` for multi-byte types and no configuration for
    one-byte types, whose values no byte order changes.
    """
    config = codec.get("configuration")
    try:
        single_byte = np.dtype(document.get("data_type")).itemsize == 1
    except (TypeError, ValueError, KeyError):
        single_byte = False  # an unknown type is refused with the record's dtype check
    if single_byte:
        return
    if not isinstance(config, Mapping) or config.get("endian") != "little":
        raise RecordShapeError(
            f"composite at {where}: {path!r} has bytes codec configuration {config!r}; computed "
            f"chunks are served little-endian (endian: little), and any other byte order would "
            f"make plain zarr read other values. {remedy}"
        )


def refuse_target_counts(target: Store, paths: AssayPaths, *, where: str) -> None:
    """Refuse a mount target holding nodes where the source's counts are read.

    A mount serves counts from its source; a ``counts``, ``countsT`` or
    ``countSummaries`` node in the target would be what plain zarr reads at
    those keys, and would disagree with every reader of this package.
    """
    if paths.matrix_group != paths.assay_group:
        # workspace layout: the whole matrices/{assay} group is the source's
        held = [paths.matrix_group] if list_dir(target, paths.matrix_group) else []
    else:
        children = set(list_dir(target, paths.assay_group))
        held = [
            join(paths.assay_group, name)
            for name in ("counts", "countsT", "countSummaries")
            if name in children
        ]
    if held:
        raise RecordShapeError(
            f"mount at {where}: the target holds {held}, where the mounted source's counts are "
            "read; plain zarr would read the target's copy while this package reads the "
            "source's, so they could disagree. Remove those nodes from the target, or mount again"
        )
