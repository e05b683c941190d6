"""How a source that cannot be bound is refused: named, with the remedy that fits.

Binding a source (:mod:`.sources`) meets the backend's own errors (a missing
directory, refused credentials, a network failure) and, at a composite's
open, stores that are no longer what the composite recorded. Each becomes
one error naming the source, its location and what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from ..errors import SourceGoneError, SourceUnavailableError, VfsError
from ..format.missing_assay import MissingAssayError
from ..format.option_names import source_label, source_options_example
from ..format.store_contents import NoZarrGroupError
from ..remote.failures import failure_remedy, first_line, is_http_location, source_failure
from ..remote.locations import Location, describe_location, local_path

__all__ = ["NamedSource", "named_failures", "refuse_replaced", "replaced_sources"]


class NamedSource(Protocol):
    """What the refusals name of a source (a :class:`~.sources.SourceSpec`)."""

    @property
    def name(self) -> str:
        """Source name."""
        ...

    @property
    def location(self) -> Location:
        """Where the source is."""
        ...

    @property
    def expected_dataset(self) -> str | None:
        """Dataset fingerprint recorded at creation (an open), else ``None``."""
        ...


@contextmanager
def replaced_sources(spec: NamedSource) -> Iterator[None]:
    """See :func:`refuse_replaced`."""
    try:
        yield
    except ValueError as exc:
        refuse_replaced(spec, exc)
        raise


def refuse_replaced(spec: NamedSource, exc: BaseException) -> None:
    """A recorded source that is no longer a CyteArc store: say so, naming the source.

    When the record holds the source's fingerprints (an open), a plain
    ``ValueError`` from reading it ("holds no Zarr group", "assay 'RNA' does
    not exist") means something else now sits at the recorded location (an
    AnnData store, an empty directory, a file), and its own remedy (write a
    store there) is not this one. The package's own errors name what they
    checked and pass unchanged.
    """
    if spec.expected_dataset is None or isinstance(exc, VfsError):
        return
    where = describe_location(spec.location)
    local = local_path(spec.location)
    if isinstance(exc, NoZarrGroupError) and (local is None or local.is_dir()):
        # nothing is there (an object store has no directory to find missing first);
        # not marked as pinned_store's failures are: named_failures passes it as it is
        raise SourceGoneError(
            f"{source_label(spec.name)} at {where} is gone: no Zarr group is there any more "
            "(no zarr.json at its root); a source moved or deleted after the composite was "
            "made must be restored at that location, or the composite recreated"
        ) from exc
    if type(exc) not in (ValueError, NoZarrGroupError, MissingAssayError):
        return
    raise ValueError(
        f"{source_label(spec.name)} at {where} is not the store the composite recorded "
        f"({first_line(exc)}); the source was replaced or moved after the composite was "
        "created. Restore the source at that path, or recreate the composite"
    ) from exc


@contextmanager
def named_failures(spec: NamedSource) -> Iterator[None]:
    """Backend errors (missing files, refused credentials, network) become one
    :class:`SourceUnavailableError` (:class:`SourceGoneError` for a source that is not
    there) that names the source and the fix; the package's other errors pass."""
    try:
        yield
    except Exception as exc:
        gone = isinstance(exc, FileNotFoundError) or type(exc).__name__ == "NotFoundError"
        kind = SourceGoneError if gone else SourceUnavailableError
        if getattr(exc, "cytearc_source", False):
            # pinned_store named the source, the key and the remedy already: said
            # once, not nested in a second naming of the same source
            label, named, detail = first_line(exc).partition(": ")
            if named and label.startswith(f"{source_label(spec.name)} at "):
                raise source_failure(kind(f"{label} cannot be read: {detail}")) from exc
        if isinstance(exc, (VfsError, ValueError, TypeError)):
            raise
        where = describe_location(spec.location)
        # an error pinned_store named already carries the backend's as its cause
        cause = exc.__cause__ if getattr(exc, "cytearc_source", False) else None
        cause = exc if cause is None else cause
        if local_path(spec.location) is not None:
            remedy = (
                "check that it exists (a source moved or deleted after the composite was made "
                "must be restored at that path, or create the composite again with its new "
                "location)"
            )
        else:
            remedy = failure_remedy(
                cause, http=is_http_location(where), options=source_options_example(spec.name)
            )
        said = first_line(exc)
        raise source_failure(
            kind(
                f"{source_label(spec.name)} at {where} cannot be read "
                f"({type(exc).__name__}: {said})"
                + ("" if remedy in said else f"; {remedy}")  # a backend may name it already
            )
        ) from exc
