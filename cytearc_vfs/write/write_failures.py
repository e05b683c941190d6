"""How a destination's failed write is told: which key, where, why, and what to do.

A write that goes behind its writer (:mod:`.write_behind`) fails after
``set`` returned; the next ``set``, flush or commit raises what
:func:`failed_write_error` makes of it. The destination is unfinished
(its root is refused by every open), so every message ends with how to
write it again.
"""

from __future__ import annotations

from ..errors import DestinationBusyError
from ..format.option_names import option_name, switched_on
from ..remote.failures import (
    StoreAccessError,
    failure_remedy,
    first_line,
    is_backend_error,
    is_http_location,
)

__all__ = ["failed_write_error"]


def failed_write_error(failure: BaseException, key: str, where: str) -> BaseException:
    """The error to raise (from ``failure``) for the failed write of ``key`` to ``where``.

    A lost claim (``DestinationBusyError``) is itself: the destination is
    another writer's, and no remedy of a write applies. A backend's own
    failure (a lasting 5xx, a timeout, nothing answering) is a
    ``StoreAccessError`` with the remedy of its cause, which the command line
    names with its flag; anything else is an ``OSError``.
    """
    if isinstance(failure, DestinationBusyError):
        return failure
    # the failure's first line: obstore's errors go on with a multi-line debug dump,
    # which stays in the cause
    said = f"writing {key!r} to {where} failed ({type(failure).__name__}: {first_line(failure)})"
    unfinished = (
        "the destination is unfinished and does not open: write it again with "
        f"{switched_on('overwrite')}"
    )
    if not is_backend_error(failure):
        return OSError(f"{said}; {unfinished}")
    remedy = failure_remedy(
        failure, http=is_http_location(where), options=option_name("storage_options")
    )
    error = StoreAccessError(f"{said}; {remedy}; {unfinished}")
    error.where = where
    return error
