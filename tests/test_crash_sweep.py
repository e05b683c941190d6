"""Crash safety of every writer, by a real crash at every store write.

Each writer runs in a child process (``crash_child.py``) that sends itself
SIGKILL right after its n-th file write or delete, for every n from 1 to the
writer's total. Then, in this process, the destination must either open
complete and correct (values read through the gather reader and through
plain zarr equal the input, and ``deep_verify`` finds nothing) or be refused
with :class:`cytearc_vfs.IncompleteStoreError` naming the writer and the
remedy, by ``open_store`` and ``deep_verify`` alike;
``check_destination(overwrite=True)`` accepts every refused destination,
and rerunning the writer with ``overwrite=True`` gives a correct store (over
the first and last refused destinations and every :data:`RERUN_STRIDE`-th
between: the reruns were 40% of the sweep's time). The sources stay
byte-identical. No point may read wrong values.

The figures (points, refused, opened correct, wrong values) are printed and,
when ``CYTEARC_CONFORMANCE_REPORT`` names a file (or a directory, which then
gets ``crash_sweep.json``), merged into that JSON file under
``"crash_sweep"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from cli_harness import run_main, tree_digest
from conftest import realistic_counts
from crash_child import ARTIFACT_KINDS, WORKSPACES, run_writer
from cytearc_vfs_conformance.families import record_family
from kill_points import reports, strided

import cytearc_vfs as cv
from cytearc_vfs.inspection.deep_verify import deep_verify
from cytearc_vfs.remote.locations import open_location
from cytearc_vfs.write.destination_checks import check_destination
from cytearc_vfs.write.row_framed import row_framed_writes

CHILD = Path(__file__).with_name("crash_child.py")
#: Reruns with overwrite: over the first and last RERUN_EDGE refused destinations
#: and every RERUN_STRIDE-th between (each refused one is checked as replaceable).
RERUN_EDGE, RERUN_STRIDE = 3, 6
SHAPE = (240, 90)
#: Variants of writers swept at every point above, killed at the first and last
#: STRIDED_EDGE writes and every STRIDED_STRIDE-th between: their markers and commit
#: are those writers', and the writes between go out together (test_write_subsets.py
#: replays any subset of them)
STRIDED = frozenset(
    {
        "write_counts_anndata",
        "write_counts_workspace",
        "repack_data_only",
        "repack_row_framed",
        "create_composite_overwrite",
    }
)
STRIDED_EDGE, STRIDED_STRIDE = 6, 3
#: The writer name each refusal must carry, per swept writer.
WRITER_NAMES = {
    "write_counts": "write_counts",
    "write_counts_overwrite": "write_counts",
    "write_counts_anndata": "write_counts",
    "write_counts_workspace": "write_counts",
    "repack": "repack",
    "repack_mount": "repack",
    # through write_counts, but a user ran repack: the refusal must name it
    "repack_data_only": "repack",
    "repack_row_framed": "repack",
    "create_composite": "create_composite",
    "create_composite_overwrite": "create_composite",
    "mount_datastore": "mount_datastore",
    "publish_artifact": "publish_artifact",
    "publish_artifact_mount": "publish_artifact",
    "publish_artifact_composite": "publish_artifact",
}


@dataclass(slots=True)
class Figures:
    """What one writer's sweep found."""

    writes: int = 0
    """Store writes (files written or deleted) of a complete run."""
    points: int = 0
    """Kill points tried (one per write)."""
    refused: int = 0
    """Points whose destination every open refused with the documented error."""
    opened_correct: int = 0
    """Points whose destination opened and read exactly the input."""
    wrong_values: int = 0
    """Points whose destination opened and read something else (must be 0)."""
    reruns: int = 0
    """Refused points rewritten by a rerun with overwrite, then read correctly
    (those :func:`rerun_sample` picks)."""
    failures: list[str] = field(default_factory=list)
    """Anything else: unexpected errors, wrong messages (must be empty)."""


# ------------------------------------------------------------------ inputs


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(n)]


def _publish(store: Any, kind: str, values: np.ndarray) -> None:
    provenance = {"operation": kind, "parameters": {}, "inputs": {}}
    with cv.publish_artifact(store, "RNA/artifacts", kind, provenance=provenance) as art:
        art.write_array("data", values.reshape(SHAPE[0], -1))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Inputs every writer reads, and what each should produce."""
    root = tmp_path_factory.mktemp("crash")
    a = realistic_counts(*SHAPE, density=0.08, seed=11)
    b = realistic_counts(SHAPE[0] // 2, SHAPE[1], density=0.08, seed=12)
    sp.save_npz(root / "counts.npz", sp.csr_matrix(a))
    layout = (8192, 2048)
    genes = _ids("gene", SHAPE[1])
    cv.write_counts(
        root / "src_a.zarr", a, cells=_ids("cell", SHAPE[0]), features=genes, layout=layout
    )
    cv.write_counts(
        root / "src_b.zarr", b, cells=_ids("bcell", b.shape[0]), features=genes, layout=layout
    )
    cv.write_counts(root / "existing.zarr", realistic_counts(50, 20, seed=13))
    with row_framed_writes():  # as stores were written before issue 14
        cv.write_counts(
            root / "src_rf.zarr", a, cells=_ids("cell", SHAPE[0]), features=genes, layout=layout
        )
    # artifacts in the source and in the mount, which a repack of the mount gathers
    _publish(cv.open_store(root / "src_a.zarr", mode="r+"), "pca", np.arange(SHAPE[0] * 2.0))
    _publish(cv.mount_datastore(root / "src_a.zarr", root / "mount.zarr"), "umap", np.ones(480))
    _anndata_input(root / "adata.zarr", a, genes)
    cv.create_composite(
        root / "composite.zarr", {"a": root / "src_a.zarr", "b": root / "src_b.zarr"}
    ).close()
    artifact = np.random.default_rng(3).normal(size=(SHAPE[0], 3))
    np.save(root / "artifact.npy", artifact)
    return {
        "root": root,
        "a": a.toarray(),
        "composite": np.vstack([a.toarray(), b.toarray()]),
        "artifact": artifact,
        "sources": (
            "src_a.zarr",
            "src_b.zarr",
            "mount.zarr",
            "src_rf.zarr",
            "adata.zarr",
            "composite.zarr",
        ),
    }


def _anndata_input(path: Path, counts: Any, genes: list[str]) -> None:
    """An AnnData Zarr store whose raw counts are ``counts`` (X holds other values),
    with obs columns of several kinds: what ``write_counts(..., layer="raw/X")`` reads."""
    import anndata as ad
    import pandas as pd

    n = counts.shape[0]
    obs = pd.DataFrame(
        {
            "batch": pd.Categorical(["b1", "b2", "b3"] * (n // 3) + ["b1"] * (n % 3)),
            "score": np.linspace(0.0, 1.0, n),
            "kept": np.arange(n) % 2 == 0,
        },
        index=_ids("cell", n),
    )
    raw = ad.AnnData(X=sp.csr_matrix(counts), obs=obs, var=pd.DataFrame(index=genes))
    adata = ad.AnnData(X=sp.csr_matrix(counts * 0.5), obs=obs, var=pd.DataFrame(index=genes))
    adata.raw = raw
    adata.write_zarr(path)


def _source_digests(work: dict[str, Any]) -> dict[str, str]:
    return {name: tree_digest(work["root"] / name) for name in work["sources"]}


# ------------------------------------------------------------------ running


def _run_child(
    writer: str, work: dict[str, Any], out: Path, points: list[int] | dict[str, int]
) -> Iterator[dict[str, Any]]:
    """Run the crash script over ``points``; yields each point's line as it is reported.

    The script kills its next child while this process checks the last
    destination, so the two cores share the sweep.
    """
    out.mkdir(parents=True, exist_ok=True)
    config = {"writer": writer, "work": str(work["root"]), "out": str(out), "points": points}
    return reports(CHILD, config)


# ------------------------------------------------------------------ checks


def _expect_refused(where: Path, writer: str, exc: Exception) -> None:
    message = str(exc)
    assert WRITER_NAMES[writer] in message, message
    # the Python form here; a shell reads --overwrite (test_cli_verify_refuses_an_unfinished_store)
    assert "overwrite=True" in message and "--overwrite" not in message, message
    with pytest.raises(cv.IncompleteStoreError):
        deep_verify(open_location(where, read_only=True), where=str(where))
    assert check_destination(where, overwrite=True) == "w"


def _read_correct(store: Any, expected: np.ndarray, *, plain: bool, writer: str) -> bool:
    """Whether the counts read exactly ``expected``, through the reader and plain zarr."""
    workspace = WORKSPACES.get(writer)
    reader = cv.VirtualArrayReader(store, "RNA", workspace=workspace)
    if reader.shape != expected.shape or not np.array_equal(reader.read(), expected):
        return False
    if plain:
        group = "RNA" if workspace is None else "matrices/RNA"
        counts = zarr.open_array(store, path=f"{group}/counts", mode="r")
        counts_t = zarr.open_array(store, path=f"{group}/countsT", mode="r")
        if not np.array_equal(counts[:], expected) or not np.array_equal(counts_t[:], expected.T):
            return False
    return True


def _check_store(where: Path, writer: str, expected: np.ndarray, figures: Figures) -> str:
    """Classify one crashed destination of a writer of counts."""
    try:
        store = cv.open_store(where)
    except cv.IncompleteStoreError as exc:
        _expect_refused(where, writer, exc)
        figures.refused += 1
        return "refused"
    plain = writer != "mount_datastore"  # a mount's counts are its source's
    correct = _read_correct(store, expected, plain=plain, writer=writer)
    reports = deep_verify(open_location(where, read_only=True), where=str(where))
    if not correct or not all(report.ok for report in reports):
        figures.wrong_values += 1
        return "wrong"
    if writer in ("mount_datastore", "create_composite", "create_composite_overwrite"):
        # complete mounts and composites are not the writers' to replace
        with pytest.raises(FileExistsError):
            check_destination(where, overwrite=True)
    figures.opened_correct += 1
    return "opened"


def _artifact_correct(store: Any, path: str, expected: np.ndarray) -> bool:
    embedding = zarr.open_array(store, path=f"{path}/embedding", mode="r")[:]
    loadings = zarr.open_array(store, path=f"{path}/loadings", mode="r")[:]
    return np.array_equal(embedding, expected) and np.array_equal(
        loadings, expected[: len(expected) // 2] * 2
    )


def _check_artifact(where: Path, writer: str, expected: np.ndarray, figures: Figures) -> str:
    """Classify one crashed artifact publication into an existing store (or mount)."""
    kind = ARTIFACT_KINDS[writer]
    store = cv.open_store(where)  # the store itself stays sound whatever the artifact
    kind_dir = where / "RNA" / "artifacts" / kind
    paths = (
        [f"RNA/artifacts/{kind}/{p.name}" for p in kind_dir.iterdir() if p.is_dir()]
        if (kind_dir.is_dir())
        else []
    )
    listed = {record.path for record in cv.list_artifacts(store, "RNA/artifacts", kind)}
    if writer == "publish_artifact_mount":
        # the source's artifact of the kind still reads through the mount at every point
        (inherited,) = [path for path in listed if not (where / path).exists()]
        assert cv.read_artifact(store, inherited).path == inherited
    outcome = "refused"
    for path in paths:
        try:
            cv.read_artifact(store, path)
        except (cv.IncompleteStoreError, FileNotFoundError):
            assert path not in listed
            continue
        assert path in listed
        if not _artifact_correct(store, path, expected):
            figures.wrong_values += 1
            return "wrong"
        outcome = "opened"
    if outcome == "opened":
        figures.opened_correct += 1
    else:
        figures.refused += 1
    return outcome


def _rerun(writer: str, work: dict[str, Any], where: Path, expected: np.ndarray) -> None:
    """Run the writer again with overwrite over a refused destination; it must come out right."""
    run_writer(writer, work["root"], where, overwrite=True)
    if writer in ARTIFACT_KINDS:
        store = cv.open_store(where)
        published = cv.list_artifacts(store, "RNA/artifacts", ARTIFACT_KINDS[writer])
        assert published and _artifact_correct(store, published[-1].path, expected)
        return
    plain = writer != "mount_datastore"
    assert _read_correct(cv.open_store(where), expected, plain=plain, writer=writer)


# ------------------------------------------------------------------ the sweep

REPORT: dict[str, Figures] = {}


def _expected(writer: str, work: dict[str, Any]) -> np.ndarray:
    return {
        "create_composite": work["composite"],
    }.get(writer, work["artifact"] if writer in ARTIFACT_KINDS else work["a"])


def rerun_sample(refused: int) -> list[int]:
    """Which of ``refused`` refused destinations (in point order) are rerun."""
    return sorted(
        set(range(min(RERUN_EDGE, refused)))
        | set(range(0, refused, RERUN_STRIDE))
        | set(range(max(0, refused - RERUN_EDGE), refused))
    )


def sweep(writer: str, work: dict[str, Any], tmp_path: Path) -> Figures:
    """Kill ``writer`` after each of its writes and check every destination."""
    before = _source_digests(work)
    figures = Figures()
    expected = _expected(writer, work)
    refused: list[Path] = []
    # points 1, 2, ... until the writer finishes before its kill point (or, strided,
    # the points of the writes counted first)
    points: list[int] | dict[str, int] = (
        {"edge": STRIDED_EDGE, "stride": STRIDED_STRIDE}
        if writer in STRIDED
        else list(range(1, 100_000))
    )
    for line in _run_child(writer, work, tmp_path / "points", points):
        if line.get("outcome") in ("finished", "counted"):
            figures.writes = line["writes"]
            continue
        if line.get("outcome") != "killed":
            figures.failures.append(f"point {line.get('point')}: {line}")
            continue
        figures.points += 1
        where = tmp_path / "points" / f"{line['point']:04d}.zarr"
        try:
            if writer in ARTIFACT_KINDS:
                outcome = _check_artifact(where, writer, expected, figures)
            else:
                outcome = _check_store(where, writer, expected, figures)
            if outcome == "refused":
                refused.append(where)
        except Exception as exc:  # every other outcome is a finding to report
            figures.failures.append(f"point {line['point']}: {type(exc).__name__}: {exc}")
    for index in rerun_sample(len(refused)):
        try:
            _rerun(writer, work, refused[index], expected)
            figures.reruns += 1
        except Exception as exc:
            figures.failures.append(f"rerun at {refused[index].name}: {type(exc).__name__}: {exc}")
    assert _source_digests(work) == before, "a writer changed one of its sources"
    REPORT[writer] = figures
    _publish_figures(writer, figures)
    return figures


def _publish_figures(writer: str, figures: Figures) -> None:
    print(
        f"\ncrash sweep {writer}: {figures.points} points of {figures.writes} writes, "
        f"{figures.refused} refused, {figures.opened_correct} opened correct, "
        f"{figures.wrong_values} wrong values, {figures.reruns} reruns with overwrite"
    )
    # picked up by the conformance report (python -m cytearc_vfs_conformance report)
    record_family(
        f"crash_sweep_{writer}",
        tried=figures.points,
        handled=figures.refused + figures.opened_correct,
        wrong_values=figures.wrong_values,
        details=asdict(figures),
    )


def _assert_sound(figures: Figures, writer: str) -> None:
    assert not figures.failures, "\n".join(figures.failures[:10])
    assert figures.wrong_values == 0
    if writer in STRIDED:
        assert figures.points == len(strided(figures.writes, STRIDED_EDGE, STRIDED_STRIDE))
    else:
        assert figures.points == figures.writes
    assert figures.refused + figures.opened_correct == figures.points
    assert figures.reruns == len(rerun_sample(figures.refused))
    # the last write publishes: killing right after it leaves a complete store
    assert figures.opened_correct >= 1


WRITERS = [
    pytest.param("write_counts", id="write_counts"),
    pytest.param("write_counts_overwrite", id="write_counts-overwrite", marks=pytest.mark.slow),
    pytest.param("write_counts_anndata", id="write_counts-anndata-raw"),
    pytest.param("write_counts_workspace", id="write_counts-workspace"),
    pytest.param("repack", id="repack"),
    pytest.param("repack_mount", id="repack-mount", marks=pytest.mark.slow),
    pytest.param("repack_data_only", id="repack-data-only"),
    pytest.param("repack_row_framed", id="repack-row-framed"),
    pytest.param("create_composite", id="create_composite"),
    pytest.param("create_composite_overwrite", id="create_composite-overwrite"),
    pytest.param("mount_datastore", id="mount_datastore"),
    pytest.param("publish_artifact", id="publish_artifact"),
    pytest.param("publish_artifact_mount", id="publish_artifact-mount"),
    pytest.param("publish_artifact_composite", id="publish_artifact-composite"),
]


@pytest.mark.parametrize("writer", WRITERS)
def test_crash_at_every_write(writer: str, work: dict[str, Any], tmp_path: Path) -> None:
    figures = sweep(writer, work, tmp_path)
    _assert_sound(figures, writer)


def test_cli_verify_refuses_an_unfinished_store(work: dict[str, Any], tmp_path: Path) -> None:
    """``cytearc-vfs verify`` goes through the same checks: exit 3, the writer and remedy named."""
    lines = list(_run_child("mount_datastore", work, tmp_path / "points", [5]))
    assert lines == [{"point": 5, "outcome": "killed"}]
    done = run_main("verify", str(tmp_path / "points" / "0005.zarr"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "mount_datastore" in done.stderr and "--overwrite" in done.stderr
    assert "overwrite=True" not in done.stderr  # a shell's remedy names the flag only
