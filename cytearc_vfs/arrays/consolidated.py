"""Consolidated metadata above an array that a resize or promote changes.

zarr opens a group whose ``zarr.json`` holds consolidated metadata from
that copy of its members' documents, without reading their own
``zarr.json``. Through such a group zarr would read an array that a resize
or promote is moving with its old document, past the marker that makes
readers refuse it (half-moved chunks, read as valid), and read it with the
old shape once the operation is done (shifted values, no error). So the
plan records every group above the array that holds consolidated metadata
(:func:`consolidated_groups`, from the documents read before anything is
written); right after the journal, before the marker, their consolidated
metadata is removed (:func:`unconsolidate`, one write per group), and
zarr then reads each member's own document. Once the new ``zarr.json`` is
written, and before the journal goes, each is consolidated again
(:func:`reconsolidate`, one write per group), so the store is left as it
was found.

Innermost group first: the consolidated metadata of a group holds the
document of every group below it, so each group is consolidated after the
groups it holds, from their final documents (zarr 3.4 rebuilds a nested
group's members when it consolidates an outer one, but copies the rest of
its document as stored). Every state in between is valid: a group is either
unconsolidated (zarr reads its members' own documents) or consolidated
with the array's new document.

A group that cannot be consolidated again (another array below it is in
the middle of its own resize or promote, so zarr refuses that array's
document; a node zarr cannot read) does not stop the operation: the array
is complete and valid, the group is valid without consolidated metadata,
and a :class:`~cytearc_vfs.errors.VfsWarning` names the group, the reason
and the remedy.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from ..errors import warn_at_caller
from ..format.option_names import callers_form
from ..format.store_io import get_json
from .documents import describe, dumps
from .key_moves import mover_for
from .summary import unfinished_below

__all__ = [
    "ConsolidationReport",
    "Reconsolidation",
    "consolidated_groups",
    "reconsolidate",
    "shown",
    "unconsolidate",
]


@dataclass(frozen=True, slots=True)
class Reconsolidation:
    """What consolidating the recorded groups again did."""

    done: tuple[str, ...] = ()
    """Groups consolidated again (``"/"`` for the root), innermost first."""
    failed: tuple[tuple[str, str], ...] = ()
    """``(group, reason)`` for each group that could not be (a warning said so)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsolidationReport:
    """What became of the consolidated metadata above an array a change resized or
    promoted (the fields :class:`~.resizing.ResizeChange` and
    :class:`~.promotion.PromoteChange` share)."""

    unconsolidated: tuple[str, ...] = ()
    """Groups above the array whose consolidated metadata was removed while it ran
    (``/``: the root), innermost first."""
    reconsolidated: tuple[str, ...] = ()
    """Groups above the array consolidated again once it was done, innermost first:
    those of :attr:`unconsolidated`, and any that someone consolidated meanwhile
    (its copy held the array's old document)."""
    not_reconsolidated: tuple[tuple[str, str], ...] = ()
    """``(group, reason)`` for those that could not be (a ``VfsWarning`` said so too)."""


def shown(group: str) -> str:
    """A group's path as the reports show it (``"/"`` for the root).

    >>> shown(""), shown("g/h")
    ('/', 'g/h')
    """
    return group or "/"


def _document_key(group: str) -> str:
    return f"{group}/zarr.json" if group else "zarr.json"


def _consolidated(document: object) -> bool:
    """Whether a group's ``zarr.json`` holds consolidated metadata.

    >>> _consolidated({"node_type": "group", "consolidated_metadata": {"metadata": {}}})
    True
    >>> _consolidated({"node_type": "group", "consolidated_metadata": None})
    False
    """
    return (
        isinstance(document, Mapping)
        and document.get("node_type") == "group"
        and document.get("consolidated_metadata") is not None
    )


def consolidated_groups(ancestors: Mapping[str, object]) -> tuple[str, ...]:
    """The groups of ``ancestors`` that hold consolidated metadata, in its order.

    ``ancestors`` maps each group above the array (``""`` for the root),
    innermost first, to its ``zarr.json`` as read.

    >>> consolidated_groups({"g": {"node_type": "group"},
    ...                      "": {"node_type": "group", "consolidated_metadata": {}}})
    ('',)
    """
    return tuple(group for group, document in ancestors.items() if _consolidated(document))


def unconsolidate(store: Store, groups: Iterable[str]) -> None:
    """Remove the consolidated metadata of each of ``groups`` that still holds any.

    Reads each group's ``zarr.json`` (one ``get``) and writes it back
    without ``consolidated_metadata`` (one write) when it has any, so
    that recovery can do it again after a crash part way through.
    """
    mover = mover_for(store)
    for group in groups:
        key = _document_key(group)
        document = get_json(store, key, where=describe(store, group))
        if not _consolidated(document):
            continue
        assert isinstance(document, Mapping)
        plain = {name: value for name, value in document.items() if name != "consolidated_metadata"}
        sync(mover.set(key, dumps(plain)))


def _consolidate(store: Store, group: str) -> None:
    """``zarr.consolidate_metadata`` of one group: one write of its ``zarr.json``.

    On a ``LocalStore`` that write is a file replaced whole (zarr writes a
    temporary file and renames it); on an object store, one put.
    """
    with warnings.catch_warnings():
        # zarr says on every call that v3 consolidated metadata is not in the
        # spec; the store held it before, so keeping it is the user's choice
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        zarr.consolidate_metadata(store, path=group or None)


def _reason(store: Store, group: str, array: str, exc: Exception) -> str:
    reason = f"{type(exc).__name__}: {exc}"
    try:  # the arrays that stopped zarr, named; without them the message still goes
        unfinished = [path for path in unfinished_below(store, group) if path != array]
    except Exception:
        unfinished = []
    if not unfinished:
        return reason
    return (
        f"{len(unfinished)} other array(s) below it with an unfinished resize or promote, "
        f"whose marked zarr.json zarr refuses: {', '.join(unfinished)}; {reason}"
    )


def _groups_above(array: str) -> list[str]:
    """The groups above the array at ``array``, innermost first (``""``: the root).

    >>> _groups_above("a/b/x")
    ['a/b', 'a', '']
    """
    parts = array.split("/") if array else []
    return ["/".join(parts[:depth]) for depth in range(len(parts) - 1, -1, -1)]


def _holds_consolidated(store: Store, group: str) -> bool:
    """Whether a group the plan did not record holds consolidated metadata now."""
    try:
        return _consolidated(get_json(store, _document_key(group)))
    except Exception:  # unreadable or unreachable: it must not keep the journal
        return False


def reconsolidate(
    store: Store, groups: Iterable[str], *, array: str, operation: str
) -> Reconsolidation:
    """Consolidate each of ``groups`` (those the plan recorded) again, innermost first.

    A group above the array that ``groups`` lacks but that holds
    consolidated metadata now is consolidated too (one ``get`` per such
    level to find it): someone consolidated it while the operation ran (such
    as another resize finishing below the same group), and its copy holds
    the array's old document. A group that fails is left without
    consolidated metadata (removed, if it holds any: a copy never outlives
    the change) and a :class:`~cytearc_vfs.errors.VfsWarning` says so;
    nothing raises, since the operation is complete by then and its journal
    must still be deleted. ``array`` is the array's path.
    """
    recorded = set(groups)
    done: list[str] = []
    failed: list[tuple[str, str]] = []
    for group in _groups_above(array):
        if group not in recorded and not _holds_consolidated(store, group):
            continue
        try:
            _consolidate(store, group)
        except Exception as exc:  # any failure: the array is complete, say so and go on
            reason = _reason(store, group, array, exc)
            try:
                unconsolidate(store, [group])
            except Exception as again:
                reason += (
                    f"; removing its consolidated metadata failed too ({type(again).__name__}: "
                    f"{again}), so it may hold the array's old document: open the group with "
                    "use_consolidated=False until it is consolidated again"
                )
            failed.append((shown(group), reason))
            warn_at_caller(
                f"{describe(store, array)}: the {operation} is complete, but group "
                f"{shown(group)!r} above it could not be consolidated again ({reason}). The "
                "group is valid without consolidated metadata (zarr reads each member's own "
                "zarr.json), but zarr.open_consolidated refuses it and remote opens are slower. "
                "If another resize or promote below the group is unfinished, finish it first "
                f"({callers_form('cytearc_vfs.arrays.recover', 'cytearc-vfs array recover')}); "
                "then run zarr.consolidate_metadata(store, "
                f"path={group!r})",
            )
        else:
            done.append(shown(group))
    return Reconsolidation(tuple(done), tuple(failed))
