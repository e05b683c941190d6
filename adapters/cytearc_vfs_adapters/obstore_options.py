"""obstore clients made from storage options, with a refusal in words for options it cannot take.

obstore takes a store's own options (``endpoint``, ``region``, credentials)
as keywords and its HTTP client's under ``client_options``. A client option
given at the top (``storage_options={"allow_http": True}``, as s3fs and
other clients take it) makes obstore 0.12 panic in Rust: a
``PanicException``, which ``except Exception`` does not catch, after a Rust
backtrace on stderr. An unknown key is an error whose text ends in Rust's
debug dump. Both are refused here as a
:class:`~cytearc_vfs.remote.failures.BackendOptionsError` (a ``ValueError``)
naming the key and where it goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cytearc_vfs.remote.failures import BackendOptionsError

__all__ = ["CLIENT_OPTION_NAMES", "client_from_url"]

#: The keys of obstore's ``ClientConfig`` (its ``client_options``), checked on obstore 0.12.
CLIENT_OPTION_NAMES = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "default_headers",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_max_frame_size",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_ca_certificate",
        "proxy_excludes",
        "proxy_url",
        "randomize_addresses",
        "timeout",
        "user_agent",
    }
)


def client_from_url(url: str, options: Mapping[str, Any], *, shown: str) -> Any:
    """obstore's client of ``url`` with ``options``; options it cannot take are refused by name.

    ``shown`` names the location in messages (the URL without any password).
    """
    from obstore.exceptions import GenericError, UnknownConfigurationKeyError
    from obstore.store import from_url

    misplaced = sorted(CLIENT_OPTION_NAMES & set(options))
    if misplaced:
        one = len(misplaced) == 1
        example = ", ".join(f"{name!r}: ..." for name in misplaced)
        raise BackendOptionsError(
            shown,
            f"{', '.join(map(repr, misplaced))} {'belongs' if one else 'belong'} to obstore's "
            f"HTTP client and {'goes' if one else 'go'} in 'client_options' "
            f"({{'client_options': {{{example}}}}}, beside the endpoint, region and "
            "credentials)",
        )
    try:
        return from_url(url, **options)
    except (UnknownConfigurationKeyError, GenericError, ValueError, TypeError) as exc:
        # obstore's text ends in Rust's debug dump of the error: its first line says it
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendOptionsError(
            shown,
            f"{said} ({type(exc).__name__}); obstore takes its store's options for this "
            "scheme (endpoint, region, credentials ...; see obstore's from_url documentation), "
            "client options under 'client_options' and retry options under 'retry_config'",
        ) from exc
