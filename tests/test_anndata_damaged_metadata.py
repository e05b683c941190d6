"""AnnData Zarr stores whose metadata is damaged: marked by ``anndata ls``, refused by
name (exit 3, "damaged", as docs/cli.md says) by ``ls``, ``write`` and ``composite``.

Damages: a metadata document cut short (an interrupted copy), a sparse group
without ``indptr``, a sparse ``shape`` attribute that is not two non-negative
integers or disagrees with the length of ``indptr`` (from that array's metadata:
``ls`` reads no chunk). Before, ``ls`` exited 2 with the JSON parser's words alone
("Unterminated string starting at: line 2 column 3"), or listed the damaged
element as sound (exit 0); a composite took a ``shape`` of ``[3.5, 4]`` or
``["3", "4"]`` as ``int()`` made it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from cli_harness import run_main
from cytearc_vfs_adapters.anndata.errors import MalformedElementError

import cytearc_vfs as cv
from cytearc_vfs.errors import RecordShapeError
from cytearc_vfs.read.anndata_elements import DAMAGED_ANNDATA_REMEDY

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

Damage = Callable[[Path, int], None]


def small() -> ad.AnnData:
    counts = sp.csr_matrix(np.arange(12, dtype=np.float32).reshape(3, 4))
    data = ad.AnnData(X=counts, layers={"counts": counts.copy()})
    data.obs_names = ["c0", "c1", "c2"]
    data.var_names = ["g0", "g1", "g2", "g3"]
    data.obs["n"] = [1, 2, 3]
    return data


def cut_short(path: str, *, array: bool = False) -> Damage:
    """The node's main document, cut after 10 bytes (as an interrupted copy leaves it)."""

    def damage(store: Path, zarr_format: int) -> None:
        name = "zarr.json" if zarr_format == 3 else (".zarray" if array else ".zattrs")
        document = store / path / name
        document.write_bytes(document.read_bytes()[:10])

    return damage


def removed(path: str) -> Damage:
    def damage(store: Path, zarr_format: int) -> None:
        shutil.rmtree(store / path)

    return damage


def shape(value: object, element: str = "X") -> Damage:
    def damage(store: Path, zarr_format: int) -> None:
        zarr.open_group(store, mode="r+")[element].attrs["shape"] = value

    return damage


#: damage -> (the element ls marks, what its note says)
ELEMENT_DAMAGES: dict[str, tuple[Damage, str, str]] = {
    "X document cut short": (
        cut_short("X"),
        "/X",
        r"the metadata document of element X cannot be read \(JSONDecodeError: ",
    ),
    "X/data document cut short": (
        cut_short("X/data", array=True),
        "/X",
        r"the metadata document of element X/data cannot be read \(JSONDecodeError",
    ),
    "a column's document cut short": (
        cut_short("obs/n", array=True),
        "/obs/n",
        r"the metadata document of element obs/n cannot be read",
    ),
    "no indptr": (removed("X/indptr"), "/X", r"needs an array 'indptr', which is missing"),
    "a layer without indptr": (
        removed("layers/counts/indptr"),
        "/layers/counts",
        r"element layers/counts: a csr_matrix needs an array 'indptr'",
    ),
    "shape of 3": (shape([3, 4, 5]), "/X", r"'shape' attribute of two non-negative integers"),
    "negative shape": (shape([-3, 4]), "/X", r"found \[-3, 4\]"),
    "fractional shape": (shape([3.5, 4]), "/X", r"found \[3\.5, 4\]"),
    "text shape": (shape(["3", "4"]), "/X", r"found \['3', '4'\]"),
    "boolean shape": (shape([True, 4]), "/X", r"found \[True, 4\]"),
    "shape against indptr": (
        shape([5, 4]),
        "/X",
        r"indptr has shape \(4,\), but a csr_matrix of shape \(5, 4\) needs \(6,\)",
    ),
    "a layer's shape against indptr": (
        shape([2, 4], "layers/counts"),
        "/layers/counts",
        r"indptr has shape \(4,\), but a csr_matrix of shape \(2, 4\) needs \(3,\)",
    ),
}


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("damage", list(ELEMENT_DAMAGES))
def test_ls_marks_the_damaged_element_and_exits_3(
    tmp_path: Path, zarr_format: int, damage: str
) -> None:
    harm, element, said = ELEMENT_DAMAGES[damage]
    store = write_anndata_zarr(small(), tmp_path / "a.zarr", zarr_format)
    harm(store, zarr_format)
    listed = run_main("anndata", "ls", str(store), "--json")
    assert listed.returncode == 3, listed.stderr
    answer = json.loads(listed.stdout)
    assert answer["damagedElements"] == 1
    [marked] = [entry for entry in answer["elements"] if entry["damaged"]]
    assert marked["path"] == element
    # a location named is the one given, not the store's own name (file:///...)
    assert marked["note"].startswith("damaged: ") and "file:" not in marked["note"]
    assert re.search(said, marked["note"]), marked["note"]
    # the rest is listed, in order
    paths = [entry["path"] for entry in answer["elements"]]
    assert paths == sorted(paths, key=lambda p: p.split("/")) and "/var" in paths
    text = run_main("anndata", "ls", str(store))
    assert text.returncode == 3
    assert "1 damaged" in text.stdout and f"{store} is damaged (1 element marked" in text.stdout


def test_a_sound_container_lists_as_before(tmp_path: Path) -> None:
    store = write_anndata_zarr(small(), tmp_path / "a.zarr", 3)
    listed = run_main("anndata", "ls", str(store), "--json")
    assert listed.returncode == 0, listed.stderr
    answer = json.loads(listed.stdout)
    assert answer["damagedElements"] == 0
    assert not any(entry["damaged"] for entry in answer["elements"])


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (cut_short(""), r"the metadata document of its root cannot be read"),
        (cut_short("obs"), r"the metadata document of element obs cannot be read"),
    ],
)
def test_ls_of_a_container_whose_tables_cannot_be_opened_exits_3(
    tmp_path: Path, zarr_format: int, damage: Damage, said: str
) -> None:
    """Without a readable root or obs there is no listing: the document is named."""
    store = write_anndata_zarr(small(), tmp_path / "a.zarr", zarr_format)
    damage(store, zarr_format)
    listed = run_main("anndata", "ls", str(store), "--json")
    assert listed.returncode == 3, listed.stderr
    answer = json.loads(listed.stdout)
    assert answer["category"] == "damaged"
    assert re.search(said, answer["message"]) and "the container is damaged" in answer["message"]


def test_a_missing_index_is_named_with_its_container(tmp_path: Path) -> None:
    """The shape is read from the obs index: its fault named the element alone
    ("element obs: the index '_index' named in its attributes is missing")."""
    store = write_anndata_zarr(small(), tmp_path / "a.zarr", 3)
    shutil.rmtree(store / "obs" / "_index")
    listed = run_main("anndata", "ls", str(store), "--json")
    assert listed.returncode == 3, listed.stderr
    message = json.loads(listed.stdout)["message"]
    assert message.startswith(f"{store}: element obs: the index '_index' named in its attr")
    assert "the container is damaged; restore it from a copy" in message


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("X document cut short", r"the metadata document 'X/zarr\.json' cannot be read"),
        ("X/data document cut short", r"the metadata of the array 'X/data' cannot be read"),
        ("no indptr", r"the array 'X/indptr' of the AnnData element 'X' is missing"),
        ("fractional shape", r"'shape' attribute is \[3\.5, 4\], not two non-negative"),
        ("text shape", r"'shape' attribute is \['3', '4'\]"),
        ("negative shape", r"'shape' attribute is \[-3, 4\]"),
    ],
)
def test_a_composite_refuses_the_damaged_source_by_name(
    tmp_path: Path, damage: str, said: str
) -> None:
    """Before: the JSON parser's or zarr's words alone ("No array found in store ..."),
    exit 2; a fractional or text shape was composed as int() made it."""
    harm = ELEMENT_DAMAGES[damage][0]
    store = write_anndata_zarr(small(), tmp_path / "a.zarr", 3)
    harm(store, 3)
    with pytest.raises(RecordShapeError, match=said):
        cv.create_composite(tmp_path / "c.zarr", {"s": store})
    assert not (tmp_path / "c.zarr").exists()
    done = run_main("composite", str(tmp_path / "c.zarr"), f"s={store}")
    assert done.returncode == 3, done.stderr
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize("damage", ["X document cut short", "no indptr", "fractional shape"])
def test_write_refuses_the_damaged_container_as_damaged(tmp_path: Path, damage: str) -> None:
    harm = ELEMENT_DAMAGES[damage][0]
    store = write_anndata_zarr(small(), tmp_path / "a.zarr", 3)
    harm(store, 3)
    done = run_main("write", str(store), str(tmp_path / "w.zarr"), "--json")
    assert done.returncode == 3, done.stdout
    refusal = json.loads(done.stdout)
    assert refusal["error"] == "MalformedElementError"
    # named by the location as given, not the store's own name (file:///...)
    assert refusal["message"].startswith(f"{store}: "), refusal["message"]
    assert not (tmp_path / "w.zarr").exists()


@pytest.mark.parametrize(
    ("damage", "document", "array"),
    [
        ("X document cut short", "the metadata document 'X/zarr.json'", "element X"),
        ("X/data document cut short", "the metadata of the array 'X/data'", "element X/data"),
    ],
)
def test_a_composite_and_the_element_layer_say_one_refusal(
    tmp_path: Path, damage: str, document: str, array: str
) -> None:
    """One builder (cytearc_vfs.read.anndata_elements.damaged_metadata) for both layers,
    each keeping its class: a composite's source said "Restore it from a copy, or write it
    again with anndata" where the container said "restore it from a copy or download it
    again, or write it again with anndata", from a copy of the same code."""
    store = write_anndata_zarr(small(), tmp_path / "a.zarr", 3)
    ELEMENT_DAMAGES[damage][0](store, 3)
    parsed = r" cannot be read \(JSONDecodeError: [^()]*\(char \d+\)\): "
    with pytest.raises(RecordShapeError) as composite:
        cv.create_composite(tmp_path / "c.zarr", {"s": store})
    assert not isinstance(composite.value, MalformedElementError)
    assert re.fullmatch(
        rf"source 's' at {re.escape(str(store))}: {re.escape(document)}{parsed}the source is "
        rf"damaged; {re.escape(DAMAGED_ANNDATA_REMEDY)}, and create the composite again",
        str(composite.value),
    ), str(composite.value)
    with pytest.raises(MalformedElementError) as container:
        cv.write_counts(tmp_path / "w.zarr", store)
    assert re.fullmatch(
        rf"{re.escape(str(store))}: the metadata document of {array}{parsed}the container "
        rf"is damaged; {re.escape(DAMAGED_ANNDATA_REMEDY)}",
        str(container.value),
    ), str(container.value)
    assert not (tmp_path / "c.zarr").exists() and not (tmp_path / "w.zarr").exists()
