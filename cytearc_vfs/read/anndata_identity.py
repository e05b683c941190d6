"""The identity of an AnnData source: object versions and byte digests.

Two costs, kept apart. **Versions** (:func:`listed_versions`): the size and
version of every object a source's identity covers, from one listing on
object storage (ETags) or a ``stat`` per local file (modification and change
times): no object is read. **Digests** (:func:`fingerprints_of`): sha256 of
the stored bytes of each group's objects (``counts``: the matrix element;
``cells``/``features``: the obs and var index columns), read a window at a
time; computed at creation, and at an open only for a group whose versions
changed. :mod:`.anndata_sources` records both and compares them.

**The open of a local source** (:func:`unchanged_locally`) costs no walk: it
stats the directories recorded at creation (:func:`watched_directories`:
an object added, removed or renamed into place moves its directory's times),
every metadata document, and a bounded sample of the other files (an edit in
place); anything different sends the open to the full walk and digests. The
reads check each chunk file they open against the same record
(:mod:`.local_chunk_files`), so an edit in place that the sample missed is
refused when the edited file is read.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype

from ..format.fingerprints import combine
from ..remote.failures import source_failure
from ..remote.locations import Location, local_path
from ..remote.object_versions import Listing
from ..remote.pinned_store import PinnedSourceStore, pinned_store_of
from .local_chunk_files import file_version
from .prefetch import MAX_IN_FLIGHT
from .unlisted_sources import bounded_grid_keys

__all__ = [
    "GROUPS",
    "absent_or_refused",
    "fingerprints_of",
    "listed_versions",
    "pin_element",
    "unchanged_locally",
    "unlisted_keys",
    "watched_directories",
]

#: The fingerprinted groups of an AnnData source.
GROUPS = ("counts", "cells", "features")
# Objects digested concurrently (their bytes are held until hashed in order).
DIGEST_WINDOW = 32
#: Chunk files of each watched prefix that a local open stats (all when fewer).
SAMPLED_FILES = 64
_DOCUMENT_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup"})
# a fresh draw at every open: an edit in place is found by some open
_DRAW = random.SystemRandom()


def _directory_version(stat: os.stat_result) -> str:
    # a directory's modification time moves when an entry is added, removed or
    # renamed into it (zarr's LocalStore writes every object by an atomic
    # rename); the inode changes when the directory itself is replaced
    return f"ino:{stat.st_ino}:mtime:{stat.st_mtime_ns}:ctime:{stat.st_ctime_ns}"


def _walk(root: Path, prefixes: list[str]) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """``({file key: [size, version]}, {directory key: version})`` under ``prefixes``.

    Keys are built as strings (no ``pathlib`` per file): the walk at creation, and
    at an open of a changed source, costs one ``stat`` per file and nothing more.
    """
    files: dict[str, list[Any]] = {}
    directories: dict[str, str] = {}
    base = os.fspath(root)
    pending = [prefix.rstrip("/") for prefix in prefixes]
    while pending:
        relative = pending.pop()
        try:
            directories[relative + "/"] = _directory_version(os.stat(os.path.join(base, relative)))
            entries = list(os.scandir(os.path.join(base, relative)))
        except (FileNotFoundError, NotADirectoryError):
            directories.pop(relative + "/", None)
            continue
        for entry in entries:
            key = f"{relative}/{entry.name}"
            if entry.is_dir(follow_symlinks=True):
                pending.append(key)
            else:
                stat = entry.stat()
                files[key] = [stat.st_size, file_version(stat)]
    return files, directories


def _local_versions(root: Path, prefixes: list[str], documents: list[str]) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for key in documents:
        try:
            stat = (root / key).stat()
        except FileNotFoundError:
            continue
        found[key] = [stat.st_size, file_version(stat)]
    found.update(_walk(root, prefixes)[0])
    return found


async def listed_versions(
    backend: Store,
    location: Location,
    prefixes: list[str],
    documents: list[str],
    held: Mapping[str, bytes | None] | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> dict[str, list[Any]] | None:
    """``{key: [size, version]}`` of the objects under ``prefixes`` and the ``documents``
    that exist, from one listing (object storage) or a ``stat`` per local file;
    ``None`` when the store reports no versions.

    An object store whose listing is refused (credentials that may read but not
    list) is asked by path instead, given the ``held`` documents: a ``HEAD`` of
    each document and of every chunk key the grids of the arrays under
    ``prefixes`` name (:func:`unlisted_keys`), at most
    :data:`~.prefetch.MAX_IN_FLIGHT` at once. An object a listing would show
    outside those keys cannot be seen: a record taken with a listing that holds
    one then differs, and the open fails closed. A key answered ``403`` (S3's
    answer to an absent key too) is absent only where ``held`` or ``recorded``
    (the objects the composite recorded, at an open) prove it so:
    :func:`absent_or_refused`.
    """
    wanted = tuple(prefix.rstrip("/") + "/" for prefix in prefixes)
    pinned = pinned_store_of(backend)
    if pinned is not None:
        listing: Listing | None = await pinned.list_objects()
        if listing is None and pinned.listing_refused is not None and held is not None:
            keys = unlisted_keys(pinned, prefixes, documents, held)
            forbidden: list[str] = []
            listing = await pinned.head_objects(keys, limit=MAX_IN_FLIGHT, forbidden=forbidden)
            absent_or_refused(pinned, forbidden, documents, held, recorded)
        if listing is None:
            return None
        return {
            key: [entry.size, entry.token]
            for key, entry in listing.items()
            if key in documents or key.startswith(wanted)
        }
    root = local_path(location)
    if root is None:
        return None
    return await asyncio.to_thread(_local_versions, root, list(wanted), documents)


def unlisted_keys(
    pinned: PinnedSourceStore,
    prefixes: list[str],
    documents: list[str],
    held: Mapping[str, bytes | None],
) -> list[str]:
    """Every key a listing of ``prefixes`` and ``documents`` could show of the AnnData
    source ``pinned``: the documents, and each chunk key of every array whose document
    under ``prefixes`` is ``held`` (stored or not: an absent one is absent from the
    answer too). Refused past :data:`~.unlisted_sources.MAX_UNLISTED_HEADS` chunk keys
    (:func:`~.unlisted_sources.bounded_grid_keys`), before any is named.
    """
    wanted = tuple(prefix.rstrip("/") + "/" for prefix in prefixes)
    arrays: list[tuple[str, Mapping[str, Any], str]] = []
    for key in documents:
        data = held.get(key)
        if data is None or not key.startswith(wanted):
            continue
        path, _, name = key.rpartition("/")
        try:
            document = json.loads(data)
        except ValueError:
            continue  # damaged: refused by the element's own read, in its words
        if not isinstance(document, dict):
            continue
        if name == ".zarray" or (name == "zarr.json" and document.get("node_type") == "array"):
            arrays.append((path, document, key))
    return list(dict.fromkeys([*documents, *bounded_grid_keys(pinned, arrays)]))


def absent_or_refused(
    pinned: PinnedSourceStore,
    keys: list[str],
    documents: list[str],
    held: Mapping[str, bytes | None],
    recorded: Mapping[str, Any] | None,
) -> None:
    """Hold ``keys`` of an AnnData source, answered ``403`` to a ``HEAD`` once its listing
    was refused, as absent where that is proved, or refuse the first that is not
    (:class:`~..errors.SourceUnavailableError`, naming it and both remedies).

    S3 answers ``403`` for a missing object to credentials that may not list. One of
    the ``documents`` is absent when it was read as absent (``held`` holds ``None``:
    at an open, recorded absent at creation); a chunk when the composite's record of
    the source's objects (``recorded``, taken with a listing at creation) lacks it. A
    document read, or a chunk recorded, is forbidden or replaced: never zeros. At
    creation (no record) a chunk answered so is refused: nothing proves it absent.
    """
    for key in keys:
        if key in documents:
            if held.get(key) is None:
                continue
            why = "this metadata document was read there (recorded at creation, or read now)"
        elif recorded is not None and key not in recorded:
            continue
        elif recorded is not None:
            why = "the composite recorded this object present when it was created"
        else:  # at creation: nothing recorded yet
            why = "no record of this AnnData source's objects proves it absent"
        raise source_failure(pinned.forbidden(key, why))
    pinned.pins.mark_absent(key for key in keys if key not in documents)


def _local_directories(root: Path, prefixes: list[str], absent: list[str]) -> dict[str, str]:
    directories = _walk(root, prefixes)[1]
    for key in absent:
        # a document absent at creation appears by an entry added to its directory
        parent = key.rpartition("/")[0]
        try:
            directories[parent + "/"] = _directory_version(os.stat(root / parent))
        except FileNotFoundError:
            continue
    return directories


async def watched_directories(
    location: Location, prefixes: list[str], absent: list[str]
) -> dict[str, str] | None:
    """``{directory key: version}`` of a local source: every directory under
    ``prefixes`` and the directory of each ``absent`` document (``None`` for a
    source not on the local filesystem). An open compares them, not every file."""
    root = local_path(location)
    if root is None:
        return None
    return await asyncio.to_thread(_local_directories, root, prefixes, absent)


def _sampled(objects: Mapping[str, list[Any]], prefixes: list[str]) -> list[str]:
    """The files a local open stats: every metadata document, and of each
    prefix's other files all when at most :data:`SAMPLED_FILES`, else that many
    drawn afresh at each open."""
    keys = [key for key in objects if key.rpartition("/")[2] in _DOCUMENT_NAMES]
    for prefix in prefixes:
        wanted = prefix.rstrip("/") + "/"
        chunks = [
            key
            for key in objects
            if key.startswith(wanted) and key.rpartition("/")[2] not in _DOCUMENT_NAMES
        ]
        keys += chunks if len(chunks) <= SAMPLED_FILES else _DRAW.sample(chunks, SAMPLED_FILES)
    return keys


def _local_unchanged(root: Path, recorded: Mapping[str, Any]) -> bool:
    base = os.fspath(root)
    for key, version in recorded["directories"].items():
        try:
            stat = os.stat(os.path.join(base, key))
        except (FileNotFoundError, NotADirectoryError):
            return False
        if _directory_version(stat) != version:
            return False
    objects = recorded["objects"]
    for key in _sampled(objects, recorded["prefixes"]):
        try:
            stat = os.stat(os.path.join(base, key))
        except (FileNotFoundError, NotADirectoryError):
            return False
        if [stat.st_size, file_version(stat)] != objects[key]:
            return False
    return True


async def unchanged_locally(location: Location, recorded: Mapping[str, Any]) -> bool:
    """Whether a local source is as ``recorded``, at a cost independent of its
    number of files: the watched directories (an object added, removed or
    replaced by a rename), every metadata document, and a sample of the other
    files (an object rewritten in place). ``False`` (the full check is due) when
    anything differs, the source is not local, or the record holds no
    directories (a composite created before they were recorded)."""
    root = local_path(location)
    if root is None or not recorded.get("directories") or not recorded["objects"]:
        return False
    return await asyncio.to_thread(_local_unchanged, root, recorded)


async def _keys_under(store: Store, prefixes: list[str]) -> list[str]:
    keys: list[str] = []
    for prefix in prefixes:
        keys.extend([key async for key in store.list_prefix(prefix.rstrip("/") + "/")])
    return keys


async def _digest(store: Store, keys: list[str], *, domain: str) -> str:
    """Digest of the stored bytes of ``keys`` (in key order), read a window at a time."""
    digest = hashlib.sha256()
    ordered = sorted(set(keys))
    for start in range(0, len(ordered), DIGEST_WINDOW):
        window = ordered[start : start + DIGEST_WINDOW]
        buffers = await asyncio.gather(
            *(store.get(key, default_buffer_prototype()) for key in window)
        )
        for key, buffer in zip(window, buffers, strict=True):
            data = b"" if buffer is None else buffer.to_bytes()
            digest.update(f"{key}\0{len(data)}\0".encode())
            digest.update(data)
    return combine(domain, {"objects": len(ordered), "sha256": digest.hexdigest()})


async def fingerprints_of(
    backend: Store,
    groups: Mapping[str, list[str]],
    versions: dict[str, list[Any]] | None,
    recorded: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Digest of each group's objects (listed where versions were taken).

    With a ``recorded`` entry, a group whose objects all have their recorded
    sizes and versions keeps its recorded digest: a new ``obs`` column (a new
    ``obs`` document) costs no digest of ``X``.
    """
    result: dict[str, str] = {}
    for group in GROUPS:
        wanted = tuple(prefix.rstrip("/") + "/" for prefix in groups[group])
        if versions is not None and recorded is not None:
            now = {k: v for k, v in versions.items() if k.startswith(wanted)}
            then = {k: v for k, v in recorded["objects"].items() if k.startswith(wanted)}
            if now and now == then and all(v[1] is not None for v in now.values()):
                result[group] = recorded["fingerprints"][group]
                continue
            differs = _resized(now, then)
            if differs:
                # the digest covers every object's key and length: it cannot match,
                # so a changed source fails closed without reading its bytes
                result[group] = (
                    f"changed: {len(differs)} object(s) added, removed or resized since, "
                    f"such as {differs[0]}"
                )
                continue
        keys = (
            [key for key in versions if key.startswith(wanted)]
            if versions is not None
            else await _keys_under(backend, groups[group])
        )
        result[group] = await _digest(backend, keys, domain=f"cytearc:anndata-{group}")
    return result


def _resized(now: Mapping[str, list[Any]], then: Mapping[str, list[Any]]) -> list[str]:
    """The objects of one group that were added, removed or resized since ``then``
    (nothing when ``then`` recorded no versions: a store that reports none).

    >>> _resized({"X/a": [3, "v2"], "X/c": [1, "v1"]}, {"X/a": [4, "v1"], "X/b": [1, "v1"]})
    ["'X/a' (4 -> 3 bytes)", "'X/b' (removed)", "'X/c' (added)"]
    >>> _resized({"X/a": [4, "v2"]}, {"X/a": [4, "v1"]})  # same size: only a digest tells
    []
    """
    if not then:
        return []
    found = []
    for key in sorted(now.keys() | then.keys()):
        if key not in now:
            found.append(f"{key!r} (removed)")
        elif key not in then:
            found.append(f"{key!r} (added)")
        elif now[key][0] != then[key][0]:
            found.append(f"{key!r} ({then[key][0]} -> {now[key][0]} bytes)")
    return found


def pin_element(backend: Store, versions: Mapping[str, list[Any]], element: str) -> None:
    """Pin the element's objects of a remote source as listed: a later read of a
    replaced one is refused (:mod:`cytearc_vfs.remote.pinned_store`)."""
    pinned = pinned_store_of(backend)
    if pinned is None:
        return
    for key, (_, token) in versions.items():
        if token is not None and key.startswith(element + "/"):
            pinned.pins.pin(key, token)
