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

S3 answers such credentials ``403``, not ``404``, for a key that does not
exist. A metadata document so answered is read as absent (it holds no values;
:meth:`~..remote.pinned_store.PinnedSourceStore.forbidden_document`). A shard so
answered is read as absent only where the source's summaries prove it holds
zeros (:func:`prove_zero`); any other key so answered refuses the read, naming
both readings (forbidden, or lost) and both remedies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from ..format.chunk_keys import ChunkKeys, grid_keys, grid_size
from ..format.option_names import source_label, source_options_example
from ..format.paths import join
from ..format.source_store import AssayInfo
from ..remote.failures import source_failure
from ..remote.pinned_store import PinnedSourceStore
from .prefetch import MAX_IN_FLIGHT

__all__ = [
    "MAX_UNLISTED_HEADS",
    "bounded_grid_keys",
    "pin_unlisted",
    "prove_zero",
    "tables_need_listing",
]

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


def pin_unlisted(pinned: PinnedSourceStore, info: AssayInfo, store: Store) -> int:
    """Pin the shards of the verified assay ``info`` of an unlisted source (a ``HEAD``
    each, a bounded number at once); returns how many were pinned.

    S3 answers ``403``, not ``404``, for a missing object to credentials that may
    not list, so a ``HEAD`` answered ``403`` is a shard never written (write_counts
    leaves out a shard of zeros) or one forbidden or lost. It is read as absent
    only where the source's own summaries (read from ``store``, the source's view,
    only then) prove it holds zeros (:func:`prove_zero`); otherwise the open is
    refused, naming the shard and both remedies: never zeros where values are."""
    arrays = [info.paths.counts, info.paths.counts_t][: 1 + info.has_counts_t]
    documents = [(path, info.array_metadata[path].to_dict(), info.paths.assay) for path in arrays]
    keys = bounded_grid_keys(pinned, documents)
    forbidden: list[str] = []
    count = sync(pinned.pin_keys(keys, limit=MAX_IN_FLIGHT, forbidden=forbidden))
    if forbidden:
        prove_zero(pinned, info, store, forbidden)
        pinned.pins.mark_absent(forbidden)
    return count


def prove_zero(
    pinned: PinnedSourceStore, info: AssayInfo, store: Store, keys: Sequence[str]
) -> None:
    """Refuse (:class:`~..errors.SourceUnavailableError`) the first of ``keys``, shards
    of ``counts`` or ``countsT`` of ``info`` answered ``403``, that the summaries do not
    prove zero: a shard of ``counts`` (cells x features) holds only zeros when every
    cell of its cell range has ``rowPositive`` 0, or every feature of its feature range
    ``columnPositive`` 0 (``countsT``: the axes swapped)."""
    paths = info.paths
    positive = {
        name: np.asarray(
            zarr.open_array(store, path=join(paths.summaries, name), mode="r", zarr_format=3)[:]
        )
        for name in ("rowPositive", "columnPositive")
    }
    axes = {
        paths.counts: (positive["rowPositive"], positive["columnPositive"]),
        paths.counts_t: (positive["columnPositive"], positive["rowPositive"]),
    }
    for key in keys:
        array = next(path for path in axes if key.startswith(f"{path}/"))
        document: dict[str, Any] = dict(info.array_metadata[array].to_dict())
        # regular: bounded_grid_keys named the keys from this grid
        shard = document["chunk_grid"]["configuration"]["chunk_shape"]
        where = paths.assay
        coords = ChunkKeys.of_array(document, where=where).decode(key[len(array) + 1 :], 2)
        spans = (
            []
            if coords is None
            else [
                values[index * size : (index + 1) * size]
                for values, index, size in zip(axes[array], coords, shard, strict=True)
            ]
        )
        if any(span.size and not span.any() for span in spans):
            continue  # proved zero: never written, as write_counts leaves such a shard out
        raise source_failure(
            pinned.forbidden(
                key,
                "the store's own summaries (countSummaries rowPositive and columnPositive) "
                "say this shard holds values",
            )
        )


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
