"""A JSON-ready description of a store: what ``cytearc-vfs info`` prints.

Every description ends with ``artifacts``: per artifact root, the published
artifacts by kind and the unpublished groups
(:func:`~cytearc_vfs.artifacts.tally.tally_artifacts`), or ``None`` for a
store that cannot list its keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zarr.abc.store import Store

from ..artifacts.roots import roots_of
from ..artifacts.tally import tally_artifacts
from ..format.source_store import read_contents, verify_store
from ..format.store_contents import StoreContents

__all__ = ["describe_store"]


def _artifacts(
    store: Store, where: str, contents: StoreContents | None
) -> list[dict[str, Any]] | None:
    """The artifact tallies of ``store`` as JSON (its roots from ``contents`` when read)."""
    roots = None if contents is None else roots_of(contents)
    tallies = tally_artifacts(store, where=where, roots=roots)
    return None if tallies is None else [tally.to_json() for tally in tallies]


def describe_composite(
    store: Store,
    *,
    where: str,
    source_storage_options: Mapping[str, Any] | None = None,
    contents: StoreContents | None = None,
) -> dict[str, Any]:
    """Sources, shape and dtype of a verified composite (its sources read with
    ``source_storage_options``, ``{name: options}``), and its own artifacts
    (``contents``: the composite's, when read already)."""
    from ..composite.store import CompositeStore

    composite = CompositeStore._verified(store, where, source_storage_options)
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
        # a composite's artifacts are its own, beside its records: read as stored
        "artifacts": _artifacts(store, where, contents),
    }


def describe_mount(
    store: Store, *, where: str, source_storage_options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Source, workspace and mounted assays of a verified mount (its source read
    with ``source_storage_options``), and the artifacts the mount shows, its
    source's and its target's counted apart."""
    from ..mount.store import MountStore

    mount = MountStore._verified(store, where, source_storage_options)
    record = mount.record
    try:
        assays = []
        for name in record.assays:
            # the reader opens the verified source documents: no request
            reader = mount.reader(name)
            assays.append(
                {
                    "assay": name,
                    "workspace": record.workspace,
                    "shape": list(reader.shape),
                    "dtype": str(reader.dtype),
                }
            )
        # through the mount, as `cytearc-vfs artifacts` lists them: its roots too
        artifacts = _artifacts(mount, where, None)
    finally:
        mount.close()
    return {
        "location": where,
        "kind": "mount",
        "zarrFormat": 3,
        "assays": assays,
        "matrixSource": record.to_json(),
        "artifacts": artifacts,
    }


def describe_store(
    store: Store, *, where: str, source_storage_options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Kind, assays, shapes, dtypes, layouts and fingerprints of a verified store, and
    its artifacts.

    ``source_storage_options`` are the backend options of a composite's
    sources (``{name: options}``) or of a mount's source, as ``open_store``
    takes them.
    """
    contents = read_contents(store, where=where)
    root_attrs = contents.root_attrs
    if "composite" in root_attrs:
        return describe_composite(
            store, where=where, source_storage_options=source_storage_options, contents=contents
        )
    if "matrixSource" in root_attrs:
        return describe_mount(store, where=where, source_storage_options=source_storage_options)
    # the contents read above tell the kind: verified from them, not read again
    contents, infos = verify_store(store, where=where, contents=contents)
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
        "artifacts": _artifacts(store, where, contents),
    }
