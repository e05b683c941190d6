"""The write-behind store of writer destinations: order, bounds, failures, requests saved.

Each test drives a real ``MemoryStore`` through :class:`TimedStore`, a test
double that adds a delay to each write (as a network would) and records
when each write started and ended, and every read, existence check and
delete it was asked for. The contract suite runs in
``tests/test_store_contracts.py``; writers over S3 in
``tests/test_remote_writes.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype, cpu, default_buffer_prototype
from zarr.storage import MemoryStore, WrapperStore

from cytearc_vfs.write.destinations import clears_pending_marker
from cytearc_vfs.write.write_behind import ROOT_DOCUMENT, WriteBehindStore

PROTO = default_buffer_prototype()
PENDING = json.dumps(
    {"zarr_format": 3, "node_type": "group", "attributes": {"cytearc:pending_store": "test"}}
).encode()
DONE = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode()


@dataclass(frozen=True)
class Write:
    key: str
    value: bytes
    started: float
    ended: float


class TimedStore(WrapperStore[MemoryStore]):
    """A MemoryStore whose writes take ``delay`` seconds (jittered) and are recorded."""

    def __init__(self, store: MemoryStore, delay: float = 0.0, fail: str | None = None) -> None:
        super().__init__(store)
        self.delay = delay
        self.fail = fail
        self.writes: list[Write] = []
        self.asked: list[tuple[str, str]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def set(self, key: str, value: Buffer) -> None:
        started = time.monotonic()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay * random.uniform(0.5, 1.5))
            if key == self.fail:
                raise OSError(f"the server refused {key}")
            await self._store.set(key, value)
        finally:
            self.in_flight -= 1
        self.writes.append(Write(key, value.to_bytes(), started, time.monotonic()))

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.asked.append(("get", key))
        return await self._store.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        self.asked.append(("exists", key))
        return await self._store.exists(key)

    async def delete(self, key: str) -> None:
        self.asked.append(("delete", key))
        await self._store.delete(key)


def _buffer(data: bytes) -> Buffer:
    return cpu.Buffer.from_bytes(data)


async def _destination(delay: float = 0.01, **kwargs: Any) -> tuple[WriteBehindStore, TimedStore]:
    """A destination as create_destination leaves it: the marker stored, the tree known."""
    timed = TimedStore(MemoryStore(), delay, **kwargs)
    await timed._store.set(ROOT_DOCUMENT, _buffer(PENDING))
    behind = WriteBehindStore(
        timed,
        absent_unless_written=True,
        documents={ROOT_DOCUMENT: PENDING},
        commits=clears_pending_marker,
    )
    return behind, timed


async def test_the_commit_is_stored_after_every_other_write() -> None:
    behind, timed = await _destination()
    for index in range(40):
        await behind.set(f"a/c/{index}", _buffer(bytes([index]) * 100))
        await behind.set(f"a{index % 3}/zarr.json", _buffer(b'{"v": %d}' % index))
    await behind.set(ROOT_DOCUMENT, _buffer(PENDING))  # keeps the marker: goes behind
    await behind.set(ROOT_DOCUMENT, _buffer(DONE))  # the commit
    commit = timed.writes[-1]
    assert (commit.key, commit.value) == (ROOT_DOCUMENT, DONE)
    assert commit.started >= max(write.ended for write in timed.writes[:-1])
    # the chunks went out together, not one after another
    assert timed.most_in_flight > 10


async def test_documents_are_written_once_with_their_newest_value() -> None:
    behind, timed = await _destination()
    for version in range(5):
        await behind.set("x/zarr.json", _buffer(b'{"version": %d}' % version))
    assert timed.writes == []  # held until the flush
    read = await behind.get("x/zarr.json", PROTO)
    assert read is not None and read.to_bytes() == b'{"version": 4}'
    await behind.flush()
    assert [(w.key, w.value) for w in timed.writes] == [("x/zarr.json", b'{"version": 4}')]


async def test_a_key_written_again_is_never_overtaken() -> None:
    behind, timed = await _destination(delay=0.02)
    for version in range(6):
        await behind.set("x/c/0", _buffer(b"%d" % version))
        await asyncio.sleep(random.uniform(0, 0.02))
    await behind.flush()
    stored = await timed._store.get("x/c/0", PROTO)
    assert stored is not None and stored.to_bytes() == b"5"
    versions = [int(w.value) for w in timed.writes if w.key == "x/c/0"]
    assert versions == sorted(versions) and versions[-1] == 5


async def test_a_known_tree_asks_the_store_nothing() -> None:
    """zarr's node API through a destination: no existence check, no parent
    check, no delete of an all-zero chunk never written reaches the store."""
    behind, timed = await _destination(delay=0.0)
    root = await zarr.api.asynchronous.open_group(behind, mode="r+", zarr_format=3)
    group = await root.create_group("cellData", attributes={"a": 1})
    array = await group.create_array("ids", shape=(100,), dtype="int64", chunks=(10,))
    await array.setitem(slice(None), np.arange(100))
    zeros = await root.create_array("RNA/zeros", shape=(50,), dtype="int32", chunks=(10,))
    await zeros.setitem(slice(None), np.zeros(50, dtype=np.int32))  # zarr deletes such chunks
    await behind.flush()
    assert timed.asked == []
    written = sorted(w.key for w in timed.writes)
    assert len(written) == len(set(written))  # every key once
    assert "cellData/zarr.json" in written and "RNA/zarr.json" in written
    values = await zarr.api.asynchronous.open_array(
        store=timed._store, path="cellData/ids", mode="r"
    )
    np.testing.assert_array_equal(await values.getitem(slice(None)), np.arange(100))


async def test_a_failed_write_stops_the_commit() -> None:
    behind, timed = await _destination(fail="a/c/3")
    for index in range(8):
        await behind.set(f"a/c/{index}", _buffer(b"x"))
    with pytest.raises(OSError, match=r"writing 'a/c/3' to .* failed") as raised:
        await behind.set(ROOT_DOCUMENT, _buffer(DONE))
    assert "a/c/3" in str(raised.value.__cause__)
    stored = await timed._store.get(ROOT_DOCUMENT, PROTO)
    assert stored is not None and stored.to_bytes() == PENDING  # still refused at open
    with pytest.raises(OSError, match="'a/c/3'"):
        await behind.set("a/c/9", _buffer(b"x"))


async def test_held_bytes_stay_bounded() -> None:
    timed = TimedStore(MemoryStore(), delay=0.01)
    behind = WriteBehindStore(timed, absent_unless_written=True, max_bytes=1000)
    most = 0
    for index in range(30):
        await behind.set(f"a/c/{index}", _buffer(b"v" * 300))
        most = max(most, behind._writes.held)
    assert most <= 1000
    before = len(timed.writes)
    await behind.set("big/c/0", _buffer(b"b" * 5000))  # above the bound: stored before set returns
    assert any(w.key == "big/c/0" for w in timed.writes[before:])
    await behind.flush()
    assert behind._writes.held == 0


async def test_settle_waits_and_drops_held_documents() -> None:
    behind, timed = await _destination(fail="a/c/1")
    await behind.set("a/zarr.json", _buffer(b"{}"))
    for index in range(4):
        await behind.set(f"a/c/{index}", _buffer(b"x"))
    await behind.settle()  # no error: the writer that settles is failing already
    assert not behind._writes.tasks
    assert "a/zarr.json" not in {w.key for w in timed.writes}


async def test_reads_see_writes_in_flight_and_ranges() -> None:
    behind, _ = await _destination(delay=0.05)
    await behind.set("a/c/0", _buffer(b"0123456789"))
    assert await behind.exists("a/c/0") and not await behind.exists("a/c/1")
    whole = await behind.get("a/c/0", PROTO)
    assert whole is not None and whole.to_bytes() == b"0123456789"
    assert [key async for key in behind.list_dir("")] == ["a", "zarr.json"]
    assert [key async for key in behind.list_prefix("a")] == ["a/c/0"]
    await behind.delete("a/c/0")
    assert await behind.get("a/c/0", PROTO) is None
    await behind.flush()
