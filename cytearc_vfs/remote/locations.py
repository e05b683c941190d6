"""From a location (path, URL or Store) to a zarr Store.

The core defines the registry; ``cytearc_vfs_adapters`` fills it with local,
memory, fsspec and obstore backends. A location string finds its backend by
URL scheme; a path without a scheme is local.
"""

from __future__ import annotations

import difflib
import os
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from zarr.abc.store import Store

from .password_masking import passwords_masked

__all__ = [
    "Location",
    "StoreOpener",
    "check_scheme_slashes",
    "check_url",
    "absolute_path",
    "describe_location",
    "expand_home",
    "given_location",
    "local_path",
    "location_text",
    "open_location",
    "register_backend",
]

Location = str | os.PathLike[str] | Store
#: ``opener(url, read_only, storage_options) -> Store``
StoreOpener = Callable[[str, bool, Mapping[str, Any] | None], Store]


@dataclass(frozen=True, slots=True)
class _Backend:
    opener: StoreOpener
    priority: int


_BACKENDS: dict[str, list[_Backend]] = {}
#: Entry-point group through which installed packages register backends.
BACKEND_ENTRY_POINTS = "cytearc_vfs.backends"
_plugins_loaded = threading.Event()
_plugins_lock = threading.Lock()


def _load_backend_plugins() -> None:
    """Call every installed ``cytearc_vfs.backends`` entry point once.

    The core never imports its adapters: ``cytearc_vfs_adapters`` (and any
    other package) announces a registration function in its metadata, and
    the first location opened calls it.
    """
    if _plugins_loaded.is_set():
        return
    # Locations are opened from several threads at once (sources bind
    # concurrently): the others wait until the registry is filled.
    with _plugins_lock:
        if _plugins_loaded.is_set():
            return
        from importlib.metadata import entry_points

        for entry in entry_points(group=BACKEND_ENTRY_POINTS):
            register = entry.load()
            register()
        _plugins_loaded.set()


def register_backend(scheme: str, opener: StoreOpener, *, priority: int = 0) -> None:
    """Register ``opener`` for URLs of ``scheme`` (highest priority wins)."""
    entries = _BACKENDS.setdefault(scheme, [])
    if any(entry.opener is opener for entry in entries):
        return
    entries.append(_Backend(opener, priority))
    entries.sort(key=lambda entry: -entry.priority)


def _scheme(location: str) -> str:
    scheme = urlsplit(location).scheme
    # "C:\\data" on Windows parses as scheme "c"
    return scheme if len(scheme) > 1 else ""


def check_url(url: str) -> str:
    """Refuse a URL with a query (``?``) or fragment (``#``); returns it otherwise.

    No backend reads them as part of a store's path (obstore drops them, fsspec
    keeps them literally, HTTP never sends a fragment), so ``s3://b/x#1.zarr``
    and ``s3://b/x#2.zarr`` would name one store and a write to one would
    replace the other.

    >>> check_url("s3://bkt/a.zarr")
    's3://bkt/a.zarr'
    >>> check_url("s3://bkt/run#1.zarr")
    Traceback (most recent call last):
    ...
    ValueError: location 's3://bkt/run#1.zarr' holds '#'...
    """
    parts = urlsplit(url)
    if parts.query or parts.fragment or "?" in url or "#" in url:
        marks = " and ".join(repr(mark) for mark in "#?" if mark in url)
        raise ValueError(
            f"location {url!r} holds {marks}, which begin a URL's fragment or query: no backend "
            "reads them as part of the store's path, so two such URLs could name one store. "
            "Rename the store (or its folders) without them, or open it as a Store object "
            "(zarr.storage.ObjectStore over an obstore client with that prefix)"
        )
    return url


def expand_home(path: str) -> str:
    """``path`` with a leading ``~`` (or ``~user``) replaced by that home directory.

    The shell does this only where a word starts with ``~``: ``--directory=~/x``,
    ``@~/options.json`` and a path in Python reach the program as typed, and
    were taken as a directory named ``~`` in the working directory (which a
    later ``rm -rf ~`` would take for the home). A directory really named ``~``
    is ``./~``.

    >>> expand_home("~/data.zarr") == os.path.join(os.path.expanduser("~"), "data.zarr")
    True
    >>> expand_home("./~/data.zarr")
    './~/data.zarr'
    """
    return os.path.expanduser(path) if path.startswith("~") else path


def location_text(location: object) -> str:
    """The text of a path or URL, refusing what names no place (bytes, ``None``, ``""``).

    >>> location_text(Path("data/a.zarr"))
    'data/a.zarr'
    >>> location_text(b"data/a.zarr")
    Traceback (most recent call last):
    ...
    TypeError: location b'data/a.zarr' is bytes; pass the path or URL as a str...
    >>> location_text("")
    Traceback (most recent call last):
    ...
    ValueError: location is an empty string; give a path or URL ('.' names the current directory)
    """
    text = os.fspath(location) if isinstance(location, (str, os.PathLike)) else location
    if isinstance(text, (bytes, bytearray)):
        raise TypeError(
            f"location {text!r} is bytes; pass the path or URL as a str "
            "(os.fsdecode(path) decodes a bytes path)"
        )
    if not isinstance(text, str):
        kind = type(location).__name__
        # a zarr Group or Array opened on the store: its store is what was meant
        hint = (
            f"; pass the path or URL it was opened from, or its store ({kind.lower()}.store)"
            if hasattr(location, "store_path")
            else ""
        )
        raise TypeError(f"location must be a path, a URL or a zarr Store, not {kind}{hint}")
    if not text:
        raise ValueError(
            "location is an empty string; give a path or URL ('.' names the current directory)"
        )
    return text


def check_scheme_slashes(text: str, known: Collection[str]) -> None:
    """Refuse ``s3:/bucket`` (a ``://`` short of a slash) and ``s3:///x`` (no bucket or host).

    ``known`` holds the schemes a backend opens; ``file:`` URLs may have one
    slash (RFC 8089), and other schemes are left to the registry's refusal.

    >>> check_scheme_slashes("s3://bkt/a.zarr", {"s3"})
    >>> check_scheme_slashes("s3:/bkt/a.zarr", {"s3"})
    Traceback (most recent call last):
    ...
    ValueError: location 's3:/bkt/a.zarr' is not a well-formed s3:// URL: ... did you mean 's3://bkt/a.zarr'?
    """
    scheme = _scheme(text)
    if scheme not in known or scheme in ("file", "memory"):
        return
    rest = text[len(scheme) + 1 :]
    if not rest.startswith("//") or not rest[2:3].strip("/"):
        meant = f"{scheme}://{rest.lstrip('/')}"
        raise ValueError(
            f"location {text!r} is not a well-formed {scheme}:// URL: {scheme + ':'!r} must be "
            f"followed by '//' and the bucket or host; did you mean {meant!r}?"
        )


#: Schemes whose URLs, typed without their ``:``, read as a path.
_REMOTE_SCHEMES = frozenset({"s3", "gs", "gcs", "az", "abfs", "abfss", "azure", "http", "https"})


def _refuse_url_without_colon(text: str) -> None:
    """Refuse ``s3//bkt/a.zarr``: a URL short of its ``:``, which as a path is the
    folder ``./s3/bkt/a.zarr`` (a writer created it and succeeded; a reader said the
    path does not exist). A folder really named so is ``./s3/bkt/a.zarr``.

    >>> _refuse_url_without_colon("s3/bkt/a.zarr")
    >>> _refuse_url_without_colon("s3//bkt/a.zarr")
    Traceback (most recent call last):
    ...
    ValueError: location 's3//bkt/a.zarr' is a URL without its ':'; did you mean 's3://bkt/a.zarr'? ...
    """
    scheme, slashes, rest = text.partition("//")
    known = _REMOTE_SCHEMES | (_BACKENDS.keys() - {"file"})
    if slashes and scheme.lower() in known and rest:
        raise ValueError(
            f"location {text!r} is a URL without its ':'; did you mean "
            f"{f'{scheme}://{rest}'!r}? (a folder named {scheme} in the current directory "
            f"is written {f'./{scheme}/{rest}'!r})"
        )


def local_path(location: Location) -> Path | None:
    """The local directory of ``location``, or ``None`` when it is not local.

    A path starting with ``~`` is in the home directory (:func:`expand_home`).
    """
    if isinstance(location, Store):
        root = getattr(location, "root", None)
        from zarr.storage import LocalStore

        return Path(root) if isinstance(location, LocalStore) and root is not None else None
    text = location_text(location)
    if isinstance(location, os.PathLike):
        return Path(expand_home(text))
    scheme = _scheme(text)
    if scheme == "":
        _refuse_url_without_colon(text)
        return Path(expand_home(text))
    if scheme == "file":
        return _file_url_path(text)
    return None


def _file_url_path(text: str) -> Path:
    """The path of a ``file:`` URL, refusing one that names another host.

    The path is percent-encoded (RFC 8089): ``file:///data/a%20b.zarr`` is the
    directory "a b.zarr", and ``%23`` the way to write a '#' in one. Two
    slashes start a host (``file://name.zarr`` is host "name.zarr", path
    empty), which was read as the current directory.

    >>> _file_url_path("file:///data/a%20b.zarr"), _file_url_path("file://localhost/d.zarr")
    (PosixPath('/data/a b.zarr'), PosixPath('/d.zarr'))
    >>> _file_url_path("file://a.zarr")
    Traceback (most recent call last):
    ...
    ValueError: location 'file://a.zarr' names the host 'a.zarr', ... did you mean 'a.zarr' (a path) or 'file:///.../a.zarr'?
    """
    parts = urlsplit(check_url(text))
    if parts.netloc not in ("", "localhost"):
        meant = unquote(parts.netloc + parts.path)
        absolute = Path(expand_home(meant)).absolute().as_posix()
        raise ValueError(
            f"location {text!r} names the host {parts.netloc!r}, and a file URL reaches this "
            "machine's files only: after 'file://' comes the host, empty or 'localhost', then "
            f"the absolute path (three slashes in all); did you mean {meant!r} (a path) or "
            f"'file://{quote(absolute)}'?"
        )
    return Path(unquote(parts.path))


def absolute_path(path: Path) -> Path:
    """``path`` made absolute, ``a/../b.zarr`` written ``b.zarr`` where that is the same place.

    Normalized as text unless a symlink makes the two differ (``link/..`` is
    where the system says, the link's target's parent): a message names the
    directory a store opens, never another.
    """
    absolute = path.absolute()
    normalized = Path(os.path.abspath(absolute))
    if normalized != absolute and normalized.resolve() == absolute.resolve():
        return normalized
    return absolute


def describe_location(location: Location) -> str:
    """A printable form of a location, for messages and records (a URL's password
    shown as ``***``, also inside a store object's description)."""
    if isinstance(location, Store):
        return passwords_masked(str(location))
    path = local_path(location)
    if path is not None:
        return str(absolute_path(path))
    return _password_masked(os.fspath(location))


def given_location(location: Location) -> str:
    """A location as its caller wrote it, for messages about it: a relative path stays
    relative and ``~`` unexpanded (``cd /tmp && cytearc-vfs export s.zarr out.h5ad``
    is told about ``out.h5ad``, not ``/tmp/out.h5ad``), a URL's password is shown as
    ``***`` and a Store is described (:func:`describe_location`). Records, which must
    reopen the location from anywhere, keep :func:`describe_location`'s absolute form.

    >>> given_location("out.h5ad"), given_location(Path("~/a.zarr"))
    ('out.h5ad', '~/a.zarr')
    >>> given_location("s3://KEY:SECRET@bkt/a.zarr")
    's3://KEY:***@bkt/a.zarr'
    """
    if isinstance(location, Store):
        return describe_location(location)
    # what names no place (bytes, None, a zarr Group) is refused by name, as the
    # location's own check would: a message about it is often built first
    return _password_masked(location_text(location))


def _password_masked(url: str) -> str:
    """``url`` with the password it carries shown as ``***``: messages must not print it.

    >>> _password_masked("s3://KEY:SECRET@bkt/a.zarr"), _password_masked("s3://bkt/a.zarr")
    ('s3://KEY:***@bkt/a.zarr', 's3://bkt/a.zarr')
    """
    try:
        password = urlsplit(url).password
    except ValueError:  # a netloc urlsplit cannot take apart
        password = None
    masked = url if password is None else url.replace(f":{password}@", ":***@", 1)
    # a password holding '/' typed unencoded: urlsplit ends the netloc at that '/'
    return passwords_masked(masked)


def reopenable_location(location: Location, *, what: str) -> str:
    """The absolute path or URI a record can reopen ``location`` from.

    A Store object qualifies when it is a local directory or a named
    ``memory://`` store; any other Store (an anonymous MemoryStore, an
    object-store client) cannot be found again from a record, so it is refused
    with the remedy: pass its URL and options instead.
    """
    if not isinstance(location, Store) or local_path(location) is not None:
        return _without_credentials(canonical_location(location), what=what)
    from zarr.storage import ManagedMemoryStore

    if isinstance(location, ManagedMemoryStore):
        return str(location)
    raise ValueError(
        f"{what} is a {type(location).__name__} object, which a record cannot reopen; pass its "
        "path or URL (with storage options) instead, or a named memory://NAME store"
    )


def _without_credentials(location: str, *, what: str) -> str:
    """Refuse a URL that carries a password (``s3://KEY:SECRET@bucket/x.zarr``).

    A record keeps its locations, and credentials are never persisted (spec,
    "Composite sources and virtual counts"): they belong in the storage
    options. A user name alone (``abfs://container@account...``) is a place,
    not a secret, and stays.

    >>> _without_credentials("s3://bkt/a.zarr", what="the source")
    's3://bkt/a.zarr'
    >>> _without_credentials("s3://KEY:SECRET@bkt/a.zarr", what="the source")
    Traceback (most recent call last):
    ...
    ValueError: the source s3://KEY:***@bkt/a.zarr carries a password in its URL...
    """
    parts = urlsplit(location)
    try:
        password = parts.password
    except ValueError:  # a netloc urlsplit cannot take apart
        password = None
    if not parts.scheme or password is None:
        return location
    raise ValueError(
        f"{what} {_password_masked(location)} carries a password in its URL, which the record would persist; "
        "give the URL without user:password@ and pass the credentials as storage options "
        "(source_storage_options, --source-storage-options), which are used and never written"
    )


def canonical_location(location: Location) -> str:
    """An absolute path or URI for records; a Store gives its own description."""
    path = local_path(location)
    if path is not None:
        return str(path.resolve())
    return describe_location(location)


def open_location(
    location: Location,
    *,
    read_only: bool,
    storage_options: Mapping[str, Any] | None = None,
) -> Store:
    """Return a Store for ``location`` (a Store is returned as given, or read-only)."""
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise TypeError(
            f"storage_options of {describe_location(location)} must be a mapping of backend "
            f"options, such as {{'endpoint': ..., 'region': ...}}, not "
            f"{type(storage_options).__name__}"
        )
    if isinstance(location, Store):
        if storage_options:
            raise ValueError("storage_options apply to URLs, not to a Store that is already open")
        if read_only and not location.read_only:
            return location.with_read_only(True)
        return location
    text = location_text(location)
    scheme = "file" if local_path(location) is not None else _scheme(text)
    _load_backend_plugins()
    check_scheme_slashes(text, _BACKENDS)
    entries = _BACKENDS.get(scheme)
    if not entries:
        known = ", ".join(sorted(f"{s}://" for s in _BACKENDS)) or "none"
        # a mistyped scheme (htps, s3a) is far likelier than a missing extra
        close = difflib.get_close_matches(scheme, sorted(_BACKENDS.keys() - {"file"}), n=1)
        meant = f"; did you mean {close[0] + text[len(scheme) :]!r}? Known" if close else "; known"
        raise ValueError(
            f"no backend opens {text!r} (scheme {scheme!r}){meant} schemes: {known}. "
            "Remote schemes need an extra: pip install 'cytearc-vfs[obstore]' or "
            "'cytearc-vfs[fsspec]'"
        )
    if scheme == "file":
        path = local_path(location)
        assert path is not None
        text = str(path)
    else:
        check_url(text)
    return entries[0].opener(text, read_only, storage_options)
