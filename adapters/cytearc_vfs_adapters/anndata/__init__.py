"""AnnData containers element by element: Zarr (v2 and v3, any store) and h5ad.

Reads every element of the AnnData on-disk specification, modern (anndata
>= 0.8, encoding attributes on every element) and legacy (anndata 0.7.x:
dataframe 0.1.0 with ``__categories``, categorical columns pointing to their
labels, elements without encoding attributes classified by their
structure); count matrices are read in row or column bands, never whole.
docs/anndata.md has the element table.

Modules
-------
:mod:`.nodes` opens a container and smooths zarr/h5py differences;
:mod:`.encodings` says what an element is; :mod:`.values` and
:mod:`.dataframes` read elements; :mod:`.matrices` and :mod:`.transposed`
read matrices in bands; :mod:`.listing` lists elements (``anndata ls``);
:mod:`.container` puts them together; :mod:`.counts` is the
``write_counts`` input adapter (:mod:`.not_imported` names what an import
leaves out), :mod:`.source_tables` the reader of an
AnnData source's ``obs`` and ``var`` for composites.
"""

from __future__ import annotations

from .container import AnnDataContainer, NotAnnDataError, looks_like_anndata
from .counts import count_input
from .dataframes import SkippedColumn
from .encodings import KNOWN_VERSIONS, Encoding, classify
from .errors import MalformedElementError, UnsupportedElementError
from .listing import ElementInfo, list_elements
from .matrices import BandStats, DenseMatrixElement, MatrixElement, SparseMatrixElement
from .values import AwkwardArrayInfo, read_element

__all__ = [
    "KNOWN_VERSIONS",
    "AnnDataContainer",
    "AwkwardArrayInfo",
    "BandStats",
    "DenseMatrixElement",
    "ElementInfo",
    "Encoding",
    "MalformedElementError",
    "MatrixElement",
    "NotAnnDataError",
    "SkippedColumn",
    "SparseMatrixElement",
    "UnsupportedElementError",
    "classify",
    "count_input",
    "list_elements",
    "looks_like_anndata",
    "read_element",
]
