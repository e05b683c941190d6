"""A remote source read with credentials that may read but not list it.

A common read-only S3 policy grants ``s3:GetObject`` and not
``s3:ListBucket``. An open of such a source (a composite's, a mount's) makes
no listing: its metadata documents are read at their keys
(:func:`~.prefetch.fetch_documents`), the assays beside the one read are the
ones its store declares (:func:`~..format.store_contents.declared_contents`),
and its count arrays' shards, which a listing pins at once, are pinned by a
``HEAD`` each at the keys their arrays' grids name (:func:`pin_unlisted`), at
most :data:`~.prefetch.MAX_IN_FLIGHT` at once. Every later read of a shard
then carries ``If-Match`` as it would after a listing.
"""

from __future__ import annotations

from zarr.core.sync import sync

from ..format.chunk_keys import grid_keys
from ..format.option_names import source_label, source_options_example
from ..format.source_store import AssayInfo
from ..remote.pinned_store import PinnedSourceStore
from .prefetch import MAX_IN_FLIGHT

__all__ = ["pin_unlisted", "tables_need_listing"]


def pin_unlisted(pinned: PinnedSourceStore, info: AssayInfo) -> int:
    """Pin the shards of the verified assay ``info`` of an unlisted source (a ``HEAD``
    each, a bounded number at once); returns how many were pinned."""
    arrays = [info.paths.counts, info.paths.counts_t][: 1 + info.has_counts_t]
    keys = [
        key
        for path in arrays
        for key in grid_keys(path, info.array_metadata[path].to_dict(), where=info.paths.assay)
    ]
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
