"""``ArrayWriter.flush`` killed after every store write: each unit reads as before or after.

A flush writes its pending units one by one (a chunk, or the shard of a
sharded array: zarr writes a shard whole), so a flush that dies midway
leaves some units new and the rest as they were; it must never leave a unit
half-written or read as anything else, such as zeros for a deleted unit.
``arrays_crash_child.py`` runs the edits of :func:`arrays_crash_child._buffered`
(a partial unit with a missing cell, a unit written all over with the fill
value, which zarr deletes, and a unit written all over) in a child that
SIGKILLs itself right after its n-th file write or delete, for every n;
here, plain zarr then reads every unit of the array, which must be exactly
its old or its new values (docs/arrays.md, "ArrayWriter: stale chunks").
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from arrays_crash_child import FLUSHES, _flushes, create, run
from kill_points import reports
from zarr.storage import LocalStore

CHILD = Path(__file__).with_name("arrays_crash_child.py")
_flushes()


def _read(where: Path) -> np.ndarray:
    return zarr.open_array(LocalStore(where), path="a", mode="r")[...]


def _units(shape: tuple[int, ...], unit: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """The regions of the units of ``shape``: what one flush write stores."""
    starts = [range(0, length, step) for length, step in zip(shape, unit, strict=True)]
    return [
        tuple(slice(s, s + step) for s, step in zip(start, unit, strict=True))
        for start in itertools.product(*starts)
    ]


@pytest.mark.parametrize("scenario", list(FLUSHES))
def test_a_killed_flush_leaves_each_unit_before_or_after(scenario: str, tmp_path: Path) -> None:
    template = tmp_path / "template"
    create(template, scenario)
    before = _read(template)
    done = tmp_path / "done"
    shutil.copytree(template, done)
    run(scenario, done, "local", "operate")
    after = _read(done)
    arguments = FLUSHES[scenario][0]
    units = _units(arguments["shape"], arguments.get("shards", arguments["chunks"]))
    changed = [region for region in units if not np.array_equal(before[region], after[region])]
    assert len(changed) >= 3  # the three kinds of edit, each in units of its own
    out = tmp_path / "points"
    out.mkdir()
    config = {
        "scenario": scenario,
        "via": "local",
        "what": "operate",
        "template": str(template),
        "out": str(out),
        "points": list(range(1, 1_000)),
    }
    points = writes = 0
    mixed = 0  # points where some units were new and others old
    for line in reports(CHILD, config):
        if line.get("outcome") == "finished":
            writes = line["writes"]
            continue
        assert line.get("outcome") == "killed", line
        points += 1
        seen = _read(out / f"{line['point']:04d}")
        states = set()
        for region in changed:
            if np.array_equal(seen[region], after[region]):
                states.add("after")
            else:
                assert np.array_equal(seen[region], before[region]), (
                    f"point {line['point']}: the unit at {region} reads neither as before "
                    f"nor as after the flush:\n{seen[region]}"
                )
                states.add("before")
        unchanged = [region for region in units if region not in changed]
        for region in unchanged:
            assert np.array_equal(seen[region], before[region]), (line["point"], region)
        mixed += states == {"before", "after"}
    print(f"\nflush crash sweep {scenario}: {points} points of {writes} writes, {mixed} mixed")
    # one write or delete per changed unit; killed after the last, the flush is whole
    assert points == writes == len(changed)
    assert mixed == points - 1
