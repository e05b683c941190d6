"""JSON documents a composite keeps beside its record, bound to that record.

Some of what a composite knows does not belong in the root ``composite``
record, whose fields the spec fixes: the sealed documents of its remote
sources (:mod:`~cytearc_vfs.composite.source_seals`) and the entries of its
AnnData sources (:mod:`~cytearc_vfs.composite.anndata_records`). Each is one
UTF-8 JSON document stored as a ``uint8`` array of one chunk in the
``_composite`` group (an open fetches it in one request), whose attribute
holds two fingerprints:

- ``fingerprint``: of the array's values, so a document edited after
  creation is refused;
- ``sources``: of the record's source bindings, so a document copied beside
  another composite's record is refused.

The attribute is written after the values: an array without it (a creation
killed between the two writes) is refused, never read.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import zarr

from ..errors import IdentityMismatchError, RecordShapeError
from ..format.fingerprints import combine
from ..format.nodes import array_at
from ..format.records import check_fields
from .maps import array_fingerprint
from .records import CompositeRecord

__all__ = ["read_bound_document", "write_bound_document"]


def _bindings_fingerprint(attribute: str, record: CompositeRecord) -> str:
    return combine(attribute, {"sources": [source.to_json() for source in record.sources]})


def write_bound_document(
    group: zarr.Group, name: str, attribute: str, record: CompositeRecord, document: Any
) -> None:
    """Write ``document`` (JSON-able) as the array ``name`` of ``group``, bound to ``record``."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    values = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()
    array = group.create_array(
        name, shape=values.shape, dtype=values.dtype, chunks=(max(1, len(values)),)
    )
    array[:] = values
    array.attrs.update(
        {
            attribute: {
                "fingerprint": array_fingerprint(values),
                "sources": _bindings_fingerprint(attribute, record),
            }
        }
    )


def read_bound_document(
    root: zarr.Group,
    path: str,
    attribute: str,
    record: CompositeRecord,
    *,
    where: str,
    remedy: str,
) -> Any:
    """The document at ``path`` (``None`` when there is no such array), checked
    against its fingerprints; ``remedy`` ends every refusal."""
    if path not in root:
        return None
    array = array_at(root, path)
    values = np.asarray(array[:])
    if values.dtype != np.uint8 or values.ndim != 1:
        raise RecordShapeError(
            f"composite at {where}: {path!r} holds {values.dtype} values of {values.ndim} "
            f"dimensions, not bytes; {remedy}"
        )
    attrs = check_fields(array.attrs.asdict(), {attribute: dict}, record=path, where=where)
    recorded = check_fields(
        attrs[attribute],
        {"fingerprint": str, "sources": str},
        record=f"{path} {attribute}",
        where=where,
    )
    found = array_fingerprint(values)
    if found != recorded["fingerprint"]:
        raise IdentityMismatchError(
            f"composite at {where}: {path} has fingerprint {found}, but its attributes hold "
            f"{recorded['fingerprint']}; it was changed after creation. {remedy[:1].upper()}"
            f"{remedy[1:]}"
        )
    if recorded["sources"] != _bindings_fingerprint(attribute, record):
        raise IdentityMismatchError(
            f"composite at {where}: {path} was written for other sources than the record "
            f"binds (copied from another composite?); {remedy}"
        )
    try:
        return json.loads(values.tobytes().decode("utf-8"))
    except ValueError as exc:
        raise RecordShapeError(
            f"composite at {where}: {path} is not JSON ({exc}); {remedy}"
        ) from exc
