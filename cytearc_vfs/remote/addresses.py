"""Where a location's keys live, so that two spellings of one place compare equal.

A writer must never write inside, over or around a store it reads. Comparing
the locations as text misses the spellings a backend treats as one place:
``s3://bkt//a.zarr`` and ``S3://bkt/a.zarr/`` both open the keys below
``a.zarr`` (obstore drops the empty segment), and a Store object names no
text at all. :func:`store_address` reduces each form, text or Store, to the
backend's own terms: the scheme, the bucket or host, the path segments, and
the server when the options name one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from zarr.abc.store import Store

from .locations import Location, check_url, local_path

__all__ = ["StoreAddress", "store_address"]

#: Schemes that name the same service (fsspec's and obstore's spellings).
_SCHEME_FAMILIES = {
    "s3a": "s3",
    "gcs": "gs",
    "abfs": "az",
    "abfss": "az",
    "adl": "az",
    "azure": "az",
    "https": "http",
}
#: obstore client classes by the scheme they serve.
_OBSTORE_SCHEMES = {"S3Store": "s3", "GCSStore": "gs", "AzureStore": "az", "HTTPStore": "http"}
#: Option names under which the backends take a custom server.
_ENDPOINT_OPTIONS = ("endpoint", "endpoint_url", "aws_endpoint", "aws_endpoint_url")


@dataclass(frozen=True, slots=True)
class StoreAddress:
    """The place a store's keys live: scheme, bucket or host, path segments, server."""

    scheme: str
    root: str
    """The bucket, container, host or memory store's name (``""`` for files)."""
    parts: tuple[str, ...]
    endpoint: str | None = None
    """The server when the options name one; ``None`` is the scheme's default."""

    def overlaps(self, other: StoreAddress) -> bool:
        """Whether one of the two is the other, or holds it."""
        if (self.scheme, self.root) != (other.scheme, other.root):
            return False
        if None not in (self.endpoint, other.endpoint) and self.endpoint != other.endpoint:
            return False  # one bucket name on two servers
        shared = min(len(self.parts), len(other.parts))
        return self.parts[:shared] == other.parts[:shared]


def store_address(
    location: Location, storage_options: Mapping[str, Any] | None = None
) -> StoreAddress | None:
    """The address of ``location``, or ``None`` for a Store whose place is unknown."""
    path = local_path(location)
    if path is not None:
        return _file_address(path)
    if isinstance(location, Store):
        return _address_of_store(location)
    url = urlsplit(check_url(os.fspath(location)))
    scheme = _SCHEME_FAMILIES.get(url.scheme.lower(), url.scheme.lower())
    root = url.netloc.lower()
    if scheme == "http":
        root = _without_default_port(url)
    return StoreAddress(scheme, root, _segments(unquote(url.path)), _endpoint(storage_options))


def _file_address(path: Path) -> StoreAddress:
    return StoreAddress("file", "", path.resolve().parts)


def _segments(path: str) -> tuple[str, ...]:
    # obstore refuses or drops empty segments; "." names the folder itself
    return tuple(part for part in path.split("/") if part not in ("", "."))


def _without_default_port(url: Any) -> str:
    host = (url.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(url.scheme.lower())
    port = url.port if url.port is not None else default
    return host if port == default else f"{host}:{port}"


def _endpoint(options: Mapping[str, Any] | None) -> str | None:
    if not options:
        return None
    client_kwargs = options.get("client_kwargs")
    candidates = [options.get(name) for name in _ENDPOINT_OPTIONS]
    if isinstance(client_kwargs, Mapping):
        candidates.append(client_kwargs.get("endpoint_url"))
    for value in candidates:
        if isinstance(value, str) and value:
            return value.rstrip("/").lower()
    return None


def _address_of_store(store: Store) -> StoreAddress | None:
    """The address of an open Store, from the backend client it wraps."""
    from zarr.storage import FsspecStore, ManagedMemoryStore, ObjectStore

    if isinstance(store, ManagedMemoryStore):
        return StoreAddress("memory", store.name, _segments(store.path))
    if isinstance(store, ObjectStore):
        return _address_of_obstore(store.store, getattr(store, "key_prefix", ""))
    if isinstance(store, FsspecStore):
        protocol = store.fs.protocol
        scheme = protocol[0] if isinstance(protocol, (tuple, list)) else str(protocol)
        if scheme in ("file", "local"):
            return _file_address(Path(store.path))
        bucket, *rest = _segments(store.path) or ("",)
        return StoreAddress(_SCHEME_FAMILIES.get(scheme, scheme), bucket.lower(), tuple(rest))
    return None


def _address_of_obstore(client: Any, key_prefix: str) -> StoreAddress | None:
    kind = type(client).__name__
    prefix = _segments(str(getattr(client, "prefix", None) or ""))
    own = prefix + _segments(key_prefix)
    if kind == "LocalStore":
        return _file_address(Path("/", *own))
    if kind == "MemoryStore":
        return None  # an anonymous store: only the same object is the same place
    scheme = _OBSTORE_SCHEMES.get(kind)
    if scheme is None:
        return None
    if scheme == "http":
        url = urlsplit(str(client.url))
        return StoreAddress(
            "http", _without_default_port(url), _segments(unquote(url.path)) + own, None
        )
    config = dict(getattr(client, "config", None) or {})
    root = str(config.get("bucket") or config.get("container_name") or "").lower()
    return StoreAddress(scheme, root, own, _endpoint(config))
