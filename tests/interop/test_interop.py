"""The reader-compatibility table: each array kind read by each reader (see the package docstring)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from .kinds import KINDS, ArrayKind, Workspace, cli_server
from .outcomes import (
    CellRecord,
    NotApplicableError,
    Outcome,
    Status,
    compare,
    record,
    run_reader,
)
from .readers import READERS, Target
from .report import render

KIND_NAMES = list(KINDS)
READER_NAMES = list(READERS)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("interop"))


def _record_not_run(kind: ArrayKind, reader: str, reason: str) -> None:
    """A cell that was skipped: the page shows it as ``not run`` with the reason."""
    record(
        CellRecord(
            kind=kind.name,
            reader=reader,
            position=[KIND_NAMES.index(kind.name), READER_NAMES.index(reader)],
            kind_label=kind.label,
            status="not run",
            detail=reason,
            reader_version="",
        )
    )


@pytest.fixture(scope="module", params=KIND_NAMES)
def row(request: pytest.FixtureRequest, workspace: Workspace) -> Iterator[tuple[ArrayKind, Target]]:
    """One kind's target, alive (server running, mount mounted) for all readers of its row."""
    kind = KINDS[request.param]
    with ExitStack() as stack:
        try:
            target = stack.enter_context(kind.build(workspace))
        except pytest.skip.Exception as skipped:  # the row cannot run here: every cell says why
            for reader in READER_NAMES:
                _record_not_run(kind, reader, str(skipped.msg))
            raise
        yield kind, target


@cache
def _version(reader: str) -> str:
    return READERS[reader].version()


@pytest.mark.parametrize("reader_name", READER_NAMES)
def test_reader_reads_kind_exactly_or_fails(
    row: tuple[ArrayKind, Target], reader_name: str
) -> None:
    """A reader reads the kind exactly or raises; silently different values fail the test."""
    kind, target = row
    reader = READERS[reader_name]
    reason = reader.unavailable()
    if reason is not None:
        _record_not_run(kind, reader.name, reason)
        pytest.skip(reason)
    outcome = run_reader(lambda: reader.read(target), target.expected, scrub=target.scrub)
    record(
        CellRecord(
            kind=kind.name,
            reader=reader.name,
            position=[KIND_NAMES.index(kind.name), READER_NAMES.index(reader.name)],
            kind_label=kind.label,
            status=outcome.status,
            detail=outcome.detail,
            reader_version=_version(reader.name),
            kind_note=target.note,
            warnings=list(outcome.warnings),
        )
    )
    print(f"{kind.name} / {reader.name}: {outcome.status} {outcome.detail}")
    assert outcome.status != "differs", (
        f"SILENT WRONG VALUES: {reader.name} read {kind.label} at {target.store} "
        f"({target.note}) without an error but returned other values: {outcome.detail}"
    )
    if kind.everywhere:
        assert outcome.status in ("exact", "n/a"), (
            f"{reader.name} must read {kind.label} exactly (portable stores read in every "
            f"reader), but ({target.note}): {outcome.status} {outcome.detail}"
        )
    if reader.required:
        assert outcome.status == "exact", (
            f"{reader.name} is the baseline every store must read in, but {kind.label} "
            f"({target.note}): {outcome.status} {outcome.detail}"
        )


# ---------------------------------------------------------------- the harness itself


@pytest.mark.parametrize(
    ("got", "status", "detail"),
    [
        (np.array([[1, 2], [3, 4]], dtype=np.uint16), "exact", ""),
        (
            np.array([[1, 2], [3, 5]], dtype=np.uint16),
            "differs",
            "1 of 4 values differ; first at (1, 1)",
        ),
        (np.array([[1, 2], [3, 4]], dtype=np.int64), "differs", "data type int64, expected uint16"),
        (np.array([1, 2, 3, 4], dtype=np.uint16), "differs", "shape (4,), expected (2, 2)"),
        (np.array([["1", "2"], ["3", "4"]]), "differs", "data type <U1"),
    ],
)
def test_compare_classifies(got: np.ndarray, status: str, detail: str) -> None:
    outcome = compare(np.array([[1, 2], [3, 4]], dtype=np.uint16), got)
    assert outcome.status == status
    assert outcome.detail.startswith(detail)


def test_compare_floats_bit_for_bit_and_text_by_value() -> None:
    expected = np.array([0.0, np.nan, 1.5], dtype=np.float32)
    assert compare(expected, expected.copy()).status == "exact"
    assert compare(expected, np.array([-0.0, np.nan, 1.5], dtype=np.float32)).status == "differs"
    ids = np.array(["a", "Hba-\u03b11"], dtype="<U6")
    assert compare(ids, np.array(["a", "Hba-\u03b11"], dtype=object)).status == "exact"
    assert compare(ids, np.array(["a", "Hba-a1"], dtype="<U8")).status == "differs"
    strings = np.array(["a", "Hba-\u03b11"], dtype=np.dtypes.StringDType())
    assert compare(ids, strings).status == "exact"
    assert compare(ids, strings[::-1]).status == "differs"


def test_run_reader_records_errors_and_warnings() -> None:
    def failing() -> np.ndarray:
        raise OSError("Not enough data: expected at least 60000\nmore detail")

    def warning() -> np.ndarray:
        import warnings

        warnings.warn("fell back to another pipeline", UserWarning, stacklevel=1)
        return np.zeros(2)

    assert run_reader(failing, np.zeros(2)) == Outcome(
        "fails", "OSError: Not enough data: expected at least 60000"
    )

    def elsewhere() -> np.ndarray:
        raise NotApplicableError("this reader has no HTTP store")

    assert run_reader(elsewhere, np.zeros(2)) == Outcome("n/a", "this reader has no HTTP store")
    outcome = run_reader(warning, np.zeros(2))
    assert outcome.status == "exact"
    assert outcome.warnings == ("fell back to another pipeline",)


def test_cli_server_refuses_a_command_that_does_not_serve() -> None:
    """The hook for ``cytearc-vfs serve`` rows names what the command printed instead."""
    with pytest.raises(RuntimeError, match=r"printed 'cytearc-vfs .*' first, not 'serving URL'"):  # noqa: SIM117
        with cli_server(["--version"]):
            pass


def _cell_record(kind: str, reader: str, status: Status, detail: str = "") -> CellRecord:
    return CellRecord(
        kind=kind,
        reader=reader,
        position=[0, 0],
        kind_label=f"`{kind}`",
        status=status,
        detail=detail,
        reader_version="" if status == "not run" else f"{reader} 1.0",
        kind_note="" if status == "not run" else f"{kind} note",
    )


def test_the_page_keeps_every_registered_row_and_column() -> None:
    """A row whose tests never ran (its mount failed to start) and a reader that
    skipped on every row (node not installed) used to drop out of the page
    without a word; they are shown as ``not run``, with the reason when known."""
    cells = [
        _cell_record("a", "r1", "exact"),
        _cell_record("a", "r2", "not run", "node is not installed"),
    ]
    page = render(
        "# Interop\n",
        cells,
        rows=[("a", "`a`"), ("b", "`b` via mount-fs")],
        columns=["r1", "r2"],
    )
    assert "| `a` | exact | not run [1] |" in page
    assert "| `b` via mount-fs | not run | not run |" in page
    assert "1. r2: `not run: node is not installed`" in page
    assert "1 reads: 1 exact, 0 with silently different values, 0 failed" in page
    assert "3 of the table's cells were not run." in page
    assert "| `b` via mount-fs | not run |" in page.split("## Arrays")[1]
    assert "| r2 | not run |" in page.split("## Readers")[1]


def test_the_committed_page_has_every_row_and_column() -> None:
    """docs/interop.md goes stale when a row or a reader is added (or renamed)
    without running ``uv run python -m tests.interop.report``."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "interop.md").read_text()
    table = page.split("## Table", 1)[1].split("## Failures", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    header = [name.strip() for name in lines[0].strip("|").split("|")]
    assert header == ["array", *READER_NAMES], "rerun: uv run python -m tests.interop.report"
    labels = [line.strip("|").split("|")[0].strip() for line in lines[2:]]
    assert labels == [KINDS[name].label for name in KIND_NAMES], (
        "rerun: uv run python -m tests.interop.report"
    )
