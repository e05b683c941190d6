"""Sealed source documents: what a composite's open need not fetch again.

Opening a composite verifies each source from some fifteen metadata
documents. For a remote source whose backend reports versions (ETags),
creation keeps the documents it verified, each with the version it was read
at (the version came in the same response as the bytes), in one array of the
composite's own store, ``_composite/sourceSeals``. The array's attributes
hold the fingerprint of its values and of the record's source bindings it
was written for, so a seal edited after creation, or copied from another
composite, is refused. The seal is not part of the composite record (whose
fields the spec fixes): it is a cache of documents, and a composite without
one (created before seals, or over sources that give no versions) opens by
fetching every document.

At open, one listing of each source (which every remote open takes anyway, to
pin the count shards) gives every object's current version. A document whose
listed version is the sealed one is the very object whose bytes were sealed,
so verification reads the sealed bytes; any other document (changed, new, or
absent from the seal) is fetched. Every check still runs, on the same bytes a
full fetch would return: only the round trips go. A source that did not
change opens with its listing alone.

The array holds UTF-8 JSON, one object per sealed source::

    {"<source name>": {"<key>": ["<version>", "<document text>"], ...}, ...}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import zarr

from ..errors import RecordShapeError
from ..read.prefetch import Seal
from .bound_documents import read_bound_document, write_bound_document
from .records import MAPS_GROUP, CompositeRecord

__all__ = ["SEALS_PATH", "decode_seals", "encode_seals", "read_seals", "write_seals"]

#: Where the sealed source documents are stored.
SEALS_PATH = f"{MAPS_GROUP}/sourceSeals"
#: The seal array's attribute: fingerprints of its values and of the bindings.
SEAL_ATTR = "cytearc:sourceSeals"


def encode_seals(seals: Mapping[str, Seal]) -> dict[str, dict[str, list[str]]]:
    """The JSON document holding ``seals`` (source name -> sealed documents).

    Documents that are not UTF-8 text are left out (they are fetched at open).

    >>> encode_seals({"a": {"zarr.json": ('"9f"', b"{}")}})
    {'a': {'zarr.json': ['"9f"', '{}']}}
    """
    payload: dict[str, dict[str, list[str]]] = {}
    for name in sorted(seals):
        documents: dict[str, list[str]] = {}
        for key in sorted(seals[name]):
            token, data = seals[name][key]
            try:
                documents[key] = [token, data.decode("utf-8")]
            except UnicodeDecodeError:
                continue
        if documents:
            payload[name] = documents
    return payload


def decode_seals(
    payload: Any, names: Sequence[str], *, where: str
) -> dict[str, dict[str, tuple[str, bytes]]]:
    """Parse the seal document strictly: sources named in ``names`` only.

    >>> decode_seals(encode_seals({"a": {"zarr.json": ('"9f"', b"{}")}}), ["a"], where="c")
    {'a': {'zarr.json': ('"9f"', b'{}')}}
    """
    problem = f"composite at {where}: {SEALS_PATH} is not a seal of the sources"
    if not isinstance(payload, dict) or not set(payload) <= set(names):
        raise RecordShapeError(f"{problem} (it names unknown sources); recreate the composite")
    seals: dict[str, dict[str, tuple[str, bytes]]] = {}
    for name, documents in payload.items():
        if not isinstance(documents, dict):
            raise RecordShapeError(f"{problem} (source {name!r}); recreate the composite")
        seal: dict[str, tuple[str, bytes]] = {}
        for key, entry in documents.items():
            if (
                not isinstance(entry, list)
                or len(entry) != 2
                or not all(isinstance(part, str) for part in entry)
            ):
                raise RecordShapeError(
                    f"{problem} (source {name!r}, key {key!r}); recreate the composite"
                )
            seal[key] = (entry[0], entry[1].encode("utf-8"))
        seals[name] = seal
    return seals


def write_seals(maps_group: zarr.Group, record: CompositeRecord, seals: Mapping[str, Seal]) -> None:
    """Write ``seals`` for the sources of ``record`` into the composite's
    ``_composite`` group; nothing is written when no source could be sealed."""
    payload = encode_seals(seals)
    if payload:
        name = SEALS_PATH.rsplit("/", 1)[1]
        write_bound_document(maps_group, name, SEAL_ATTR, record, payload)


def read_seals(
    root: zarr.Group, record: CompositeRecord, *, where: str
) -> dict[str, dict[str, tuple[str, bytes]]]:
    """The verified seals of a composite's sources (none when it has no seal array)."""
    remedy = f"delete {SEALS_PATH} (the composite then opens by fetching every document)"
    payload = read_bound_document(root, SEALS_PATH, SEAL_ATTR, record, where=where, remedy=remedy)
    if payload is None:
        return {}
    return decode_seals(payload, [source.name for source in record.sources], where=where)
