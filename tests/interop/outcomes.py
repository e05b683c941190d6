"""One cell of the interop table: what a reader returned for an array kind.

A reader's result is compared with the values written, exactly (shape, data
type and every value; floats bit for bit up to NaN == NaN), and classified:

- ``exact``: every value, the shape and the data type are those written;
- ``differs``: the reader returned without an error but something differs:
  silent wrong values, which the test reports as a failure;
- ``fails``: the reader raised; the first line of its error is kept;
- ``n/a``: the reader cannot address this kind of location at all (an HTTP
  URL for a reader without an HTTP store), said with the reason;
- ``not run``: the test skipped (a reader not installed, a row that cannot
  run on this machine, such as FUSE without ``/dev/fuse``), with the reason.

When ``$CYTEARC_INTEROP_REPORT`` names a directory, each cell is written there
as ``{kind}__{reader}.json`` (:func:`record`); ``report.py`` reads them back
(:func:`read_records`) into ``docs/interop.md``.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "ENV",
    "CellRecord",
    "NotApplicableError",
    "Outcome",
    "compare",
    "first_line",
    "read_records",
    "record",
    "run_reader",
]

ENV = "CYTEARC_INTEROP_REPORT"

Status = Literal["exact", "differs", "fails", "n/a", "not run"]

# Long enough for tensorstore's messages, which put the cause at the end.
_MAX_MESSAGE = 240

# Parts of error messages that change from run to run (which shard entry a
# concurrent read met first, at which compressed byte): the generated page
# must only change when an outcome does.
_VOLATILE = (
    (re.compile(r"shard entry \{[\d, ]+\}/"), "shard entry {i, j}/"),
    (re.compile(r"/c/[\d/]+(?=\W)"), "/c/..."),
    (re.compile(r"\bat byte \d+"), "at byte N"),
)


class NotApplicableError(Exception):
    """A reader cannot address this target at all (not a failure to read it)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one reader did with one array."""

    status: Status
    """``exact``, ``differs``, ``fails`` or ``n/a``."""
    detail: str = ""
    """Why it differs, the first line of the error, or why it is not applicable."""
    warnings: tuple[str, ...] = ()
    """Warnings the reader emitted while reading (first lines, deduplicated)."""


@dataclass(frozen=True, slots=True)
class CellRecord:
    """The JSON shape of one cell of the table."""

    kind: str
    """The array kind (row): its slug."""
    reader: str
    """The reader (column)."""
    position: list[int]
    """Row and column index in the registries, so the report keeps their order."""
    kind_label: str
    """The row's heading (markdown)."""
    status: Status
    """As :attr:`Outcome.status`, or ``not run`` (then ``detail`` says why)."""
    detail: str
    """As :attr:`Outcome.detail`."""
    reader_version: str
    """The reader's version string as the report shows it."""
    kind_note: str = ""
    """What the kind is (array, data type, geometry), for the report's row legend."""
    warnings: list[str] = field(default_factory=list)
    """As :attr:`Outcome.warnings`."""


def first_line(exc: BaseException, *, scrub: Sequence[str] = ()) -> str:
    """``Type: first line of the message``, following ``__cause__`` when the message is empty.

    Each string of ``scrub`` (temporary directories) is replaced by ``<tmp>``
    so that the generated page does not change from run to run.

    >>> first_line(ValueError("bad chunk\\nat byte 3"))
    'ValueError: bad chunk'
    >>> try:
    ...     raise KeyError() from TypeError("unsupported data type")
    ... except KeyError as e:
    ...     first_line(e)
    'KeyError <- TypeError: unsupported data type'
    """
    names: list[str] = []
    current: BaseException | None = exc
    while current is not None:
        names.append(type(current).__name__)
        text = str(current).strip()
        if text:
            line = text.splitlines()[0].strip()
            for path in scrub:
                line = line.replace(path, "<tmp>")
            for pattern, replacement in _VOLATILE:
                line = pattern.sub(replacement, line)
            line = re.sub(r"\s+", " ", line)
            if len(line) > _MAX_MESSAGE:
                line = line[: _MAX_MESSAGE - 3] + "..."
            return f"{' <- '.join(names)}: {line}"
        current = current.__cause__ or current.__context__
    return " <- ".join(names)


def compare(expected: npt.NDArray[Any], got: Any) -> Outcome:
    """``exact`` or ``differs`` (with where and how) for values a reader returned.

    Strings compare as Python strings, whatever their numpy width or type (fixed
    width, object, or the variable-width ``StringDType`` zarr-python reads Zarr's
    ``string`` type as).

    >>> compare(np.arange(3, dtype=np.uint16), np.arange(3, dtype=np.uint16)).status
    'exact'
    >>> compare(np.arange(3, dtype=np.uint16), np.array([0, 1, 5], dtype=np.uint16)).detail
    '1 of 3 values differ; first at (2,): expected 2, got 5'
    >>> compare(np.arange(3, dtype=np.uint16), np.arange(3, dtype=np.int64)).detail
    'data type int64, expected uint16 (values equal)'
    """
    got = np.asarray(got)
    if got.shape != expected.shape:
        return Outcome("differs", f"shape {got.shape}, expected {expected.shape}")
    if expected.dtype.kind == "U":
        if got.dtype.kind not in "UOT":
            return Outcome("differs", f"data type {got.dtype}, expected text ({expected.dtype})")
        wrong = np.array(
            [str(a) != str(b) for a, b in zip(expected.ravel(), got.ravel(), strict=True)],
            dtype=bool,
        ).reshape(expected.shape)
    else:
        values_equal = got.dtype.kind in "biuf" and np.array_equal(
            expected, got, equal_nan=expected.dtype.kind == "f"
        )
        if got.dtype != expected.dtype:
            how = "values equal" if values_equal else "values differ too"
            return Outcome("differs", f"data type {got.dtype}, expected {expected.dtype} ({how})")
        if expected.dtype.kind == "f":
            # bit for bit: -0.0 against 0.0 or another NaN payload is a difference too
            width = f"u{expected.dtype.itemsize}"
            wrong = expected.view(width) != got.view(width)
        else:
            wrong = expected != got
    n_wrong = int(np.count_nonzero(wrong))
    if n_wrong == 0:
        return Outcome("exact")
    where = tuple(int(i) for i in np.argwhere(wrong)[0])
    return Outcome(
        "differs",
        f"{n_wrong} of {expected.size} values differ; first at {where}: "
        f"expected {expected[where]!r}, got {got[where]!r}",
    )


def run_reader(
    read: Callable[[], Any], expected: npt.NDArray[Any], *, scrub: Sequence[str] = ()
) -> Outcome:
    """Call ``read`` and classify what it returned or raised.

    Warnings are recorded, not raised: the test suite turns warnings into
    errors, and a reader that warns and then reads exact values has read them.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = read()
        except NotApplicableError as exc:
            return Outcome("n/a", str(exc))
        except Exception as exc:  # any reader error is a finding, never a crash of the harness
            outcome = Outcome("fails", first_line(exc, scrub=scrub))
        else:
            outcome = compare(expected, got)
    seen = tuple(dict.fromkeys(str(w.message).splitlines()[0] for w in caught))
    return Outcome(outcome.status, outcome.detail, seen)


def record(cell: CellRecord) -> Path | None:
    """Write ``cell`` into ``$CYTEARC_INTEROP_REPORT``, if it is set; returns the path."""
    directory = os.environ.get(ENV)
    if not directory:
        return None
    path = Path(directory) / f"{cell.kind}__{cell.reader}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(cell), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_records(directory: Path) -> list[CellRecord]:
    """Every cell written into ``directory`` (files of another shape are skipped)."""
    cells: list[CellRecord] = []
    for path in sorted(directory.glob("*__*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            cells.append(CellRecord(**data))
        except (OSError, ValueError, TypeError):
            continue
    return cells
