"""Storage backends for location strings: local, memory, fsspec and obstore.

Local paths reach zarr as :class:`pathlib.Path`, because zarr reads a string
as a URL and would cut a directory named ``a#b;c?`` at ``#``. Remote URLs
prefer obstore (fewer copies, native async) and fall back to fsspec; each is
imported lazily, with an error naming the extra to install. Remote stores get
the request timeouts of :mod:`cytearc_vfs.remote.timeouts` unless their options set
their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from zarr.abc.store import Store
from zarr.storage import LocalStore, ManagedMemoryStore

from cytearc_vfs.remote.locations import register_backend
from cytearc_vfs.remote.timeouts import timeouts

__all__ = [
    "forget_memory",
    "open_fsspec",
    "open_local",
    "open_memory",
    "open_obstore",
    "register_all",
]

REMOTE_SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "http", "https")


def open_local(path: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """A LocalStore rooted at ``path``."""
    if storage_options:
        raise ValueError(f"storage_options do not apply to the local path {path!r}")
    return LocalStore(Path(path), read_only=read_only)


# zarr drops a ManagedMemoryStore's dict once no instance refers to it; a
# ``memory://name`` location must outlive the writer that created it, so the
# first instance of each name is kept for the life of the process.
_MEMORY_STORES: dict[str, ManagedMemoryStore] = {}


def open_memory(url: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """The process-local ``memory://name`` store (created on first use, kept until exit)."""
    if storage_options:
        raise ValueError(f"storage_options do not apply to {url!r}")
    parts = urlsplit(url)
    if not parts.netloc:
        raise ValueError(f"{url!r} names no memory store; write memory://NAME")
    keeper = _MEMORY_STORES.setdefault(parts.netloc, ManagedMemoryStore(name=parts.netloc))
    return ManagedMemoryStore(name=keeper.name, path=parts.path.strip("/"), read_only=read_only)


def forget_memory(name: str) -> None:
    """Release the ``memory://name`` store so its contents can be freed."""
    _MEMORY_STORES.pop(name, None)


def open_obstore(url: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """An obstore-backed store for a cloud or HTTP URL."""
    try:
        from obstore.store import from_url
        from zarr.storage import ObjectStore
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"reading {url!r} needs obstore: pip install 'cytearc-vfs[obstore]'"
        ) from exc
    options: dict[str, Any] = dict(storage_options or {})
    limits = timeouts()
    # bounded by default (obstore would retry a hung server for minutes);
    # options given explicitly win
    options["client_options"] = {
        "timeout": timedelta(seconds=limits.total),
        "connect_timeout": timedelta(seconds=limits.connect),
        **(options.get("client_options") or {}),
    }
    options["retry_config"] = options.get("retry_config") or {
        "retry_timeout": timedelta(seconds=limits.total)
    }
    backend = from_url(url, **options)
    return ObjectStore(backend, read_only=read_only)


def open_fsspec(url: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """An fsspec-backed store for a cloud or HTTP URL."""
    try:
        from zarr.storage import FsspecStore
    except ImportError as exc:  # pragma: no cover
        raise ImportError(
            f"reading {url!r} needs fsspec: pip install 'cytearc-vfs[fsspec]'"
        ) from exc
    options = dict(storage_options or {})
    if urlsplit(url).scheme == "s3":
        # s3fs passes these to botocore; options given explicitly win
        limits = timeouts()
        options["config_kwargs"] = {
            "connect_timeout": limits.connect,
            "read_timeout": limits.total,
            **(options.get("config_kwargs") or {}),
        }
    return FsspecStore.from_url(url, storage_options=options, read_only=read_only)


def _obstore_available() -> bool:
    try:
        import obstore  # noqa: F401
    except ImportError:
        return False
    return True


def register_all() -> None:
    """Fill the core's backend registry (idempotent; runs when this module is imported)."""
    register_backend("file", open_local)
    register_backend("memory", open_memory)
    remote_default = open_obstore if _obstore_available() else open_fsspec
    for scheme in REMOTE_SCHEMES:
        register_backend(scheme, remote_default, priority=1)
        if remote_default is not open_fsspec:
            register_backend(scheme, open_fsspec)


# Registering at import, whichever of cytearc_vfs and cytearc_vfs_adapters is
# imported first, breaks the import cycle between the face and its adapters.
register_all()
