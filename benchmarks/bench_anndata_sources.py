"""Benchmark: a composite over AnnData Zarr stores (no conversion) against the alternatives.

Real data, tiled (the output says so): Wu 2020 (200 x 30,727) and the
CellTypist sample (559 x 32,786), which share 20,408 genes, from
``cytearc_vfs.realdata`` (pinned PyPI archives). Three AnnData stores are
written by anndata itself, each tile's cells renamed so ids stay unique:

* ``wu_csr``    Wu 2020 x ``--tiles`` as CSR, Zarr v3;
* ``ct_csr``    CellTypist x ``--tiles // 3 + 1`` as CSR, Zarr v2 (CSC with
                ``--csc``: a feature-major source, which a cell read must read whole);
* ``wu_dense``  Wu 2020 x 5 as a dense array, Zarr v3.

Compared on the same selections (union of genes, zeros where a source lacks
one):

* ``anndata-sources``  ``create_composite`` over the three AnnData stores,
                       read with the gather reader: ``read`` (a dense block),
                       ``read_sparse`` (a CSR matrix), and plain zarr for the band;
* ``cytearc-sources``  the same composite over the stores converted by
                       ``cv.write_counts`` (conversion time printed), ``read``
                       and ``read_sparse``, and ``read`` made CSR by scipy
                       (the obvious way to a sparse result without it);
* ``anndata-lazy``     anndata's own lazy route: ``anndata.experimental.read_lazy``
                       of each store, ``anndata.concat(join="outer")``, the
                       selection computed with dask (outer-join blocks are COO,
                       which dask cannot index: each block is made CSR first);
                       the result stays sparse;
* ``tiledbsoma``       (``--soma``) the three AnnData objects ingested into one
                       SOMA experiment (``from_anndata``, then ``register_anndatas``
                       + ``from_anndata`` for the others), read with
                       ``axis_query(...).to_anndata``; ingest time printed.
                       tiledbsoma 2.3 needs pandas < 3, so it is not in the
                       ``bench`` group (one lock for the project): run with
                       ``uv run --group bench --with 'tiledbsoma>=2.3'``.

Selections: 1,000 random cells x all genes; 50 random genes x all cells; a
10,000-cell band x all genes. Medians of ``--repeat`` runs, warm page cache.

    uv run --group bench python benchmarks/bench_anndata_sources.py [--json -]
    uv run --group bench --with 'tiledbsoma>=2.3' python benchmarks/bench_anndata_sources.py --soma
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import scipy.sparse as sp
import zarr
from timing import median_time

import cytearc_vfs as cv
from cytearc_vfs.realdata import loaders


def tiled(data: ad.AnnData, tiles: int, prefix: str) -> ad.AnnData:
    """``tiles`` copies of ``data``'s cells, renamed ``{prefix}{tile}-{id}``."""
    x = sp.vstack([sp.csr_matrix(data.X)] * tiles, format="csr")
    result = ad.AnnData(X=x)
    result.obs_names = [f"{prefix}{t}-{name}" for t in range(tiles) for name in data.obs_names]
    result.var_names = list(data.var_names)
    return result


def write(data: ad.AnnData, path: Path, zarr_format: int) -> Path:
    with ad.settings.override(zarr_write_format=zarr_format):
        data.write_zarr(path)
    return path


def lazy_route(paths: list[Path]) -> Callable[[Any, Any], Any]:
    """anndata's lazy concat of the stores; returns ``select(cells, genes)``."""
    from anndata.experimental import read_lazy

    joined = ad.concat([read_lazy(path) for path in paths], join="outer")
    x = joined.X.map_blocks(sp.csr_matrix, dtype=joined.X.dtype)
    names = list(joined.var_names)

    def select(cells: Any, genes: Any) -> Any:
        block = x[cells] if genes is None else x[cells][:, genes]
        return block.compute()

    select.var_names = names  # type: ignore[attr-defined]
    return select


def soma_route(
    root: Path, parts: list[ad.AnnData]
) -> tuple[Callable[[Any, Any], Any], float, list[str]]:
    """One SOMA experiment of ``parts``; returns ``select(cells, genes)`` (soma joinids),
    the ingest time and the experiment's var ids in joinid order.

    Each part goes in as an in-memory AnnData whose counts are the CSR layer
    ``data`` with ``X`` left empty: anndata 0.13 lists ``X`` among the layers
    under the key ``None``, which tiledbsoma 2.3's ``from_anndata`` cannot name
    (``TypeError: quote_from_bytes() expected bytes``). The first part creates
    the experiment, the others are registered against it and appended.
    """
    import tiledbsoma
    import tiledbsoma.io

    uri = str(root / "soma")
    started = time.perf_counter()
    inputs = [
        ad.AnnData(obs=part.obs, var=part.var, layers={"data": sp.csr_matrix(part.X)})
        for part in parts
    ]
    tiledbsoma.io.from_anndata(uri, inputs[0], measurement_name="RNA")
    mapping = tiledbsoma.io.register_anndatas(
        uri, inputs[1:], measurement_name="RNA", obs_field_name="obs_id", var_field_name="var_id"
    )
    mapping.prepare_experiment(uri)
    for data in inputs[1:]:
        tiledbsoma.io.from_anndata(uri, data, measurement_name="RNA", registration_mapping=mapping)
    ingest = time.perf_counter() - started
    experiment = tiledbsoma.Experiment.open(uri)
    var = experiment.ms["RNA"].var.read(column_names=["soma_joinid", "var_id"]).concat()
    frame = var.to_pandas().sort_values("soma_joinid")
    var_ids = [str(v) for v in frame["var_id"]]

    def select(cells: Any, genes: Any) -> Any:
        query = experiment.axis_query(
            "RNA",
            obs_query=tiledbsoma.AxisQuery(coords=(np.asarray(cells),)),
            var_query=None if genes is None else tiledbsoma.AxisQuery(coords=(np.asarray(genes),)),
        )
        return query.to_anndata(X_name="data").X

    return select, ingest, var_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", type=int, default=50, help="copies of Wu 2020 in wu_csr")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--soma", action="store_true", help="also TileDB-SOMA (bench group)")
    parser.add_argument("--csc", action="store_true", help="write the CellTypist source as CSC")
    parser.add_argument("--json", help="write results as JSON to this path ('-': stdout)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    root = Path(tempfile.mkdtemp(prefix="bench-anndata-sources-"))
    try:
        run(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(args: argparse.Namespace, root: Path) -> None:
    wu, ct = loaders.wu2020(), loaders.celltypist_sample()
    parts = [
        tiled(wu, args.tiles, "w"),
        tiled(ct, args.tiles // 3 + 1, "c"),
        tiled(wu, 5, "d"),
    ]
    if args.csc:
        parts[1].X = sp.csc_matrix(parts[1].X)
    parts[2].X = parts[2].X.toarray()
    second = "ct_csc" if args.csc else "ct_csr"
    paths = {
        "wu_csr": write(parts[0], root / "wu_csr.zarr", 3),
        second: write(parts[1], root / f"{second}.zarr", 2),
        "wu_dense": write(parts[2], root / "wu_dense.zarr", 3),
    }
    n_cells = sum(p.n_obs for p in parts)
    print(
        f"real data, tiled: Wu 2020 x {args.tiles} (CSR v3), CellTypist x {args.tiles // 3 + 1} "
        f"({'CSC' if args.csc else 'CSR'} v2), Wu 2020 x 5 (dense v3): {n_cells} cells",
        file=sys.stderr,
    )
    started = time.perf_counter()
    converted = {}
    for name, part in zip(paths, parts, strict=True):
        converted[name] = root / f"{name}.cytearc.zarr"
        cv.write_counts(converted[name], part)
    convert_s = time.perf_counter() - started

    started = time.perf_counter()
    over_anndata = cv.create_composite(root / "over_anndata.zarr", paths)
    create_anndata_s = time.perf_counter() - started
    started = time.perf_counter()
    over_cytearc = cv.create_composite(root / "over_cytearc.zarr", converted)
    create_cytearc_s = time.perf_counter() - started
    readers = {"anndata-sources": over_anndata.reader(), "cytearc-sources": over_cytearc.reader()}
    features = list(readers["anndata-sources"].feature_ids)
    n_features = len(features)

    rng = np.random.default_rng(0)
    cells = np.sort(rng.choice(n_cells, 1000, replace=False))
    genes = np.sort(rng.choice(n_features, 50, replace=False))
    # 10,000 cells about the middle; all of them when fewer (a start below 0
    # would count from the end, and each route could read another band)
    half = min(5000, n_cells // 2)
    band = slice(n_cells // 2 - half, n_cells // 2 + half)
    band_label = f"{2 * half:,}-cell band x all genes"
    selections = {
        "1,000 random cells x all genes": (cells, None),
        "50 random genes x all cells": (None, genes),
        band_label: (band, None),
    }

    started = time.perf_counter()
    lazy = lazy_route(list(paths.values()))
    lazy_setup_s = time.perf_counter() - started
    lazy_genes = {
        name: np.asarray([lazy.var_names.index(features[g]) for g in genes])  # type: ignore[attr-defined]
        for name in ["genes"]
    }["genes"]
    routes: dict[str, Callable[[Any, Any], Any]] = {}
    for name, reader in readers.items():
        routes[name] = (lambda r: lambda c, g: r.read(c, g))(reader)
        routes[f"{name} (read_sparse)"] = (lambda r: lambda c, g: r.read_sparse(c, g))(reader)
    # the obvious way to a sparse result without read_sparse
    routes["cytearc-sources (read + csr)"] = lambda c, g: sp.csr_matrix(
        readers["cytearc-sources"].read(c, g)
    )
    routes["anndata-lazy"] = lambda c, g: lazy(
        slice(None) if c is None else c, None if g is None else lazy_genes
    )
    soma_ingest_s = None
    if args.soma:
        try:
            soma, soma_ingest_s, soma_var = soma_route(root, parts)
            soma_genes = np.asarray([soma_var.index(features[g]) for g in genes])
            routes["tiledbsoma"] = lambda c, g: soma(
                np.arange(n_cells)[c] if c is not None else np.arange(n_cells),
                None if g is None else soma_genes,
            )
            soma_block = soma(cells[:50], None).toarray()
            np.testing.assert_array_equal(
                soma_block[:, [soma_var.index(f) for f in features]],
                readers["cytearc-sources"].read(cells[:50]),
            )
        except Exception as exc:  # optional: say why and go on
            print(f"tiledbsoma skipped: {type(exc).__name__}: {exc}", file=sys.stderr)

    # correctness: every route gives the same values for the cell selection
    truth = readers["cytearc-sources"].read(cells[:50])
    np.testing.assert_array_equal(readers["anndata-sources"].read(cells[:50]), truth)
    np.testing.assert_array_equal(
        readers["anndata-sources"].read_sparse(cells[:50]).toarray(), truth
    )
    lazy_block = lazy(cells[:50], None).toarray()
    order = [lazy.var_names.index(f) for f in features]  # type: ignore[attr-defined]
    np.testing.assert_array_equal(lazy_block[:, order], truth)

    results: dict[str, dict[str, float]] = {}
    for label, (c, g) in selections.items():
        results[label] = {}
        for name, route in routes.items():
            seconds, _ = median_time(lambda route=route, c=c, g=g: route(c, g), args.repeat)
            results[label][name] = seconds
    # the band through plain zarr on the computed chunks too
    counts = zarr.open_array(over_anndata, path="RNA/counts", mode="r")
    results[band_label]["anndata-sources (plain zarr)"] = median_time(
        lambda: counts[band], args.repeat
    )[0]

    print(f"\n{n_cells} cells x {n_features} genes (union); medians of {args.repeat}")
    print(f"convert to CyteArc (write_counts, 3 stores): {convert_s:.2f} s")
    print(
        f"create composite: over AnnData {create_anndata_s:.2f} s (fingerprints every object, "
        f"checks dtype, reads summaries), over CyteArc {create_cytearc_s:.2f} s"
    )
    print(f"anndata lazy concat setup: {lazy_setup_s:.2f} s")
    if soma_ingest_s is not None:
        print(f"tiledbsoma ingest: {soma_ingest_s:.2f} s")
    for label, row in results.items():
        base = row["anndata-sources"]
        print(f"\n{label}")
        for name, seconds in row.items():
            print(
                f"  {name:30s} {seconds * 1e3:9.1f} ms   {seconds / base:6.2f}x of anndata-sources"
            )
    print("\ntargets (ratios of medians)")
    cells_row = results["1,000 random cells x all genes"]
    print(
        "  cells, over AnnData / over CyteArc (<= 2): dense "
        f"{cells_row['anndata-sources'] / cells_row['cytearc-sources']:.2f}x, sparse "
        f"{cells_row['anndata-sources (read_sparse)'] / cells_row['cytearc-sources (read_sparse)']:.2f}x"
    )
    for label, row in results.items():
        print(
            f"  {label}, over CyteArc: read_sparse / (read + csr_matrix) "
            f"{row['cytearc-sources (read_sparse)'] / row['cytearc-sources (read + csr)']:.2f}x"
        )
    for label, row in results.items():
        others = [("anndata-lazy", ">= 3")] + (
            [("tiledbsoma", ">= 1")] if "tiledbsoma" in row else []
        )
        for other, target in others:
            print(
                f"  {label}, {other} / over AnnData ({target}): dense "
                f"{row[other] / row['anndata-sources']:.2f}x, read_sparse "
                f"{row[other] / row['anndata-sources (read_sparse)']:.2f}x"
            )
    if args.json:
        payload = json.dumps(
            {
                "cells": n_cells,
                "features": n_features,
                "convert_s": convert_s,
                "create_s": {"anndata": create_anndata_s, "cytearc": create_cytearc_s},
                "soma_ingest_s": soma_ingest_s,
                "seconds": results,
            },
            indent=2,
        )
        if args.json == "-":
            print(payload)
        else:
            Path(args.json).write_text(payload)
    over_anndata.close()
    over_cytearc.close()


if __name__ == "__main__":
    main()
