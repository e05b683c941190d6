"""Run a writer into S3 and kill the process right after its n-th answered write or delete.

Used by ``test_remote_crash_sweep.py`` through :func:`kill_points.reports`, one
JSON config per line of stdin: the writer, the inputs folder, the S3 server's
storage options, a bucket, and the kill points. :func:`kill_points.sweep`
forks one child per point before any zarr or obstore call; the child counts
every ``set``, ``set_if_not_exists`` and ``delete`` of the obstore-backed
store (``SharedClientObjectStore``), and the commit's conditional
``obstore.put_async`` (write/claims.py), once the server has answered it, and
sends itself SIGKILL right after the n-th (writes still in flight on other
requests stay unanswered, or land, as in a real crash). A child that
finishes reports its count of writes first, as ``{"s3_writes": n}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import scipy.sparse as sp
from kill_points import kill_counter, serve_sweeps, sweep

import cytearc_vfs as cv

#: The store methods that write, counted once answered.
WRITES = ("set", "set_if_not_exists", "delete")


def _kill_after(point: int) -> list[int]:
    """Count the answered writes of the S3 store class; SIGKILL after the ``point``-th
    (0: count only). Returns the live count."""
    from cytearc_vfs_adapters.backends import SharedClientObjectStore

    tick, count = kill_counter(point)

    def counted(method: Any) -> Any:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = await method(*args, **kwargs)
            tick()
            return result

        return wrapper

    for name in WRITES:
        setattr(SharedClientObjectStore, name, counted(getattr(SharedClientObjectStore, name)))
    import obstore

    put = obstore.put_async

    async def conditional(*args: Any, **kwargs: Any) -> Any:
        result = await put(*args, **kwargs)
        if kwargs.get("mode") is not None:  # the commit; the store's own puts are counted
            tick()
        return result

    obstore.put_async = conditional  # type: ignore[assignment]
    return count


def run_writer(
    writer: str, work: Path, url: str, options: dict[str, Any], *, overwrite: bool
) -> None:
    """Run ``writer`` on the inputs in ``work``, writing ``url``."""
    counts = sp.csr_array(sp.load_npz(work / "counts.npz"))
    if writer in ("write_counts", "write_counts_overwrite"):
        cv.write_counts(
            url,
            counts,
            layout=(8192, 2048),
            storage_options=options,
            overwrite=overwrite or writer == "write_counts_overwrite",
        )
    elif writer == "repack":
        cv.repack(
            work / "src_a.zarr", url, destination_storage_options=options, overwrite=overwrite
        )
    else:
        raise ValueError(f"unknown writer {writer!r}")


def run_sweep(config: dict[str, Any]) -> int:
    """One sweep: writer, inputs, S3 options and bucket, and the points."""
    writer, work = config["writer"], Path(config["work"])
    options, base = config["options"], config["base"]

    def prepare(point: int) -> tuple[str, int]:
        return f"{base}/{point:04d}.zarr", point

    def operate(destination: tuple[str, int]) -> None:
        url, point = destination
        count = _kill_after(point)
        run_writer(writer, work, url, options, overwrite=False)
        print(json.dumps({"s3_writes": count[0]}), flush=True)

    return sweep(config["points"], prepare, operate)


def main() -> int:
    import anndata  # noqa: F401  (imported before forking: the writers check for AnnData)
    import cytearc_vfs_adapters.backends  # noqa: F401
    import obstore  # noqa: F401

    for name in ("write_counts", "repack", "open_store"):
        getattr(cv, name)
    return serve_sweeps(run_sweep)


if __name__ == "__main__":
    sys.exit(main())
