"""One refusal, two readers: the flag at a shell, the keyword in Python, never both.

Before, some remedies named both at once, whoever read them:
``source_layers={'a': 'raw/X'} (command line: --layer a=raw/X)``, ``(workspace in
Python, --workspace on the command line)``. Each is now written by
``format/option_names`` in the form its reader types. The command line runs in
a pseudo-terminal as a person runs it (tests/cli_harness.py) or, where the
process itself is not what is tested, in this process.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from anndata_files import write_anndata_zarr
from cli_harness import run_in_terminal, run_main
from conftest import realistic_counts
from test_anndata_raw_counts import with_raw
from test_anndata_sources import GENES, adata
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.errors import UnsupportedSourceError
from cytearc_vfs.format.option_names import (
    Placeholder,
    command_line_names,
    option_given,
    source_option_given,
)
from cytearc_vfs.read.anndata_elements import MissingElementError, matrix_element

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

#: words only a Python caller types, and only a shell user
PYTHON_ONLY = ("source_layers", "source_workspaces", "workspace=", "assay=", "command line")
SHELL_ONLY = ("--layer", "--workspace", "--assay")


def shell_form(message: str) -> None:
    assert not any(word in message for word in PYTHON_ONLY), message


def python_form(message: str) -> None:
    assert not any(word in message for word in (*SHELL_ONLY, "command line")), message


def refusal(args: list[str]) -> str:
    """The one error line of ``cytearc-vfs ARGS`` (exit 2), run in this process."""
    done = run_main(*args, "--json")
    assert done.returncode == 2, done.stderr
    return str(json.loads(done.stdout)["message"])


def test_a_missing_layer_of_a_composite_source(tmp_path: Path) -> None:
    source = write_anndata_zarr(adata(30, GENES[:10], "a", seed=1), tmp_path / "a.zarr", 3)
    at_shell = run_in_terminal(
        ["composite", str(tmp_path / "c.zarr"), f"a={source}", "--layer", "a=nope"]
    )
    assert at_shell.returncode == 2, at_shell.output
    assert "Name a layer with --layer a=LAYER" in at_shell.output
    shell_form(at_shell.output)
    with pytest.raises(UnsupportedSourceError) as raised:
        cv.create_composite(tmp_path / "c.zarr", {"a": source}, source_layers={"a": "nope"})
    assert "Name a layer with source_layers={'a': LAYER}" in str(raised.value)
    python_form(str(raised.value))


def test_fractional_counts_name_the_raw_counts(tmp_path: Path) -> None:
    source = write_anndata_zarr(with_raw(30, GENES[:10], "a", seed=2), tmp_path / "a.zarr", 3)
    said = refusal(["composite", str(tmp_path / "c.zarr"), f"a={source}"])
    assert "holds its raw counts, with --layer a=raw/X, or import" in said
    shell_form(said)
    with pytest.raises(UnsupportedSourceError) as raised:
        cv.create_composite(tmp_path / "c.zarr", {"a": source})
    assert "holds its raw counts, with source_layers={'a': 'raw/X'}, or import" in str(raised.value)
    python_form(str(raised.value))


def test_a_mount_of_a_store_whose_assays_are_in_workspaces(tmp_path: Path) -> None:
    source = tmp_path / "s.zarr"
    cv.write_counts(source, realistic_counts(20, 8, seed=3), workspace="w1")
    said = refusal(["mount", str(source), str(tmp_path / "m.zarr")])
    assert "name the workspace that holds them, one of 'w1', with --workspace NAME" in said
    shell_form(said)
    with pytest.raises(ValueError) as raised:
        cv.mount_datastore(source, tmp_path / "m.zarr")
    assert "name the workspace that holds them, one of 'w1', with workspace=NAME" in str(
        raised.value
    )
    python_form(str(raised.value))


def test_the_element_layer_names_the_layer_option_in_either_form(tmp_path: Path) -> None:
    """The element parser's own refusal of a missing element (a composite's binding says
    it again with what the store holds; this is the form it says it in)."""
    counts = sp.csr_matrix(np.eye(3, dtype=np.int32))
    import anndata as ad

    source = write_anndata_zarr(ad.AnnData(X=counts), tmp_path / "a.zarr", 3)
    store = LocalStore(source, read_only=True)

    async def documents(key: str) -> Any:
        buffer = await store.get(key, default_buffer_prototype())
        return None if buffer is None else json.loads(buffer.to_bytes())

    def refused() -> str:
        with pytest.raises(MissingElementError) as raised:
            asyncio.run(matrix_element(documents, "layers/nope", 3, where="a.zarr"))
        return str(raised.value)

    said = refused()
    assert "give an existing layer with source_layers={NAME: LAYER}, the raw" in said
    python_form(said)
    with command_line_names():
        said = refused()
    assert "give an existing layer with --layer NAME=LAYER, the raw" in said
    shell_form(said)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    cv.write_counts(root / "store.zarr", realistic_counts(20, 8, seed=4))
    cv.write_counts(root / "ws.zarr", realistic_counts(20, 8, seed=5), workspace="w1")
    write_anndata_zarr(adata(20, GENES[:8], "a", seed=6), root / "anndata.zarr", 3)
    return {"STORE": root / "store.zarr", "WS": root / "ws.zarr", "ANNDATA": root / "anndata.zarr"}


#: refusals whose option names were chosen by an on_command_line() test beside the
#: option table: (command line, its words; Python call, its words)
NAMED_BY_THE_TABLE: dict[str, tuple[str, str, Any, str]] = {
    "a repeated assay of a mount": (
        "mount STORE NEW --assay RNA --assay RNA",
        "--assay names 'RNA' more than once",
        lambda s, new: cv.mount_datastore(s["STORE"], new, assays=["RNA", "RNA"]),
        "assays names 'RNA' more than once",
    ),
    "a layer of a CyteArc source": (
        "composite NEW a=STORE --layer a=counts",
        "--layer a=counts names source 'a', which is a CyteArc store, not an AnnData store; "
        "layers apply to AnnData sources only (pick its assay with --assay NAME)",
        lambda s, new: cv.create_composite(new, {"a": s["STORE"]}, source_layers={"a": "counts"}),
        "source_layers={'a': 'counts'} names source 'a', which is a CyteArc store, not an "
        "AnnData store; layers apply to AnnData sources only (pick its assay with assay=NAME)",
    ),
    "a workspace of an AnnData source": (
        "composite NEW a=ANNDATA --workspace a=w",
        "is an AnnData store, which has no workspaces; leave out --workspace a=w",
        lambda s, new: cv.create_composite(new, {"a": s["ANNDATA"]}, source_workspaces={"a": "w"}),
        "is an AnnData store, which has no workspaces; leave out source_workspaces={'a': 'w'}",
    ),
    "an assay in a workspace, asked of the root": (
        "composite NEW a=WS",
        "'W/A' is assay 'A' of workspace 'W': give --assay A --workspace W (a composite's "
        "source: --workspace NAME=W)",
        lambda s, new: cv.create_composite(new, {"a": s["WS"]}),
        "'W/A' is assay 'A' of workspace 'W': give assay='A', workspace='W' (a composite's "
        "source: source_workspaces={NAME: 'W'})",
    ),
}


@pytest.mark.parametrize("case", list(NAMED_BY_THE_TABLE))
def test_options_are_named_through_the_table(
    sources: dict[str, Path], tmp_path: Path, case: str
) -> None:
    command, at_shell, call, in_python = NAMED_BY_THE_TABLE[case]
    places = {**sources, "NEW": tmp_path / "new.zarr"}
    words = re.sub(r"\b(STORE|WS|ANNDATA|NEW)\b", lambda m: str(places[m[1]]), command)
    said = refusal(words.split())
    assert at_shell in said
    shell_form(said)
    with pytest.raises(ValueError) as raised:
        call(sources, tmp_path / "new.zarr")
    assert in_python in str(raised.value)
    python_form(str(raised.value))
    assert not (tmp_path / "new.zarr").exists()


def test_a_matrix_of_an_encoding_a_composite_does_not_read(tmp_path: Path) -> None:
    """Said 'Pick another layer with source_layers, or convert the source with
    cv.write_counts' at a shell too, which takes neither."""
    import zarr

    source = write_anndata_zarr(adata(20, GENES[:8], "a", seed=7), tmp_path / "a.zarr", 3)
    zarr.open_group(source / "X", mode="r+").attrs["encoding-type"] = "coo_matrix"
    said = refusal(["composite", str(tmp_path / "c.zarr"), f"a={source}"])
    assert "Pick another layer with --layer NAME=LAYER, or convert the source with " in said
    assert said.endswith("cytearc-vfs write")
    shell_form(said)
    with pytest.raises(UnsupportedSourceError) as raised:
        cv.create_composite(tmp_path / "c.zarr", {"a": source})
    assert str(raised.value).endswith(
        "Pick another layer with source_layers={NAME: LAYER}, or convert the source with "
        "cv.write_counts"
    )
    python_form(str(raised.value))


def test_shell_forms_quote_words_a_shell_would_split(tmp_path: Path) -> None:
    """A remedy pasted into a shell must give each value as one word: a layer named
    with a space was shown as ``--layer a=my layer``, which the shell splits."""
    source = write_anndata_zarr(with_raw(30, GENES[:10], "a", seed=2), tmp_path / "a.zarr", 3)
    with command_line_names(), pytest.raises(UnsupportedSourceError) as raised:
        cv.create_composite(tmp_path / "c.zarr", {"a": source}, source_layers={"a": "my layer"})
    said = str(raised.value)
    # what the store holds, then each choice as a shell takes it; placeholders stay bare
    assert "has no 'layers/my layer'; it holds X, raw/X and no layers." in said
    assert "Name a layer with --layer a=LAYER, or --layer a=raw/X for the raw counts" in said
    assert "or leave out --layer a=LAYER to read X" in said
    shell_form(said)
    with command_line_names():
        assert option_given("assay", "my assay") == "--assay 'my assay'"
        assert source_option_given("source_layers", "a", "my layer") == "--layer 'a=my layer'"
        assert source_option_given("source_layers", "a", Placeholder("LAYER")) == "--layer a=LAYER"
    # Python's form quotes by repr, as before
    assert option_given("assay", "my assay") == "assay='my assay'"


def test_import_remedies_quote_a_path_with_a_space(tmp_path: Path) -> None:
    """``cytearc-vfs info`` of an AnnData store in a folder named with a space offers
    ``anndata ls`` and ``write`` commands that work when pasted."""
    folder = tmp_path / "my data"
    folder.mkdir()
    source = write_anndata_zarr(adata(30, GENES[:10], "a", seed=1), folder / "a.zarr", 3)
    said = refusal(["info", str(source)])
    assert f"cytearc-vfs anndata ls '{source}' lists its elements" in said
    assert f"cytearc-vfs write '{source}' OUT.zarr" in said
