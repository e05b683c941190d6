"""``cytearc-vfs serve`` keeps its answer memory bounded whatever clients do.

Real servers on 127.0.0.1 and real sockets: a zarr sharded array whose one
shard is 32 MiB, clients that ask for it and stop reading, clients that
leave mid-answer, a value rewritten while it is streamed, ranges over
streamed values, and a composite whose computed chunks are larger than a
piece. Bounds are asserted from the server's counters (bytes held, peak,
waits, pieces read), never from wall time. The budget itself
(:class:`AnswerBudget`) is tested on its own: first come, first served,
nobody passes a waiting ask, a timed-out ask leaves the line.
"""

from __future__ import annotations

import asyncio
import doctest
import http.client
import itertools
import os
import re
import signal
import socket
import struct
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import numpy as np
import pytest
import zarr
from cli_harness import run_main
from conftest import realistic_counts
from cytearc_vfs_adapters.serve import ServeOptions, StoreServer
from cytearc_vfs_adapters.serve import budget as budget_module
from cytearc_vfs_adapters.serve import pieces as pieces_module
from cytearc_vfs_adapters.serve.budget import AnswerBudget
from cytearc_vfs_adapters.serve.pieces import StreamedSpan, piece_reads
from hypothesis import given
from hypothesis import strategies as st
from s3_server import S3Server
from test_serve import (
    Running,
    all_keys,
    start_serve,  # noqa: F401  (a fixture)
    stored,
    wait_until,
)
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

import cytearc_vfs as cv
import cytearc_vfs.composite.create as composite_create

PROTO = default_buffer_prototype()
MiB = 1 << 20
PIECE = MiB
SHARD_KEY = "big/c/0"
SMALL_KEY = "small/c/0"

# ----------------------------------------------------------------- helpers


def get(
    url: str, key: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request(method, "/" + key, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def address(server: StoreServer) -> tuple[str, int]:
    parts = urlsplit(server.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def stalled_client(server: StoreServer, key: str, *, wait_for_head: bool = True) -> socket.socket:
    """A client that asks for ``key`` and then reads nothing more (a tiny receive buffer)."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.settimeout(60)
    client.connect(address(server))
    client.sendall(f"GET /{key} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    if wait_for_head:
        client.recv(1024)  # the answer has begun
    return client


def wait_stalled(server: StoreServer, held: int) -> None:
    """Wait until the server holds ``held`` answer bytes and reads no further piece.

    A client that reads nothing still takes bytes until the kernel's socket
    buffers are full; only then does its answer hold its piece for good.
    """
    seen: list[tuple[int, int]] = []

    def still() -> bool:
        stats = server.stats()
        seen.append((stats.held_bytes, stats.piece_reads))
        return len(seen) >= 15 and len(set(seen[-15:])) == 1 and seen[-1][0] == held

    wait_until(still, f"{held} answer bytes held by stalled clients")


def hang_up(client: socket.socket) -> None:
    """Close with RST, as a killed client does: the server's next write fails at once."""
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


def read_head(client: socket.socket) -> tuple[int, int, bytes]:
    """Read an answer's head: status, promised Content-Length, the body bytes that came with it."""
    received = b""
    while b"\r\n\r\n" not in received:
        data = client.recv(1024)
        assert data, received[:200]
        received += data
    head, _, body = received.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: (\d+)", head)
    assert length is not None, head
    return int(head.split(b" ", 2)[1]), int(length.group(1)), body


def read_to_end(client: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    body = b""
    while data := client.recv(1 << 20):
        body += data
    return body


# ----------------------------------------------------------------- stores


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> LocalStore:
    """A zarr sharded array with one 32 MiB shard (uncompressed), and a small array."""
    root = tmp_path_factory.mktemp("sharded") / "store.zarr"
    writable = LocalStore(root)
    big = zarr.create_array(
        writable,
        name="big",
        shape=(32 * MiB,),
        dtype="uint8",
        chunks=(MiB,),
        shards=(32 * MiB,),
        compressors=None,
    )
    big[:] = np.frombuffer(np.random.default_rng(0).bytes(32 * MiB), dtype=np.uint8)
    small = zarr.create_array(writable, name="small", shape=(1000,), dtype="int32", chunks=(1000,))
    small[:] = np.arange(1000, dtype=np.int32)
    return LocalStore(root, read_only=True)


def options(**changes: float) -> ServeOptions:
    return ServeOptions(piece_bytes=PIECE, **changes)  # type: ignore[arg-type]


# ----------------------------------------------------- the budget, on its own


async def test_the_budget_serves_first_come_first_served() -> None:
    budget = AnswerBudget(10)
    first = budget.try_acquire(8)
    assert first is not None and budget.held == 8
    order: list[str] = []

    async def ask(name: str, nbytes: int) -> None:
        lease = await budget.acquire(nbytes, timeout=30)
        order.append(name)
        await asyncio.sleep(0)
        lease.release()

    large = asyncio.create_task(ask("large", 10))
    await asyncio.sleep(0)
    small = asyncio.create_task(ask("small", 1))
    await asyncio.sleep(0)
    # 2 bytes are free, but the small ask waits behind the large one: nobody passes
    assert order == [] and budget.waits == 2
    assert budget.try_acquire(1) is None, "an ask passed the line"
    first.release()
    await asyncio.gather(large, small)
    assert order == ["large", "small"]
    assert budget.held == 0 and budget.peak == 10


async def test_an_ask_larger_than_the_budget_gets_the_whole_budget() -> None:
    budget = AnswerBudget(10)
    lease = await budget.acquire(1000, timeout=1)
    assert lease.nbytes == 10 and budget.held == 10
    lease.shrink(4)
    assert budget.held == 4
    lease.release()
    lease.release()  # once only
    assert budget.held == 0


async def test_a_timed_out_ask_leaves_the_line_and_lets_the_next_in() -> None:
    budget = AnswerBudget(10)
    holder = budget.try_acquire(6)
    assert holder is not None
    with pytest.raises(TimeoutError):
        await budget.acquire(10, timeout=0.05)  # at the head, waiting for all 10 bytes
    # the ask behind it fitted all along: it is granted once the large one left
    assert (await budget.acquire(4, timeout=1)).nbytes == 4
    assert budget.held == 10
    waiting = asyncio.create_task(budget.acquire(3, timeout=30))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    holder.release()
    assert budget.held == 4, "a cancelled ask kept bytes"


@given(
    limit=st.integers(1, 64),
    asks=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 5)), min_size=1, max_size=30),
)
def test_any_asks_are_granted_in_order_within_the_limit(
    limit: int, asks: list[tuple[int, int]]
) -> None:
    """Whatever is asked (larger than the limit too) and however long it is held:
    grants come in the order of the asks, never more than the limit is held, and
    everything comes back."""
    budget = AnswerBudget(limit)
    granted: list[int] = []

    async def ask(index: int, nbytes: int, steps: int) -> None:
        lease = await budget.acquire(nbytes, timeout=30)
        assert lease.nbytes == min(nbytes, limit) and budget.held <= limit
        granted.append(index)
        for _ in range(steps):
            await asyncio.sleep(0)
        lease.release()

    async def run() -> None:
        await asyncio.gather(*(ask(i, n, k) for i, (n, k) in enumerate(asks)))

    asyncio.run(run())
    assert granted == list(range(len(asks)))
    assert budget.held == 0 and budget.peak <= limit


def test_piece_reads_cover_the_span_and_read_one_byte_past_it() -> None:
    for start, stop, size, piece in [(0, 10, 10, 3), (3, 9, 20, 4), (0, 4, 4, 4), (5, 6, 6, 1)]:
        reads = piece_reads(StreamedSpan("k", start, stop, size), piece)
        sent = [(r.start, r.start + r.sent) for r in reads]
        assert sent[0][0] == start and sent[-1][1] == stop
        assert all(a[1] == b[0] for a, b in itertools.pairwise(sent))
        assert all(r.stop - r.start <= piece for r in reads[:-1])
        last = reads[-1]
        assert last.stop == stop + 1 and last.expected == last.sent + (stop < size)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"piece_bytes": 0}, "piece_bytes must be a positive number"),
        ({"max_answer_bytes": MiB, "piece_bytes": MiB}, "must be smaller than max_answer_bytes"),
        ({"max_reads": 0}, "max_reads must be a positive number"),
    ],
)
def test_options_that_cannot_work_are_refused(changes: dict[str, int], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        ServeOptions(**changes)  # type: ignore[arg-type]


# ------------------------------------------------- slow clients, bounded memory


def test_stalled_clients_hold_one_piece_each_and_block_no_one(sharded: LocalStore) -> None:
    shard = stored(sharded, SHARD_KEY)
    budget = 32 * MiB
    with StoreServer.start(sharded, options=options(max_answer_bytes=budget)) as server:
        stalled = [stalled_client(server, SHARD_KEY) for _ in range(20)]
        try:
            # each stalled answer holds exactly the piece its client does not take
            wait_until(lambda: server.stats().held_bytes == 20 * PIECE, "twenty stalled pieces")
            # meanwhile a fast client reads other keys and the same shard, every byte checked
            for _ in range(5):
                assert get(server.url, "big/zarr.json")[::2] == (
                    200,
                    stored(sharded, "big/zarr.json"),
                )
                assert get(server.url, SMALL_KEY)[::2] == (200, stored(sharded, SMALL_KEY))
            status, headers, body = get(server.url, SHARD_KEY)
            assert status == 200 and int(headers["content-length"]) == len(shard)
            assert body == shard
            status, _, body = get(server.url, SHARD_KEY, {"Range": "bytes=5000000-"})
            assert status == 206 and body == shard[5_000_000:]
            wait_until(lambda: server.stats().held_bytes == 20 * PIECE, "the fast answers done")
            stats = server.stats()
            assert stats.open_connections >= 20 and stats.dropped == 0
            # the old behaviour held 20 whole shards (640 MiB); now one piece per answer
            assert stats.peak_held_bytes <= 21 * (PIECE + 1) <= budget
            assert stats.streamed == 22 and stats.budget_waits == 0
        finally:
            for client in stalled:
                hang_up(client)
        wait_until(lambda: server.stats().held_bytes == 0, "the stalled pieces given back")
        wait_until(lambda: server.stats().open_connections == 0, "every connection closed")
        assert server.stats().dropped == 20 and server.stats().aborted == 0


def test_slow_clients_cannot_starve_a_fast_one(sharded: LocalStore) -> None:
    """More stalled clients than the budget has pieces: they wait in line, are
    dropped by the write timeout, and the fast client, in line behind them, is
    served every byte (no 503, no cut body)."""
    shard = stored(sharded, SHARD_KEY)
    budget = 4 * PIECE
    settings = options(max_answer_bytes=budget, write_timeout=0.5, answer_wait_timeout=60)
    with StoreServer.start(sharded, options=settings) as server:
        stalled = [stalled_client(server, SHARD_KEY, wait_for_head=False) for _ in range(12)]
        try:
            wait_until(
                lambda: server.stats().held_bytes == budget and server.stats().budget_waits >= 8,
                "four stalled holders and eight in line",
            )
            results: dict[str, tuple[int, dict[str, str], bytes]] = {}
            fast = threading.Thread(target=lambda: results.update(shard=get(server.url, SHARD_KEY)))
            fast.start()
            fast.join(timeout=120)
            assert not fast.is_alive()
            status, _headers, body = results["shard"]
            assert status == 200 and body == shard
            assert get(server.url, SMALL_KEY)[::2] == (200, stored(sharded, SMALL_KEY))
            # the stalled clients still in line when the fast one was done are dropped too
            wait_until(lambda: server.stats().dropped == 12, "every stalled client dropped")
            stats = server.stats()
            assert stats.peak_held_bytes <= budget and stats.budget_waits >= 8
            assert stats.aborted == 0 and stats.statuses.get(503, 0) == 0
        finally:
            for client in stalled:
                client.close()
        wait_until(lambda: server.stats().held_bytes == 0, "all answer memory given back")


def test_a_client_that_leaves_mid_stream_frees_its_memory(sharded: LocalStore) -> None:
    with StoreServer.start(sharded, options=options()) as server:
        for round_ in range(1, 4):
            client = stalled_client(server, SHARD_KEY)
            wait_until(lambda: server.stats().held_bytes == PIECE, "a stalled piece")
            hang_up(client)
            wait_until(lambda: server.stats().held_bytes == 0, "the piece given back")
            assert server.stats().dropped == round_
        assert server.stats().aborted == 0
        assert get(server.url, SMALL_KEY)[0] == 200


def test_an_answer_that_waits_too_long_for_memory_is_refused_before_its_head(
    sharded: LocalStore,
) -> None:
    budget = 2 * PIECE
    settings = options(max_answer_bytes=budget, answer_wait_timeout=0.2)
    with StoreServer.start(sharded, options=settings) as server:
        stalled = [stalled_client(server, SHARD_KEY) for _ in range(2)]
        try:
            wait_stalled(server, budget)
            status, headers, body = get(server.url, SMALL_KEY)
            assert status == 503 and headers["retry-after"] == "1"
            assert b"answer memory" in body and b"retry" in body
            stats = server.stats()
            assert stats.statuses[503] == 1 and stats.budget_waits == 1
            assert stats.held_bytes == budget, "the refused answer held nothing"
        finally:
            for client in stalled:
                hang_up(client)
        wait_until(lambda: server.stats().held_bytes == 0, "all answer memory given back")
        assert get(server.url, SMALL_KEY)[::2] == (200, stored(sharded, SMALL_KEY))


def test_a_stream_that_waits_too_long_for_its_next_piece_is_cut(
    sharded: LocalStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Two stalled streams fill the budget; a third answer waits in line. When one
    of the stalled clients reads, its freed piece goes to the answer in line (first
    come, first served), and its own next piece waits: past answer_wait_timeout its
    connection is cut, short of its Content-Length."""
    budget = 2 * PIECE
    settings = options(max_answer_bytes=budget, answer_wait_timeout=1.0)
    with StoreServer.start(sharded, options=settings) as server:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.settimeout(60)
        reader.connect(address(server))
        reader.sendall(f"GET /{SHARD_KEY} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        status, length, body = read_head(reader)
        other = stalled_client(server, SHARD_KEY)
        wait_stalled(server, budget)
        third = stalled_client(server, SHARD_KEY, wait_for_head=False)
        wait_until(lambda: server.stats().budget_waits == 1, "a third answer in line")
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        try:
            with reader:
                body += read_to_end(reader)
            stats = server.stats()
            assert (status, stats.aborted) == (200, 1)
            assert len(body) < length, "a cut stream looked complete"
        finally:
            hang_up(other)
            hang_up(third)
        wait_until(lambda: server.stats().held_bytes == 0, "all answer memory given back")
    assert any("no answer memory came free within 1 s" in r.getMessage() for r in caplog.records)


def test_listings_are_held_under_the_budget_too(sharded: LocalStore) -> None:
    budget = 2 * PIECE
    with StoreServer.start(sharded, options=options(max_answer_bytes=budget)) as server:
        status, _, listing = get(server.url, "big/", {"Accept": "text/html"})
        assert status == 200 and b'href="zarr.json"' in listing
        assert server.stats().peak_held_bytes == len(listing)
        # the budget full of stalled pieces: the listing waits in line, then comes whole
        stalled = [stalled_client(server, SHARD_KEY) for _ in range(2)]
        wait_stalled(server, budget)
        answers: list[tuple[int, dict[str, str], bytes]] = []
        waiting = threading.Thread(
            target=lambda: answers.append(get(server.url, "big/", {"Accept": "text/html"}))
        )
        waiting.start()
        wait_until(lambda: server.stats().budget_waits == 1, "the listing in line")
        assert not answers
        for client in stalled:
            hang_up(client)
        waiting.join(timeout=60)
        assert answers and answers[0][::2] == (200, listing)
        assert server.stats().peak_held_bytes <= budget
        wait_until(lambda: server.stats().held_bytes == 0, "all answer memory given back")


# ------------------------------------------------- values that change mid-stream


@pytest.mark.parametrize(
    "change",
    [
        "grows",
        "shrinks",
        "vanishes",
        "grows under a suffix range",
        # the same size, other bytes: its later pieces were read from the new
        # file and the client got a complete body of mixed bytes, under the old ETag
        "replaced by a rename",
        "rewritten in place",
        "replaced under a suffix range",
    ],
)
def test_a_value_that_changes_mid_stream_cuts_the_connection(
    tmp_path: Path, change: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "blob"
    original = np.random.default_rng(1).bytes(12 * MiB)
    path.write_bytes(original)
    store = LocalStore(tmp_path / "store", read_only=True)
    ranged = change.endswith("range")
    with StoreServer.start(store, options=options()) as server:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.settimeout(60)
        client.connect(address(server))
        extra = "Range: bytes=-10000000\r\n" if ranged else ""
        client.sendall(f"GET /blob HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
        status, length, body = read_head(client)
        wait_until(lambda: server.stats().held_bytes == PIECE, "the stream under way")
        if change.startswith("grows"):
            with path.open("ab") as grown:
                grown.write(b"appended")
        elif change == "shrinks":
            os.truncate(path, 6 * MiB)
        elif change.startswith("replaced"):
            other = tmp_path / "other"
            other.write_bytes(np.random.default_rng(2).bytes(len(original)))
            os.replace(other, path)
        elif change == "rewritten in place":
            with path.open("r+b") as rewritten:
                rewritten.write(np.random.default_rng(2).bytes(len(original)))
        else:
            path.unlink()
        # a larger window from now on: the rest arrives quickly
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        with client:
            body += read_to_end(client)
        wait_until(lambda: server.stats().aborted == 1, "the aborted answer counted")
        assert server.stats().held_bytes == 0
    assert status == (206 if ranged else 200)
    assert length == (10_000_000 if ranged else len(original))
    assert len(body) < length, "a changed value was sent as a complete-looking body"
    logged = [r.getMessage() for r in caplog.records if "answer cut off" in r.getMessage()]
    assert len(logged) == 1 and "'blob'" in logged[0]


# ------------------------------------------------------ ranges, HEAD, pieces read


def test_ranges_over_streamed_values_are_exact(sharded: LocalStore) -> None:
    shard = stored(sharded, SHARD_KEY)
    size = len(shard)
    cases = [
        (None, shard),
        ("bytes=0-", shard),
        ("bytes=1000-5242879", shard[1000:5_242_880]),
        (f"bytes={size - 3 * MiB - 7}-", shard[size - 3 * MiB - 7 :]),
        ("bytes=-3145735", shard[-3_145_735:]),
        (f"bytes=-{size + 10}", shard),
        ("bytes=10-20", shard[10:21]),
        (f"bytes={PIECE - 1}-{PIECE}", shard[PIECE - 1 : PIECE + 1]),
    ]
    with StoreServer.start(sharded, options=options()) as server:
        for header, want in cases:
            before = server.stats()
            status, headers, body = get(server.url, SHARD_KEY, {"Range": header} if header else {})
            assert body == want, header
            assert int(headers["content-length"]) == len(want)
            if header is None:
                assert status == 200 and "content-range" not in headers
            else:
                assert status == 206 and headers["content-range"].endswith(f"/{size}")
            after = server.stats()
            # pieces of at most PIECE bytes: as many reads as pieces, one answer in memory
            pieces = -(-len(want) // PIECE)
            assert after.piece_reads - before.piece_reads == (pieces if pieces > 1 else 0)
            assert after.peak_held_bytes <= PIECE + 1
        # HEAD: the size, nothing read
        before = server.stats()
        status, headers, body = get(server.url, SHARD_KEY, method="HEAD")
        assert (status, int(headers["content-length"]), body) == (200, size, b"")
        assert server.stats().piece_reads == before.piece_reads
        # a value of exactly one piece, and one byte more than a piece
        for length in (PIECE, PIECE + 1):
            status, _, body = get(server.url, SHARD_KEY, {"Range": f"bytes=0-{length - 1}"})
            assert status == 206 and body == shard[:length]
        # the client may have every byte a moment before the server gives the piece back
        wait_until(lambda: server.stats().held_bytes == 0, "the last piece given back")


# -------------------------------------------------------------- composites


@pytest.fixture(scope="module")
def composite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cv.CompositeStore]:
    root = tmp_path_factory.mktemp("composite")
    for name, (cells, seed) in {"a": (400, 1), "b": (300, 2)}.items():
        cv.write_counts(
            root / f"{name}.zarr",
            realistic_counts(cells, 80, density=0.1, seed=seed),
            cells=[f"{name}{i}" for i in range(cells)],
            features=[f"g{i}" for i in range(80)],
        )
    with mock.patch.object(composite_create, "VIRTUAL_CHUNK_BYTES", 24_000):
        created = cv.create_composite(
            root / "comp.zarr", {"a": root / "a.zarr", "b": root / "b.zarr"}
        )
    created.close()
    store = cv.open_store(root / "comp.zarr")
    assert isinstance(store, cv.CompositeStore)
    yield store
    store.close()


def test_a_composite_chunk_larger_than_a_piece_is_computed_once(
    composite: cv.CompositeStore,
) -> None:
    key = "RNA/counts/c/1/0"
    size = sync(composite.getsize(key))
    piece = 256
    assert size > 10 * piece  # would be many pieces if it were streamed
    whole = stored(composite, key)
    settings = ServeOptions(piece_bytes=piece, max_answer_bytes=8 * piece)
    with StoreServer.start(composite, options=settings) as server:
        for header, want, status in [
            (None, whole, 200),
            ("bytes=100-30000", whole[100:30001], 206),
            (f"bytes=-{piece * 3}", whole[-piece * 3 :], 206),
        ]:
            before = composite.chunk_stats
            got = get(server.url, key, {"Range": header} if header else {})
            assert (got[0], got[2]) == (status, want), header
            assert composite.chunk_stats.reads == before.reads + 1, "computed more than once"
        stats = server.stats()
        assert stats.streamed == 0 and stats.piece_reads == 0
        # computed whole, it holds its whole size, granted even above the budget
        assert stats.peak_held_bytes == min(size, 8 * piece)
        wait_until(lambda: server.stats().held_bytes == 0, "the chunk given back")
        # the composite's own stored keys are streamed like any stored value
        own = max(
            (key for key in all_keys(composite.backing) if not key.endswith("zarr.json")),
            key=lambda key: sync(composite.backing.getsize(key)),
        )
        value = stored(composite.backing, own)
        assert len(value) > piece
        assert get(server.url, own)[::2] == (200, value)
        assert server.stats().streamed == 1
        assert server.stats().piece_reads == -(-len(value) // piece)


# ------------------------------------------------------------ remote stores


@pytest.mark.remote
def test_a_remote_store_is_streamed_in_ranged_reads(s3_server: S3Server) -> None:
    """On S3 every piece is a ranged GET; the last asks one byte past the span (or the
    object), which S3 answers with what there is."""
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    cv.write_counts(
        f"s3://{bucket}/s.zarr",
        realistic_counts(3000, 200, density=0.3, seed=5),
        storage_options=options,
    )
    store = cv.open_store(f"s3://{bucket}/s.zarr", storage_options=options)
    try:
        key = max(
            (key for key in all_keys(store) if "/c/" in key),
            key=lambda key: sync(store.getsize(key)),
        )
        value = stored(store, key)
        piece = 16 * 1024
        assert len(value) > 4 * piece
        settings = ServeOptions(piece_bytes=piece, max_answer_bytes=4 * piece)
        with StoreServer.start(store, options=settings) as server:
            assert get(server.url, key)[::2] == (200, value)
            tail = len(value) - 3 * piece - 5
            assert get(server.url, key, {"Range": f"bytes=-{tail}"})[::2] == (206, value[-tail:])
            middle = get(server.url, key, {"Range": f"bytes=100-{2 * piece + 99}"})
            assert middle[::2] == (206, value[100 : 2 * piece + 100])
            stats = server.stats()
            pieces = [-(-n // piece) for n in (len(value), tail, 2 * piece)]
            assert stats.streamed == 3 and stats.piece_reads == sum(pieces)
            assert stats.peak_held_bytes <= 4 * piece and stats.aborted == 0
            assert get(server.url, "zarr.json")[::2] == (200, stored(store, "zarr.json"))
    finally:
        store.close()


# ------------------------------------------------------------ command line


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("lots", "is not a size"),
        ("-5M", "is negative"),
        ("1M", "smaller than two 1.0 MiB pieces"),
    ],
)
def test_cli_refuses_an_answer_memory_that_cannot_work(
    sharded: LocalStore, tmp_path: Path, value: str, words: str
) -> None:
    location = tmp_path / "a.zarr"
    cv.write_counts(location, realistic_counts(20, 10, seed=3))
    result = run_main("serve", str(location), f"--max-answer-memory={value}")
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_serves_under_an_answer_memory(
    start_serve: Callable[..., Running],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    location = tmp_path / "a.zarr"
    cv.write_counts(location, realistic_counts(3000, 300, density=0.3, seed=4))
    store = cv.open_store(location)
    key = max(
        (key for key in all_keys(store) if "/c/" in key), key=lambda key: sync(store.getsize(key))
    )
    running = start_serve([str(location), "--max-answer-memory", "2M"], terminal=False)
    url = running.first_line.split()[1]
    assert get(url, key)[::2] == (200, stored(store, key))
    running.process.send_signal(signal.SIGINT)
    running.read_rest()
    assert running.process.returncode == 130


@pytest.mark.parametrize("module", [budget_module, pieces_module])
def test_docstring_examples(module: types.ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
