"""``cytearc-vfs export``: through the command line, in a terminal, and killed midway.

A killed export must never leave anything at the destination that reads as
an AnnData: the export writes under a temporary name and renames at the end.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anndata as ad
import pytest
import scipy.sparse as sp
from cli_harness import cli_executable, run_in_terminal, run_main
from conftest import realistic_counts
from cytearc_vfs_adapters.anndata_output import export_anndata

import cytearc_vfs as cv


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export_cli") / "s.zarr"
    cv.write_counts(path, realistic_counts(900, 80, seed=4))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    # in this process: these exports end by themselves (the killed ones below run
    # the program)
    return run_main(*args)


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
def test_export_through_the_command_line(store: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"out{suffix}"
    # --mem-budget bounds the whole export (tests/test_export_budget.py): 16,000 bytes
    # cannot hold it, and the refusal names the smallest budget that can
    small = _cli("export", str(store), str(out), "--mem-budget", "16000")
    assert small.returncode == 2 and "raise --mem-budget to at least" in small.stderr
    assert not out.exists()
    run = _cli("export", str(store), str(out), "--json", "--mem-budget", "32M")
    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout)
    assert payload["shape"] == [900, 80] and payload["format"] == suffix[1:]
    assert payload["bands"] == 1 and payload["bandCells"] == 900
    assert payload["membershipColumn"] is None
    assert run.stderr == ""  # no library warnings on the way
    back = ad.read_h5ad(out) if suffix == ".h5ad" else ad.read_zarr(out)
    expected = cv.to_anndata(store, lazy=False)
    assert (back.X != expected.X).nnz == 0 and list(back.obs_names) == list(expected.obs_names)


def test_export_zarr_v2_for_older_readers(store: Path, tmp_path: Path) -> None:
    import zarr

    out = tmp_path / "v2.zarr"
    run = _cli("export", str(store), str(out), "--zarr-format", "2")
    assert run.returncode == 0, run.stderr
    assert (out / ".zgroup").is_file() and zarr.open_group(out, mode="r").metadata.zarr_format == 2
    assert ad.read_zarr(out).shape == (900, 80)
    wrong = _cli("export", str(store), str(tmp_path / "v4.zarr"), "--zarr-format", "4")
    assert wrong.returncode == 2 and "--zarr-format" in wrong.stderr


def test_export_refusals_exit_2_with_the_remedy(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.h5ad"
    assert _cli("export", str(store), str(out)).returncode == 0
    again = _cli("export", str(store), str(out))
    assert again.returncode == 2 and "--overwrite" in again.stderr
    # the remedy names the option as the command line gives it (cli.md), not also Python's
    assert "overwrite=True" not in again.stderr, again.stderr
    with pytest.raises(FileExistsError, match=r"give overwrite=True to replace") as refused:
        export_anndata(store, out)
    assert "--overwrite" not in str(refused.value)
    assert _cli("export", str(store), str(out), "--overwrite").returncode == 0
    wrong = _cli("export", str(store), str(tmp_path / "out.csv"))
    assert wrong.returncode == 2 and ".zarr" in wrong.stderr and ".h5ad" in wrong.stderr
    missing = _cli("export", str(tmp_path / "absent.zarr"), str(tmp_path / "x.h5ad"))
    assert missing.returncode == 2 and "export needs" in missing.stderr
    # a Zarr format for an HDF5 file was ignored without a word
    format_ = _cli("export", str(store), str(tmp_path / "v2.h5ad"), "--zarr-format", "2")
    assert format_.returncode == 2 and "applies to a .zarr OUT only" in format_.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.h5ad"]


def test_overwrite_of_something_else_names_the_flag_at_a_shell(store: Path, tmp_path: Path) -> None:
    # a newcomer who swaps STORE and OUT, or exports onto a CyteArc store, with
    # --overwrite: the refusal said "so overwrite does not replace it", Python's word
    other = tmp_path / "other.zarr"
    cv.write_counts(other, realistic_counts(20, 10, seed=1))
    before = sorted(str(p.relative_to(other)) for p in other.rglob("*"))
    run = _cli("export", str(store), str(other), "--overwrite")
    assert run.returncode == 2, run.stderr
    assert "--overwrite does not replace it" in run.stderr, run.stderr
    assert "so overwrite" not in run.stderr
    assert sorted(str(p.relative_to(other)) for p in other.rglob("*")) == before
    with pytest.raises(FileExistsError, match=r"so overwrite=True does not replace it"):
        export_anndata(store, other, overwrite=True)
    # inside the exported store: it would gain foreign keys
    inside = _cli("export", str(store), str(store / "inner.h5ad"))
    assert inside.returncode == 2 and "overlaps" in inside.stderr, inside.stderr
    assert not (store / "inner.h5ad").exists()


def test_an_h5ad_export_on_a_full_disk_is_the_environment(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HDF5 reports a full disk as a RuntimeError when the file is closed ("Set slist
    enabled failed (file write failed: ..., errno = 28, ...)"): the export exited 70,
    "a bug in cytearc-vfs". It is the system, exit 4, and no partial file stays."""
    import h5py

    real_exit = h5py.File.__exit__

    def full_disk(self: h5py.File, *exc: object) -> None:
        real_exit(self, *exc)
        raise RuntimeError(
            "Set slist enabled failed (file write failed: time = Wed Dec  2 12:35:04 2026\n"
            ", filename = 'x.partial', file descriptor = 6, errno = 28, error message = "
            "'No space left on device', buf = 0x1, total write size = 32768)"
        )

    monkeypatch.setattr(h5py.File, "__exit__", full_disk)
    run = run_main("export", str(store), str(tmp_path / "full.h5ad"), "--json")
    assert run.returncode == 4, run.stderr
    payload = json.loads(run.stdout)
    assert payload["category"] == "environment" and payload["error"] == "OSError"
    assert "writing the .h5ad failed: No space left on device (errno 28" in payload["message"]
    assert "bug" not in payload["message"]
    assert list(tmp_path.iterdir()) == []


def test_export_in_a_terminal(store: Path, tmp_path: Path) -> None:
    run = run_in_terminal(["export", str(store), str(tmp_path / "t.h5ad")])
    assert run.returncode == 0, run.output
    assert "exported 900 cells x 80 features" in run.output
    assert ad.read_h5ad(tmp_path / "t.h5ad").shape == (900, 80)
    # one band: the bar counted cells, and stood at 0% until the export ended; its
    # steps now move it, each drawn, up to 100%
    drawn = [
        (int(done), int(total))
        for done, total in re.findall(r"export:.*?\| *(\d+)/(\d+) \[", run.output)
    ]
    assert drawn and all(total == 7 for _, total in drawn), run.output
    counts = [done for done, _ in drawn]
    assert counts == sorted(counts) and counts[-1] == 7, run.output
    assert [n for n in counts if 0 < n < 7], run.output  # it moved on the way
    assert "step/s" in run.output, run.output
    # piped, nothing is drawn (no carriage returns in a log)
    piped = subprocess.run(
        [cli_executable(), "export", str(store), str(tmp_path / "p.h5ad")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr
    assert "\r" not in piped.stdout and "exported 900 cells" in piped.stdout


@pytest.mark.parametrize(("band_bytes", "bands"), [(None, 1), (100 * 80, 9)])
def test_export_progress_counts_steps_to_the_end(
    store: Path, tmp_path: Path, band_bytes: int | None, bands: int
) -> None:
    """``progress("export", done, total)``: the tables, obs, var and uns, each band read and
    appended, and the finish; the last call only once the export is in place."""
    out = tmp_path / "o.zarr"
    calls: list[tuple[str, int, int, bool]] = []
    info = export_anndata(
        store,
        out,
        band_bytes=band_bytes,
        progress=lambda phase, done, total: calls.append((phase, done, total, out.exists())),
    )
    assert info.bands == bands
    total = 5 + 2 * bands
    assert [(phase, done, of) for phase, done, of, _ in calls] == [
        ("export", done, total) for done in range(1, total + 1)
    ]
    assert [exists for *_, exists in calls] == [False] * (total - 1) + [True]


_CHILD = textwrap.dedent(
    """
    import sys, time
    from cytearc_vfs_adapters.anndata_output import export_anndata

    def progress(phase, done, total):
        # steps: tables, obs, var, uns, then two per band (read, appended)
        if done >= 4 + 2 * 3:  # three bands are on disk under the temporary name
            print("midway", flush=True)
            time.sleep(120)

    export_anndata(sys.argv[1], sys.argv[2], band_bytes=100 * 80, progress=progress)
    """
)


@pytest.mark.parametrize(
    ("how", "suffix"),
    [(signal.SIGKILL, ".zarr"), (signal.SIGKILL, ".h5ad"), (signal.SIGINT, ".zarr")],
)
def test_a_killed_export_leaves_nothing_that_reads_as_anndata(
    store: Path, tmp_path: Path, suffix: str, how: signal.Signals
) -> None:
    out = tmp_path / f"out{suffix}"
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(store), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "midway"
        os.kill(child.pid, how)
        child.wait(timeout=60)
    assert not out.exists()
    left = [p for p in tmp_path.iterdir()]
    if how == signal.SIGINT:
        assert left == []  # the interrupt removed its temporary
    else:
        # SIGKILL runs no cleanup: the temporary stays, under a name that is not OUT,
        # and its root never says "anndata" (that is written last)
        (temporary,) = left
        assert temporary.name.startswith(f".{out.name}.") and temporary.name.endswith(".partial")
        if suffix == ".zarr":
            root = json.loads((temporary / "zarr.json").read_text())
            assert root["attributes"]["encoding-type"] == "cytearc-unfinished-export"
            # anndata reads a root without attributes (anndata 0.7's layout): the marker
            # makes it refuse the temporary instead of reading the unwritten rows as empty
            with pytest.raises(Exception, match="cytearc-unfinished-export"):
                ad.read_zarr(temporary)
    # the next export is not blocked by what the killed one left
    cv_info = _cli("export", str(store), str(out))
    assert cv_info.returncode == 0, cv_info.stderr
    assert sp.issparse(ad.read_h5ad(out).X if suffix == ".h5ad" else ad.read_zarr(out).X)


def test_a_suffix_in_capitals_exports_and_a_bare_suffix_is_refused(
    store: Path, tmp_path: Path
) -> None:
    """``OUT.H5AD`` was refused as not ending in .h5ad; ``.zarr`` alone wrote a hidden
    directory named ``.zarr``."""
    run = _cli("export", str(store), str(tmp_path / "OUT.H5AD"), "--overwrite")
    assert run.returncode == 0, run.stderr
    assert ad.read_h5ad(tmp_path / "OUT.H5AD").shape == (900, 80)
    # an AnnData at that name may be replaced, whatever the case of its suffix
    again = _cli("export", str(store), str(tmp_path / "OUT.H5AD"), "--overwrite")
    assert again.returncode == 0, again.stderr
    bare = _cli("export", str(store), str(tmp_path / ".zarr"))
    assert bare.returncode == 2 and "no name before its suffix .zarr" in bare.stderr
    assert "such as pbmc.zarr" in bare.stderr
    assert not (tmp_path / ".zarr").exists()


def test_every_message_names_out_as_it_was_given(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cd /tmp && cytearc-vfs export s.zarr out.h5ad`` said "to /tmp/out.h5ad", and a
    destination inside the store was named by its absolute path: each message now
    names OUT (and STORE) as typed; ``--json``'s ``location`` stays the absolute path."""
    import shutil

    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(store, work / "s.zarr")
    (work / "afile").write_text("not a folder")
    (work / "notes.h5ad").write_text("not an AnnData")
    monkeypatch.chdir(work)
    said: list[str] = []

    def export(*args: str) -> subprocess.CompletedProcess[str]:
        run = _cli("export", *args)
        said.append(run.stdout + run.stderr)
        return run

    done = export("s.zarr", "out.h5ad")
    assert done.returncode == 0, done.stderr
    assert " of assay RNA to out.h5ad (h5ad) in " in done.stdout, done.stdout
    exists = export("s.zarr", "./out.h5ad")
    assert "export destination ./out.h5ad already exists" in exists.stderr, exists.stderr
    assert "export destination nope/out.h5ad: its folder nope does not exist" in (
        export("s.zarr", "nope/out.h5ad").stderr
    )
    assert "export destination 'afile/out.h5ad' cannot be written" in (
        export("s.zarr", "afile/out.h5ad").stderr
    )
    other = export("s.zarr", "notes.h5ad", "--overwrite").stderr
    assert "export destination notes.h5ad holds something that is not an AnnData" in other
    inside = export("s.zarr", "s.zarr/inner.zarr").stderr
    assert "destination 's.zarr/inner.zarr' overlaps source 'exported store' at 's.zarr'" in (
        inside
    ), inside
    home = export("s.zarr", "~/cytearc-no-such-folder/out.h5ad").stderr
    assert "export destination ~/cytearc-no-such-folder/out.h5ad: its folder" in home, home
    for message in said:
        assert str(work) not in message and "file://" not in message, message
    as_json = json.loads(export("s.zarr", "out.zarr", "--json").stdout)
    assert as_json["location"] == str(work / "out.zarr")


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
def test_an_export_into_another_zarr_store_is_refused(
    store: Path, tmp_path: Path, suffix: str
) -> None:
    """``export s.zarr other.zarr/x.h5ad`` wrote into another store (a foreign member of
    an AnnData or CyteArc store, or a store nested in it), which ``write`` refuses."""
    other = tmp_path / "other.zarr"
    assert _cli("export", str(store), str(other)).returncode == 0
    before = sorted(str(p.relative_to(other)) for p in other.rglob("*"))
    for inner in (other / f"x{suffix}", other / "obsm" / f"x{suffix}"):
        run = _cli("export", str(store), str(inner))
        assert run.returncode == 2, run.stderr
        # the nearest node is named: the store, or its group obsm
        assert f"destination {str(inner)!r} is below the Zarr node '{other}" in run.stderr
        assert "Choose a destination outside any Zarr store" in run.stderr
    assert sorted(str(p.relative_to(other)) for p in other.rglob("*")) == before
