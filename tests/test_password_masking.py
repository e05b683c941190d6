"""A URL's password is never printed, even one holding ``/`` (AWS secret access
keys often do: ``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY``).

Typed unencoded, such a password ends the URL's authority at its first ``/``:
``urlsplit`` then reads a host ``KEY:wJalrXUtnFEMI`` and the rest as the path,
and both maskers printed the secret whole (``given_location``, which
today's messages use for every location as typed, ``describe_location`` and
the text of a backend's error).
"""

from __future__ import annotations

import pytest

from cytearc_vfs.remote.locations import describe_location, given_location, reopenable_location
from cytearc_vfs.remote.password_masking import passwords_masked

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
URL = f"s3://AKIDEXAMPLE:{SECRET}@bkt/a.zarr"


@pytest.mark.parametrize("mask", [given_location, describe_location, passwords_masked])
def test_a_password_holding_a_slash_is_masked(mask: object) -> None:
    assert callable(mask)
    shown = mask(URL)
    assert "wJalr" not in shown and "EXAMPLEKEY" not in shown, shown
    assert shown == "s3://AKIDEXAMPLE:***@bkt/a.zarr"


def test_the_refusal_of_a_password_in_a_recorded_url_does_not_print_it() -> None:
    with pytest.raises(ValueError) as refused:
        reopenable_location(URL, what="the source")
    assert "wJalr" not in str(refused.value) and "EXAMPLEKEY" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    ["http://host:8080/d@v2.zarr", "s3://bkt/run@2/a.zarr", "http://127.0.0.1:9/x@y/z.zarr"],
)
def test_a_port_or_an_at_sign_in_a_path_is_no_password(url: str) -> None:
    assert given_location(url) == url
    assert passwords_masked(f"GET {url} failed") == f"GET {url} failed"
