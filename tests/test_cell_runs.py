"""Cell mappings summarized as runs: exact against the expanded arrays, bounded, and used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import cytearc_vfs as cv
import cytearc_vfs.read.cell_runs as cell_runs
from cytearc_vfs.read.cell_runs import RunCollector, merge_runs
from cytearc_vfs.read.read_stats import ReadCounters


@st.composite
def mappings(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """rowSources and sourceRows made of random runs, and random window sizes."""
    codes, rows = [], []
    for _ in range(draw(st.integers(1, 12))):
        length = draw(st.integers(1, 40))
        code = draw(st.integers(0, 4))
        start = draw(st.integers(0, 1000))
        codes.append(np.full(length, code))
        rows.append(np.arange(start, start + length))
    windows = draw(st.lists(st.integers(1, 50), min_size=1, max_size=6))
    return np.concatenate(codes), np.concatenate(rows), windows


def _collect(values: np.ndarray, collector: RunCollector, windows: list[int]) -> None:
    start, turn = 0, 0
    while start < len(values):
        size = windows[turn % len(windows)]
        collector.observe(start, values[start : start + size])
        start += size
        turn += 1


@given(mappings())
def test_runs_resolve_every_cell_exactly(case: tuple[np.ndarray, np.ndarray, list[int]]) -> None:
    codes, rows, windows = case
    sources, source_rows = RunCollector(0), RunCollector(1)
    _collect(codes, sources, windows)
    _collect(rows, source_rows, windows[::-1])
    runs = merge_runs(sources, source_rows)
    assert runs is not None
    cells = np.arange(len(codes))
    found_codes, found_rows = runs.lookup(cells[::-1])
    np.testing.assert_array_equal(found_codes, codes[::-1])
    np.testing.assert_array_equal(found_rows, rows[::-1])


def test_too_many_runs_are_not_summarized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cell_runs, "MAX_RUNS", 3)
    sources, rows = RunCollector(0), RunCollector(1)
    sources.observe(0, np.zeros(10, dtype=np.int64))
    rows.observe(0, np.array([0, 2, 4, 6, 8, 10, 12, 14, 16, 18]))  # every cell its own run
    assert rows.overflowed
    assert merge_runs(sources, rows) is None


def _sources(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(3)
    paths = {}
    for name in ("a", "b"):
        dense = rng.integers(0, 4, size=(300, 20)).astype(np.float32)
        paths[name] = tmp_path / f"{name}.zarr"
        cv.write_counts(paths[name], sp.csr_array(dense))
    return paths


def test_open_summarizes_plain_composites(tmp_path: Path) -> None:
    comp = cv.create_composite(tmp_path / "c.zarr", _sources(tmp_path))
    store = cv.open_store(tmp_path / "c.zarr")
    runs = store.count_mapping("RNA", ReadCounters()).cell_runs
    assert runs is not None and len(runs.starts) == 2  # one run per source
    np.testing.assert_array_equal(cv.VirtualArrayReader(store).read(), comp.reader().read())


def test_scattered_selections_fall_back_to_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _sources(tmp_path)
    every_third = {"a": np.arange(0, 300, 3), "b": np.arange(1, 300, 3)}
    cv.create_composite(tmp_path / "c.zarr", paths, cells=every_third)
    expected = np.concatenate(
        [
            cv.VirtualArrayReader(paths["a"]).read(every_third["a"]),
            cv.VirtualArrayReader(paths["b"]).read(every_third["b"]),
        ]
    )
    monkeypatch.setattr(cell_runs, "MAX_RUNS", 10)
    store = cv.open_store(tmp_path / "c.zarr")
    assert store.count_mapping("RNA", ReadCounters()).cell_runs is None
    reader = cv.VirtualArrayReader(store)
    picks = np.array([150, 0, 199, 0, 73])
    np.testing.assert_array_equal(reader.read(picks), expected[picks])
    np.testing.assert_array_equal(reader.read(), expected)
