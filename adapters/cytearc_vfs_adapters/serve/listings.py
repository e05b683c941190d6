"""The bodies of directory listings: an HTML index, a JSON document, a WebDAV multistatus.

Zarr HTTP clients list a directory in one of two ways, and neither reads the
JSON listing this server first offered:

* fsspec's ``HTTPFileSystem`` (zarr's ``FsspecStore``) fetches the directory's
  URL with ``Accept: */*`` and scrapes ``<a href="...">`` links from a
  ``text/html`` answer: :func:`html_index`;
* object_store's HTTP store (obstore's ``HTTPStore``, zarr's ``ObjectStore``)
  sends WebDAV ``PROPFIND`` with ``Depth: 1`` and reads a ``207``
  multistatus: each ``response`` has an ``href``, one ``propstat`` whose
  ``status`` says ``200 OK``, and in its ``prop`` a ``getlastmodified`` (an
  RFC 1123 date, required), a ``resourcetype`` (``collection`` for a
  directory) and, for a key, its ``getcontentlength`` (and ``getetag``,
  which obstore reports as the object's ``e_tag``): :func:`multistatus`.

:func:`wants_json` picks between the JSON document and the HTML index from
the request's ``Accept`` field. Names are percent-encoded in links and
``href``\\ s (nothing changes for Zarr's own names: letters, digits, ``-._~``)
and escaped in text.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import formatdate
from urllib.parse import quote

__all__ = [
    "Entry",
    "finite_depth_error",
    "href",
    "html_index",
    "json_listing",
    "multistatus",
    "wants_json",
]


@dataclass(frozen=True, slots=True)
class Entry:
    """One resource of a listing: a key with its size, or a directory."""

    path: str
    """The key, or the directory's prefix without its final ``/`` (``""``: the root)."""
    size: int | None
    """The value's size in bytes; ``None`` for a directory."""
    etag: str | None = None
    """The key's ``ETag`` (quoted), when its store gives one (``getetag``)."""
    modified: int | None = None
    """The key's real modification time (seconds since the epoch), when it has one."""

    @property
    def is_directory(self) -> bool:
        """Whether the entry is a directory (a WebDAV collection)."""
        return self.size is None


def _quality(accept: str, wanted: str) -> float:
    """The ``q`` the ``Accept`` value gives ``wanted``: its most specific matching range."""
    kind = wanted.partition("/")[0]
    best: tuple[int, float] = (-1, 0.0)
    for element in accept.split(","):
        media, *parameters = (part.strip() for part in element.split(";"))
        media = media.lower()
        specificity = {wanted: 2, f"{kind}/*": 1, "*/*": 0}.get(media)
        if specificity is None or specificity < best[0]:
            continue
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    quality = 0.0  # a malformed weight is no preference for this range
        best = (specificity, quality)
    return best[1]


def wants_json(accept: str | None) -> bool:
    """Whether a listing request asks for the JSON document rather than the HTML index.

    A request without ``Accept`` gets JSON (as this server always answered);
    otherwise the type the client weighs higher, HTML on a tie (fsspec's
    aiohttp, curl and browsers accept ``*/*`` or prefer ``text/html``), JSON
    when HTML is refused (``q=0``): the server has no third format to offer.

    >>> wants_json(None), wants_json("*/*"), wants_json("application/json")
    (True, False, True)
    >>> wants_json("text/html,application/xhtml+xml,*/*;q=0.8")
    False
    """
    if accept is None:
        return True
    html_weight = _quality(accept, "text/html")
    return html_weight == 0 or _quality(accept, "application/json") > html_weight


def json_listing(prefix: str, names: Sequence[str]) -> bytes:
    """``{"prefix": "RNA/", "names": [...]}``: the names directly below ``prefix``."""
    document = {"prefix": prefix + "/" if prefix else "", "names": list(names)}
    return (json.dumps(document) + "\n").encode()


def href(path: str, *, directory: bool) -> str:
    """The absolute request path of a key, or of a directory's listing (ends in ``/``)."""
    encoded = "/".join(quote(segment, safe="") for segment in path.split("/")) if path else ""
    if directory:
        return f"/{encoded}/" if encoded else "/"
    return f"/{encoded}"


def html_index(prefix: str, children: Sequence[Entry]) -> bytes:
    """A minimal HTML page linking each child of ``prefix`` (a directory's link ends in ``/``).

    Links are relative to the directory's URL (which ends in ``/``), so the
    page works behind a proxy that adds a path; fsspec joins them to the URL
    it listed. No absolute URL appears in the text (fsspec would take it for
    a link).

    >>> print(html_index("RNA", [Entry("RNA/counts", None), Entry("RNA/zarr.json", 9)]).decode())
    <!DOCTYPE html>
    <html><head><meta charset="utf-8"><title>Index of /RNA/</title></head>
    <body><h1>Index of /RNA/</h1>
    <ul>
    <li><a href="counts/">counts/</a></li>
    <li><a href="zarr.json">zarr.json</a></li>
    </ul>
    </body></html>
    <BLANKLINE>
    """
    title = html.escape(href(prefix, directory=True))
    lines = [
        "<!DOCTYPE html>",
        f'<html><head><meta charset="utf-8"><title>Index of {title}</title></head>',
        f"<body><h1>Index of {title}</h1>",
        "<ul>",
    ]
    for child in children:
        name = child.path.rsplit("/", 1)[-1]
        suffix = "/" if child.is_directory else ""
        link = quote(name, safe="") + suffix
        lines.append(f'<li><a href="{link}">{html.escape(name)}{suffix}</a></li>')
    lines += ["</ul>", "</body></html>", ""]
    return "\n".join(lines).encode("utf-8")


def _response(entry: Entry, started: str) -> str:
    location = html.escape(href(entry.path, directory=entry.is_directory), quote=False)
    if entry.is_directory:
        kind = "<D:resourcetype><D:collection/></D:resourcetype>"
    else:
        kind = f"<D:resourcetype/><D:getcontentlength>{entry.size}</D:getcontentlength>"
    if entry.etag is not None:
        kind += f"<D:getetag>{html.escape(entry.etag, quote=False)}</D:getetag>"
    modified = started if entry.modified is None else formatdate(entry.modified, usegmt=True)
    return (
        f"<D:response><D:href>{location}</D:href><D:propstat><D:prop>{kind}"
        f"<D:getlastmodified>{modified}</D:getlastmodified></D:prop>"
        "<D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
    )


def multistatus(entries: Sequence[Entry], started: str) -> bytes:
    """A WebDAV (RFC 4918) ``multistatus`` body describing ``entries``.

    Each key has its ``getetag`` where its store gives an ``ETag`` (the same
    one a ``GET`` sends). ``getlastmodified`` (an RFC 1123 date) is an
    entry's real modification time where it has one, else ``started``, the
    time the server started: object_store requires the property, and a
    directory or a computed chunk has no time of its own.
    """
    lines = ['<?xml version="1.0" encoding="utf-8"?>', '<D:multistatus xmlns:D="DAV:">']
    lines += [_response(entry, started) for entry in entries]
    lines += ["</D:multistatus>", ""]
    return "\n".join(lines).encode("utf-8")


def finite_depth_error() -> bytes:
    """The body of a refused ``Depth: infinity`` (RFC 4918, section 9.1): the precondition."""
    return (
        b'<?xml version="1.0" encoding="utf-8"?>\n'
        b'<D:error xmlns:D="DAV:"><D:propfind-finite-depth/></D:error>\n'
    )
