"""Conditional requests (RFC 9110, section 13) against a key's validators.

:func:`precondition` evaluates ``If-Match``, ``If-Unmodified-Since``,
``If-None-Match`` and ``If-Modified-Since`` in the order of section 13.2.2;
:func:`range_applies` decides ``If-Range`` (section 13.1.5). The rules:

* ``If-Match`` is compared strongly: ``*`` holds for any existing key, a
  list holds when one of its tags equals the key's strong tag; a key without
  a tag matches no listed tag. A failure is ``412``.
* ``If-Unmodified-Since`` counts only without ``If-Match``, and only where the
  key has a real ``Last-Modified`` and the date parses: later than the date is ``412``.
* ``If-None-Match`` is compared weakly (``W/"x"`` equals ``"x"``): a match
  is ``304`` for ``GET`` and ``HEAD`` (``412`` for other methods, which this
  server refuses before), ``*`` matches any existing key.
* ``If-Modified-Since`` counts only without ``If-None-Match``, for ``GET``
  and ``HEAD``, and only where ``Last-Modified`` is real: not later than the
  date is ``304``.
* ``If-Range`` holds when its tag equals the key's strong tag, or its date
  equals ``Last-Modified`` exactly; a weak tag never holds. When it does not
  hold the whole value is sent (``200``).

These are only asked of a key that exists (a ``404`` stays a ``404``,
section 13.2.1). Malformed fields match nothing (a list with a bad element is
read up to it); malformed dates are ignored, as the RFC says.
"""

from __future__ import annotations

import re
from email.utils import parsedate_to_datetime
from http import HTTPStatus

from .protocol import RequestHead
from .validators import Validators

__all__ = ["entity_tags", "precondition", "range_applies"]

# entity-tag (RFC 9110, section 8.8.3): [W/] DQUOTE *etagc DQUOTE
_TAG = re.compile(r'\s*(W/)?("[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)')


def entity_tags(value: str) -> list[tuple[bool, str]] | None:
    """The ``(weak, "tag")`` pairs of an ``If-Match``/``If-None-Match`` value; ``None`` for ``*``.

    Parsing stops at the first element that is not an entity tag.

    >>> entity_tags('"a", W/"b",  "c"')
    [(False, '"a"'), (True, '"b"'), (False, '"c"')]
    >>> entity_tags(" * ") is None, entity_tags("abc")
    (True, [])
    """
    if value.strip() == "*":
        return None
    tags = []
    position = 0
    while position < len(value):
        if not value[position:].strip(" \t,"):
            break
        matched = _TAG.match(value, position)
        if matched is None:
            break
        tags.append((matched.group(1) is not None, matched.group(2)))
        position = matched.end()
    return tags


def _date(value: str) -> int | None:
    """Seconds since the epoch of an HTTP-date, or ``None`` when it is not one."""
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return int(when.timestamp())


def _strong_match(value: str, validators: Validators) -> bool:
    tags = entity_tags(value)
    if tags is None:
        return True
    current = validators.etag
    return current is not None and any(not weak and tag == current for weak, tag in tags)


def _weak_match(value: str, validators: Validators) -> bool:
    tags = entity_tags(value)
    if tags is None:
        return True
    current = validators.etag
    return current is not None and any(tag == current for _, tag in tags)


def precondition(head: RequestHead, validators: Validators) -> HTTPStatus | None:
    """``412``, ``304``, or ``None`` (go on) for a request of an existing key.

    >>> from .protocol import parse_head
    >>> head = parse_head(b'GET /k HTTP/1.1\\r\\nHost: h\\r\\nIf-None-Match: W/"a", "b"')
    >>> precondition(head, Validators('"a"'))
    <HTTPStatus.NOT_MODIFIED: 304>
    >>> precondition(head, Validators('"c"')) is None
    True
    """
    if_match = head.field("if-match")
    if if_match is not None:
        if not _strong_match(if_match, validators):
            return HTTPStatus.PRECONDITION_FAILED
    else:
        since = head.field("if-unmodified-since")
        date = None if since is None else _date(since)
        if date is not None and validators.modified is not None and validators.modified > date:
            return HTTPStatus.PRECONDITION_FAILED
    reading = head.method in ("GET", "HEAD")
    if_none_match = head.field("if-none-match")
    if if_none_match is not None:
        if _weak_match(if_none_match, validators):
            return HTTPStatus.NOT_MODIFIED if reading else HTTPStatus.PRECONDITION_FAILED
        return None
    since = head.field("if-modified-since")
    date = None if since is None or not reading else _date(since)
    if date is not None and validators.modified is not None and validators.modified <= date:
        return HTTPStatus.NOT_MODIFIED
    return None


def range_applies(if_range: str | None, validators: Validators) -> bool:
    """Whether a ``Range`` is served under the request's ``If-Range`` (``None``: no field).

    >>> range_applies(None, Validators()), range_applies('"a"', Validators('"a"'))
    (True, True)
    >>> range_applies('W/"a"', Validators('"a"')), range_applies('"a"', Validators())
    (False, False)
    >>> range_applies("Tue, 01 Dec 2026 15:00:00 GMT", Validators(None, 1796137200))
    True
    """
    if if_range is None:
        return True
    value = if_range.strip()
    if value.startswith('"') or value.startswith("W/"):
        tags = entity_tags(value)
        return (
            tags is not None
            and len(tags) == 1
            and not tags[0][0]
            and validators.etag is not None
            and tags[0][1] == validators.etag
        )
    date = _date(value)
    return date is not None and validators.modified is not None and date == validators.modified
