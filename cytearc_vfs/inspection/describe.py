"""A JSON-ready description of a store: what ``cytearc-vfs info`` prints."""

from __future__ import annotations

from typing import Any

from zarr.abc.store import Store

from ..format.source_store import read_contents, verify_store

__all__ = ["describe_store"]


def describe_composite(store: Store, *, where: str) -> dict[str, Any]:
    """Sources, shape and dtype of a verified composite."""
    from ..composite.store import CompositeStore

    composite = CompositeStore._verified(store, where, None)
    reader = composite.reader()
    record = composite.record
    return {
        "location": where,
        "kind": "composite",
        "zarrFormat": 3,
        "assay": record.assay,
        "shape": list(reader.shape),
        "dtype": str(reader.dtype),
        "arrays": sorted(record.arrays),
        "sources": [binding.to_json() for binding in record.sources],
    }


def describe_mount(store: Store, *, where: str) -> dict[str, Any]:
    """Source, workspace and mounted assays of a verified mount."""
    from ..mount.store import MountStore

    mount = MountStore._verified(store, where, None)
    return {
        "location": where,
        "kind": "mount",
        "zarrFormat": 3,
        "matrixSource": mount.record.to_json(),
    }


def describe_store(store: Store, *, where: str) -> dict[str, Any]:
    """Kind, assays, shapes, dtypes, layouts and fingerprints of a verified store."""
    root_attrs = read_contents(store, where=where).root_attrs
    if "composite" in root_attrs:
        return describe_composite(store, where=where)
    if "matrixSource" in root_attrs:
        return describe_mount(store, where=where)
    contents, infos = verify_store(store, where=where)
    assays = []
    for info in infos:
        assays.append(
            {
                "assay": info.paths.assay,
                "workspace": info.paths.workspace,
                "assayType": info.assay_type,
                "shape": list(info.shape),
                "dtype": info.layout.dtype,
                "countsT": info.has_counts_t,
                "layout": info.layout.to_json(),
                "contentFingerprint": info.content_fingerprint,
                "countsFingerprint": info.counts_fingerprint,
                "datasetFingerprint": info.dataset_fingerprint,
            }
        )
    return {
        "location": where,
        "kind": "ordinary",
        "zarrFormat": contents.zarr_format,
        "assays": assays,
        "pendingAssays": [p.assay_group for p in contents.pending],
    }
