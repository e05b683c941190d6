"""Crash safety of resize and promote, by a real crash after every store write.

Each operation runs in a child process (``arrays_crash_child.py``) that
sends itself SIGKILL right after its n-th file write, delete or rename, for
every n up to the operation's total. Then, in this process:

- plain zarr either refuses the array (the in-progress marker in
  ``zarr.json``) or reads it exactly as before or exactly as after;
- :func:`cytearc_vfs.arrays.recover` finishes the operation, after which
  plain zarr reads exactly the array as after (or as before), never a mix,
  and no journal, progress or staging key is left.

Both ways of renaming are swept: ``local`` (``os.replace``, atomic) and
``wrapped`` (get + set + delete through a wrapper store, with the
half-done renames recovery must tell apart). A second sweep kills the
recovery itself after each of its writes, at chosen first crash points.

Under a consolidated root (``resize-consolidated``), zarr opening the root
group (which reads the array through the consolidated copy while there is
one) is checked the same way before recovery, and after it the root holds
consolidated metadata again, exactly what ``zarr.consolidate_metadata``
gives on the recovered store.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from array_helpers import leftovers
from arrays_crash_child import (
    CONSOLIDATED,
    SCENARIOS,
    _scenarios,
    create,
    open_store,
    run,
    values_of,
)
from kill_points import reports
from zarr.errors import MetadataValidationError
from zarr.storage import LocalStore

from cytearc_vfs.arrays import recover

CHILD = Path(__file__).with_name("arrays_crash_child.py")
_scenarios()


@dataclass(slots=True)
class Figures:
    """What one sweep found."""

    writes: int = 0
    """Writes, deletes and renames of a complete run."""
    points: int = 0
    """Kill points tried."""
    refused_before_recovery: int = 0
    """Points where plain zarr refused the array until recovery."""
    before: int = 0
    """Points that read exactly as before once recovered."""
    after: int = 0
    """Points that read exactly as after once recovered."""
    failures: list[str] = field(default_factory=list)
    """Anything else (must stay empty)."""


def _child(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return reports(CHILD, config)


@dataclass(frozen=True, slots=True)
class Expected:
    before: np.ndarray
    after: np.ndarray

    def state(self, got: np.ndarray) -> str | None:
        for name, values in (("before", self.before), ("after", self.after)):
            if got.shape == values.shape and np.array_equal(got, values):
                return name
        return None


def _expected(scenario: str, root: Path) -> tuple[Path, Expected]:
    template = root / "template"
    create(template, scenario)
    done = root / "done"
    shutil.copytree(template, done)
    run(scenario, done, "local", "operate")
    after = zarr.open_array(LocalStore(done), path="a", mode="r")[...]
    return template, Expected(values_of(SCENARIOS[scenario][0]["shape"]), after)


def _read_before_recovery(
    store: LocalStore, expected: Expected, figures: Figures, point: int, *, through_root: bool
) -> bool:
    """Whether zarr refused the array (the marker); a read that is neither exactly
    before nor exactly after is a failure. ``through_root``: open the root group
    first, so that zarr reads the array from consolidated metadata while there is some."""
    try:
        if through_root:
            seen = zarr.open_group(store, mode="r")["a"][...]
        else:
            seen = zarr.open_array(store, path="a", mode="r")[...]
    except MetadataValidationError as exc:
        if "cytearc_unfinished_operation" not in str(exc):
            figures.failures.append(f"point {point}: refused for another reason: {exc}")
        return True
    if expected.state(seen) is None:
        how = "through the root group" if through_root else "plain"
        figures.failures.append(f"point {point}: zarr read a mix before recovery ({how})")
    return False


def _consolidated_failures(where: Path) -> list[str]:
    """What is wrong with the root's consolidated metadata, recovered."""
    document = where / "zarr.json"
    found = json.loads(document.read_text()).get("consolidated_metadata")
    if found is None:
        return ["the root is not consolidated again"]
    zarr.consolidate_metadata(LocalStore(where))
    if json.loads(document.read_text())["consolidated_metadata"] != found:
        return ["the root's consolidated metadata is not what zarr.consolidate_metadata gives"]
    return []


def _check(
    where: Path, expected: Expected, figures: Figures, point: int, *, consolidated: bool
) -> None:
    store = LocalStore(where)
    refused = _read_before_recovery(store, expected, figures, point, through_root=False)
    if consolidated:
        _read_before_recovery(store, expected, figures, point, through_root=True)
    figures.refused_before_recovery += refused
    recover(store, "a")
    state = expected.state(zarr.open_array(store, path="a", mode="r")[...])
    if state is None:
        figures.failures.append(f"point {point}: a mix of before and after after recovery")
        return
    if leftovers(store):
        figures.failures.append(f"point {point}: left {leftovers(store)}")
    if consolidated:
        problems = _consolidated_failures(where)
        through = zarr.open_consolidated(store, mode="r")["a"][...]
        if expected.state(through) != state:
            problems.append("zarr.open_consolidated reads another array")
        figures.failures += [f"point {point}: {problem}" for problem in problems]
    setattr(figures, state, getattr(figures, state) + 1)


def sweep(
    scenario: str,
    via: str,
    root: Path,
    *,
    template: Path,
    expected: Expected,
    what: str = "operate",
) -> Figures:
    """Kill the operation (or a recovery from ``template``) after each write; check each point."""
    figures = Figures()
    out = root / f"points-{what}"
    out.mkdir(parents=True)
    config = {
        "scenario": scenario,
        "via": via,
        "what": what,
        "template": str(template),
        "out": str(out),
        "points": list(range(1, 10_000)),
    }
    for line in _child(config):
        if line.get("outcome") == "finished":
            figures.writes = line["writes"]
            continue
        if line.get("outcome") != "killed":
            figures.failures.append(str(line))
            continue
        figures.points += 1
        try:
            _check(
                out / f"{line['point']:04d}",
                expected,
                figures,
                line["point"],
                consolidated=scenario in CONSOLIDATED,
            )
        except Exception as exc:  # every other outcome is a finding
            figures.failures.append(f"point {line['point']}: {type(exc).__name__}: {exc}")
    return figures


@pytest.mark.parametrize(
    ("scenario", "via"),
    # under a consolidated root only local: the consolidation writes are the same either way
    [
        (s, v)
        for s in SCENARIOS
        for v in ("local", "wrapped")
        if v == "local" or s not in CONSOLIDATED
    ],
)
def test_killed_after_every_write_reads_before_or_after(
    scenario: str, via: str, tmp_path: Path
) -> None:
    template, expected = _expected(scenario, tmp_path)
    figures = sweep(scenario, via, tmp_path, template=template, expected=expected)
    print(
        f"\narray crash sweep {scenario} ({via}): {figures.points} points of {figures.writes} "
        f"writes, {figures.refused_before_recovery} refused by zarr until recovered, "
        f"{figures.after} after, {figures.before} before"
    )
    assert not figures.failures, "\n".join(figures.failures[:10])
    assert figures.points == figures.writes >= 8
    # the journal is the first write: from then on every point rolls forward
    assert figures.after == figures.points and figures.before == 0
    # the marker goes on at write 2 and off with the new zarr.json, 3 writes before the
    # end; under a consolidated root, one write later (the root's after the journal) and
    # one write earlier (consolidating it again before the journal goes)
    assert figures.refused_before_recovery == figures.points - (
        6 if scenario in CONSOLIDATED else 4
    )


@pytest.mark.parametrize(
    ("scenario", "via"), [("resize-chain", "wrapped"), ("resize-consolidated", "local")]
)
def test_a_killed_recovery_is_recovered(scenario: str, via: str, tmp_path: Path) -> None:
    """Kill the operation at a few points, then kill the recovery after each of its writes."""
    template, expected = _expected(scenario, tmp_path)
    first = tmp_path / "first"
    first.mkdir()
    killed = [
        line
        for line in _child(
            {
                "scenario": scenario,
                "via": via,
                "what": "operate",
                "template": str(template),
                "out": str(first),
                "points": [3, 6, 9],  # in the prepare step, early and later in the renames
            }
        )
    ]
    assert [line["outcome"] for line in killed] == ["killed"] * 3
    for line in killed:
        crashed = first / f"{line['point']:04d}"
        root = tmp_path / f"again-{line['point']}"
        root.mkdir()
        figures = sweep(scenario, via, root, template=crashed, expected=expected, what="recover")
        assert not figures.failures, "\n".join(figures.failures[:10])
        assert figures.points == figures.writes >= 3
        assert figures.after == figures.points
    # the crashed directories themselves still recover
    recover(open_store(first / "0006", via), "a")
    got = zarr.open_array(LocalStore(first / "0006"), path="a", mode="r")[...]
    assert np.array_equal(got, expected.after)
