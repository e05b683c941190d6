"""URLs in messages with their passwords shown as ``***``.

A location typed with credentials (``s3://KEY:SECRET@bucket/a.zarr``), or a
backend's error that names the URL it requested, must not print the secret.
Its own module: the location helpers (:mod:`.locations`) and the failure
messages (:mod:`.failures`) both mask, and each imports the other's names
otherwise.
"""

from __future__ import annotations

import re

__all__ = ["passwords_masked"]

#: ``scheme://user:password@`` in a backend's text (obstore names the URL it requested).
#: The password may hold ``/`` (AWS secret keys do; typed unencoded): what follows a
#: ``:`` up to the ``@`` is masked, unless it begins as a port and a path do
#: (``host:8080/d@v2.zarr``: an ``@`` in the path, no password).
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?!\d*/)[^@\s]+@")


def passwords_masked(text: str) -> str:
    """``text`` with the password of every URL in it shown as ``***``.

    >>> passwords_masked("GET https://user:pw@host/a.zarr/zarr.json failed; s3://b/x")
    'GET https://user:***@host/a.zarr/zarr.json failed; s3://b/x'
    >>> passwords_masked("s3://KEY:se/cret@bkt/a.zarr"), passwords_masked("http://h:80/a@b")
    ('s3://KEY:***@bkt/a.zarr', 'http://h:80/a@b')
    """
    return _URL_PASSWORD.sub(r"\1***@", text)
