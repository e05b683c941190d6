"""AnnData as input to ``write_counts``: in memory, or on disk without loading ``X``.

Registered as the ``anndata`` entry of the core's ``cytearc_vfs.count_sources``
group (see :mod:`cytearc_vfs.write.count_source`). Two inputs are recognised:

- an ``anndata.AnnData`` object: its ``X`` (or ``layer``), ``obs`` and
  ``var``; ``layer="raw/X"`` takes its raw counts ``adata.raw.X`` with
  ``adata.raw.var`` as the features. anndata is the optional extra
  ``cytearc-vfs[anndata]``: an AnnData can only exist where anndata was
  imported, so this adapter looks for the module instead of importing it,
  and scipy or numpy input never pays for it;
- the location of an AnnData container: a path or URL of an AnnData Zarr
  store (v2 or v3), an ``.h5ad`` file, a zarr ``Store`` or ``Group``. Its
  matrix (``X``, a layer, or ``raw/X`` with ``raw/var`` as the features)
  is handed to the writer as a :class:`~.matrices.MatrixElement`,
  which the writer reads in row bands (a CSR's rows directly, a CSC's from a
  transposed spill, a dense array's by slicing): ``X`` is never loaded.
  An opened :class:`~.container.AnnDataContainer` is taken as well (its
  matrix element then shows what the write read, in ``stats``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import zarr
from zarr.abc.store import Store

from cytearc_vfs.errors import warn_at_caller
from cytearc_vfs.format.table_names import OBS, RAW_VAR, VAR, TableName
from cytearc_vfs.read.anndata_elements import RAW_COUNTS, MissingElementError
from cytearc_vfs.write.count_source import CountInput
from cytearc_vfs.write.membership import declared_membership

from .container import AnnDataContainer, NotAnnDataError
from .dataframes import SkippedColumn
from .matrices import SparseMatrixElement
from .nodes import open_container
from .not_imported import not_imported_from_anndata, not_imported_from_container

__all__ = ["count_input", "membership_of"]


def _in_memory(counts: Any, layer: str | None) -> CountInput | None:
    anndata = sys.modules.get("anndata")
    if anndata is None or not isinstance(counts, anndata.AnnData):
        return None
    # recent anndata lists X among the layers under the key None
    names = sorted(name for name in counts.layers if isinstance(name, str))
    raw = counts.raw
    choices = f"its layers are {names}" + (
        f", and its raw counts {RAW_COUNTS!r}" if raw is not None else ""
    )
    features = counts.var
    if layer is None:
        matrix = counts.X
        if matrix is None:
            raise MissingElementError(
                f"the AnnData has no X; pass layer= naming the layer with counts ({choices})",
                "X",
            )
    elif layer == RAW_COUNTS:
        if raw is None:
            raise MissingElementError(
                f"the AnnData has no raw counts (adata.raw is None), so layer={RAW_COUNTS!r} "
                f"names nothing; {choices} (or pass no layer= to write X)",
                RAW_COUNTS,
            )
        # the raw counts' own features: raw.var may list more than var
        matrix, features = raw.X, raw.var
    else:
        if layer not in counts.layers:
            raise MissingElementError(
                f"the AnnData has no layer {layer!r}; {choices} (or pass no layer= to write X)",
                f"layers/{layer}",
            )
        matrix = counts.layers[layer]
    left = not_imported_from_anndata(counts, layer)
    membership = declared_membership(counts.uns)
    return CountInput(matrix, counts.obs, features, membership, left, OBS, _features(layer))


def _features(layer: str | None) -> TableName:
    """How refusals name the feature table of the counts ``layer``: ``raw/var`` for the
    raw counts, ``var`` for any other."""
    return RAW_VAR if layer == RAW_COUNTS else VAR


def _is_location(counts: Any) -> bool:
    if isinstance(counts, (str, os.PathLike, Store, zarr.Group, AnnDataContainer)):
        return True
    return type(counts).__module__.startswith("h5py")


def count_input(
    counts: Any, layer: str | None, storage_options: Mapping[str, Any] | None = None
) -> CountInput | None:
    """The counts of an AnnData (object or container location), or ``None`` for anything
    else; ``storage_options`` are the backend options of a location given as a URL."""
    found = _in_memory(counts, layer)
    if found is not None or not _is_location(counts):
        return found
    container = (
        counts if isinstance(counts, AnnDataContainer) else _opened(counts, layer, storage_options)
    )
    container.check_root()
    matrix = container.matrix(layer)
    # the checks, the value scan, the write pass and countsT's feature groups each read
    # the matrix: on object storage each chunk object is fetched once for all of them,
    # kept until the write releases it (or this refuses)
    matrix.fetch_once()
    try:
        if isinstance(matrix, SparseMatrixElement):
            matrix.check_stored_chunks()  # a partial copy is refused before anything is written
        skipped: list[SkippedColumn] = []
        obs, var = container.obs(skipped=skipped), container.features(layer, skipped=skipped)
        left = not_imported_from_container(container.root, layer)
        membership = membership_of(container)
    except BaseException:
        matrix.release()
        raise
    for column in skipped:
        # one unreadable column (an awkward array, an unknown encoding) does not
        # cost the import: it is left out, and said so before anything is written
        warn_at_caller(
            f"{container.where}: column {column.path!r} cannot be read, it is not imported "
            f"(the counts and the other columns are): {column.reason}",
        )
    return CountInput(
        matrix,
        obs,
        var,
        membership,
        left,
        OBS,
        _features(layer),
        release=matrix.release,
    )


def membership_of(container: AnnDataContainer) -> Mapping[str, Any] | None:
    """The container's ``uns["cytearc"]["assayMembership"]`` (only that element is read)."""
    try:
        declared = container.read("uns/cytearc/assayMembership")
    except KeyError:  # no such element: nothing declared
        return None
    return declared_membership({"cytearc": {"assayMembership": declared}})


def _opened(
    counts: Any, layer: str | None, storage_options: Mapping[str, Any] | None
) -> AnnDataContainer:
    features = "raw/var" if layer == RAW_COUNTS else "var"
    try:
        if not isinstance(counts, (str, os.PathLike)):
            return AnnDataContainer.open(counts, storage_options=storage_options)
        # the tables are read whole: on object storage their objects at once
        return AnnDataContainer(
            open_container(counts, storage_options=storage_options, prefetch_tables=features)
        )
    except (NotAnnDataError, FileNotFoundError) as exc:
        raise ValueError(
            f"counts given as a location: {exc}. write_counts reads a location only when it "
            "is an AnnData Zarr store or an .h5ad file; other counts are passed as a "
            "scipy.sparse matrix, a numpy array or an AnnData. Nothing was written"
        ) from exc
