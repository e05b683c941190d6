"""Which values are read in pieces, and the store reads that stream one.

A stored value (a file, an object, a composite's own key, a mount's source
artifact) is read with ranged reads of at most ``piece_bytes`` each, one
after the other as the client takes them, so an answer holds one piece in
memory, never the whole value. A value the store *computes* on each read (a
composite's count chunk) is read whole, once: a ranged read of it would
compute the whole chunk again for every piece (:func:`computed_on_read`).

The last read of a stream asks for one byte past the span it sends
(:func:`piece_reads`): a value that grew, or shrank to the span's end,
while it was streamed then reads a length other than the expected one,
and the server cuts the connection before the last byte instead of
sending a body that looks complete. A local file replaced or rewritten with
as many bytes is caught by its identity (size, ``mtime_ns``, inode and
device), compared after every piece (:attr:`StreamedSpan.identity`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from zarr.abc.store import Store

from cytearc_vfs.composite.store import CompositeStore

from ..anndata_output.view import AnnDataViewStore

__all__ = [
    "PieceRead",
    "PieceReader",
    "StreamAbortedError",
    "StreamedSpan",
    "computed_on_read",
    "piece_reads",
]


class StreamAbortedError(Exception):
    """A streamed answer cannot go on: the server closes the connection mid-body.

    The value changed size or vanished, a store read failed, or no answer
    memory came free in time. The client sees fewer bytes than the
    ``Content-Length`` it was promised and a closed connection: never a body
    it could take as complete.
    """


def computed_on_read(store: Store, key: str) -> bool:
    """Whether reading ``key`` of ``store`` computes its value (a composite's virtual array).

    Such a value is at most one chunk of the virtual array (about 8 MiB, see
    ``docs/serve.md``) and is read whole, once per answer. So is a chunk an
    AnnData view (``serve --as-anndata``) computes, or re-keys from such a chunk:
    read in pieces, it was computed again for every piece (a 1,000-cell read of a
    100,000-cell composite's view took 10.6 s over HTTP, against 1.5 s from its
    mount).
    """
    if isinstance(store, AnnDataViewStore):
        inner = store.rekeyed_key(key)
        return store.computes(key) if inner is None else computed_on_read(*inner)
    if not isinstance(store, CompositeStore):
        return False
    return any(key.startswith(path + "/") for path in store.record.arrays)


@dataclass(frozen=True, slots=True)
class StreamedSpan:
    """The bytes ``start``-``stop`` of a ``size``-byte value still to be read and sent."""

    key: str
    """The store key."""
    start: int
    """First byte not yet sent."""
    stop: int
    """One past the last byte the answer sends."""
    size: int
    """Size of the whole value when the answer began (its Content-Length or Content-Range)."""
    identity: str | None = None
    """What identified the value's bytes when the answer began (a local file's
    stat, :attr:`.validators.Described.identity`), checked after every piece;
    ``None``: nothing cheap to check (a remote object)."""


@dataclass(frozen=True, slots=True)
class PieceRead:
    """One ranged store read of a stream: ask ``start``-``stop``, expect ``expected`` bytes."""

    start: int
    """First byte asked for."""
    stop: int
    """One past the last byte asked for."""
    expected: int
    """Bytes the read returns when the value is unchanged."""
    sent: int
    """Bytes of the read that are sent (the first ``sent``)."""


class PieceReader(Protocol):
    """What reads the pieces of a streamed answer (the store its first piece came from)."""

    async def read_piece(self, span: StreamedSpan, read: PieceRead) -> memoryview:
        """The bytes of ``read`` of ``span``, or :class:`StreamAbortedError` if they are
        not the ones due."""
        ...


def piece_reads(span: StreamedSpan, piece_bytes: int) -> list[PieceRead]:
    """The ranged reads that stream ``span``, ``piece_bytes`` at most each.

    The last read asks for one byte more: past the end of the value there is
    none (a value that grew returns it), inside the value there is one (a
    value that shrank to the span's end does not return it).

    Examples
    --------
    >>> [(r.start, r.stop, r.expected, r.sent) for r in piece_reads(StreamedSpan("k", 4, 10, 10), 4)]
    [(4, 8, 4, 4), (8, 11, 2, 2)]
    >>> [(r.start, r.stop, r.expected, r.sent) for r in piece_reads(StreamedSpan("k", 0, 6, 10), 4)]
    [(0, 4, 4, 4), (4, 7, 3, 2)]
    >>> piece_reads(StreamedSpan("k", 10, 10, 10), 4)
    []
    """
    reads = []
    for start in range(span.start, span.stop, piece_bytes):
        stop = min(start + piece_bytes, span.stop)
        if stop < span.stop:
            reads.append(PieceRead(start, stop, stop - start, stop - start))
        else:
            beyond = 1 if stop < span.size else 0
            reads.append(PieceRead(start, stop + 1, stop - start + beyond, stop - start))
    return reads
