"""zarr's ``StoreTests`` for stores that keep the CyteArc contract.

zarr ships :class:`zarr.testing.store.StoreTests` so that store authors can
check their store against the ``Store`` contract. Its tests assume a store
that starts empty, writes anything anywhere and can be cleared. CyteArc's
stores differ in three documented ways, and each class here adapts the
suite to one of them, overriding only the tests that the difference touches
(each override says why in its docstring):

- :class:`CyteArcStoreTests`: every store refuses ``clear()`` (it is
  ``delete_dir("")``, which would delete the published records), with a
  ``ValueError`` naming "deleting the whole store".
- :class:`OverlayStoreTests`: a writable store that is never empty. A
  composite shows its record, mappings and computed count arrays; a mounted
  target shows its ``matrixSource`` record and the source's artifacts. Its
  root ``zarr.json`` carries an immutable record, so it is *reserved*:
  replacing it with arbitrary bytes raises ``PermissionError``. Listings are
  checked as what the test wrote plus what the store held before.
- :class:`ReadOnlyViewTests`: a view that never writes (a cached, counted or
  prefetched view of a source). Tests whose subject is writing are skipped;
  tests whose subject is reading or listing seed their keys through the
  suite's bypassing ``set`` helper instead of the store.

Another implementation reuses these classes the way zarr's are reused::

    class TestMyComposite(OverlayStoreTests[MyComposite, cpu.Buffer]):
        store_cls = MyComposite
        buffer_cls = cpu.Buffer
        ...  # set/get helpers, store_kwargs fixture, the three abstract tests
"""

from __future__ import annotations

import pickle
from typing import Any, ClassVar

import pytest
from zarr.abc.store import (
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
    SupportsDeleteSync,
    SupportsGetSync,
    SupportsSetSync,
    _store_supports_sync_io,
)
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.sync import _collect_aiterator
from zarr.testing.store import StoreTests

__all__ = ["CLEAR_REFUSAL", "CyteArcStoreTests", "OverlayStoreTests", "ReadOnlyViewTests"]

#: What the package's stores say when ``clear()`` or ``delete_dir("")`` is refused.
CLEAR_REFUSAL = "deleting the whole store"

_PROTO = default_buffer_prototype()


async def _keys(store: Store, prefix: str | None = None) -> set[str]:
    listing = store.list() if prefix is None else store.list_prefix(prefix)
    return set(await _collect_aiterator(listing))


class CyteArcStoreTests[S: Store, B: Buffer](StoreTests[S, B]):
    """``StoreTests`` with the one refusal every CyteArc store shares.

    Set ``refuses_clear = False`` on a subclass for an implementation that
    chooses to allow ``clear()``; the suite's own test then runs.
    """

    refuses_clear: ClassVar[bool] = True

    @staticmethod
    def _require_get_sync(store: S) -> SupportsGetSync:
        """Skip unless zarr would use the store's sync surface.

        zarr reads a store synchronously only when ``_store_supports_sync_io``
        says so; a store that opts out (the remote cache, whose sync methods
        would go around it) keeps the inherited methods that zarr never calls.
        """
        if not _store_supports_sync_io(store):
            pytest.skip("the store opts out of synchronous I/O (_supports_sync_io)")
        return StoreTests._require_get_sync(store)

    @staticmethod
    def _require_set_sync(store: S) -> SupportsSetSync:
        """Skip unless zarr would use the store's sync surface (see ``_require_get_sync``)."""
        if not _store_supports_sync_io(store):
            pytest.skip("the store opts out of synchronous I/O (_supports_sync_io)")
        return StoreTests._require_set_sync(store)

    @staticmethod
    def _require_delete_sync(store: S) -> SupportsDeleteSync:
        """Skip unless zarr would use the store's sync surface (see ``_require_get_sync``)."""
        if not _store_supports_sync_io(store):
            pytest.skip("the store opts out of synchronous I/O (_supports_sync_io)")
        return StoreTests._require_delete_sync(store)

    async def test_clear(self, store: S) -> None:
        """``clear()`` is ``delete_dir("")``: it would delete the store's records
        with everything else, so CyteArc stores refuse it and keep every key
        (docs/errors.md, "Keys"). zarr's version expects an empty store."""
        if not self.refuses_clear:
            await super().test_clear(store)
            return
        await self.set(store, "key", self.buffer_cls.from_bytes(b"something"))
        with pytest.raises(ValueError, match=CLEAR_REFUSAL):
            await store.clear()
        assert await store.exists("key")


class OverlayStoreTests[S: Store, B: Buffer](CyteArcStoreTests[S, B]):
    """For a writable store that holds keys of its own before any write."""

    reserved_keys: ClassVar[tuple[str, ...]] = ("zarr.json",)
    """Keys the store holds from the start and refuses to replace with arbitrary bytes."""

    async def test_reserved_keys_refused(self, store: S) -> None:
        """Replacing a reserved document (the root ``zarr.json`` carries the
        composite or ``matrixSource`` record) with bytes that drop the record
        raises ``PermissionError`` and leaves the document unchanged."""
        for key in self.reserved_keys:
            before = await self.get(store, key)
            with pytest.raises(PermissionError):
                await store.set(key, self.buffer_cls.from_bytes(b"\x01\x02\x03\x04"))
            with pytest.raises(PermissionError):
                await store.delete(key)
            assert (await self.get(store, key)).to_bytes() == before.to_bytes()

    @pytest.mark.parametrize("key", ["c/0", "foo/c/0.0", "foo/0/0"])
    @pytest.mark.parametrize("data", [b"\x01\x02\x03\x04", b""])
    async def test_set(self, store: S, key: str, data: bytes) -> None:
        """zarr's ``test_set`` without its ``zarr.json`` case: that key is reserved
        here, and ``test_reserved_keys_refused`` checks the refusal instead."""
        await store.set(key, self.buffer_cls.from_bytes(data))
        assert (await self.get(store, key)).to_bytes() == data

    async def test_set_many(self, store: S) -> None:
        """zarr's ``test_set_many`` without the reserved root document."""
        values = {key: self.buffer_cls.from_bytes(key.encode()) for key in ("c/0", "foo/c/0.0")}
        await store._set_many(values.items())
        for key, value in values.items():
            assert (await self.get(store, key)).to_bytes() == value.to_bytes()

    async def test_is_empty(self, store: S) -> None:
        """The store holds its records from the start, so ``is_empty("")`` is
        false; directories it does not hold are empty until written."""
        assert not await store.is_empty("")
        assert await store.is_empty("spam/")
        await self.set(store, "foo/bar", self.buffer_cls.from_bytes(b"something"))
        assert not await store.is_empty("foo/")
        assert not await store.is_empty("foo")
        assert await store.is_empty("fo")

    async def test_list(self, store: S) -> None:
        """``list()`` is what the store held before plus what was written."""
        before = await _keys(store)
        written = {"foo/zarr.json", *(f"foo/c/{i}" for i in range(10))}
        await store._set_many((key, self.buffer_cls.from_bytes(b"")) for key in written)
        assert await _keys(store) == before | written

    async def test_list_prefix(self, store: S) -> None:
        """``list_prefix`` under fresh directories yields exactly the keys written
        there, with path-segment (not string-prefix) semantics."""
        written = [f"{p}zarr.json" for p in ("a/", "a/b/", "a/b/c/", "ab/")]
        await store._set_many((key, self.buffer_cls.from_bytes(b"")) for key in written)
        for prefix in ("a/", "a/b/", "a/b/c/"):
            assert await _keys(store, prefix) == {k for k in written if k.startswith(prefix)}
        assert await _keys(store, "") >= set(written)

    async def test_list_empty_path(self, store: S) -> None:
        """An empty prefix lists everything, written keys included."""
        written = {"foo/bar/zarr.json", "foo/bar/c/1", "foo/baz/c/0"}
        before = await _keys(store)
        await store._set_many((key, self.buffer_cls.from_bytes(b"")) for key in written)
        assert await _keys(store, "") == before | written
        assert await _keys(store, "foo/bar/") == {"foo/bar/zarr.json", "foo/bar/c/1"}

    async def test_list_dir(self, store: S) -> None:
        """``list_dir`` yields child names without '/', with or without a trailing
        '/'; the root lists the store's own children besides the written ones."""
        root_before = set(await _collect_aiterator(store.list_dir("")))
        assert root_before, "a store with records lists children at its root"
        for directory, written in (
            ("foo", {"foo/zarr.json", "foo/c/1"}),
            ("foo/bar", {"foo/bar/first", "foo/bar/second/zarr.json"}),
        ):
            assert await _collect_aiterator(store.list_dir(directory)) == ()
            await store._set_many((key, self.buffer_cls.from_bytes(b"1")) for key in written)
            expected = {key.removeprefix(directory + "/").split("/")[0] for key in written}
            for spelling in (directory, directory + "/"):
                assert set(await _collect_aiterator(store.list_dir(spelling))) == expected
        assert set(await _collect_aiterator(store.list_dir(""))) == root_before | {"foo"}

    async def test_delete_dir(self, store: S) -> None:
        """zarr's ``test_delete_dir`` without writing the reserved root document
        (the store holds its own): the directory goes, its siblings stay."""
        await store.set("foo-bar/zarr.json", self.buffer_cls.from_bytes(b"root"))
        await store.set("foo/zarr.json", self.buffer_cls.from_bytes(b"bar"))
        await store.set("foo/c/0", self.buffer_cls.from_bytes(b"chunk"))
        await store.delete_dir("foo")
        assert await store.exists("zarr.json")
        assert await store.exists("foo-bar/zarr.json")
        assert not await store.exists("foo/zarr.json")
        assert not await store.exists("foo/c/0")


class ReadOnlyViewTests[S: Store, B: Buffer](CyteArcStoreTests[S, B]):
    """For a read-only view of a source: it reads and lists, and never writes.

    ``store_kwargs`` gives a read-only store. The suite's ``set`` helper must
    write to the viewed store without going through the view.
    """

    # -- what must write: skipped, the view has no writable form

    def _skip_write(self) -> None:
        pytest.skip(f"{self.store_cls.__name__} is a read-only view: it never writes")

    def test_store_read_only(self, store: S) -> None:
        """A view reports ``read_only`` (zarr's version expects a writable store)."""
        assert store.read_only
        with pytest.raises(AttributeError):
            store.read_only = False  # type: ignore[misc]

    @pytest.mark.parametrize("read_only", [True])
    async def test_store_open_read_only(self, open_kwargs: dict[str, Any], read_only: bool) -> None:
        """Only ``read_only=True`` opens: the view has no writable form."""
        opened = await self.store_cls.open(**{**open_kwargs, "read_only": read_only})
        assert opened._is_open
        assert opened.read_only

    async def test_with_read_only_store(self, open_kwargs: dict[str, Any]) -> None:
        """A view derived with ``with_read_only(True)`` still refuses writes;
        ``with_read_only(False)`` either raises or gives a store that really
        writes (zarr's rule: never a store that claims writes it refuses)."""
        store = await self.store_cls.open(**{**open_kwargs, "read_only": True})
        reader = store.with_read_only(True)
        for view in (store, reader):
            with pytest.raises(ValueError, match="read-only mode"):
                await view.set("foo", self.buffer_cls.from_bytes(b"bar"))
            with pytest.raises(ValueError, match="read-only mode"):
                await view.delete("foo")
        try:
            writer = store.with_read_only(False)
        except (NotImplementedError, ValueError):
            return
        assert writer.read_only, "a view's writable form must not be offered"

    async def test_serializable_store(self, store: S) -> None:
        """A pickled view equals the original, keeps ``read_only`` and reads the
        same bytes (zarr's version writes through the store)."""
        await self.set(store, "foo", self.buffer_cls.from_bytes(b"\x01\x02\x03\x04"))
        copy = pickle.loads(pickle.dumps(store))
        assert copy == store
        assert copy.read_only == store.read_only
        got = await copy.get("foo", prototype=_PROTO)
        assert got is not None and got.to_bytes() == b"\x01\x02\x03\x04"

    async def test_set(self, store: S) -> None:  # type: ignore[override]
        """Writing is the subject: a read-only view never writes."""
        self._skip_write()

    async def test_set_not_open(self, store_not_open: S) -> None:
        """Writing is the subject: a read-only view never writes."""
        self._skip_write()

    async def test_set_many(self, store: S) -> None:
        """Writing is the subject: a read-only view never writes."""
        self._skip_write()

    async def test_set_if_not_exists(self, store: S) -> None:
        """Writing is the subject: a read-only view never writes."""
        self._skip_write()

    async def test_delete(self, store: S) -> None:
        """Deleting is the subject: a read-only view never deletes."""
        self._skip_write()

    async def test_delete_dir(self, store: S) -> None:
        """Deleting is the subject: a read-only view never deletes."""
        self._skip_write()

    async def test_delete_nonexistent_key_does_not_raise(self, store: S) -> None:
        """Deleting is the subject: a read-only view never deletes."""
        self._skip_write()

    async def test_clear(self, store: S) -> None:
        """Clearing is deleting: a read-only view refuses it (read-only mode or
        the package-wide refusal of deleting the whole store)."""
        with pytest.raises(ValueError, match=f"read-only mode|{CLEAR_REFUSAL}"):
            await store.clear()

    def test_set_sync(self, store: S) -> None:
        """Writing is the subject: a read-only view never writes."""
        self._skip_write()

    def test_delete_sync(self, store: S) -> None:
        """Deleting is the subject: a read-only view never deletes."""
        self._skip_write()

    def test_delete_sync_missing(self, store: S) -> None:
        """Deleting is the subject: a read-only view never deletes."""
        self._skip_write()

    async def test_sync_async_set_get_parity(self, store: S) -> None:  # type: ignore[override]
        """Writing through either API is the subject: a view never writes; the
        read-side parity is ``test_get_sync_byte_range_parity``."""
        self._skip_write()

    async def test_delete_sync_visible_to_async_get(self, store: S) -> None:
        """Deleting is the subject: a read-only view never deletes."""
        self._skip_write()

    # -- reading and listing: the same checks, keys seeded past the view

    async def _seed(self, store: S, keys: dict[str, bytes]) -> None:
        for key, value in keys.items():
            await self.set(store, key, self.buffer_cls.from_bytes(value))

    async def test_exists(self, store: S) -> None:
        """zarr's ``test_exists``, the key written past the view."""
        assert not await store.exists("foo")
        await self._seed(store, {"foo/zarr.json": b"bar"})
        assert await store.exists("foo/zarr.json")

    async def test_getsize_prefix(self, store: S) -> None:
        """``getsize_prefix("c")`` counts ``c/...`` and not the sibling ``cc/0``."""
        await self._seed(
            store, {k: b"\x01\x02\x03\x04" for k in ("c/0/0", "c/0/1", "c/1/0", "cc/0")}
        )
        assert await store.getsize_prefix("c") == 12

    async def test_list(self, store: S) -> None:
        """``list()`` yields exactly the viewed store's keys."""
        assert await _keys(store) == set()
        written = {"foo/zarr.json", *(f"foo/c/{i}" for i in range(10))}
        await self._seed(store, dict.fromkeys(written, b""))
        assert await _keys(store) == written

    async def test_list_prefix(self, store: S) -> None:
        """``list_prefix`` with path-segment semantics."""
        written = [f"{p}zarr.json" for p in ("", "a/", "a/b/", "a/b/c/", "ab/")]
        await self._seed(store, dict.fromkeys(written, b""))
        for prefix in ("", "a/", "a/b/", "a/b/c/"):
            assert await _keys(store, prefix) == {k for k in written if k.startswith(prefix)}

    async def test_list_empty_path(self, store: S) -> None:
        """An empty prefix lists every key; a directory prefix only its own."""
        written = {"foo/bar/zarr.json", "foo/bar/c/1", "foo/baz/c/0"}
        await self._seed(store, dict.fromkeys(written, b""))
        assert await _keys(store) == written
        assert await _keys(store, "") == written
        assert await _keys(store, "foo/bar/") == {"foo/bar/zarr.json", "foo/bar/c/1"}

    async def test_list_dir(self, store: S) -> None:
        """``list_dir`` yields child names, with or without a trailing '/'."""
        assert await _collect_aiterator(store.list_dir("")) == ()
        await self._seed(store, {"foo/zarr.json": b"1", "foo/c/1": b"1", "foo/bar/x": b"1"})
        for spelling in ("foo", "foo/"):
            assert set(await _collect_aiterator(store.list_dir(spelling))) == {
                "zarr.json",
                "c",
                "bar",
            }
        assert set(await _collect_aiterator(store.list_dir(""))) == {"foo"}

    @pytest.mark.parametrize(
        "byte_range",
        [None, RangeByteRequest(1, 4), OffsetByteRequest(1), SuffixByteRequest(1)],
        ids=["none", "range", "offset", "suffix"],
    )
    async def test_get_sync_byte_range_parity(self, store: S, byte_range: Any) -> None:
        """``get_sync`` and ``get`` return the same bytes (seeded past the view)."""
        getter = self._require_get_sync(store)
        await self._seed(store, {"parity": b"\x01\x02\x03\x04"})
        synced = getter.get_sync("parity", byte_range=byte_range)
        awaited = await store.get("parity", prototype=_PROTO, byte_range=byte_range)
        assert synced is not None and awaited is not None
        assert synced.to_bytes() == awaited.to_bytes()
