"""From an HTTP request target to the store key (or listing prefix) it names.

``/RNA/counts/zarr.json`` names the key ``RNA/counts/zarr.json``; a target
ending in ``/`` (``/``, ``/RNA/``) names a listing of that prefix. Each path
segment is percent-decoded once, on its own, and the key is then checked by
the package's one key rule (:func:`cytearc_vfs.format.store_keys.check_key`),
so no spelling reaches outside the store:

* a segment that decodes to something holding ``/`` (``%2f``) is refused
  here: it would split into segments the client did not send;
* ``..``, ``%2e%2e``, double encodings (``%252e%252e``), empty segments
  (``RNA//zarr.json``), backslashes (``%5c``), NUL and other controls, drive
  letters are refused by the key rule;
* a malformed percent escape (``%zz``, ``%4``) or percent-encoded bytes that
  are not UTF-8 are refused; a target with raw non-ASCII bytes never gets
  here (the request line must be ASCII).

Repeated slashes at the start of the path are read as one: clients that
join a base URL ending in ``/`` with a key they start with ``/`` (zarrs's
HTTP store does, given the URL ``serve`` prints) ask for ``//RNA/...``.
They name the same key of this store, never anything outside it.

The query string is ignored (clients add cache busters); the server reads
nothing from it, credentials included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from cytearc_vfs.format.store_keys import check_key, check_prefix

__all__ = ["BadTargetError", "Target", "parse_target", "target_host"]

# What a refusal names as the store: the client must not learn the server's paths.
_WHERE = "this server"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class BadTargetError(ValueError):
    """The request target names no key of any store (answered ``400``)."""


@dataclass(frozen=True, slots=True)
class Target:
    """A checked request target."""

    path: str
    """A store key, or a listing prefix without its final ``/`` (``""``: the root)."""
    listing: bool
    """The target ended in ``/``: list the names directly below ``path``."""


def _decoded(segment: str) -> str:
    if _BAD_ESCAPE.search(segment):
        raise BadTargetError(f"the path segment {segment!r} holds a malformed percent escape")
    try:
        decoded = unquote(segment, errors="strict")
    except UnicodeDecodeError as exc:
        raise BadTargetError(
            f"the path segment {segment!r} percent-encodes bytes that are not UTF-8"
        ) from exc
    if "/" in decoded:
        raise BadTargetError(
            f"the path segment {segment!r} decodes to {decoded!r}, which holds a '/'; "
            "send separators unencoded"
        )
    return decoded


def target_host(raw: str, host_field: str | None) -> str | None:
    """The host a request names: an absolute-form target's authority, else its ``Host``.

    RFC 9112, section 3.2.2: a server receiving an absolute-form target
    ignores the ``Host`` field and uses the target's authority.

    >>> target_host("http://evil.example/zarr.json", "127.0.0.1")
    'evil.example'
    >>> target_host("/zarr.json", "127.0.0.1")
    '127.0.0.1'
    """
    if raw.startswith(("http://", "https://")):
        return urlsplit(raw).netloc
    return host_field


def parse_target(raw: str) -> Target:
    """The key or listing prefix that the request target ``raw`` names.

    Raises
    ------
    BadTargetError
        When ``raw`` is not an origin-form (or absolute-form) path, or names
        no safe key; the message says why.

    Examples
    --------
    >>> parse_target("/RNA/counts/zarr.json")
    Target(path='RNA/counts/zarr.json', listing=False)
    >>> parse_target("/RNA/")
    Target(path='RNA', listing=True)
    >>> parse_target("/")
    Target(path='', listing=True)
    >>> parse_target("//RNA/zarr.json")
    Target(path='RNA/zarr.json', listing=False)
    >>> parse_target("/RNA/%2e%2e/%2e%2e/secret")
    Traceback (most recent call last):
    ...
    cytearc_vfs_adapters.serve.targets.BadTargetError: request of key 'RNA/../../secret' in this server refused: it has the segment '..', which walks out of its directory; keys are relative paths like 'RNA/counts/zarr.json'
    """
    if raw.startswith(("http://", "https://")):
        # absolute-form (RFC 9112, section 3.2.2): only its path matters here
        parts = urlsplit(raw)
        raw = parts.path or "/"
        if parts.query:
            raw += "?" + parts.query
    if not raw.startswith("/"):
        raise BadTargetError(f"the request target {raw[:200]!r} is not a path starting with '/'")
    path = raw.lstrip("/").partition("?")[0]  # leading slashes: see the module docstring
    if "#" in path:
        raise BadTargetError("a request target carries no fragment ('#')")
    if path == "":
        return Target("", listing=True)
    listing = path.endswith("/")
    body = path[:-1] if listing else path
    name = "/".join(_decoded(segment) for segment in body.split("/"))
    try:
        # named as a request: a HEAD or a listing was refused as a "get" or a "list_dir"
        if listing:
            check_prefix(name + "/", op="request", where=_WHERE)
        else:
            check_key(name, op="request", where=_WHERE)
    except ValueError as exc:
        raise BadTargetError(str(exc)) from exc
    return Target(name, listing)
