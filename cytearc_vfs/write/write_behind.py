"""Write-behind for a destination its writer is filling: writes go out together, the root last.

Through zarr's node API, a writer waits for one round trip after another
(each new node reads and writes its parents' documents): a small
``write_counts`` to an object store spent about 70 (docs/remote.md).
:class:`WriteBehindStore` takes the waits away:

- **The tree is known.** A writer's destination was emptied down to its
  root document by :func:`~cytearc_vfs.write.destinations.create_destination`
  and nobody else writes it, so a key this store has not written is absent:
  zarr's existence checks, ``set_if_not_exists`` of parents that exist and
  deletes of all-fill chunks never written are answered without a request
  (``absent_unless_written=True``). Documents written are kept (they are
  small) and read back from memory.
- **Documents go last, once.** A metadata document (``zarr.json``) is held
  until the next flush or commit and then written with its newest value:
  zarr rewrites an array's document for every attribute update (a shard
  table, ``complete``), and each rewrite would wait for the one before.
- **Writes go behind.** ``set`` hands the value to a task and returns; at
  most ``max_in_flight`` writes are in flight and at most ``max_bytes`` of
  values are held (a larger value is written before ``set`` returns, as
  without this store). A key written again before its first write went out
  is written once, with the newest value; writes (and deletes) of one key never overtake
  each other.
- **The commit is a barrier.** A write that ``commits(key, value)`` calls
  a commit (by default any write of the root ``zarr.json``) first waits for
  every earlier write to be stored (raising the first that failed), and
  later writes wait for it. Destinations commit with the root write that
  clears their marker (``cytearc:pending_store``, docs/writing.md "Crash
  safety"): it is therefore always the last, after everything else is
  stored, and a process that dies at any instant before it leaves any
  subset of the other writes and a root that every open refuses.

A write sent is finished even when the task that sent it is cancelled
(:func:`~cytearc_vfs.write.stopping.finish_sent`): a writer stopped by an
interrupt has nothing of it landing after the stop.

A writer's :class:`~cytearc_vfs.write.claims.Claim` is checked before the
commit and now and then before further writes (one writer per destination).

A failed write is raised, naming its key, by the next ``set``, flush or
commit, and every later write is refused. :meth:`WriteBehindStore.settle`
waits for the writes in flight without raising: a writer that failed gives
its destination back with nothing still landing in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from ..errors import DestinationBusyError
from ..format.byte_ranges import byte_slice
from ..format.key_checked import KeyCheckedStore
from .claims import Claim
from .stopping import finish_sent
from .write_failures import failed_write_error

__all__ = ["ROOT_DOCUMENT", "Commits", "WriteBehindStore", "byte_slice", "root_document_commits"]

#: The root group's document, where writers commit.
ROOT_DOCUMENT = "zarr.json"
#: Tells whether a write (key, value) commits (see the module docstring).
Commits = Callable[[str, Buffer], bool]


def root_document_commits(key: str, value: Buffer) -> bool:
    """The default commit: any write of the root document."""
    return key == ROOT_DOCUMENT


#: Writes in flight at once: enough to hide a round trip behind the others.
MAX_IN_FLIGHT = 64
#: Bytes of values held for writes not yet stored. Documents and small chunks
#: go behind; a count shard above this is written before ``set`` returns, so
#: a writer holds no more shards than it did (its memory budget stands).
MAX_HELD_BYTES = 8 << 20


def _size(value: Buffer | None) -> int:
    return 0 if value is None else len(value)


def _is_document(key: str) -> bool:
    return key.rsplit("/", 1)[-1] == "zarr.json"


def _below(key: str, prefix: str) -> bool:
    """Whether ``key`` lies in the directory ``prefix`` (path segments, not characters).

    >>> _below("a/zarr.json", "a"), _below("ab/zarr.json", "a"), _below("x", "")
    (True, False, True)
    """
    base = prefix.strip("/")
    return not base or key == base or key.startswith(base + "/")


@dataclass
class _Writes:
    """What every view of one :class:`WriteBehindStore` shares."""

    written: set[str] | None
    """Keys stored or going out; ``None`` when the tree is not known."""
    documents: dict[str, bytes] = field(default_factory=dict)
    """Metadata documents written, kept to answer reads."""
    pending: dict[str, Buffer | None] = field(default_factory=dict)
    """The newest value of each key going out; ``None`` for a delete."""
    deferred: dict[str, Buffer] = field(default_factory=dict)
    """Documents held for the next flush or commit."""
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """The task writing each pending key."""
    held: int = 0
    """Bytes of the pending values."""
    failure: BaseException | None = None
    """The first write that failed."""
    failed_key: str = ""
    """The key whose write failed first."""
    given: dict[str, bytes] = field(default_factory=dict)
    """The documents the store was made with (the root before its commit)."""
    committed: str | None = None
    """The key of the last commit sent (stored, or perhaps stored)."""
    claim: Claim | None = None
    """The writer's claim on the destination, checked before its writes."""
    # created on zarr's event loop at first use
    gate: asyncio.Semaphore | None = None
    changed: asyncio.Condition | None = None
    commit: asyncio.Lock | None = None


class WriteBehindStore(KeyCheckedStore):
    """``store`` with writes that go out concurrently behind the writer; see the module docstring.

    Every key and prefix is checked on entry, as in every store of the package
    (:class:`~cytearc_vfs.format.key_checked.KeyCheckedStore`).

    Parameters
    ----------
    store
        The destination's store.
    absent_unless_written
        The destination holds nothing but what this store writes (and the
        ``documents`` given): reads, existence checks and deletes of other
        keys make no request.
    documents
        Documents already stored (the root's first document), answered from memory.
    read_only
        A read-only view (zarr asks for one to open a group with mode ``"r"``).
    max_in_flight, max_bytes
        Bounds of the writes in flight and of the bytes held for them.
    commits
        Which writes are commits, stored only after every earlier write.
    claim
        The writer's claim on the destination (the root document is its own).
    """

    def __init__(
        self,
        store: Store,
        *,
        absent_unless_written: bool = False,
        documents: dict[str, bytes] | None = None,
        read_only: bool = False,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_bytes: int = MAX_HELD_BYTES,
        commits: Commits = root_document_commits,
        where: str | None = None,
        claim: Claim | None = None,
    ) -> None:
        super().__init__(read_only=read_only)
        self.store = store
        #: The destination as its caller gave it (a URL), for messages; else the store's name.
        self.where = str(store) if where is None else where
        self.max_in_flight = max_in_flight
        self.max_bytes = max_bytes
        self.commits = commits
        self._writes = _Writes(set(documents or {}) if absent_unless_written else None)
        self._writes.documents.update(documents or {})
        self._writes.given.update(documents or {})
        self._writes.claim = claim

    # ------------------------------------------------------------ identity

    def _view(self, read_only: bool) -> Self:
        view = type(self)(
            self.store,
            read_only=read_only,
            max_in_flight=self.max_in_flight,
            max_bytes=self.max_bytes,
            commits=self.commits,
            where=self.where,
        )
        view._writes = self._writes  # the same writes: a view sees them in flight
        return view

    def with_read_only(self, read_only: bool = False) -> Self:
        return self._view(read_only)

    def __eq__(self, value: object) -> bool:
        return (
            isinstance(value, WriteBehindStore)
            and self.store == value.store
            and self.read_only == value.read_only
        )

    def __hash__(self) -> int:
        return hash((type(self), self.store))

    def __repr__(self) -> str:
        return f"WriteBehindStore({self.store!r})"

    def __str__(self) -> str:
        return str(self.store)

    def __getstate__(self) -> dict[str, Any]:
        waiting = len(self._writes.pending) + len(self._writes.deferred)
        if waiting:
            raise TypeError(
                f"{self!r} has {waiting} write(s) not stored yet and cannot be pickled; "
                "flush it first"
            )
        return {
            "store": self.store,
            "read_only": self.read_only,
            "max_in_flight": self.max_in_flight,
            "max_bytes": self.max_bytes,
            "commits": self.commits,
            "written": self._writes.written,
            "documents": self._writes.documents,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["store"],
            read_only=state["read_only"],
            max_in_flight=state["max_in_flight"],
            max_bytes=state["max_bytes"],
            commits=state["commits"],
        )
        self._writes = _Writes(state["written"], dict(state["documents"]))

    async def _open(self) -> None:
        await super()._open()
        await self.store._ensure_open()

    @property
    def supports_writes(self) -> bool:
        return self.store.supports_writes

    @property
    def supports_deletes(self) -> bool:
        return self.store.supports_deletes

    @property
    def supports_listing(self) -> bool:
        return self.store.supports_listing

    @property
    def claim(self) -> Claim | None:
        """The writer's claim on the destination, if it was given one."""
        return self._writes.claim

    # ------------------------------------------------------------ writing

    def _sync_objects(self) -> tuple[asyncio.Semaphore, asyncio.Condition, asyncio.Lock]:
        writes = self._writes
        if writes.gate is None or writes.changed is None or writes.commit is None:
            writes.gate = asyncio.Semaphore(self.max_in_flight)
            writes.changed = asyncio.Condition()
            writes.commit = asyncio.Lock()
        return writes.gate, writes.changed, writes.commit

    def _raise_failure(self) -> None:
        failure = self._writes.failure
        if failure is None:
            return
        error = failed_write_error(failure, self._writes.failed_key, self.where)
        if error is failure:
            raise failure
        raise error from failure

    def _failed(self, key: str, exc: Exception) -> None:
        """Keep the first failure: every later write, flush and commit raises it."""
        if self._writes.failure is None:
            self._writes.failure, self._writes.failed_key = exc, key

    async def set(self, key: str, value: Buffer) -> None:
        self._check_key(key, "set")
        self._check_writable()
        self._raise_failure()
        _, changed, commit = self._sync_objects()
        claim = self._writes.claim
        if self.commits(key, value):
            async with commit:
                self._writes.deferred.pop(key, None)  # superseded by the commit
                await self.flush()  # everything before the commit is stored
                await self._wait_for(key)
                # sent: it may land even if this task is cancelled while it is in flight
                self._writes.committed = key
                if claim is None:
                    await self._store_now(key, value)
                else:  # only over this writer's own root (compared and swapped where it can)
                    await self._claimed_commit(claim, key, value)
            return
        if commit.locked():
            async with commit:  # a write issued while a commit goes out follows it
                pass
        await self._check_claim(key, now=False)
        writes = self._writes
        if key == ROOT_DOCUMENT and claim is not None:  # marked as this writer's
            value = value.from_bytes(claim.stamp(value.to_bytes()))
        if _is_document(key):
            writes.deferred[key] = value
            self._stored(key, value)
            return
        size = len(value)
        if size > self.max_bytes:
            await self._wait_for(key)
            await self._store_now(key, value)
            return
        async with changed:
            await changed.wait_for(lambda: writes.held + size <= self.max_bytes or not writes.tasks)
        self._raise_failure()
        self._send(key, value)

    async def _check_claim(self, key: str, *, now: bool) -> None:
        """Raise if the destination is not this writer's any more; no write follows."""
        if self._writes.claim is not None:
            try:
                await self._writes.claim.check(now=now)
            except Exception as exc:  # taken by another writer, or the root's read failed
                self._failed(key, exc)
                self._raise_failure()

    async def _claimed_commit(self, claim: Claim, key: str, value: Buffer) -> None:
        try:
            await claim.commit(key, value.to_bytes())
        except Exception as exc:  # named like a write's failure; a lost claim as itself
            self._failed(key, exc)
            self._raise_failure()
        self._stored(key, value)

    async def _store_now(self, key: str, value: Buffer) -> None:
        """Store ``value`` before returning; a failure is kept as one behind is."""
        try:
            await finish_sent(self.store.set(key, value))
        except Exception as exc:  # named like a write behind, and no later write may land
            self._failed(key, exc)
            self._raise_failure()
        self._stored(key, value)

    def _send(self, key: str, value: Buffer | None) -> None:
        """Make ``value`` (``None``: a delete) the next value of ``key`` to go out."""
        writes = self._writes
        previous = writes.pending.get(key)
        writes.held += _size(value) - _size(previous)
        writes.pending[key] = value
        if value is not None:
            self._stored(key, value)
        task = writes.tasks.get(key)
        if task is None or task.done():  # done: cancelled before it ran (see _drain)
            writes.tasks[key] = asyncio.ensure_future(self._write_out(key))

    def _stored(self, key: str, value: Buffer) -> None:
        if self._writes.written is not None:
            self._writes.written.add(key)
        if _is_document(key):
            self._writes.documents[key] = value.to_bytes()

    async def _write_out(self, key: str) -> None:
        """Store the newest value of ``key`` until no newer one is pending."""
        gate, changed, _ = self._sync_objects()
        writes = self._writes
        try:
            async with gate:
                while key in writes.pending:
                    value = writes.pending[key]
                    try:
                        # sent writes end before a stop that cancels this task returns
                        if value is None:
                            await finish_sent(self.store.delete(key))
                        else:
                            await finish_sent(self.store.set(key, value))
                    except Exception as exc:  # kept for the next set, flush or root write
                        self._failed(key, exc)
                        writes.held -= _size(writes.pending.pop(key, None))
                        return
                    if key in writes.pending and writes.pending[key] is value:  # none newer
                        del writes.pending[key]
                        writes.held -= _size(value)
        finally:
            writes.tasks.pop(key, None)
            async with changed:
                changed.notify_all()

    async def _wait_for(self, key: str) -> None:
        task = self._writes.tasks.get(key)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _drain(self) -> None:
        """Wait until no write task is left."""
        tasks = self._writes.tasks
        while tasks:
            # A task cancelled before its first step (a stop, stopping.py) never ran
            # the finally that removes it: a done task is gone, whatever ran of it.
            for key, task in list(tasks.items()):
                if task.done() and tasks.get(key) is task:
                    del tasks[key]
            if tasks:
                await asyncio.gather(*list(tasks.values()), return_exceptions=True)

    async def settle(self) -> None:
        """Wait until no write is in flight; failures are kept, not raised.

        Documents held for the next flush are dropped: a writer that settles
        has failed, and nothing more of it should land.
        """
        self._writes.deferred.clear()
        await self._drain()

    async def revert_commit(self) -> bool:
        """After :meth:`settle`: if a commit was sent, store its key's document as given again.

        A writer whose commit landed but that failed anyway (an interrupt
        that arrived while the commit was in flight) gives its destination
        back refused as unfinished, as it was before the commit. Returns
        whether a document was stored.
        """
        writes = self._writes
        key = writes.committed
        document = None if key is None else writes.given.get(key)
        if key is None or document is None:
            return False
        if writes.claim is not None:  # never over another writer's root
            try:
                await writes.claim.check(now=True)
            except DestinationBusyError:
                return False
        await finish_sent(
            self.store.set(key, default_buffer_prototype().buffer.from_bytes(document))
        )
        writes.documents[key] = document
        writes.committed = None
        return True

    async def flush(self) -> None:
        """Write the held documents and wait until every write is stored; raises if one failed."""
        deferred, self._writes.deferred = self._writes.deferred, {}
        for key, value in deferred.items():
            self._send(key, value)
        await self._drain()
        self._raise_failure()

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        self._check_key(key, "set_if_not_exists")
        if not await self.exists(key):
            await self.set(key, value)

    async def delete(self, key: str) -> None:
        self._check_key(key, "delete")
        self._check_writable()
        self._raise_failure()
        writes = self._writes
        writes.deferred.pop(key, None)
        writes.documents.pop(key, None)
        if writes.written is not None:
            if key not in writes.written:
                return  # never written: nothing to delete
            writes.written.discard(key)
        # In the key's queue, as a write: it follows the key's earlier writes
        # and a later write of the key follows it.
        self._send(key, None)
        await self._wait_for(key)
        self._raise_failure()

    async def delete_dir(self, prefix: str) -> None:
        self._check_prefix(prefix, "delete_dir")
        self._check_writable()
        writes = self._writes
        if writes.written is not None:
            keys = [key async for key in self.list_prefix(prefix)]
            await asyncio.gather(*(self.delete(key) for key in keys))
            return
        for key in [key for key in writes.deferred if _below(key, prefix)]:
            del writes.deferred[key]
        for key in [key for key in writes.pending if _below(key, prefix)]:
            writes.held -= _size(writes.pending.pop(key))
        await self._drain()  # nothing of the prefix lands after the store's delete
        for key in [key for key in writes.documents if _below(key, prefix)]:
            del writes.documents[key]
        await finish_sent(self.store.delete_dir(prefix))

    # ------------------------------------------------------------ reading

    def _held(self, key: str) -> bytes | Buffer | None:
        # a document's newest value, also while an older one goes out
        document = self._writes.documents.get(key)
        return document if document is not None else self._writes.pending.get(key)

    def _absent(self, key: str) -> bool:
        written = self._writes.written
        if key in self._writes.pending and self._writes.pending[key] is None:
            return True  # its delete is going out
        return written is not None and key not in written

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._check_key(key, "get")
        held = self._held(key)
        if held is not None:
            data = held if isinstance(held, bytes) else held.to_bytes()
            return prototype.buffer.from_bytes(data[byte_slice(len(data), byte_range)])
        if self._absent(key):
            return None
        return await self.store.get(key, prototype, byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        # every key is checked before any is read
        requests = [(self._check_key(key, "get_partial_values"), rng) for key, rng in key_ranges]
        return list(await asyncio.gather(*(self.get(key, prototype, rng) for key, rng in requests)))

    async def exists(self, key: str) -> bool:
        self._check_key(key, "exists")
        if self._held(key) is not None:
            return True
        if self._absent(key):
            return False
        if self._writes.written is not None:
            return key in self._writes.written
        return await self.store.exists(key)

    async def getsize(self, key: str) -> int:
        self._check_key(key, "getsize")
        held = self._held(key)
        if held is not None:
            return len(held)
        if self._absent(key):
            raise FileNotFoundError(key)
        return await self.store.getsize(key)

    async def _keys(self) -> list[str]:
        if self._writes.written is not None:
            return sorted(self._writes.written)
        await self.flush()  # the store's own listing then shows every write
        return [key async for key in self.store.list()]

    async def list(self) -> AsyncIterator[str]:
        for key in await self._keys():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        self._check_prefix(prefix, "list_prefix")
        for key in await self._keys():
            if _below(key, prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        base = self._check_prefix(prefix, "list_dir").strip("/")
        base = base + "/" if base else ""
        seen: set[str] = set()
        for key in await self._keys():
            if key.startswith(base):
                child = key[len(base) :].split("/", 1)[0]
                if child not in seen:
                    seen.add(child)
                    yield child
