"""No writer writes inside, over or around a store it reads: :func:`check_no_overlap`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from zarr.abc.store import Store

from ..remote.addresses import store_address
from ..remote.locations import Location, describe_location

__all__ = ["check_no_overlap"]


def check_no_overlap(
    destination: Location,
    sources: Mapping[str, Location],
    *,
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Mapping[str, Any] | None] | None = None,
    describe: Callable[[Location], str] = describe_location,
) -> None:
    """Refuse a destination inside, equal to, or around any of ``sources``.

    Locations compare by where their keys live (:func:`store_address`), so a
    second spelling of a source (``s3://bkt//a.zarr``, ``S3://bkt/a.zarr/``,
    a Store over the same bucket and prefix) is refused like the first.
    ``storage_options`` are the destination's and ``source_storage_options``
    the sources' by name: a custom endpoint in both tells two servers apart.
    ``describe`` names a location in the refusal (``given_location``: as the
    caller wrote it, a relative path relative).
    """
    options = source_storage_options or {}
    target = store_address(destination, storage_options)
    for name, location in sources.items():
        source = store_address(location, options.get(name))
        if target is not None and source is not None:
            overlaps = target.overlaps(source)
        else:  # a Store whose place is unknown is only the same as itself
            overlaps = destination is location or (
                isinstance(destination, Store) and destination == location
            )
        if overlaps:
            raise ValueError(
                f"destination {describe(destination)!r} overlaps source {name!r} at "
                f"{describe(location)!r}; a writer must not write inside, over or "
                "around one of its sources: choose a destination outside it"
            )
