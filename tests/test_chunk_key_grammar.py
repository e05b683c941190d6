"""A store that computes its chunks answers exactly the chunk keys it lists.

zarr writes a chunk index in one spelling only: ASCII digits without leading
zeros. A composite once read ``c/00/0`` and ``c/\\u0660/0`` (``int`` takes an
Arabic-Indic zero) as chunk ``c/0/0`` and served its bytes, and ``cytearc-vfs
serve`` answered 200 for them, while ``list_dir`` listed only ``0``. Every
store here reads chunk keys through the one parser,
:meth:`cytearc_vfs.format.chunk_keys.ChunkKeys.decode_in`: any other spelling
(leading zeros, signs, other digits, spaces, underscores), a position outside
the grid, or another number of dimensions is no key (``get`` -> ``None``,
``exists`` -> ``False``, ``getsize`` -> ``FileNotFoundError``, HTTP 404),
never another chunk.

Stores: a composite (``counts`` and ``countsT``), a mount (of an ordinary
store: a composite cannot be mounted), AnnData views of the composite and of
an ordinary store (their computed ``X``, ``obs``, ``var``
arrays), and a composite served over HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock
from urllib.parse import quote

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from cytearc_vfs_adapters.serve import StoreServer
from hypothesis import assume, given
from hypothesis import strategies as st
from test_serve import request
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import cytearc_vfs as cv
import cytearc_vfs.composite.create as composite_create
from cytearc_vfs.format.chunk_keys import ChunkKeys
from cytearc_vfs.format.store_keys import key_problem

PROTO = default_buffer_prototype()
# a chunk key: an array's path, then ``c`` and its grid position (none for 0-d)
CHUNK_KEY = re.compile(r"(?P<array>.+/)?c(?P<coords>(/[0-9]+)*)")
ARABIC_INDIC = str.maketrans(
    "0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669"
)
FULLWIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))


@dataclass(frozen=True)
class Stores:
    """The stores under test, by name, and every key each lists."""

    stores: dict[str, Store]
    listed: dict[str, frozenset[str]]
    computed: dict[str, frozenset[str]]
    """The arrays whose chunks each store computes (the others it reads through)."""
    server: StoreServer
    """Serves ``stores["composite"]``."""


def _keys(store: Store) -> frozenset[str]:
    async def collect() -> frozenset[str]:
        return frozenset([key async for key in store.list()])

    return sync(collect())


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    root = tmp_path_factory.mktemp("chunk_keys")
    rng = np.random.default_rng(7)
    sources = {}
    for name, n_cells in (("a", 14), ("b", 9)):
        values = rng.integers(0, 4, (n_cells, 5)).astype(np.uint8)
        path = root / f"{name}.zarr"
        cv.write_counts(
            path,
            sp.csr_matrix(values),
            cells=pd.DataFrame(index=[f"{name}{i}" for i in range(n_cells)]),
            features=pd.DataFrame(index=[f"g{j}" for j in range(5)]),
        )
        sources[name] = path
    composite_path = root / "composite.zarr"
    # 2 rows a computed chunk: counts has 12 row chunks (two-digit indices), countsT 5
    with mock.patch.object(composite_create, "VIRTUAL_CHUNK_BYTES", 10):
        cv.create_composite(composite_path, sources)
    # a composite cannot be mounted: the mount reads keys through to a source
    cv.mount_datastore(sources["a"], root / "mount.zarr")
    stores: dict[str, Store] = {
        "composite": cv.open_store(composite_path),
        "mount": cv.open_store(root / "mount.zarr"),
        "view_of_composite": cv.anndata_view(composite_path),
        "view_of_source": cv.anndata_view(sources["a"]),
    }
    server = StoreServer.start(stores["composite"])
    try:
        listed = {name: _keys(store) for name, store in stores.items()}
        computed = {
            "composite": frozenset({"RNA/counts", "RNA/countsT"}),
            "mount": frozenset(),  # a mount computes nothing
            "view_of_composite": _computed_arrays(stores["view_of_composite"]),
            "view_of_source": _computed_arrays(stores["view_of_source"]),
        }
        yield Stores(stores, listed, computed, server)
    finally:
        server.close()
        for store in stores.values():
            store.close()


def _computed_arrays(view: Store) -> frozenset[str]:
    """The arrays of an AnnData view that it computes (its layout is private)."""
    layout = sync(view._layout())  # type: ignore[attr-defined]
    return frozenset(
        path for path, array in layout.arrays.items() if type(array).__name__ == "_Computed"
    )


def _array_of(key: str) -> str:
    match = CHUNK_KEY.fullmatch(key)
    assert match is not None, key
    return (match.group("array") or "").removesuffix("/")


def _chunk_keys(keys: frozenset[str]) -> list[str]:
    return sorted(key for key in keys if CHUNK_KEY.fullmatch(key))


def _answers(store: Store, key: str) -> tuple[bytes | None, bool]:
    value = sync(store.get(key, PROTO))
    return (None if value is None else value.to_bytes()), sync(store.exists(key))


def _is_no_key(store: Store, key: str, *, computed: bool) -> None:
    value, exists = _answers(store, key)
    assert value is None, f"{key!r} is not listed but get returned {len(value)} bytes"
    assert not exists, f"{key!r} is not listed but exists says so"
    if computed:
        # (a stored array's getsize is zarr's LocalStore's: it stats a directory
        # or raises NotADirectoryError; not a computed chunk, not checked here)
        with pytest.raises(FileNotFoundError):
            sync(store.getsize(key))


def test_every_store_lists_computed_chunks(stores: Stores) -> None:
    """The fixture's stores list chunk keys with two-digit indices and 0-d keys."""
    composite = _chunk_keys(stores.listed["composite"])
    assert "RNA/counts/c/11/0" in composite and "RNA/counts/c/12/0" not in composite
    assert "RNA/countsT/c/4/0" in composite
    for name in ("mount", "view_of_composite", "view_of_source"):
        assert _chunk_keys(stores.listed[name]), name
    # a listed key answers, with the size getsize gives
    for name, store in stores.stores.items():
        for key in _chunk_keys(stores.listed[name])[:3]:
            value, exists = _answers(store, key)
            assert value is not None and exists, (name, key)
            assert sync(store.getsize(key)) == len(value), (name, key)


def _respellings(key: str) -> list[str]:
    """Keys that name the same position as chunk ``key`` in a spelling zarr never
    writes, or another rank or an out-of-grid position."""
    match = CHUNK_KEY.fullmatch(key)
    assert match is not None
    head = (match.group("array") or "") + "c"
    coords = match.group("coords").split("/")[1:]
    out = [f"{head}/{'/'.join([*coords, '0'])}", f"{head}/99999" + "/0" * max(0, len(coords) - 1)]
    if coords:
        out.append(f"{head}/{'/'.join(coords[:-1])}" if len(coords) > 1 else head)
    for at, part in enumerate(coords):
        spellings = [
            "0" + part,
            "+" + part,
            " " + part,
            part + " ",
            part.translate(ARABIC_INDIC),
            part.translate(FULLWIDTH),
            "-" + part if part == "0" else part,
        ]
        if len(part) > 1:
            spellings.append(f"{part[0]}_{part[1:]}")
        for spelling in spellings:
            changed = [*coords]
            changed[at] = spelling
            out.append(f"{head}/{'/'.join(changed)}")
    return [k for k in dict.fromkeys(out) if k != key]


@pytest.mark.parametrize("name", ["composite", "mount", "view_of_composite", "view_of_source"])
def test_respelled_chunk_keys_are_no_keys(stores: Stores, name: str) -> None:
    store, listed, computed = stores.stores[name], stores.listed[name], stores.computed[name]
    # per array: its first, a middle and its last chunk
    by_array: dict[str, list[str]] = {}
    for key in _chunk_keys(listed):
        by_array.setdefault(_array_of(key), []).append(key)
    tried = 0
    for array, keys in by_array.items():
        for key in {keys[0], keys[len(keys) // 2], keys[-1]}:
            for other in _respellings(key):
                if other in listed or key_problem(other) is not None:
                    continue
                _is_no_key(store, other, computed=array in computed)
                tried += 1
    assert tried > 20
    assert not computed or computed <= set(by_array), "every computed array lists chunks"


@pytest.mark.parametrize("key", ["RNA/counts/c/00/0", "RNA/counts/c/\u0660/0"])
def test_the_audited_keys(stores: Stores, key: str) -> None:
    """The audit's keys: no key in the composite, nor over HTTP."""
    _is_no_key(stores.stores["composite"], key, computed=True)
    assert "RNA/counts/c/0/0" in stores.listed["composite"]
    for method in ("GET", "HEAD"):
        status, _, _ = request(stores.server.url, method, "/" + quote(key))
        assert status == 404, (method, key, status)
    status, _, body = request(stores.server.url, "GET", "/RNA/counts/c/0/0")
    assert status == 200 and body == _answers(stores.stores["composite"], "RNA/counts/c/0/0")[0]


# A component: characters that int() or a careless parser may take for digits
COMPONENT = st.text(
    alphabet=st.sampled_from([*"0123456789+-_ ", "\u0660", "\u0661", "\uff11", "\u00b9"]),
    min_size=1,
    max_size=4,
)


@given(data=st.data())
def test_any_spelling_answers_only_when_listed(stores: Stores, data: st.DataObject) -> None:
    """A key made of a listed chunk key's array and drawn components: it answers
    exactly when it is listed, and then with the listed key's bytes."""
    name = data.draw(st.sampled_from(sorted(stores.stores)), label="store")
    store, listed = stores.stores[name], stores.listed[name]
    key = data.draw(st.sampled_from(_chunk_keys(listed)), label="listed key")
    match = CHUNK_KEY.fullmatch(key)
    assert match is not None
    rank = len(match.group("coords").split("/")) - 1
    parts = data.draw(st.lists(COMPONENT, min_size=0, max_size=rank + 1), label="components")
    other = "/".join([(match.group("array") or "") + "c", *parts])
    assume(key_problem(other) is None)
    if other in listed:
        value, exists = _answers(store, other)
        assert value is not None and exists
    else:
        _is_no_key(store, other, computed=_array_of(key) in stores.computed[name])


def test_one_parser_reads_every_encoding() -> None:
    """The shared parser: zarr's own spelling only, in both encodings."""
    default, v2 = ChunkKeys("default", "/"), ChunkKeys("v2", ".")
    assert default.decode_in("c/3/0", (4, 1)) == (3, 0)
    assert v2.decode_in("3.0", (4, 1)) == (3, 0)
    for key in ("c/03/0", "c/3/0/0", "c/3", "c/4/0", "c/3/1", "c/+3/0", "c/3 /0", "c/\u0663/0"):
        assert default.decode_in(key, (4, 1)) is None, key
    for key in ("03.0", "3.0.0", "4.0", "+3.0", "\u0663.0", "3"):
        assert v2.decode_in(key, (4, 1)) is None, key
