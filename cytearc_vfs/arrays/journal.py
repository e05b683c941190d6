"""The journal that makes resize and promote all-or-nothing, and recovery from it.

A resize or a promote is planned in full before anything changes, then
carried out in this order (each step one store write, delete or rename):

1. write the plan to ``{array}/cytearc.journal.json``: the document before
   and after, the chunks to clear, the keys to drop, the renames in order,
   the groups above the array that hold consolidated metadata; then remove
   that metadata, one write per group (:mod:`.consolidated`);
2. rewrite ``zarr.json`` with the in-progress marker
   (:data:`~.documents.MARKER_FIELD`, ``must_understand: true``): from here
   on zarr, tensorstore and zarrs refuse to open the array;
3. *prepare*: clear the cells a shrink cuts off in edge chunks (read,
   fill, write; idempotent), delete the chunks that fall outside, then write
   ``cytearc.journal.progress.json`` = ``{"done": 0}``;
4. the renames, one after the other; after rename ``m`` for each ``m`` in
   the plan's ``marks``, progress = ``{"done": m}``;
5. write the new ``zarr.json`` (no marker), then consolidate the recorded
   groups again, innermost first (one write each), with any other group
   above the array that holds consolidated metadata by then (its copy
   holds the old document); a group that fails is left unconsolidated
   with a warning and never stops the operation;
6. delete the journal, then the progress.

Recovery (:func:`recover_array`) always rolls forward: the journal has the
new document and the whole plan. It runs only when asked (:func:`recover`):
nothing can tell a live operation of another process from a dead one, so
every other operation refuses an array whose journal is present
(:func:`~.documents.refuse_unfinished`) rather than race it. Where it resumes:

- ``zarr.json`` is the new document and differs from the old one: the
  consolidation of step 5 (again: it is idempotent), then step 6;
- ``zarr.json`` is the new document and the same as the old one (a resize
  that moves chunks but keeps the shape, ``low=[-4], high=[4]``): the
  progress key tells step 5 (present: only step 6 is left) from step 1
  (absent: all of it). Step 6 deletes the journal before the progress so
  that no state after step 5 lacks the progress while the journal is there;
  a progress left without a journal (a crash between the two deletes) is
  deleted by the next :func:`recover` or operation before it writes a
  journal, so it never stands for the next operation's;
- ``zarr.json`` is the old document: the rest of step 1 (the recorded
  groups that still hold consolidated metadata lose it), then on;
- no progress: steps 2 and 3 again (both are idempotent), then on;
- progress ``{"done": c}``: the renames after ``c`` are located from which
  of the plan's keys exist, which alone pins the state down. A rename is
  "copy, then delete the source", so every prefix of the rename sequence
  (and every half-done rename) leaves its own set of existing keys,
  *unless* a rename is immediately followed by the one that refills its
  source (``a -> b`` then ``c -> a``): then "copied ``a`` to ``b``" and
  "moved ``a``, copied ``c`` to ``a``" leave the same keys. The planner
  orders renames to avoid such pairs and puts a progress mark between the
  ones it cannot avoid, so the state found is unique; ``docs/arrays.md``
  gives the argument. A half-done rename is redone whole (its source is
  intact; its target may be torn).

Renames never overwrite a key that has not moved yet, and a move's target
never exists when it is written (stray keys there are dropped in step 3).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from ..errors import RecordShapeError
from ..format.store_io import get_json
from .consolidated import Reconsolidation, reconsolidate, unconsolidate
from .documents import (
    JOURNAL_NAME,
    MARKER_FIELD,
    PROGRESS_NAME,
    array_lock,
    describe,
    dumps,
    marked,
    refresh,
)
from .edges import EdgeChunks
from .key_moves import KeyMover, mover_for

__all__ = [
    "JOURNAL_VERSION",
    "Plan",
    "chained_marks",
    "execute",
    "identify",
    "recover",
    "recover_array",
]

#: ``cytearc_array_journal`` of the documents this version writes.
JOURNAL_VERSION = 2
#: The fields of a journal, by the versions this one reads: version 1 (no
#: ``reconsolidate``: its operation removed consolidated metadata before
#: writing the journal, and nothing is consolidated again) is finished too.
_FIELDS: dict[int, frozenset[str]] = {
    1: frozenset(
        {
            "cytearc_array_journal",
            "operation",
            "arguments",
            "before",
            "after",
            "clear_bounds",
            "clear_chunks",
            "drops",
            "moves",
            "marks",
        }
    ),
}
_FIELDS[2] = _FIELDS[1] | {"reconsolidate"}
#: Stands for a journal that is not valid JSON (torn while being written).
_torn: object = object()


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything a resize or promote will do, decided before anything is done."""

    operation: str
    """``"resize"`` or ``"promote"``."""
    arguments: dict[str, Any]
    """What the caller asked for (and what rounding made of it), for people."""
    before: dict[str, Any]
    """``zarr.json`` before."""
    after: dict[str, Any]
    """``zarr.json`` after."""
    clear_bounds: tuple[int | None, ...] = ()
    """Per dimension of the old array, the index from which cells of the
    chunks in :attr:`clear_chunks` must hold the fill value (``None``: no bound)."""
    clear_chunks: tuple[tuple[int, ...], ...] = ()
    """Old grid positions of the edge chunks to clear beyond :attr:`clear_bounds`
    (read, filled, written; :mod:`.edges`). Edge chunks that clearing would
    empty are in :attr:`drops` instead."""
    drops: tuple[str, ...] = ()
    """Keys (relative to the array) deleted before any rename."""
    moves: tuple[tuple[str, str], ...] = ()
    """Renames ``(source, target)`` in the order they run (relative keys)."""
    marks: tuple[int, ...] = field(default=())
    """After how many renames a progress mark is written."""
    reconsolidate: tuple[str, ...] = ()
    """Groups above the array (``""``: the root), innermost first, whose
    consolidated metadata the operation removes and consolidates again."""

    @property
    def changes_nothing(self) -> bool:
        """Whether carrying the plan out would leave the store as it is."""
        return (
            self.before == self.after
            and not self.clear_chunks
            and not self.drops
            and not self.moves
        )

    def to_json(self) -> dict[str, Any]:
        """The journal document."""
        return {
            "cytearc_array_journal": JOURNAL_VERSION,
            "operation": self.operation,
            "arguments": self.arguments,
            "before": self.before,
            "after": self.after,
            "clear_bounds": list(self.clear_bounds),
            "clear_chunks": [list(c) for c in self.clear_chunks],
            "drops": list(self.drops),
            "moves": [list(m) for m in self.moves],
            "marks": list(self.marks),
            "reconsolidate": list(self.reconsolidate),
        }

    @classmethod
    def from_json(cls, data: object, *, where: str) -> Plan:
        """Parse a journal document strictly.

        Raises
        ------
        RecordShapeError
            Any field missing, unknown or of the wrong type.
        """
        if not isinstance(data, dict):
            raise RecordShapeError(f"{where}: a journal is an object, not {type(data).__name__}")
        version = data.get("cytearc_array_journal")
        fields = _FIELDS.get(version) if type(version) is int else None
        if fields is None:
            raise RecordShapeError(
                f"{where}: journal version {version!r} is not one of {sorted(_FIELDS)}; "
                "finish it with the cytearc-vfs version that started it"
            )
        if set(data) != fields:
            raise RecordShapeError(
                f"{where}: journal fields {sorted(data)} are not {sorted(fields)} "
                f"(version {version})"
            )
        try:
            plan = cls(
                operation=_text(data["operation"]),
                arguments=_object(data["arguments"]),
                before=_object(data["before"]),
                after=_object(data["after"]),
                clear_bounds=tuple(_optional_int(b) for b in _list(data["clear_bounds"])),
                clear_chunks=tuple(
                    tuple(_int(i) for i in _list(c)) for c in _list(data["clear_chunks"])
                ),
                drops=tuple(_text(k) for k in _list(data["drops"])),
                moves=tuple(_pair(m) for m in _list(data["moves"])),
                marks=tuple(_int(m) for m in _list(data["marks"])),
                reconsolidate=tuple(_text(g) for g in _list(data.get("reconsolidate", []))),
            )
        except (TypeError, ValueError) as exc:
            raise RecordShapeError(f"{where}: malformed journal ({exc})") from exc
        if plan.operation not in ("resize", "promote"):
            raise RecordShapeError(f"{where}: journal of unknown operation {plan.operation!r}")
        return plan


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    return value


def _object(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{value!r} is not an object")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _optional_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _pair(value: object) -> tuple[str, str]:
    items = _list(value)
    if len(items) != 2:
        raise ValueError(f"{value!r} is not a [source, target] pair")
    return _text(items[0]), _text(items[1])


def chained_marks(moves: Sequence[tuple[str, str]]) -> tuple[int, ...]:
    """Where a progress mark must separate two renames (see the module docstring).

    Rename ``i + 1`` refilling the source of rename ``i`` needs a mark after ``i``.

    >>> chained_marks([("c/1", "c/2"), ("c/0", "c/1")])
    (1,)
    >>> chained_marks([("c/1/0", "c/2/0"), ("c/1/1", "c/2/1"), ("c/0/0", "c/1/0")])
    ()
    """
    return tuple(i + 1 for i in range(len(moves) - 1) if moves[i + 1][1] == moves[i][0])


def identify(
    moves: Sequence[tuple[str, str]],
    marks: Sequence[int],
    done: int,
    existing: frozenset[str] | set[str],
    *,
    where: str,
) -> int:
    """How many renames are complete, given the keys that exist.

    ``done`` renames are known complete (the last progress mark). The states
    after ``done``, up to the next mark, are walked in order: after each
    copy (source and target both exist) and after each delete; exactly one
    must leave the keys of ``moves`` that ``existing`` holds.

    Returns
    -------
    int
        The number of renames to skip; a half-done rename is not counted,
        so it runs again whole.

    Raises
    ------
    RecordShapeError
        No state, or several, match: the keys were changed by someone else.

    Examples
    --------
    >>> moves = [("c/1", "c/2"), ("c/0", "c/1")]
    >>> identify(moves, [1], 0, {"c/1", "c/0"}, where="a")  # nothing moved yet
    0
    >>> identify(moves, [1], 0, {"c/1", "c/2", "c/0"}, where="a")  # copied c/1 only
    0
    >>> identify(moves, [1], 1, {"c/2", "c/1"}, where="a")  # all done
    2
    >>> staged = [("c/0", "s/c/0/0"), ("s/c/0/0", "c/0/0")]
    >>> identify(staged, [], 0, {"c/0"}, where="a"), identify(staged, [], 0, {"s/c/0/0"}, where="a")
    (0, 1)
    """
    universe = {key for move in moves for key in move}
    observed = existing & universe
    # before the first rename: every source that no earlier rename creates
    # (a staged chunk's second rename starts from where its first one put it)
    expected: set[str] = set()
    created: set[str] = set()
    for source, target in moves:
        if source not in created:
            expected.add(source)
        created.add(target)
    for source, target in moves[:done]:
        expected.add(target)
        expected.discard(source)
    mismatched = len(expected ^ observed)
    limit = min([m for m in marks if m > done], default=len(moves))
    found: list[int] = [done] if mismatched == 0 else []
    for index in range(done, limit):
        source, target = moves[index]
        if target not in expected:
            expected.add(target)
            mismatched += -1 if target in observed else 1
        if mismatched == 0:
            found.append(index)  # copied, not deleted: run rename index again
        if source in expected:
            expected.discard(source)
            mismatched += 1 if source in observed else -1
        if mismatched == 0:
            found.append(index + 1)
    if len(set(found)) != 1:
        raise RecordShapeError(
            f"{where}: the keys present match {len(set(found))} states of the interrupted "
            f"operation (between rename {done} and {limit} of {len(moves)}); the array was "
            "changed by something else while the operation was unfinished. Restore it from "
            "a copy"
        )
    return found[0]


@dataclass(slots=True)
class _Run:
    store: Store
    path: str
    mover: KeyMover
    plan: Plan

    @property
    def prefix(self) -> str:
        return f"{self.path}/" if self.path else ""

    def key(self, name: str) -> str:
        return self.prefix + name

    def set_json(self, name: str, document: Mapping[str, Any]) -> None:
        sync(self.mover.set(self.key(name), dumps(document)))

    def delete(self, name: str) -> None:
        sync(self.mover.delete(self.key(name)))

    def prepare(self) -> None:
        """Step 3: clear edge cells, drop chunks, mark the renames as started."""
        if self.plan.clear_chunks:
            self._clear_edges()
        for key in self.plan.drops:
            self.delete(key)
        self.set_json(PROGRESS_NAME, {"done": 0})

    def _clear_edges(self) -> None:
        edges = EdgeChunks(self.store, self.path, self.plan.before, self.plan.clear_bounds)
        for coords in self.plan.clear_chunks:
            edges.clear(coords)

    def run_moves(self, start: int) -> None:
        """Step 4 from rename ``start`` on, with the plan's progress marks."""
        marks = set(self.plan.marks)
        for index in range(start, len(self.plan.moves)):
            source, target = self.plan.moves[index]
            sync(self.mover.move(self.key(source), self.key(target)))
            if index + 1 in marks:
                self.set_json(PROGRESS_NAME, {"done": index + 1})

    def finish(self) -> Reconsolidation:
        """Steps 5 and 6."""
        self.set_json("zarr.json", self.plan.after)
        return self.close()

    def close(self) -> Reconsolidation:
        """The consolidation of step 5 (the array is complete), then step 6: the
        journal first (the operation is done), then the progress."""
        again = reconsolidate(
            self.store, self.plan.reconsolidate, array=self.path, operation=self.plan.operation
        )
        self.delete(JOURNAL_NAME)
        self.delete(PROGRESS_NAME)
        sync(self.mover.tidy(self.prefix))
        return again


def same_document(stored: object, expected: Mapping[str, Any]) -> bool:
    """Whether two JSON documents are equal (NaN equal to NaN, key order ignored).

    >>> same_document({"a": float("nan"), "b": 1}, {"b": 1, "a": float("nan")})
    True
    """
    return json.dumps(stored, sort_keys=True) == json.dumps(expected, sort_keys=True)


def execute(
    store: Store, path: str, plan: Plan, *, stale_progress: bool = False
) -> Reconsolidation:
    """Carry ``plan`` out from the start (steps 1 to 6 of the module docstring).

    Returns what consolidating the recorded groups again did.

    ``stale_progress``: the array's keys include a progress key, which a
    crash between the two deletes of step 6 of an earlier operation left; it
    is deleted first, or a recovery would read it as this operation's.
    """
    run = _Run(store, path, mover_for(store), plan)
    if stale_progress:
        run.delete(PROGRESS_NAME)
    run.set_json(JOURNAL_NAME, plan.to_json())
    # before the marker: zarr reading through consolidated metadata would not see it
    unconsolidate(store, plan.reconsolidate)
    run.set_json("zarr.json", marked(plan.before, plan.operation))
    run.prepare()
    run.run_moves(0)
    return run.finish()


def recover_array(store: Store, path: str) -> bool:
    """Finish the operation a crash interrupted on the array at ``path``, if any.

    Returns
    -------
    bool
        Whether there was one to finish (it is finished now).

    Raises
    ------
    RecordShapeError
        The journal or the array is not in any state the operation passes
        through (changed by something else); nothing is written then.
    """
    where = describe(store, path)
    prefix = f"{path}/" if path else ""
    try:
        journal = get_json(store, prefix + JOURNAL_NAME, where=where)
    except RecordShapeError:
        journal = _torn
    if journal is None:
        # a crash between step 6's two deletes: the operation is complete
        if get_json(store, prefix + PROGRESS_NAME, where=where) is not None:
            sync(mover_for(store).delete(prefix + PROGRESS_NAME))
        return False
    current = get_json(store, prefix + "zarr.json", where=where)
    started = isinstance(current, dict) and MARKER_FIELD in current
    if journal is _torn:
        if started:
            raise RecordShapeError(
                f"{where}: the journal of the unfinished operation is unreadable"
            )
        # torn while being written: nothing else was, the array is as before
        sync(mover_for(store).delete(prefix + JOURNAL_NAME))
        return True
    plan = Plan.from_json(journal, where=f"{where}, {JOURNAL_NAME}")
    run = _Run(store, path, mover_for(store), plan)
    progress = get_json(store, prefix + PROGRESS_NAME, where=where)
    unchanged = same_document(plan.before, plan.after)
    if same_document(current, plan.after) and not (unchanged and progress is None):
        # step 5 done (for an unchanged document the progress says so: step 6
        # deletes it last); with no progress, an unchanged document is step 1
        run.close()
        return True
    if same_document(current, plan.before):
        # the rest of step 1 (the marker is written only after it)
        unconsolidate(store, plan.reconsolidate)
        run.set_json("zarr.json", marked(plan.before, plan.operation))
    elif not same_document(current, marked(plan.before, plan.operation)):
        raise RecordShapeError(
            f"{where}: zarr.json is neither the document before nor after the unfinished "
            f"{plan.operation} its journal describes; the array was changed by something else. "
            "Restore it from a copy"
        )
    if progress is None:
        run.prepare()
        start = 0
    else:
        if not (isinstance(progress, dict) and isinstance(progress.get("done"), int)):
            raise RecordShapeError(f"{where}: progress {progress!r} is not {{'done': N}}")
        existing = sync(run.mover.existing(prefix))
        relative = {key[len(prefix) :] for key in existing}
        start = identify(plan.moves, plan.marks, progress["done"], relative, where=where)
    run.run_moves(start)
    run.finish()
    return True


def recover(target: zarr.Array[Any] | Store, path: str | None = None) -> bool:
    """Finish a resize or promote that a crash (or an error) left unfinished.

    The only way an unfinished operation is finished: the other operations
    of :mod:`cytearc_vfs.arrays` refuse the array while its journal is
    present, because an operation another process is running right now looks
    the same as one that died. Call it only when no other process is
    changing the array: when they refuse, or when zarr refuses to open an
    array whose ``zarr.json`` carries ``cytearc_unfinished_operation`` (which
    is why it also takes a store and a path). The operation is always
    completed (rolled forward), never undone. It also deletes a progress key
    a crash left after an operation completed (and then returns ``False``).

    Parameters
    ----------
    target
        The array, or the writable store holding it.
    path
        The array's path in ``target`` when it is a store (default: the root).

    Returns
    -------
    bool
        Whether there was an unfinished operation (it is finished now; an
        array object passed in then describes the array as it is).

    Raises
    ------
    RecordShapeError
        The array was changed by something else while unfinished: the
        journal matches no state the operation passes through.

    Examples
    --------
    >>> recover(zarr.storage.MemoryStore(), "a")
    False
    """
    if isinstance(target, zarr.Array):
        store, own = target.store_path.store, target.store_path.path
        if path is not None and path != own:
            raise ValueError(f"path {path!r} given with an array at {own!r}; give one or the other")
        with array_lock(store, own):  # no flush, resize or promote of it in this process
            finished = recover_array(store, own)
        if finished:
            document = get_json(store, f"{own}/zarr.json" if own else "zarr.json")
            assert isinstance(document, dict)
            refresh(target, document)
        return finished
    if not isinstance(target, Store):
        raise TypeError(f"recover takes a zarr.Array or a Store, not {type(target).__name__}")
    path = (path or "").strip("/")
    with array_lock(target, path):  # no flush, resize or promote of it in this process
        if recover_array(target, path):
            return True
    # zarr refuses the array and there is no journal to finish it with
    document = get_json(target, f"{path}/zarr.json" if path else "zarr.json")
    if isinstance(document, dict) and MARKER_FIELD in document:
        raise RecordShapeError(
            f"{describe(target, path)}: zarr.json marks an unfinished "
            f"{document[MARKER_FIELD].get('operation', 'operation')} but its journal "
            f"({JOURNAL_NAME}) is gone, so it cannot be finished; restore the array from a copy"
        )
    return False
