"""The docs' code blocks run as written (quickstart, cli, artifacts, mount, anndata,
anndata-out, arrays, serve, mount-fs, data, README)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from unpublished_groups import killed_producer

DOCS = Path(__file__).resolve().parent.parent / "docs"


def blocks(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_quickstart_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for code in blocks("quickstart.md", "python"):
        exec(compile(code, "quickstart.md", "exec"), namespace)
    assert (tmp_path / "quickstart.zarr" / "zarr.json").is_file()
    for command in blocks("quickstart.md", "bash")[1].strip().splitlines():
        args = command.split()
        assert args[:2] == ["uv", "run"]
        # the installed entry point, run as uv would run it
        result = subprocess.run(
            [sys.executable, "-m", "cytearc_vfs.cli", *args[3:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            env=os.environ.copy(),
        )
        assert result.returncode == 0, result.stderr


def test_every_doc_link_resolves() -> None:
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+\.md)\)", page.read_text()):
            assert (DOCS / target).is_file(), f"{page.name} links to missing {target}"


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_mount_worked_example_runs_and_shows_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mount.md's worked example, with the recipes and arrays it leaves to the reader:
    every line commented with a Python literal evaluates to that literal."""
    import ast

    import numpy as np

    import cytearc_vfs as cv

    monkeypatch.chdir(tmp_path)
    cv.write_counts("pbmc.zarr", np.arange(12, dtype=np.uint8).reshape(4, 3))
    namespace: dict[str, object] = {
        "cv": cv,  # imported by the page's first block
        "pca_recipe": {"operation": "pca", "parameters": {"dims": 2}, "inputs": {}},
        "umap_recipe": {"operation": "umap", "parameters": {}, "inputs": {}},
        "embedding": np.ones((4, 2)),
        "layout_2d": np.zeros((4, 2)),
    }
    (code,) = re.findall(r"```python\n(.*?)```", _section("mount.md", "## Worked example"), re.S)
    exec(compile(code, "mount.md", "exec"), namespace)
    checked = 0
    for line in code.splitlines():
        expression, _, comment = line.partition("  # ")
        try:
            expected = ast.literal_eval(comment.strip())
        except (ValueError, SyntaxError):
            continue
        assert eval(expression, namespace) == expected, line
        checked += 1
    assert checked == 3
    found = eval('cv.find_artifact(mount, "RNA/artifacts", "pca", pca_recipe)', namespace)
    assert found is not None and found.artifact_id == namespace["art"].artifact_id  # type: ignore[attr-defined]


def _run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``cytearc-vfs ARGS`` as a user types it, run as uv would run the entry point."""
    return subprocess.run(
        [sys.executable, "-m", "cytearc_vfs.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env=os.environ.copy(),
    )


def test_cli_page_examples_print_what_it_shows(tmp_path: Path) -> None:
    """cli.md's shell block runs, and each local example prints the line the page shows."""
    import anndata as ad
    import numpy as np

    import cytearc_vfs as cv

    for command in blocks("cli.md", "bash")[0].strip().splitlines():
        args = command.partition("#")[0].split()
        assert args[0] == "cytearc-vfs"
        args = [("info" if word == "COMMAND" else word) for word in args[1:]]
        assert _run_cli(args, tmp_path).returncode == 0, command
    cv.write_counts(tmp_path / "pbmc.zarr", np.ones((3, 2), dtype=np.uint8))
    # the artifacts `info pbmc.zarr` shows
    for operation, kind in (("pca.a", "pca"), ("pca.b", "pca"), ("leiden", "leiden")):
        _publish(tmp_path / "pbmc.zarr", kind, operation)
    killed_producer(tmp_path / "pbmc.zarr", [("RNA/artifacts", "umap")])
    ad.AnnData(X=np.ones((3, 2), dtype=np.float32)).write_h5ad(tmp_path / "pbmc.h5ad")
    refusals = 0
    for block in blocks("cli.md", "text"):
        lines = block.strip().splitlines()
        if not lines[0].startswith("$ cytearc-vfs ") or "s3://" in block:
            continue
        result = _run_cli(lines[0].split()[2:], tmp_path)
        shown = [line.replace("/data/", f"{tmp_path}/") for line in lines[1:]]
        if lines[0] == "$ cytearc-vfs info pbmc.zarr":
            assert result.stdout.splitlines() == shown, result.stdout
            assert result.returncode == 0
            continue
        assert result.stderr.splitlines() == shown, lines[0]
        assert result.returncode == 2
        refusals += 1
    assert refusals == 2


def _publish(location: Any, kind: str, operation: str) -> None:
    import numpy as np

    import cytearc_vfs as cv

    provenance = {"operation": operation, "parameters": {}, "inputs": {}}
    with cv.publish_artifact(location, "RNA/artifacts", kind, provenance=provenance) as art:
        art.write_array("data", np.ones(3))


def test_cli_page_mount_info_example_shows_what_info_prints(tmp_path: Path) -> None:
    """The lines cli.md shows of `info` on a mount: a source artifact, two of the
    target's and a group its producer left unpublished."""
    import numpy as np

    import cytearc_vfs as cv

    cv.write_counts(tmp_path / "src.zarr", np.ones((3, 2), dtype=np.uint8))
    _publish(tmp_path / "src.zarr", "pca", "pca")
    cv.mount_datastore(tmp_path / "src.zarr", tmp_path / "mine.zarr").close()
    mount = cv.open_store(tmp_path / "mine.zarr", mode="r+")
    for kind in ("pca", "umap"):
        _publish(mount, kind, f"{kind}.mine")
    mount.close()
    killed_producer(tmp_path / "mine.zarr", [("RNA/artifacts", "umap")])
    (shown,) = [
        block
        for block in blocks("cli.md", "text")
        if block.startswith("  artifacts (cytearc-vfs artifacts mine.zarr")
    ]
    result = _run_cli(["info", "mine.zarr"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(shown), result.stdout


def test_artifacts_page_example_runs_and_shows_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """artifacts.md's example runs as written, and each line commented with a Python
    literal evaluates to that literal."""
    import ast

    monkeypatch.chdir(tmp_path)
    code, unpublished = blocks("artifacts.md", "python")
    namespace: dict[str, object] = {}
    exec(compile(code, "artifacts.md", "exec"), namespace)
    exec(compile(unpublished, "artifacts.md", "exec"), namespace)
    assert namespace["groups"] == []  # the example's producer published
    checked = 0
    for line in code.splitlines():
        expression, _, comment = line.partition("  # ")
        try:
            expected = ast.literal_eval(comment.strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(expected, str) and "<" in expected:
            continue  # a placeholder such as '<id>', checked below
        assert eval(expression, namespace) == expected, line
        checked += 1
    assert checked == 1
    art = namespace["art"]
    assert len(art.artifact_id) == 64  # type: ignore[attr-defined]
    assert art.path == f"RNA/artifacts/normalized/{art.artifact_id}"  # type: ignore[attr-defined]


def test_anndata_page_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """anndata.md's first block runs as written on the files it names: an AnnData Zarr
    store and .h5ad files with a layer, raw counts and uns."""
    import warnings

    import anndata as ad
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp

    monkeypatch.chdir(tmp_path)
    x = sp.random(60, 80, density=0.3, format="csr", random_state=0, dtype=np.float32)
    x.data = np.ceil(x.data * 9)
    data = ad.AnnData(
        X=x,
        obs=pd.DataFrame(
            {"cell_type": pd.Categorical(["B", "T"] * 30)}, index=[f"c{i}" for i in range(60)]
        ),
        var=pd.DataFrame(index=[f"g{i}" for i in range(80)]),
        layers={"spliced": x.copy()},
    )
    data.uns["neighbors"] = {"params": {"n_neighbors": 15}}
    data.raw = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data.write_zarr("pbmc.zarr")
        data.write_h5ad("pbmc.h5ad")
        data.write_h5ad("cxg.h5ad")
    code = blocks("anndata.md", "python")[0]
    namespace: dict[str, object] = {}
    exec(compile(code, "anndata.md", "exec"), namespace)
    for written in ("pbmc_cytearc.zarr", "spliced.zarr", "counts.zarr"):
        assert (tmp_path / written / "zarr.json").is_file()


def test_anndata_ls_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    """anndata.md's `anndata ls` example, on the anndata 0.7 layout it describes: each
    line shown (up to the '...') is what the command prints."""
    sys.path.insert(0, str(Path(__file__).parent))
    from anndata_fixtures import write_legacy

    (block,) = [b for b in blocks("anndata.md", "console") if "anndata ls" in b]
    command, *shown = block.strip().splitlines()
    shown = [line.replace("/data/", f"{tmp_path}/") for line in shown if line.strip() != "..."]
    write_legacy(tmp_path / "old.zarr", 2)
    args = command.removeprefix("$ cytearc-vfs ").replace("/data/", f"{tmp_path}/").split()
    result = _run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    assert printed[0] == shown[0]
    for line in shown[1:]:
        assert line in printed, line


def test_arrays_page_example_runs_and_shows_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """arrays.md's example runs as written; the line commented ``# True`` is true."""
    monkeypatch.chdir(tmp_path)
    (code,) = blocks("arrays.md", "python")
    namespace: dict[str, object] = {}
    exec(compile(code, "arrays.md", "exec"), namespace)
    (last,) = [line for line in code.splitlines() if line.endswith("  # True")]
    assert bool(eval(last.partition("  # ")[0], namespace))
    assert namespace["a"].shape == (2, 180, 360)  # type: ignore[attr-defined]


def test_anndata_out_view_and_export_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """anndata-out.md's `anndata_view` block and `cytearc-vfs export` commands run as
    written, on a composite named as the page names it."""
    import warnings

    import numpy as np
    import pandas as pd

    import cytearc_vfs as cv

    monkeypatch.chdir(tmp_path)
    genes = ["CD3E", "MS4A1"] + [f"g{i}" for i in range(8)]
    counts = np.arange(1200 * 10, dtype=np.uint32).reshape(1200, 10) % 7
    cv.write_counts("pbmc.zarr", counts, features=pd.DataFrame(index=genes))
    cv.create_composite("merged.zarr", {"a": "pbmc.zarr"}).close()
    (code,) = [b for b in blocks("anndata-out.md", "python") if "anndata_view(" in b]
    namespace: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's own notices about read_lazy
        exec(compile(code, "anndata-out.md", "exec"), namespace)
    lazy = namespace["lazy"]
    assert np.array_equal(lazy[:1000, ["CD3E", "MS4A1"]].X.compute(), counts[:1000, :2])  # type: ignore[index]
    namespace["view"].close()  # type: ignore[attr-defined]
    (commands,) = [b for b in blocks("anndata-out.md", "bash") if "cytearc-vfs export" in b]
    for command in commands.strip().splitlines():
        result = _run_cli(command.split()[1:], tmp_path)
        assert result.returncode == 0, (command, result.stderr)
    assert (tmp_path / "pbmc.h5ad").is_file() and (tmp_path / "merged_anndata.zarr").is_dir()


def _composite_of_two(tmp_path: Path, rows: tuple[int, int]) -> tuple[Path, object]:
    """A composite of two small sources with ``rows`` cells each, and its counts as
    zarr-python reads them in process."""
    import numpy as np
    import zarr

    import cytearc_vfs as cv

    rng = np.random.default_rng(0)
    sources = []
    for name, n in zip("ab", rows, strict=True):
        cv.write_counts(tmp_path / f"{name}.zarr", rng.integers(0, 9, (n, 3), dtype=np.uint8))
        sources.append(tmp_path / f"{name}.zarr")
    composite = tmp_path / "atlas.zarr"
    cv.create_composite(composite, sources)
    expected = zarr.open_array(cv.open_store(composite), path="RNA/counts", mode="r")[:]
    return composite, expected


@contextmanager
def _running(args: list[str], first: str, *, stream: str = "stdout") -> Iterator[str]:
    """``cytearc-vfs ARGS`` running until the block ends (then stopped as Ctrl-C stops
    it); yields its first line on ``stream``, which must start with ``first``."""
    from cli_harness import cli_executable, readable, stop_process

    process = subprocess.Popen(
        [cli_executable(), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        said = getattr(process, stream)
        line = said.readline() if readable(said, 120) else ""
        if not line.startswith(first):
            stop_process(process)
            raise AssertionError(f"{args[0]} did not start: {line}{process.stderr.read()}")  # type: ignore[union-attr]
        yield line.strip()
    finally:
        stop_process(process, signal.SIGINT)
        for stream_ in (process.stdout, process.stderr):
            if stream_ is not None:
                stream_.close()


def test_serve_page_client_blocks_read_a_served_composite(tmp_path: Path) -> None:
    """serve.md's Python clients (tensorstore over http, zarr-python over obstore, and
    the FsspecStore alternative its comment gives) read a composite served by the
    command, with the page's URL replaced by the one the server printed."""
    import numpy as np
    import zarr

    composite, expected = _composite_of_two(tmp_path, (1200, 1000))
    with _running(["serve", str(composite)], "serving http://") as line:
        url = line.removeprefix("serving ")
        codes = blocks("serve.md", "python")
        assert len(codes) == 2 and all("http://127.0.0.1:8731/" in code for code in codes)
        tensorstore_block, zarr_block = (
            code.replace("http://127.0.0.1:8731/", url) for code in codes
        )
        namespace: dict[str, object] = {}
        exec(compile(tensorstore_block, "serve.md", "exec"), namespace)
        np.testing.assert_array_equal(namespace["band"], expected[0:2000])  # type: ignore[index]
        namespace = {}
        exec(compile(zarr_block, "serve.md", "exec"), namespace)
        np.testing.assert_array_equal(namespace["counts"][:], expected)  # type: ignore[index]
        alternative = zarr_block.split("# or: ")[1].strip()
        store = eval(alternative, {"zarr": zarr})
        np.testing.assert_array_equal(
            zarr.open_array(store, path="RNA/counts", mode="r")[:], expected
        )


def test_mount_fs_page_python_blocks_read_the_mounted_composite(tmp_path: Path) -> None:
    """mount-fs.md's Python readers (zarr-python, the zarrs pipeline, tensorstore) read
    a composite mounted by the command, with /mnt/atlas replaced by the mount point."""
    import numpy as np
    from cytearc_vfs_adapters.fuse.mounting import check_fuse

    try:
        check_fuse()
    except (ImportError, OSError) as exc:
        pytest.skip(f"FUSE does not work here: {exc}")
    # the zarrs block reads cell 40,000
    composite, expected = _composite_of_two(tmp_path, (30_000, 12_000))
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with _running(["mount-fs", str(composite), str(mountpoint)], "mounted "):
        codes = blocks("mount-fs.md", "python")
        assert len(codes) == 3 and all("/mnt/atlas" in code for code in codes)
        plain, zarrs, tensorstore = (code.replace("/mnt/atlas", str(mountpoint)) for code in codes)
        namespace: dict[str, object] = {}
        exec(compile(plain, "mount-fs.md", "exec"), namespace)
        np.testing.assert_array_equal(namespace["block"], expected[1000:3000])
        assert len(namespace["genes"]) == expected.shape[1]  # type: ignore[arg-type]
        namespace = {}
        exec(compile(zarrs, "mount-fs.md", "exec"), namespace)
        np.testing.assert_array_equal(namespace["rows"], expected[[5, 17, 40_000], :])
        namespace = {}
        exec(compile(tensorstore, "mount-fs.md", "exec"), namespace)
        np.testing.assert_array_equal(namespace["band"], expected[1000:3000])


def test_readme_python_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README.md's example runs as written, given the AnnData it leaves to the reader."""
    import anndata as ad
    import numpy as np

    monkeypatch.chdir(tmp_path)
    (code,) = re.findall(r"```python\n(.*?)```", (DOCS.parent / "README.md").read_text(), re.S)
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    namespace: dict[str, object] = {"adata": ad.AnnData(X=values)}
    exec(compile(code, "README.md", "exec"), namespace)
    np.testing.assert_array_equal(namespace["counts"][:], values)  # type: ignore[index]


def test_data_page_python_block_runs_and_returns_what_its_comments_say() -> None:
    """data.md's example runs as written: wu2020 is float32 CSR counts, fetch gives the
    cached file, available() names all five data sets."""
    import scipy.sparse as sp

    (code,) = blocks("data.md", "python")
    namespace: dict[str, object] = {}
    exec(compile(code, "data.md", "exec"), namespace)
    adata = namespace["adata"]
    assert sp.issparse(adata.X) and adata.X.format == "csr" and adata.X.dtype == "float32"  # type: ignore[attr-defined]
    assert Path(namespace["path"]).is_file()  # type: ignore[arg-type]
    realdata = namespace["realdata"]
    assert len(realdata.available()) == 5  # type: ignore[attr-defined]


def test_serve_page_zarrita_block_reads_a_served_composite(tmp_path: Path) -> None:
    """serve.md's JavaScript client (zarrita under node) reads a served composite's
    band, with the page's URL replaced by the one the server printed."""
    import json
    import shutil

    import numpy as np

    modules = Path(__file__).resolve().parent / "js" / "node_modules"
    if shutil.which("node") is None or not (modules / "zarrita" / "package.json").is_file():
        pytest.skip("node or zarrita is not installed (npm ci --prefix tests/js; .ci/run does)")
    composite, expected = _composite_of_two(tmp_path, (1200, 1000))
    (code,) = blocks("serve.md", "js")
    assert "http://127.0.0.1:8731/" in code
    (tmp_path / "node_modules").symlink_to(modules)  # node resolves imports beside the script
    script = tmp_path / "client.mjs"
    with _running(["serve", str(composite)], "serving http://") as line:
        script.write_text(
            code.replace("http://127.0.0.1:8731/", line.removeprefix("serving "))
            + "console.log(JSON.stringify({shape: band.shape, data: Array.from(band.data)}));\n"
        )
        result = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    band = json.loads(result.stdout)
    np.testing.assert_array_equal(np.reshape(band["data"], band["shape"]), expected[0:2000])
