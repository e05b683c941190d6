"""A remote source read with credentials that may read but not list it.

A common read-only S3 policy grants ``s3:GetObject`` and not
``s3:ListBucket``. An open of such a source (a composite's, a mount's) makes
no listing: its metadata documents are read at their keys
(:func:`~.prefetch.fetch_documents`), the assays beside the one read are the
ones its store declares (:func:`~..format.store_contents.declared_contents`),
and its count arrays' shards, which a listing pins at once, are pinned by a
``HEAD`` each at the keys their arrays' grids name (:func:`pin_unlisted`), at
most :data:`~.prefetch.MAX_IN_FLIGHT` at once. Every later read of a shard
then carries ``If-Match`` as it would after a listing. Those ``HEAD`` requests are
bounded (:data:`MAX_UNLISTED_HEADS`, :func:`bounded_grid_keys`): a grid of
more chunk objects is refused, naming the remedy, before any is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zarr.core.sync import sync

from ..format.chunk_keys import grid_keys, grid_size
from ..format.option_names import source_label, source_options_example
from ..format.source_store import AssayInfo
from ..remote.failures import source_failure
from ..remote.pinned_store import PinnedSourceStore
from .prefetch import MAX_IN_FLIGHT

__all__ = ["MAX_UNLISTED_HEADS", "bounded_grid_keys", "pin_unlisted", "tables_need_listing"]

#: The most chunk objects an open asks for by ``HEAD`` in place of one refused listing
#: of a source: a listing names a thousand objects a request, a ``HEAD`` one, so past
#: this (over a thousand rounds of :data:`~.prefetch.MAX_IN_FLIGHT`) the listing is
#: what the open needs. It also bounds the keys held: a grid is counted before any of
#: its keys is named (a damaged document may name 10^15 chunks).
MAX_UNLISTED_HEADS = 100_000


def bounded_grid_keys(
    pinned: PinnedSourceStore, arrays: Sequence[tuple[str, Mapping[str, Any], str]]
) -> list[str]:
    """The chunk keys of ``arrays`` (each ``(path, metadata document, where)``) of the
    source ``pinned``, whose listing was refused, to be asked for by ``HEAD``; refused
    (an ``OSError``: ``PermissionError``, or the :class:`~..errors.SourceUnavailableError`
    a source's open says it as, naming the count and the remedy) past
    :data:`MAX_UNLISTED_HEADS`, before any key is named."""
    total = sum(grid_size(path, document, where=where) for path, document, where in arrays)
    if total > MAX_UNLISTED_HEADS:
        names = ", ".join(repr(path) for path, _, _ in arrays)
        # said in full (the source, the count, the remedy): not named again around it
        raise source_failure(
            pinned.listing_refused_error(
                "",
                needs=(
                    f"read by path, its open would make a HEAD of each of the {total:,} chunk "
                    f"objects of {names} (more than {MAX_UNLISTED_HEADS:,}, where a listing "
                    "takes a request per thousand), so it"
                ),
            )
        )
    return [
        key for path, document, where in arrays for key in grid_keys(path, document, where=where)
    ]


def pin_unlisted(pinned: PinnedSourceStore, info: AssayInfo) -> int:
    """Pin the shards of the verified assay ``info`` of an unlisted source (a ``HEAD``
    each, a bounded number at once); returns how many were pinned."""
    arrays = [info.paths.counts, info.paths.counts_t][: 1 + info.has_counts_t]
    documents = [(path, info.array_metadata[path].to_dict(), info.paths.assay) for path in arrays]
    keys = bounded_grid_keys(pinned, documents)
    return sync(pinned.pin_keys(keys, limit=MAX_IN_FLIGHT))


def tables_need_listing(name: str, where: str, refused: str) -> PermissionError:
    """The refusal of a creation that must copy a source's tables when the source's
    listing was refused: a table's columns are found only by listing its group."""
    return PermissionError(
        f"{source_label(name)} at {where}: its listing was refused ({refused}); a new "
        "composite copies every column of the source's cell and feature tables, and only a "
        "listing of their groups finds them all (credentials that may read but not list, "
        "such as S3 without s3:ListBucket, cannot). Create the composite with credentials "
        f"that may also list the source, as {source_options_example(name)}: opening and "
        "reading it afterwards needs read access only"
    )
