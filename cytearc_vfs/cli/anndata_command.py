"""AnnData on the command line: ``cytearc-vfs anndata ls PATH``, and the input check of
``cytearc-vfs write``.

The container is read by the AnnData element layer of the adapters
(``cytearc_vfs_adapters.anndata``, docs/anndata.md): metadata and one listing
of each sparse matrix's chunks, never values. A location that is not an
AnnData is refused (exit 2); a damaged one (a metadata document that cannot
be parsed, a malformed sparse matrix, a chunk the listing proves lost) is
listed with its damaged elements marked, and exits 3, as ``docs/cli.md`` says of
a store that fails closed.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from .failures import ExitCode, InputRefusedError
from .inputs import json_option
from .outcome import Outcome, plural
from .progress import ProgressBars

__all__ = ["checked_anndata_input", "cmd_anndata"]


def refuse_remote_h5ad(location: str) -> None:
    """Refuse an ``.h5ad`` URL before any request: h5py reads local files only (probing
    the URL would end in an unrelated storage error, such as a credentials lookup)."""
    from ..remote.locations import local_path

    if local_path(location) is None and location.rstrip("/").endswith(".h5ad"):
        raise InputRefusedError(
            f"{location}: .h5ad files are read from local paths only; download it first, or "
            "give an AnnData Zarr store, which is read where it is"
        )


def checked_anndata_input(
    location: str, layer: str | None, storage_options: Mapping[str, Any] | None = None
) -> str:
    """Check that ``location`` is an AnnData container holding ``layer`` (a layer's name,
    or ``raw/X`` for its raw counts); the writer then
    streams it band by band (``X`` is never loaded). ``storage_options`` open a URL."""
    from cytearc_vfs_adapters.anndata import AnnDataContainer, NotAnnDataError

    from ..inspection.store_kind import classify_location
    from ..read.anndata_elements import RAW_COUNTS

    refuse_remote_h5ad(location)
    found = classify_location(location, storage_options=storage_options)
    # a root without attributes may be AnnData of anndata 0.7: the container decides
    if found.kind not in ("h5ad", "anndata", "zarr-group"):
        remedy = (
            "it already is one: copy it with cytearc-vfs repack"
            if found.is_cytearc
            else "give an .h5ad file or an AnnData Zarr store"
        )
        raise InputRefusedError(f"{found.words}; write imports AnnData: {remedy}")
    try:
        container = AnnDataContainer.open(location, storage_options=storage_options)
    except NotAnnDataError as exc:
        raise InputRefusedError(str(exc)) from exc
    try:
        container.check_root()
        raw = container.has_raw_counts()
        # the layer is looked up by its path: a store that cannot list is still
        # imported (its layers are listed only to name them in a refusal)
        if layer is None or (layer == RAW_COUNTS and raw) or container.has_layer(layer):
            return location
        layers = (
            f"its layers are: {', '.join(container.layers()) or 'none'}"
            if container.can_list
            else "its layers cannot be listed (its store cannot list its keys)"
        )
    finally:
        container.close()
    choices = layers + (f", and its raw counts {RAW_COUNTS}" if raw else "")
    if layer == RAW_COUNTS and not raw:
        raise InputRefusedError(
            f"{found.where} has no raw counts (no {RAW_COUNTS}: the AnnData was written "
            f"without adata.raw); {choices} (leave out --layer to use X)"
        )
    raise InputRefusedError(
        f"{found.where} has no layer {layer!r}; {choices} (leave out --layer to use X)"
    )


def _shape_text(shape: Sequence[int] | None) -> str:
    if shape is None:
        return ""
    return " x ".join(str(n) for n in shape) if shape else "scalar"


def cmd_anndata(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``anndata ls PATH``: every element of an AnnData container."""
    from cytearc_vfs_adapters.anndata import AnnDataContainer, NotAnnDataError
    from cytearc_vfs_adapters.anndata.nodes import open_container

    try:
        # every element's metadata is read: on object storage a level at a time
        container = AnnDataContainer(
            open_container(
                args.location,
                storage_options=json_option(args.storage_options, "--storage-options"),
                prefetch_metadata=True,
            )
        )
    except NotAnnDataError as exc:
        raise InputRefusedError(str(exc)) from exc
    try:
        if not container.can_list:
            # zarr's own refusal named neither the store nor a remedy
            raise InputRefusedError(
                f"{container.where}: its store cannot list its keys, and anndata ls names the "
                "elements by listing them; read it through a backend that lists (a local "
                "copy, or its object-store or WebDAV URL), or import it with cytearc-vfs "
                "write, which reads the counts, obs and var by their paths"
            )
        elements = container.elements()
        shape = container.shape
        storage = f"Zarr v{container.zarr_format}" if container.storage == "zarr" else "HDF5 (h5ad)"
        where = container.where
    finally:
        container.close()
    legacy = sum(1 for element in elements if element.legacy)
    awkward = sum(1 for element in elements if element.encoding_type == "awkward-array")
    unread = sum(1 for element in elements if element.note.startswith("not read"))
    damaged = sum(1 for element in elements if element.damaged)
    payload = {
        "location": where,
        "storage": container.storage,
        "zarrFormat": container.zarr_format,
        "shape": list(shape),
        "elements": [element.to_dict() for element in elements],
        "legacyElements": legacy,
        "awkwardArrays": awkward,
        "unreadableElements": unread,
        "damagedElements": damaged,
    }
    extras = [f"{legacy} legacy"]
    if awkward:
        extras.append(f"{plural(awkward, 'awkward array')} reported, not read")
    if unread:
        extras.append(f"{unread} not readable here")
    if damaged:
        extras.append(f"{damaged} damaged")
    lines = [
        f"{where}: AnnData ({storage}), {shape[0]} obs x {shape[1]} var, "
        f"{plural(len(elements), 'element')} ({', '.join(extras)})"
    ]
    rows = [
        (
            "/" + element.path,
            f"{element.encoding_type} {element.encoding_version}",
            _shape_text(element.shape),
            ("legacy" + ("" if element.declared else ", inferred")) if element.legacy else "",
            element.note,
        )
        for element in elements
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(4)] + [row[4]]
        lines.append("  " + "  ".join(cells).rstrip())
    if damaged:
        lines.append(
            f"{where} is damaged ({plural(damaged, 'element')} marked above): restore it from "
            "a copy or download it again, or write it again with anndata"
        )
    # the listing is the report; the code says the container fails closed
    return Outcome(payload, "\n".join(lines), ExitCode.DAMAGED if damaged else ExitCode.OK)
