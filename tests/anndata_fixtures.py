"""AnnData containers holding every element of the AnnData element table, in Zarr v2 and v3.

Modern containers are written by anndata itself (plus one awkward array,
written by hand: anndata needs the awkward package for it). Legacy
containers (anndata 0.7.x layouts, which anndata no longer writes) are
written by hand with zarr, as the AnnData element specification describes
them: no root attributes, dataframe 0.1.0 with ``__categories``, categorical
columns pointing to their labels with a ``categories`` attribute (the
relative path anndata 0.7 wrote, the absolute path the specification
describes, and the inline labels of older files), mappings and arrays with
no encoding attributes at all. :func:`legacy_expected` is what the
specification says each of them holds.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp
import zarr

N_OBS, N_VAR = 12, 5


def counts(n_obs: int = N_OBS, n_var: int = N_VAR, *, seed: int = 0) -> sp.csr_matrix:
    """Whole-number counts, about 40% non-zero."""
    rng = np.random.default_rng(seed)
    dense = rng.integers(1, 9, size=(n_obs, n_var)) * (rng.random((n_obs, n_var)) < 0.4)
    return sp.csr_matrix(dense.astype(np.float32))


def modern_adata() -> ad.AnnData:
    """An AnnData with an element of every kind anndata writes."""
    x = counts()
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(
                ["t", "b", "t", "nk", "b", "t", "t", "b", "nk", "t", "b", "t"], ordered=True
            ),
            "batch": pd.Categorical(["a", "b", None, "a", "b", "a", "a", "b", "a", None, "b", "a"]),
            "score": np.linspace(0, 1, N_OBS),
            "n_genes": np.arange(N_OBS, dtype=np.int32),
            "maybe_int": pd.array([1, None, 3, 4, None, 6, 7, 8, 9, 10, 11, None], dtype="Int64"),
            "maybe_bool": pd.array([True, None, False] * 4, dtype="boolean"),
        },
        index=[f"cell{i}" for i in range(N_OBS)],
    )
    var = pd.DataFrame(
        {"symbol": [f"S{i}" for i in range(N_VAR)], "highly_variable": [True, False] * 2 + [True]},
        index=[f"gene{i}" for i in range(N_VAR)],
    )
    adata = ad.AnnData(X=x, obs=obs, var=var)
    adata.layers["csc"] = sp.csc_matrix(x)
    adata.layers["dense"] = x.toarray()
    adata.obsm["X_pca"] = np.arange(N_OBS * 2, dtype=np.float64).reshape(N_OBS, 2)
    # nullable strings live in an obsm dataframe: anndata's writer turns string columns
    # of obs and var with repeated (or missing) values into categoricals
    adata.obsm["frame"] = pd.DataFrame(
        {
            "q": np.arange(N_OBS),
            "note_na": pd.array(
                ["x", None, "z", "w", "v", "u", "s", "r", "q", "p", "o", "n"],
                dtype=pd.StringDtype(na_value=pd.NA),
            ),
            "note_nan": pd.array(
                ["x", None, "z", "w", "v", "u", "s", "r", "q", "p", "o", "n"],
                dtype=pd.StringDtype(na_value=np.nan),
            ),
        },
        index=obs.index,
    )
    adata.varm["loadings"] = np.ones((N_VAR, 3))
    adata.obsp["distances"] = sp.csr_matrix(np.eye(N_OBS))
    adata.varp["corr"] = np.eye(N_VAR)
    adata.uns["n_neighbors"] = 15
    adata.uns["ratio"] = 0.5
    adata.uns["flag"] = True
    adata.uns["title"] = "an atlas"
    adata.uns["nothing"] = None
    adata.uns["colors"] = np.array(["red", "green"], dtype=object)
    adata.uns["params"] = {"alpha": 0.1, "method": "umap", "steps": np.arange(3)}
    adata.raw = adata.copy()
    return adata


def write_awkward(group: zarr.Group, name: str) -> None:
    """An awkward array as anndata would store it (``ak.to_buffers``): group, form, length."""
    ragged = group.create_group(name)
    ragged.attrs.update(
        {
            "encoding-type": "awkward-array",
            "encoding-version": "0.1.0",
            "form": '{"class": "ListOffsetArray", "offsets": "i64", "content": '
            '{"class": "NumpyArray", "primitive": "int64", "form_key": "node1"}, '
            '"form_key": "node0"}',
            "length": 3,
        }
    )
    ragged.create_array("node0-offsets", data=np.array([0, 2, 2, 5], dtype=np.int64))
    ragged.create_array("node1-data", data=np.arange(5, dtype=np.int64))


def write_modern(path: Path, zarr_format: int, *, awkward: bool = True) -> ad.AnnData:
    """``modern_adata()`` written by anndata in ``zarr_format``, plus ``uns/ragged`` (awkward,
    which anndata reads only with the awkward package installed)."""
    adata = modern_adata()
    with warnings.catch_warnings():
        # anndata 0.13 deprecates choosing the Zarr format it writes; v2 is still real data
        warnings.simplefilter("ignore", DeprecationWarning)
        with ad.settings.override(zarr_write_format=zarr_format, allow_write_nullable_strings=True):
            adata.write_zarr(path)
    if not awkward:
        return adata
    root = zarr.open_group(path, mode="r+", use_consolidated=False)
    write_awkward(root["uns"], "ragged")  # type: ignore[arg-type]
    if zarr_format == 3 or (path / ".zmetadata").exists():
        zarr.consolidate_metadata(path, zarr_format=zarr_format)
    return adata


def _strings(group: zarr.Group, name: str, values: list[str], **attrs: Any) -> zarr.Array:
    array = group.create_array(name, shape=(len(values),), dtype=str, chunks=(len(values),))
    array[:] = np.array(values, dtype=object)
    array.attrs.update(attrs)
    return array  # type: ignore[return-value]


def _array(group: zarr.Group, name: str, values: Any, **attrs: Any) -> zarr.Array:
    values = np.asarray(values)
    array = group.create_array(name, shape=values.shape, dtype=values.dtype)
    array[...] = values
    array.attrs.update(attrs)
    return array  # type: ignore[return-value]


def _scalar_text(group: zarr.Group, name: str, value: str) -> None:
    array = group.create_array(name, shape=(), dtype=str)
    array[()] = value


CELL_TYPES = ["b", "nk", "t"]
CELL_TYPE_CODES = [2, 0, 2, 1, 0, 2, 2, 0, 1, 2, 0, 2]
BATCHES = ["a", "b"]
BATCH_CODES = [0, 1, -1, 0, 1, 0, 0, 1, 0, -1, 1, 0]
CHROMS = ["chr1", "chr2"]
CHROM_CODES = [0, 1, 1, 0, 1]


def write_legacy(
    path: Path, zarr_format: int, *, absolute: bool = True, missing_categories: bool = True
) -> None:
    """An anndata 0.7.x container, written by hand (see the module docstring).

    ``missing_categories=False`` leaves no missing value in ``obs/batch`` (CyteArc's
    table writer asks for them to be filled). ``absolute=False`` writes every label path as anndata 0.7 did (relative),
    which is what anndata itself still reads.
    """
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)  # no root attributes
    x = counts()
    matrix = root.create_group("X")
    matrix.attrs.update(
        {"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": list(x.shape)}
    )
    _array(matrix, "data", x.data)
    _array(matrix, "indices", x.indices)
    _array(matrix, "indptr", x.indptr)

    obs = root.create_group("obs")
    obs.attrs.update(
        {
            "_index": "_index",
            "column-order": ["cell_type", "batch", "score", "name"],
            "encoding-type": "dataframe",
            "encoding-version": "0.1.0",
        }
    )
    _strings(obs, "_index", [f"cell{i}" for i in range(N_OBS)])
    labels = obs.create_group("__categories")
    # anndata 0.7 wrote the labels' path relative to the dataframe ...
    _array(obs, "cell_type", np.array(CELL_TYPE_CODES, dtype=np.int8))
    obs["cell_type"].attrs["categories"] = "__categories/cell_type"
    _strings(labels, "cell_type", CELL_TYPES, ordered=True)
    # ... and the element specification describes an absolute one
    batch = BATCH_CODES if missing_categories else [max(code, 0) for code in BATCH_CODES]
    _array(obs, "batch", np.array(batch, dtype=np.int8))
    obs["batch"].attrs["categories"] = (
        "/obs/__categories/batch" if absolute else "__categories/batch"
    )
    _strings(labels, "batch", BATCHES, ordered=False)
    _array(obs, "score", np.linspace(0, 1, N_OBS))
    _strings(obs, "name", [f"n{i}" for i in range(N_OBS)])

    var = root.create_group("var")  # a dataframe with no encoding attributes at all
    var.attrs.update({"_index": "_index", "column-order": ["symbol", "chrom"]})
    _strings(var, "_index", [f"gene{i}" for i in range(N_VAR)])
    _strings(var, "symbol", [f"S{i}" for i in range(N_VAR)])
    # files older than 0.7 kept the labels themselves in the attribute
    _array(var, "chrom", np.array(CHROM_CODES, dtype=np.int8))
    var["chrom"].attrs["categories"] = CHROMS

    layers = root.create_group("layers")  # mappings and dense arrays without attributes
    _array(layers, "counts", x.toarray().astype(np.int32))
    obsm = root.create_group("obsm")
    _array(obsm, "X_pca", np.arange(N_OBS * 2, dtype=np.float64).reshape(N_OBS, 2))

    uns = root.create_group("uns")
    _scalar_text(uns, "title", "an atlas")
    _array(uns, "n_neighbors", np.array(15, dtype=np.int64))
    _array(uns, "flag", np.array(True))
    _strings(uns, "colors", ["red", "green"])
    params = uns.create_group("params")
    _array(params, "alpha", np.array(0.1))
    declared = uns.create_group("declared")  # the legacy mapping encoding, declared
    declared.attrs.update({"encoding-type": "dict", "encoding-version": "0.1.0"})
    _array(declared, "k", np.arange(2))
    cats = uns.create_group("cats")  # a categorical group without attributes
    _array(cats, "codes", np.array([1, 0, -1], dtype=np.int8))
    _strings(cats, "categories", ["lo", "hi"])
    maybe = uns.create_group("maybe")  # nullable arrays without attributes
    _array(maybe, "values", np.array([1, 2, 3], dtype=np.int32))
    _array(maybe, "mask", np.array([False, True, False]))
    maybe_bool = uns.create_group("maybe_bool")
    _array(maybe_bool, "values", np.array([True, False, True]))
    _array(maybe_bool, "mask", np.array([True, False, False]))


def legacy_expected() -> dict[str, Any]:
    """What the specification says each element of :func:`write_legacy` holds."""
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical.from_codes(CELL_TYPE_CODES, CELL_TYPES, ordered=True),
            "batch": pd.Categorical.from_codes(BATCH_CODES, BATCHES),
            "score": np.linspace(0, 1, N_OBS),
            "name": np.array([f"n{i}" for i in range(N_OBS)], dtype=object),
        },
        index=pd.Index([f"cell{i}" for i in range(N_OBS)], dtype=object),
    )
    var = pd.DataFrame(
        {
            "symbol": np.array([f"S{i}" for i in range(N_VAR)], dtype=object),
            "chrom": pd.Categorical.from_codes(CHROM_CODES, CHROMS),
        },
        index=pd.Index([f"gene{i}" for i in range(N_VAR)], dtype=object),
    )
    # text columns are object columns, as anndata reads them (pandas would infer "str")
    obs["name"] = obs["name"].astype(object)
    var["symbol"] = var["symbol"].astype(object)
    return {
        "obs": obs,
        "var": var,
        "X": counts().toarray(),
        "layers/counts": counts().toarray().astype(np.int32),
        "obsm/X_pca": np.arange(N_OBS * 2, dtype=np.float64).reshape(N_OBS, 2),
        "uns/title": "an atlas",
        "uns/n_neighbors": np.int64(15),
        "uns/flag": np.True_,
        "uns/colors": np.array(["red", "green"], dtype=object),
        "uns/params": {"alpha": np.float64(0.1)},
        "uns/declared": {"k": np.arange(2)},
        "uns/cats": pd.Categorical.from_codes([1, 0, -1], ["lo", "hi"]),
        "uns/maybe": pd.arrays.IntegerArray(
            np.array([1, 2, 3], dtype=np.int32), np.array([False, True, False])
        ),
        "uns/maybe_bool": pd.arrays.BooleanArray(
            np.array([True, False, True]), np.array([True, False, False])
        ),
    }
