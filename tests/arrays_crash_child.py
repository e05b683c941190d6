"""Run one array operation and SIGKILL the process right after its n-th store write.

Used by ``test_arrays_crash.py`` through :func:`kill_points.reports`, one JSON
config per line of stdin. Each config names a scenario (:data:`SCENARIOS`), how the store is opened
(``local``: zarr's ``LocalStore``, whose renames are ``os.replace``;
``wrapped``: the same directory behind a plain ``WrapperStore``, so renames
are get + set + delete), what runs (``operate``, or ``recover`` on a
directory an earlier kill left), a template directory and the kill points.

The script imports everything once, then for each sweep
:func:`kill_points.sweep` forks one child per point before any zarr call (an event-loop thread does not
survive a fork). The child counts every file write and delete
``LocalStore`` makes and every rename (``key_moves.replace_file``) and
sends itself SIGKILL right after the n-th.
Each point prints one JSON line: ``{"point": n, "outcome": "killed"}``, or
``"finished"`` with the write count once a point lies past the last write.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from kill_points import serve_sweeps, sweep

#: name -> (zarr.create_array arguments, the operation)
SCENARIOS: dict[str, tuple[dict[str, Any], Callable[[Any], object]]] = {}
#: Scenarios whose root group holds consolidated metadata (as anndata writes it).
CONSOLIDATED = frozenset({"resize-consolidated"})
#: name -> (zarr.create_array arguments, buffered writes flushed): swept by
#: ``test_arrays_flush_crash.py``, where each unit (chunk, or shard) must read as
#: before or as after, since a flush writes unit by unit
FLUSHES: dict[str, tuple[dict[str, Any], Callable[[Any], object]]] = {}


def _scenarios() -> None:
    from zarr.codecs import TransposeCodec

    from cytearc_vfs.arrays import promote, resize

    SCENARIOS.update(
        {
            # a grown start, a cut (non-aligned) end with its edge chunks rewritten,
            # a shrunk start and a grown end on the other dimension
            "resize-2d": (
                {"shape": (7, 5), "chunks": (2, 2)},
                lambda a: resize(a, low=[1, -2], high=[-2, 3]),
            ),
            # one chain of chunks: every rename refills the last one's source
            # resize-2d under a consolidated root: removed after the journal, consolidated
            # again after the new zarr.json
            "resize-consolidated": (
                {"shape": (7, 5), "chunks": (2, 2)},
                lambda a: resize(a, low=[1, -2], high=[-2, 3]),
            ),
            "resize-chain": (
                {"shape": (9,), "chunks": (2,)},
                lambda a: resize(a, low=[4], high=[-2]),
            ),
            "resize-sharded": (
                {"shape": (12, 4), "chunks": (2, 2), "shards": (4, 4)},
                lambda a: resize(a, low=[-4, 0], high=[-1, 1]),
            ),
            # chunks move, the shape (so zarr.json) stays: recovery must still roll forward
            "resize-same-shape": (
                {"shape": (7,), "chunks": (1,), "shards": (2,)},
                lambda a: resize(a, low=[-4], high=[4]),
            ),
            "promote-transpose": (
                {"shape": (5, 4), "chunks": (2, 2), "filters": [TransposeCodec(order=(1, 0))]},
                lambda a: promote(a, 1),
            ),
            "promote-sharded": (
                {"shape": (8, 6), "chunks": (2, 3), "shards": (4, 6)},
                lambda a: promote(a, 0),
            ),
        }
    )


def _buffered(array: Any) -> None:
    """Edits of three kinds, flushed together: a partial unit with a missing (masked)
    cell, read, laid over and written; a unit written all over with the fill value,
    which zarr deletes; a unit written all over."""
    from cytearc_vfs.arrays import ArrayWriter

    rows = array.shape[0]
    with ArrayWriter(array) as writer:
        edit = np.ma.masked_array(np.full((2, 4), 100, dtype="i4"), mask=False)
        edit.mask[0, 0] = True
        writer.write(edit, [range(1, 3), range(1, 5)])
        writer.write(np.full((4, 6), -1, dtype="i4"), [range(4, 8), None])
        writer.write(np.arange(24, dtype="i4").reshape(4, 6) + 200, [range(rows - 4, rows), None])


def _flushes() -> None:
    FLUSHES.update(
        {
            "flush-sharded": ({"shape": (12, 6), "chunks": (2, 3), "shards": (4, 6)}, _buffered),
            "flush-chunks": ({"shape": (12, 6), "chunks": (2, 3)}, _buffered),
        }
    )


def values_of(shape: tuple[int, ...]) -> np.ndarray:
    """The values every scenario writes first (no cell holds the fill value -1)."""
    return np.arange(int(np.prod(shape)), dtype="i4").reshape(shape)


def create(directory: Path, scenario: str) -> None:
    """Write the scenario's array at ``directory``/a."""
    import zarr
    from zarr.storage import LocalStore

    arguments, _ = {**SCENARIOS, **FLUSHES}[scenario]
    array = zarr.create_array(
        LocalStore(directory), name="a", dtype="i4", fill_value=-1, **arguments
    )
    array[...] = values_of(arguments["shape"])
    if scenario in CONSOLIDATED:
        zarr.consolidate_metadata(LocalStore(directory))


def open_store(directory: Path, via: str) -> Any:
    """The store the operation runs on."""
    from zarr.storage import LocalStore, WrapperStore

    local = LocalStore(directory)
    return local if via == "local" else WrapperStore(local)


def run(scenario: str, directory: Path, via: str, what: str) -> None:
    """Run the scenario's operation (or a recovery) on ``directory``."""
    import zarr

    from cytearc_vfs.arrays import recover

    store = open_store(directory, via)
    if what == "recover":
        recover(store, "a")
        return
    _, operation = {**SCENARIOS, **FLUSHES}[scenario]
    operation(zarr.open_array(store, path="a", mode="r+"))


def run_sweep(config: dict[str, Any]) -> int:
    """One sweep of the scenario (or its recovery) the config names."""
    from cytearc_vfs.arrays import key_moves

    template, out = Path(config["template"]), Path(config["out"])

    def prepare(point: int) -> Path:
        destination = out / f"{point:04d}"
        shutil.copytree(template, destination)
        return destination

    def operate(destination: Path) -> None:
        run(config["scenario"], destination, config["via"], config["what"])

    # renames count as writes too
    return sweep(config["points"], prepare, operate, (key_moves, "replace_file"))


def main() -> int:
    import cytearc_vfs.arrays  # noqa: F401  (imported before forking)

    _scenarios()
    _flushes()
    return serve_sweeps(run_sweep)


if __name__ == "__main__":
    sys.exit(main())
