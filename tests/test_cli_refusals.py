"""Wrong inputs to every command: documented exit code, one line, no traceback, JSON that parses.

One table: each row is a command line a user could type by mistake, the
exit code ``docs/cli.md`` documents for it, and words the one-line message
must hold. Every row also runs with ``--json`` (one JSON object on stdout),
and the destinations involved must be exactly as before.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from cli_harness import tree_digest, write_h5ad
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.cli import main


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One of each kind of location a user may point a command at."""
    root = tmp_path_factory.mktemp("places")
    counts = realistic_counts(120, 40, seed=7)
    cv.write_counts(root / "store.zarr", counts)
    cv.write_counts(root / "existing.zarr", counts)
    adata = write_h5ad(root / "data.h5ad", counts)
    adata.write_zarr(root / "anndata.zarr")
    (root / "plain").mkdir()
    (root / "plain" / "notes.txt").write_text("not a store")
    (root / "empty").mkdir()
    (root / "file.txt").write_text("not a store")
    cv.write_counts(root / "corrupt.zarr", counts)
    shard = root / "corrupt.zarr" / "RNA" / "counts" / "c" / "0" / "0"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    cv.create_composite(root / "composite.zarr", {"a": root / "store.zarr"})
    cv.mount_datastore(root / "store.zarr", root / "mount.zarr")
    (root / "ids.txt").write_text("no-such-cell\n")
    (root / "empty-ids.txt").write_text("\n  \n")
    return {
        "STORE": root / "store.zarr",
        "EXISTING": root / "existing.zarr",
        "H5AD": root / "data.h5ad",
        "ANNDATA": root / "anndata.zarr",
        "PLAIN": root / "plain",
        "EMPTY": root / "empty",
        "FILE": root / "file.txt",
        "MISSING": root / "missing.zarr",
        "CORRUPT": root / "corrupt.zarr",
        "COMPOSITE": root / "composite.zarr",
        "MOUNT": root / "mount.zarr",
        "NEW": root / "new.zarr",
        "IDS": root / "ids.txt",
        "EMPTYIDS": root / "empty-ids.txt",
    }


NOT_STORES = ("MISSING", "PLAIN", "EMPTY", "FILE", "ANNDATA", "H5AD")
WORDS = {
    "MISSING": "does not exist",
    "PLAIN": "no zarr.json",
    "EMPTY": "empty directory",
    "FILE": "a file, not a Zarr store",
    "ANNDATA": "cytearc-vfs write",
    "H5AD": "cytearc-vfs write",
}

CASES: list[tuple[str, int, str]] = [
    *[(f"info {kind}", 2, WORDS[kind]) for kind in NOT_STORES],
    *[(f"verify {kind}", 2, WORDS[kind]) for kind in NOT_STORES],
    *[(f"artifacts {kind}", 2, WORDS[kind]) for kind in NOT_STORES],
    # an AnnData Zarr store is a composite source (read without conversion)
    *[(f"composite NEW {kind}", 2, WORDS[kind]) for kind in NOT_STORES if kind != "ANNDATA"],
    *[(f"mount {kind} NEW", 2, WORDS[kind]) for kind in NOT_STORES],
    *[(f"repack {kind} NEW", 2, WORDS[kind]) for kind in NOT_STORES],
    # an AnnData: what describes it, or (a Zarr store) a composite over it, no copy
    ("info ANNDATA", 2, "anndata ls"),
    ("verify H5AD", 2, "anndata ls"),
    ("export ANNDATA NEW", 2, "cytearc-vfs composite DEST.zarr NAME="),
    ("serve ANNDATA", 2, "give DEST.zarr to serve"),
    ("export H5AD NEW", 2, "import it with: cytearc-vfs write"),
    ("write MISSING NEW", 2, "does not exist"),
    ("write PLAIN NEW", 2, "give an .h5ad file or an AnnData Zarr store"),
    ("write STORE NEW", 2, "cytearc-vfs repack"),
    ("write H5AD EXISTING", 2, "--overwrite"),
    ("write H5AD NEW --layer nope", 2, "has no layer 'nope'"),
    # said "assay_type 'rna' ...", the Python keyword, and not the preset meant
    ("write H5AD NEW --assay-type rna", 2, "--assay-type 'rna' for assay 'RNA' is not a preset"),
    ("write H5AD NEW --assay-type adt", 2, "did you mean 'ADT'?"),
    ("composite EXISTING STORE", 2, "--overwrite"),
    ("composite NEW COMPOSITE", 2, "composites do not nest"),
    # an .h5ad source was told only to import it (a copy into a CyteArc store); an
    # AnnData Zarr copy is a source the composite reads where it is
    ("composite NEW H5AD", 2, "an AnnData Zarr store that a composite reads where it is"),
    ("composite NEW MOUNT", 2, "mounts do not chain"),
    # a layer of a CyteArc source: the remedy named source_layers and assay=
    ("composite NEW a=STORE --layer a=counts", 2, "--layer a=counts names source 'a'"),
    ("composite NEW a=STORE --layer a=counts", 2, "(pick its assay with --assay NAME)"),
    # "a=": NAME is a source, LAYER is what is missing (it said "NAME one of the sources")
    ("composite NEW a=ANNDATA --layer a=", 2, "--layer 'a=' gives no LAYER"),
    ("composite NEW a=STORE --workspace a=", 2, "--workspace 'a=' gives no WS"),
    # given twice for one source: the last was taken, silently
    ("composite NEW a=ANNDATA --layer a=x --layer a=y", 2, "gives source 'a' a LAYER twice"),
    # two id files for one source: the second replaced the first, silently
    ("composite NEW a=STORE --cells a=IDS --cells a=EMPTYIDS", 2, "gives source 'a' two FILEs"),
    # an explicit --features choice beside --features-file: the file won, silently
    ("composite NEW a=STORE --features intersection --features-file IDS", 2, "give one of them"),
    ("composite NEW a=ANNDATA --workspace a=w", 2, "no workspaces; leave out --workspace a=w"),
    ("composite NEW STORE STORE", 2, "two sources are named 'store'"),
    ("composite NEW STORE --features bogus", 2, "union, intersection or @FILE"),
    ("composite NEW STORE --features @MISSING", 2, "does not exist"),
    ("composite NEW STORE --cells other=IDS", 2, "NAME one of the sources"),
    ("composite NEW STORE --cells store=IDS", 2, "are not cells of that source"),
    ("composite STORE STORE --overwrite", 2, "is the destination"),
    # one source, no name: it said "source 'source' is the destination"
    ("mount STORE STORE --overwrite", 2, "the source is the destination"),
    ("repack STORE STORE --overwrite", 2, "the source is the destination"),
    ("mount STORE EXISTING", 2, "--overwrite"),
    ("mount COMPOSITE NEW", 2, "composites do not nest"),
    # the Python keyword (assays=) and function (list_artifacts) were named at the shell
    ("mount STORE NEW --assay RNA --assay RNA", 2, "--assay names 'RNA' more than once"),
    ("artifacts STORE --remove-incomplete nope", 2, "cytearc-vfs artifacts LOCATION --incomplete"),
    # no artifact has such a kind: "0 complete artifacts of kind ../x", exit 0
    ("artifacts STORE --kind ../x", 2, "--kind '../x' is not a valid name"),
    ("artifacts STORE --incomplete --kind zarr.json", 2, "--kind 'zarr.json' is reserved"),
    ("artifacts STORE --kind=", 2, "--kind '' is not a valid name"),
    ("mount STORE MOUNT --overwrite", 2, "analyses depend on it"),
    ("repack STORE EXISTING", 2, "--overwrite"),
    ("repack COMPOSITE NEW", 2, "composites do not nest"),
    # a budget too small for the data: the remedy names the command line's option
    ("repack STORE NEW --mem-budget 10", 2, "give a larger --mem-budget"),
    *[
        (f"{command} --mem-budget{budget}", 2, words)
        for command in (
            "write H5AD NEW",
            "composite NEW STORE",
            "repack STORE NEW",
            "export STORE NEW",
        )
        for budget, words in (
            (" 0", "leaves no working memory; give a positive size"),
            (" 0B", "the smallest useful budget is about 1M"),
            (" -1", "is negative"),
            ("=-1G", "is negative"),
        )
    ],
    ("repack STORE NEW --mem-budget lots", 2, "is not a size"),
    # "-0" is no negative size: it leaves no memory, as 0 does
    ("repack STORE NEW --mem-budget=-0", 2, "--mem-budget -0 leaves no working memory"),
    ("verify CORRUPT", 1, "could not be read"),
    ("info STORE --bogus", 2, "unrecognized arguments: --bogus"),
    # an option of other commands: which take it, not a near name of this one (it
    # said "did you mean --debug?" for --mem-budget)
    (
        "info STORE --mem-budget 2G",
        2,
        "(--mem-budget is an option of write, composite, repack and export, not of info)",
    ),
    ("mount-fs STORE EMPTY --port 8000", 2, "(--port is an option of serve, not of mount-fs)"),
    (
        "array promote STORE RNA/x --dimension 0 --low 1",
        2,
        "(--low is an option of array resize, not of array promote)",
    ),
    # a composite's or a mount's count arrays, which info lists, are not stored there:
    # "no Zarr node here; check the path" sent the user looking for a typo
    ("array info COMPOSITE RNA/counts", 2, "is a composite, whose count arrays are not stored"),
    ("array info MOUNT RNA/countsT", 2, "is a mounted target, whose count arrays are not stored"),
    ("array info COMPOSITE RNA/nothing", 2, "no Zarr node here"),
    # a location that is no Zarr store: resize created the missing directory, promote and
    # recover said "[Errno 17] File exists", info "no Zarr node here; check the path"
    ("array resize MISSING RNA/x --high 1", 2, "does not exist; array resize needs a Zarr"),
    ("array promote H5AD X --dimension 0", 2, "is an h5ad file (AnnData in HDF5)"),
    ("array recover FILE x", 2, "is a file, not a Zarr store; array recover needs a Zarr"),
    ("array info H5AD /", 2, "anndata ls"),
    # ids in a --cells file that the source lacks: named as given at the shell (it said
    # "cells['a']: ... give ids of its cellData/ids, a boolean mask or integer rows")
    ("composite NEW a=STORE --cells a=IDS", 2, "--cells a=FILE: 1 id(s) are not cells"),
    # an empty id file made a composite of 0 features (or cells) and exited 0
    ("composite NEW STORE --features-file EMPTYIDS", 2, "lists no ids (it is empty or blank)"),
    ("composite NEW STORE --features @EMPTYIDS", 2, "lists no ids (it is empty or blank)"),
    ("composite NEW a=STORE --cells a=EMPTYIDS", 2, "lists no ids (it is empty or blank)"),
    # options for a local source: said so, not "the source was replaced or moved"
    (
        'info COMPOSITE --source-storage-options {"a":{"endpoint":"http://x"}}',
        2,
        "--source-storage-options give options for source 'a' of the composite",
    ),
    (
        'info MOUNT --source-storage-options {"a":{}}',
        2,
        "is the local path",
    ),
    (
        'composite NEW a=STORE --source-storage-options {"a":{"endpoint":"http://x"}}',
        2,
        "which takes none: they are for remote URLs",
    ),
    (
        'mount STORE NEW --source-storage-options {"endpoint":"http://x"}',
        2,
        "which takes none: they are for remote URLs",
    ),
    # argparse takes a negative value for an option: the line says how to give one
    ("array resize STORE RNA/x --low -1,0", 2, "starts with '-' is written --low=VALUE"),
    ("repack STORE NEW --mem-budget -1G", 2, "starts with '-' is written --mem-budget=VALUE"),
    # a demo folder that cannot be one: named with the flag, not "[Errno 17] File exists"
    ("demo --directory FILE", 2, "is a file, not a folder"),
    ("demo --directory /proc/demo", 2, "--directory /proc/demo cannot be written"),
    ("demo --directory=", 2, "--directory is empty"),
    # inside a store: refused before both datasets were downloaded, not after
    ("demo --directory STORE", 2, "or leave --directory out for a temporary folder"),
    ("repack STORE", 2, "the following arguments are required"),
    # options for a local .h5ad were dropped silently (a local Zarr store refused them)
    ('anndata ls H5AD --storage-options {"a":1}', 2, "options were given for the local path"),
    ('write H5AD NEW --source-storage-options {"a":1}', 2, "options were given for the local"),
    # a path starting with '-' is read as an option: "LOCATION is required" alone
    ("info -weird.zarr", 2, "(a path that starts with '-' is written ./-weird.zarr, or after --)"),
    ("mount STORE -new.zarr", 2, "is written ./-new.zarr, or after --"),
    ("frobnicate STORE", 2, "invalid choice"),
    # a mistyped command: the list of choices alone, not the one meant
    ("inf STORE", 2, "invalid choice: 'inf' (did you mean 'info'?"),
    ("INFO STORE", 2, "(did you mean 'info'?"),
    ("composit NEW STORE", 2, "(did you mean 'composite'?"),
    ("array inf STORE x", 2, "(did you mean 'info'?"),
    ("anndata list H5AD", 2, "(did you mean 'ls'?"),
]


def _argv(case: str, places: dict[str, Path]) -> list[str]:
    words = []
    for word in case.split():
        prefix = "@" if word.startswith("@") else ""
        name = word.removeprefix("@")
        if name in places:
            words.append(prefix + str(places[name]))
        elif "=" in name and name.split("=", 1)[1] in places:
            key, value = name.split("=", 1)
            words.append(f"{key}={places[value]}")
        else:
            words.append(word)
    return words


@pytest.mark.parametrize(("case", "code", "words"), CASES, ids=[c for c, _, _ in CASES])
def test_wrong_input(
    case: str,
    code: int,
    words: str,
    places: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = {name: tree_digest(path) for name, path in places.items() if path.suffix != ".txt"}
    argv = _argv(case, places)
    status = _run(argv)
    captured = capsys.readouterr()
    assert status == code, captured
    assert "Traceback" not in captured.err
    if code == 1:
        assert words in captured.out
    else:
        lines = [line for line in captured.err.splitlines() if line.strip()]
        assert len(lines) == 1, captured.err
        assert words in lines[0], lines[0]
        # a shell's remedy names flags, never Python's overwrite=True or fill_missing=True
        assert "=True" not in lines[0], lines[0]
    after = {name: tree_digest(path) for name, path in places.items() if path.suffix != ".txt"}
    assert after == before, "a refused command changed a location"

    # the same with --json: one JSON object on stdout
    assert _run([*argv, "--json"]) == code
    payload = json.loads(capsys.readouterr().out)
    assert isinstance(payload, dict)
    assert payload["ok"] is False
    if code == 2:
        assert payload["exitCode"] == 2
        assert words in payload["message"]


def _run(argv: list[str]) -> int:
    """``main``'s status; argparse's usage errors exit through SystemExit."""
    try:
        return main(argv)
    except SystemExit as exited:
        return int(exited.code or 0)


def test_damaged_store_exit_code(
    places: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that fails closed on open exits 3 (damaged), with the spec's error named."""
    import shutil

    broken = places["STORE"].parent / "broken.zarr"
    shutil.copytree(places["STORE"], broken)
    summary = broken / "RNA" / "countSummaries" / "zarr.json"
    summary.write_text(summary.read_text().replace('"source_fingerprint"', '"tampered"'))
    status = main(["info", str(broken), "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert status == 3, payload
    assert payload["category"] == "damaged"


def test_debug_shows_the_traceback(
    places: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            ["repack", str(places["STORE"]), str(places["NEW"]), "--mem-budget", "lots", "--debug"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("cytearc-vfs repack:")


@pytest.mark.parametrize(
    ("value", "shown"),
    [("1", True), ("yes", True), ("0", False), ("false", False), ("No", False), ("off", False)],
)
def test_the_debug_variable_reads_as_people_write_yes_and_no(
    value: str,
    shown: bool,
    places: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CYTEARC_VFS_DEBUG=false (or no, off) turned the tracebacks on: only "" and "0"
    were off."""
    monkeypatch.setenv("CYTEARC_VFS_DEBUG", value)
    assert main(["info", str(places["MISSING"])]) == 2
    assert ("Traceback" in capsys.readouterr().err) is shown


def test_a_write_that_fails_says_its_destination_was_removed(
    places: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A full disk part-way: the line said "the destination is unfinished and does not
    open: write it again with overwrite=True" (the Python keyword), while the command
    had removed the destination, and said nothing of that."""
    import errno

    from zarr.storage import LocalStore

    destination = tmp_path / "full.zarr"
    real_set = LocalStore.set
    writes = 0

    async def full_disk(self: LocalStore, key: str, value: object) -> None:
        nonlocal writes
        if Path(str(self.root)) == destination:
            writes += 1
            if writes == 6:
                raise OSError(errno.ENOSPC, "No space left on device")
        await real_set(self, key, value)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalStore, "set", full_disk)
    assert main(["write", str(places["H5AD"]), str(destination)]) == 4
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "No space left" in lines[0] and "overwrite=True" not in lines[0]
    assert lines[0].endswith(
        f"removed the unfinished destination {destination}, so running the command "
        "again needs no --overwrite"
    )
    assert not destination.exists()
    monkeypatch.setattr(LocalStore, "set", real_set)
    assert main(["write", str(places["H5AD"]), str(destination)]) == 0


def test_a_source_name_taken_from_a_directory_name_says_how_to_name_it(
    places: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``composite NEW a.zarr "my data.zarr"``: the refusal named the invalid name
    'my data' that the user never typed, and not how to give one."""
    unnamed = tmp_path / "my data.zarr"
    argv = ["composite", str(tmp_path / "new.zarr"), str(places["STORE"]), str(unnamed)]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "source name 'my data' is not a valid name" in line
    assert "taken from its directory name" in line and f"source_2={unnamed}" in line
    # quoted as the shell needs it: copied as printed, "my data.zarr" stays one argument
    example = line.rpartition("(e.g. ")[2].removesuffix(")")
    assert shlex.split(example) == [f"source_2={unnamed}"]
    assert not (tmp_path / "new.zarr").exists()
    # named so, the same source is taken (the refusal came before anything was read)
    assert main([*argv[:3], f"source_2={places['STORE']}"]) == 0


@pytest.mark.parametrize(
    "case",
    [
        "info s3//bkt/a.zarr",
        "verify gs//bkt/a.zarr",
        "anndata ls https//host/a.zarr",
        "array info s3//bkt/a.zarr RNA",
        "write H5AD s3//bkt/a.zarr",
        "composite s3//bkt/a.zarr STORE",
        "composite NEW a=s3//bkt/a.zarr",
        "mount STORE s3//bkt/a.zarr",
        "repack STORE s3//bkt/a.zarr",
        "export s3//bkt/a.zarr NEW",
        "serve s3//bkt/a.zarr",
    ],
)
def test_a_url_short_of_its_colon_is_refused_not_made_a_folder(
    case: str,
    places: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``s3//bkt/a.zarr`` (the ``:`` left out) was the local path ``./s3/bkt/a.zarr``:
    a writer created that folder tree in the working directory and exited 0, a
    reader said it "does not exist; check the path"."""
    monkeypatch.chdir(tmp_path)
    argv = _argv(case, places)
    if argv[0] == "export":
        argv[-1] = str(tmp_path / "out.zarr")
    assert _run(argv) == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    scheme = case.partition("//")[0].rpartition(" ")[2].rpartition("=")[2]
    assert f"did you mean '{scheme}://" in line, line
    assert list(tmp_path.iterdir()) == []
    # a folder really named so is given as ./s3/...
    assert f"./{scheme}/" in line, line


@pytest.mark.parametrize(
    "case",
    [
        "info LONG",
        "write H5AD LONG",
        "composite LONG STORE",
        "mount STORE LONG",
        "repack STORE LONG",
        "export STORE LONG",
    ],
)
def test_a_name_longer_than_the_file_system_allows_is_refused(
    case: str, places: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path with a name of 300 characters exited 4, "fix the cause (space,
    permissions, network) and run the command again": the system's failure, when
    the name given is what the file system cannot hold."""
    long = tmp_path / ("a" * 300 + ".zarr")
    argv = [str(long) if word == "LONG" else word for word in _argv(case, places)]
    assert _run(argv) == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1, line
    assert "File name too long" in line and "(space, permissions, network)" not in line
    assert "a name in that path is longer than the file system allows" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("given", "size"),
    [("2Gi", 2 * 1024**3), ("512Mi", 512 * 1024**2), ("1Ti", 1024**4), ("64ki", 64 * 1024)],
)
def test_a_size_in_the_units_kubernetes_writes_is_taken(given: str, size: int) -> None:
    """``2Gi`` (Kubernetes, Slurm-adjacent tooling) was "not a size" while ``2GiB`` was one."""
    from cytearc_vfs.cli.inputs import mem_budget_option

    assert mem_budget_option(given) == size


@pytest.mark.parametrize("flag", ["--cells", "--features-file"])
def test_an_id_file_that_repeats_an_id_names_it(
    flag: str, places: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --cells file listing a cell twice said "cells['a'] repeats rows", the Python
    form and no id; a features file "the explicit feature list repeats ids", no id."""
    ids = tmp_path / "ids.txt"
    store = places["STORE"]
    column = "cellData/ids" if flag == "--cells" else "RNA/featureData/ids"
    first, second = (str(i) for i in zarr.open_array(store / column, mode="r")[:2])
    ids.write_text(f"{first}\n{second}\n{first}\n")
    argument = f"a={ids}" if flag == "--cells" else str(ids)
    destination = tmp_path / "new.zarr"
    assert main(["composite", str(destination), f"a={store}", flag, argument]) == 2
    line = capsys.readouterr().err.strip()
    given = "--cells a=FILE" if flag == "--cells" else "--features-file FILE"
    assert line.startswith(f"cytearc-vfs composite: {given} lists {first!r} twice"), line
    assert "cells[" not in line
    assert not destination.exists()


@pytest.mark.parametrize(
    "case",
    [
        'mount STORE DEST --storage-options {"a":1}',
        'repack STORE DEST --destination-storage-options {"a":1}',
        'write H5AD DEST --storage-options {"a":1}',
        'composite DEST a=STORE --storage-options {"a":1}',
    ],
)
def test_a_refusal_leaves_an_empty_destination_directory_in_place(
    case: str, places: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty directory made for the output (mkdir out.zarr, a mount point, a folder
    with its own permissions) counts as free, and a command that failed after taking
    it removed it whole, "removed the unfinished destination": the user's directory was
    gone after an exit 2 that says nothing was changed."""
    destination = tmp_path / "out.zarr"
    destination.mkdir()
    argv = [str(destination) if word == "DEST" else word for word in _argv(case, places)]
    assert _run(argv) == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1, line
    assert destination.is_dir() and list(destination.iterdir()) == [], line
    assert "removed the unfinished destination" not in line, line


@pytest.mark.parametrize(
    "case",
    [
        'mount STORE DEST --storage-options {"a":1}',
        'repack STORE DEST --destination-storage-options {"a":1}',
        'composite DEST a=STORE --storage-options {"a":1}',
    ],
)
def test_options_for_a_missing_local_destination_are_refused_before_it_is_made(
    case: str, places: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The destination was created (by the writer's lock), then the options refused,
    then the destination removed: "removed the unfinished destination" after an exit 2."""
    destination = tmp_path / "missing.zarr"
    argv = [str(destination) if word == "DEST" else word for word in _argv(case, places)]
    assert _run(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "options were given for the local path" in line, line
    assert "removed the unfinished destination" not in line, line
    assert not destination.exists()


def test_a_folder_named_like_a_scheme_is_still_a_path(
    places: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for given in ("./s3/bkt/a.zarr", "s3/bkt/b.zarr", str(tmp_path / "s3//bkt/c.zarr")):
        assert main(["mount", str(places["STORE"]), given]) == 0, given
    assert sorted(p.name for p in (tmp_path / "s3" / "bkt").iterdir()) == [
        "a.zarr",
        "b.zarr",
        "c.zarr",
    ]


@pytest.mark.parametrize(
    ("argv", "command"),
    [(["info"], "info"), (["anndata", "ls"], "anndata"), (["array", "info"], "array"), ([], "")],
)
def test_a_usage_error_names_its_command_as_other_errors_do(
    argv: list[str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json`` usage errors said ``"command": "cytearc-vfs info"`` (argparse's prog),
    every other error of the same command ``"command": "info"``."""
    assert _run([*argv, "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["command"] == command and payload["error"] == "UsageError"


def test_a_destination_below_a_file_says_so(
    places: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``write IN data.h5ad/x.zarr`` said only "[Errno 20] Not a directory: ...": no remedy."""
    below = places["FILE"] / "x.zarr"
    assert main(["write", str(places["H5AD"]), str(below)]) == 2
    line = capsys.readouterr().err.strip()
    assert str(below) in line and f"its folder {str(places['FILE'])!r} is a file" in line
    assert line.endswith("Choose a destination whose folders are directories. Nothing was written")


def test_demo_without_its_data_is_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's real data cannot be fetched (offline, a cache that cannot be made):
    a ``DataFetchError`` exited 2, "refused", as if the command line were wrong."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("CYTEARC_DATA_DIR", str(blocker))
    assert main(["demo", "--directory", str(tmp_path / "demo"), "--json"]) == 4
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert payload["error"] == "DataFetchError" and payload["category"] == "environment"
    assert payload["exitCode"] == 4 and "CYTEARC_DATA_DIR" in payload["message"]
    lines = captured.err.strip().splitlines()
    assert lines[-1].startswith("cytearc-vfs demo: the real-data cache") and len(lines) == 1


def test_an_object_store_client_error_is_the_environment_not_a_bug() -> None:
    """``anndata ls s3://...`` without credentials raised obstore's GenericError, whose
    message is a multi-line debug dump: it exited 70 ("a bug in cytearc-vfs")."""
    from obstore.exceptions import GenericError

    from cytearc_vfs.cli.failures import ExitCode, classify_failure

    failure = classify_failure(
        GenericError(
            "Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token\n\n"
            'Debug source:\nGeneric {\n    store: "S3",\n}'
        )
    )
    assert failure.code == ExitCode.ENVIRONMENT
    assert "Generic S3 error: Error performing PUT" in failure.message
    assert "Debug source" not in failure.message and "--storage-options" in failure.message


def test_credential_values_are_never_echoed(
    places: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # demo takes no --storage-options: argparse would echo the value it does not know
    secret = '{"secret_access_key":"s3cr3t-value"}'
    for argv in (
        ["demo", "--directory", str(places["NEW"]), "--storage-options", secret],
        ["demo", f"--source-storage-options={secret}", "--bogus"],
    ):
        assert _run(argv) == 2
        captured = capsys.readouterr()
        assert "s3cr3t" not in captured.err + captured.out
        assert "<value not shown>" in captured.err
        assert len(captured.err.strip().splitlines()) == 1
        assert _run([*argv, "--json"]) == 2
        captured = capsys.readouterr()
        assert "s3cr3t" not in captured.err + captured.out
        assert "<value not shown>" in json.loads(captured.out)["message"]


@pytest.mark.parametrize(
    ("argv", "command", "meant"),
    [
        (["info", "STORE", "--jsn"], "info", "--json"),
        (["composite", "NEW", "STORE", "--featurs", "union"], "composite", "--features"),
        (["array", "info", "STORE", "--sotrage-options", "{}"], "array info", "--storage-options"),
        (["anndata", "ls", "ANNDATA", "--debgu"], "anndata ls", "--debug"),
    ],
)
def test_a_mistyped_option_is_refused_by_its_command(
    argv: list[str],
    command: str,
    meant: str,
    places: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A mistyped option was refused as the program's ("cytearc-vfs: unrecognized
    arguments: --jsn; run 'cytearc-vfs --help'"), with "command": "" in the JSON, though a
    command was given: the line now names the command, its --help and the option meant."""
    argv = _argv(" ".join(argv), places)
    assert _run(argv) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"cytearc-vfs {command}: unrecognized arguments: "), line
    assert f"(did you mean {meant}?)" in line
    assert line.endswith(f"run 'cytearc-vfs {command} --help' for the options")
    assert _run([*argv, "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["command"] == command.split()[0]
    assert f"(did you mean {meant}?)" in payload["message"]


def test_a_mistyped_credential_option_hides_its_value(
    places: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in a credential option's name (--storage-optoins) made it unknown, and the
    refusal printed its value: the secret on stderr and in logs."""
    secret = '{"secret_access_key":"s3cr3t-value"}'
    for argv in (
        ["info", str(places["STORE"]), f"--storage-optoins={secret}"],
        ["info", str(places["STORE"]), "--source-storag-options", secret],
        ["write", str(places["H5AD"]), str(places["NEW"]), "--sotrage-options", secret],
    ):
        for extra in ([], ["--json"]):
            assert _run([*argv, *extra]) == 2
            captured = capsys.readouterr()
            assert "s3cr3t" not in captured.err + captured.out
            assert "<value not shown>" in captured.err
    assert not places["NEW"].exists()


@pytest.mark.parametrize("options", ["{}", '{"a": {}}'])
@pytest.mark.parametrize("command", ["serve", "mount-fs", "export"])
def test_source_options_for_an_ordinary_store_are_refused_by_every_command(
    command: str, options: str, places: dict[str, Path], tmp_path: Path
) -> None:
    """``info`` and ``verify`` refused --source-storage-options for an ordinary store;
    ``serve``, ``mount-fs`` and ``export`` served or exported with ``{}``, and refused
    anything else naming the Python keywords (source_storage_options) to a shell user."""
    import subprocess
    import sys

    from cli_harness import stop_process
    from cytearc_vfs_adapters.fuse.mounting import is_mounted

    mountpoint = tmp_path / "mp"
    mountpoint.mkdir()
    extra = {"serve": [], "mount-fs": [str(mountpoint)], "export": [str(tmp_path / "out.h5ad")]}
    argv = [command, str(places["STORE"]), *extra[command], "--source-storage-options", options]
    # a process of its own: serve and mount-fs that are not refused run until stopped
    process = subprocess.Popen(
        [sys.executable, "-m", "cytearc_vfs.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        stop_process(process)  # SIGTERM: mount-fs unmounts, serve stops listening
        _, stderr = process.communicate()
    finally:
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
    assert process.returncode == 2, stderr
    assert stderr.strip() == (
        f"cytearc-vfs {command}: {places['STORE']} is an ordinary store: "
        "--source-storage-options apply to a composite's or a mount's sources only; give the "
        "store's own options with --storage-options"
    )
    assert not (tmp_path / "out.h5ad").exists()


def test_the_library_names_source_options_as_the_caller_gives_them(
    places: dict[str, Path],
) -> None:
    from cytearc_vfs.format.option_names import command_line_names

    with pytest.raises(ValueError, match=r"ordinary store; source_storage_options apply"):
        cv.open_store(places["STORE"], source_storage_options={"a": {}})
    with command_line_names(), pytest.raises(ValueError) as refused:
        cv.open_store(places["STORE"], source_storage_options={"a": {}})
    assert "--source-storage-options apply" in str(refused.value)
    assert "use --storage-options for the store itself" in str(refused.value)
    # a composite's local source given options: refused as such, not as a moved source
    with pytest.raises(ValueError, match=r"source_storage_options give options for source 'a'"):
        cv.open_store(places["COMPOSITE"], source_storage_options={"a": {"endpoint": "x"}})


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends


@pytest.mark.parametrize(
    ("options", "code", "words"),
    [
        # obstore refuses an option it does not know: the user's input
        ({"bogus_option": 1}, 2, "the storage backend refused its options"),
        # nothing listens at the endpoint: the system, not a bug (was exit 70)
        ({}, 4, "s3://bucket/store.zarr cannot be read"),
    ],
)
def test_backend_errors_are_not_bugs(
    options: dict[str, object], code: int, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = {
        "endpoint": f"http://127.0.0.1:{_closed_port()}",
        "access_key_id": "key",
        "secret_access_key": "s3cr3t-value",
        "region": "us-east-1",
        "client_options": {"allow_http": True},
        "retry_config": {"max_retries": 0},
        **options,
    }
    argv = ["serve", "s3://bucket/store.zarr", "--storage-options", json.dumps(storage)]
    assert _run(argv) == code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], captured.err
    assert "This is a bug" not in lines[0] and "s3cr3t" not in lines[0]
    assert "--storage-options" in lines[0]  # the remedy names where the options go


def test_a_composite_of_a_store_written_in_a_workspace(
    places: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``write --workspace w1`` makes a store whose assay is 'w1/RNA'. ``composite`` of it
    was refused with "give one of them; 'W/A' is assay 'A' of workspace 'W'", yet
    ``--assay w1/RNA`` is no valid name and the command had no option for a source's
    workspace (Python's source_workspaces=): such a store could not be composed from the
    shell. ``--workspace NAME=WS`` gives it, and the refusal says so."""
    store = tmp_path / "ws.zarr"
    assert main(["write", str(places["H5AD"]), str(store), "--workspace", "w1"]) == 0
    capsys.readouterr()
    assert main(["composite", str(tmp_path / "c.zarr"), f"ws={store}"]) == 2
    line = capsys.readouterr().err.strip()
    assert "its assays: ['w1/RNA']" in line and "--workspace NAME=W" in line, line
    assert main(["export", str(store), str(tmp_path / "x.h5ad")]) == 2
    assert "give --assay A --workspace W" in capsys.readouterr().err
    assert main(["composite", str(tmp_path / "c.zarr"), f"ws={store}", "--workspace", "ws=w1"]) == 0
    reader = cv.open_store(tmp_path / "c.zarr").reader()
    expected = cv.VirtualArrayReader(cv.open_store(store), assay="RNA", workspace="w1").read()
    assert np.array_equal(reader.read(), expected)
    assert main(["composite", str(tmp_path / "d.zarr"), f"ws={store}", "--workspace", "x=w1"]) == 2
    assert "--workspace 'x=w1' must be NAME=WS" in capsys.readouterr().err
    # mount named no workspace it could give ("name the workspace that holds the assays"),
    # and told a root-layout store given a workspace to name one too
    assert main(["mount", str(store), str(tmp_path / "m.zarr")]) == 2
    assert "has no assay in its root layout; name the workspace that holds them, one of 'w1'" in (
        capsys.readouterr().err
    )
    assert main(["mount", str(places["STORE"]), str(tmp_path / "m.zarr"), "--workspace", "w2"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "has no assay in workspace 'w2'; its assays are in its root layout: give no workspace"
        )
    )
    assert main(["mount", str(store), str(tmp_path / "m.zarr"), "--workspace", "w1"]) == 0


@pytest.mark.parametrize(
    ("column", "flag"),
    [
        (pd.Categorical(["a", None]), "--fill-missing"),
        (pd.array([1, None], dtype="Int64"), "--fill-missing"),
    ],
    ids=["categorical", "nullable-int"],
)
def test_a_table_refusal_at_a_shell_names_the_flag(column: object, flag: str) -> None:
    from cytearc_vfs.format.option_names import command_line_names
    from cytearc_vfs.format.table_names import CELL_DATA
    from cytearc_vfs.format.tables import prepare_table

    frame = pd.DataFrame({"c": column}, index=["x", "y"])
    with pytest.raises(ValueError, match="fill_missing=True to store") as in_python:
        prepare_table(frame, table=CELL_DATA)
    assert "--fill-missing" not in str(in_python.value)
    with command_line_names(), pytest.raises(ValueError) as at_shell:
        prepare_table(frame, table=CELL_DATA)
    assert f"pass {flag} to store" in str(at_shell.value)
    assert "fill_missing" not in str(at_shell.value)
