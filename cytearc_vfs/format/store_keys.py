"""The one rule every store of this package applies to the keys it is given.

A store key is a relative, already normalized path: segments joined by
single ``/``, no ``.`` or ``..``, no leading or trailing ``/``, no backslash
(a separator on Windows), no control character, no drive (``C:``). A segment
made of dots and spaces only (``...``, ``.. ``) is refused too: the Zarr v3
spec forbids names made of dots, and Windows drops trailing dots and spaces,
so ``.. `` would be ``..`` there.
zarr normalizes node paths before it builds keys (``normalize_path``), so
nothing zarr sends is refused; a key that breaks the rule comes from a
caller, and a backend may resolve it outside the store (``LocalStore``
joins keys onto its root directory: ``root / "/etc/hostname"`` is
``/etc/hostname``). Keys are refused, never repaired: a repaired key could
name a different node than its caller meant.

``%`` is an ordinary character (``LocalStore`` writes a file named ``%41``),
but HTTP and object-store backends put keys into URLs, where a server may
decode ``%2e%2e`` to ``..`` (RFC 3986 treats them as equal). So a segment
whose URL-decoding (repeated, for double encoding) is made of dots, or holds
a separator or control character, is refused too; any other ``%`` is literal.
Unicode look-alikes of ``.`` (``\\u2024``, ``\\uff0e``) are names like any other.

Prefixes (``list_prefix``, ``list_dir``, ``delete_dir``) follow the same rule
and may end in one ``/``, as zarr sends them both ways (``Store.is_empty``
and ``Store.delete_dir`` append it; group listings and
``_chunks_initialized`` do not). The empty prefix is the store's root: fine
to list, refused to delete.

Protected paths (a composite's mappings, a mount's ``matrixSource``) are
compared with :func:`protected_by` on keys that passed :func:`check_key`, so
no second spelling of a key can slip past them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

__all__ = [
    "KEY_REMEDY",
    "METADATA_DOCUMENTS",
    "check_key",
    "check_prefix",
    "key_problem",
    "protected_by",
]

#: The names of Zarr's metadata documents, v3 and v2 (and v2's consolidated one): a
#: key ending in one of them is a node's document, not a chunk or a child.
METADATA_DOCUMENTS = frozenset({"zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata"})

KEY_REMEDY = "keys are relative paths like 'RNA/counts/zarr.json'"
ROOT_DELETE_REFUSED = (
    "deleting the whole store through a key is refused; remove the store's directory yourself"
)

# C0 controls, DEL and C1 controls: no backend stores them faithfully, and
# NUL truncates paths in C libraries.
_CONTROL = "\x00-\x1f\x7f-\x9f"
_NAME_CHAR = rf"[^/\\%{_CONTROL}]"
# A segment that is not made of dots and spaces only.
_SEGMENT = rf"(?![. ]+(?:/|\Z)){_NAME_CHAR}+"
# The fast path: a key of plain segments. Anything else (including every key
# with a '%') goes through key_problem, which also explains the refusal.
_PLAIN_KEY = re.compile(rf"(?![^/]:){_SEGMENT}(?:/{_SEGMENT})*")
_BAD_CHAR = re.compile(rf"[\\{_CONTROL}]")
# Python's ntpath (so pathlib, so LocalStore on Windows) takes any first
# character before ':' as a drive.
_DRIVE = re.compile(r"[^/]:")
_DELETING_OPS = frozenset({"delete", "delete_dir", "delete_sync", "clear"})


def _dots_only(segment: str) -> bool:
    return segment != "" and segment.strip(". ") == ""


def _url_decoded(segment: str) -> str:
    """``segment`` URL-decoded until it stops changing (double encoding included)."""
    for _ in range(8):
        decoded = unquote(segment)
        if decoded == segment:
            break
        segment = decoded
    return segment


def key_problem(key: str) -> str | None:
    """What makes ``key`` unsafe as a store key, or ``None`` when it is safe.

    Examples
    --------
    >>> key_problem("RNA/counts/c/0/0") is None
    True
    >>> key_problem("RNA/../../etc")
    "has the segment '..', which walks out of its directory"
    >>> key_problem("/etc/hostname")
    "is absolute (starts with '/')"
    >>> key_problem("RNA/%2e%2e/x")
    "has the segment '%2e%2e', which URL-decodes to '..'"
    """
    if _PLAIN_KEY.fullmatch(key):
        return None
    if key == "":
        return "is empty"
    if key.startswith("/"):
        return "is absolute (starts with '/')"
    if key.endswith("/"):
        return "ends with '/' (a key names a value, not a directory)"
    if "//" in key:
        return "has an empty segment ('//')"
    bad = _BAD_CHAR.search(key)
    if bad is not None:
        if bad.group() == "\\":
            return "holds a backslash (a path separator on Windows)"
        return f"holds the control character {bad.group()!r}"
    if _DRIVE.match(key):
        return f"starts with the drive {key[:2]!r} (absolute on Windows)"
    for segment in key.split("/"):
        if _dots_only(segment):
            if segment == "..":
                return "has the segment '..', which walks out of its directory"
            if segment == ".":
                return "has the segment '.', which names its own directory (not a node)"
            return f"has the segment {segment!r}, made of dots and spaces only (not a node name)"
        decoded = _url_decoded(segment)
        if decoded != segment and (
            _dots_only(decoded) or "/" in decoded or _BAD_CHAR.search(decoded) is not None
        ):
            return f"has the segment {segment!r}, which URL-decodes to {decoded!r}"
    return None


def _refusal(what: str, value: str, op: str, where: str, problem: str) -> ValueError:
    return ValueError(f"{op} of {what} {value!r} in {where} refused: it {problem}; {KEY_REMEDY}")


def check_key(key: str, *, op: str, where: str) -> str:
    """Return ``key`` when it is a safe store key; raise ``ValueError`` when not.

    For the keys of ``get``, ``set``, ``delete``, ``exists`` and their kin.

    Parameters
    ----------
    key : str
        The key a store method was given.
    op : str
        The method's name, for the message (``"get"``, ``"delete"``, ...).
    where : str
        The store, for the message (its ``str``).

    Returns
    -------
    str
        ``key`` itself: valid keys are already normalized.

    Raises
    ------
    ValueError
        Naming the key, the store, what is wrong and the remedy. Deleting
        the empty key (the root, for ``LocalStore``) is refused with its own
        message.

    Examples
    --------
    >>> check_key("RNA/counts/zarr.json", op="get", where="store")
    'RNA/counts/zarr.json'
    >>> check_key("./zarr.json", op="set", where="store")
    Traceback (most recent call last):
    ...
    ValueError: set of key './zarr.json' in store refused: it has the segment '.', which names its own directory (not a node); keys are relative paths like 'RNA/counts/zarr.json'
    """
    if not isinstance(key, str):
        raise TypeError(f"{op} in {where}: a key is a str, not {type(key).__name__}")
    problem = key_problem(key)
    if problem is None:
        return key
    if key == "" and op in _DELETING_OPS:
        raise ValueError(f"{op} of key '' in {where}: {ROOT_DELETE_REFUSED}")
    raise _refusal("key", key, op, where, problem)


def check_prefix(prefix: str, *, op: str, where: str) -> str:
    """Return ``prefix`` when it is a safe listing or deletion prefix; raise ``ValueError``.

    For ``list_prefix``, ``list_dir``, ``delete_dir`` and ``is_empty``. A
    prefix is ``""`` (the root) or a valid key, optionally followed by one
    ``/``. The root may be listed; deleting it (``delete_dir("")``, which is
    what ``Store.clear`` does) is refused.

    Parameters
    ----------
    prefix : str
        The prefix a store method was given.
    op : str
        The method's name; ``"delete_dir"`` and ``"clear"`` refuse the root.
    where : str
        The store, for the message.

    Returns
    -------
    str
        ``prefix`` itself, unchanged.

    Examples
    --------
    >>> check_prefix("", op="list_dir", where="store")
    ''
    >>> check_prefix("RNA/", op="list_prefix", where="store")
    'RNA/'
    >>> check_prefix("", op="delete_dir", where="store")
    Traceback (most recent call last):
    ...
    ValueError: delete_dir of prefix '' in store: deleting the whole store through a key is refused; remove the store's directory yourself
    """
    if not isinstance(prefix, str):
        raise TypeError(f"{op} in {where}: a prefix is a str, not {type(prefix).__name__}")
    if prefix == "":
        if op in _DELETING_OPS:
            raise ValueError(f"{op} of prefix '' in {where}: {ROOT_DELETE_REFUSED}")
        return prefix
    body = prefix[:-1] if prefix.endswith("/") else prefix
    problem = "is absolute (it is '/')" if body == "" else key_problem(body)
    if problem is not None:
        raise _refusal("prefix", prefix, op, where, problem)
    return prefix


def protected_by(key: str, protected: Iterable[str], *, deleting: bool) -> str | None:
    """The protected path that ``key`` would touch, or ``None``.

    A protected path ``P`` covers ``P`` itself and everything under ``P/``.
    Deleting also touches everything under the deleted key (``LocalStore``
    removes a directory named by ``delete``), so when ``deleting`` an
    ancestor of ``P`` touches ``P``, and the root (``""``) touches every
    path. Both ``key`` and the protected paths must be normalized (passed
    :func:`check_key`); ``key`` may end in one ``/`` (a prefix).

    Examples
    --------
    >>> protected_by("RNA/countSummaries/rowSums/c/0", ["RNA/countSummaries"], deleting=False)
    'RNA/countSummaries'
    >>> protected_by("RNA/countSummariesX", ["RNA/countSummaries"], deleting=False) is None
    True
    >>> protected_by("RNA", ["RNA/countSummaries"], deleting=False) is None
    True
    >>> protected_by("RNA/", ["RNA/countSummaries"], deleting=True)
    'RNA/countSummaries'
    """
    key = key.removesuffix("/")
    for path in protected:
        if key == path or key.startswith(path + "/"):
            return path
        if deleting and (key == "" or path.startswith(key + "/")):
            return path
    return None
