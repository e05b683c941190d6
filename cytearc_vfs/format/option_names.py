"""How messages name the options a caller gives: Python keywords, or command-line flags.

The same refusal reaches Python callers (``source_storage_options={'a': {...}}``)
and people at a shell (``--source-storage-options '{"a": {...}}'``); each
should read the remedy in the form they type. Messages ask this module for an
option's name; the command line switches it to its flags while a command runs
(:func:`command_line_names`), and everyone else reads the Python form.

The switch is process-wide, not a context variable: many messages are built
in zarr's event-loop thread, which does not see the caller's context. The
command line runs one command per process, and restores the Python form
afterwards for programs (and tests) that call its ``main``.

>>> option_name("mem_budget")
'mem_budget'
>>> with command_line_names():
...     option_name("mem_budget")
'--mem-budget'
>>> source_options_example("a")
"source_storage_options={'a': {...}}"

A per-source option is a mapping in Python and one ``NAME=VALUE`` flag a source
at a shell: :func:`source_option_given` writes an entry in the form the caller
types, and :class:`Placeholder` leaves a part of it for the caller to fill in.

>>> source_option_given("source_layers", "a", Placeholder("LAYER"))
"source_layers={'a': LAYER}"
>>> with command_line_names():
...     source_option_given("source_layers", "a", Placeholder("LAYER"))
'--layer a=LAYER'
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "MOUNT_SOURCE",
    "Placeholder",
    "callers_form",
    "command_line_names",
    "on_command_line",
    "option_given",
    "option_name",
    "option_offered",
    "options_given",
    "shell_word",
    "source_label",
    "source_option_given",
    "source_options_example",
    "switched_on",
]

#: The name a mount's one source is read under. No composite source has it
#: (their names are never empty), and its options are the whole
#: ``source_storage_options``, not an entry of them.
MOUNT_SOURCE = ""

#: Python keyword -> the command line's flag for the same value
COMMAND_LINE_FLAGS = {
    "assay": "--assay",
    "assay_type": "--assay-type",
    # mount_datastore's list: the command line repeats its flag, one assay each
    "assays": "--assay",
    "fill_missing": "--fill-missing",
    "make_unique": "--make-unique",
    "mem_budget": "--mem-budget",
    "overwrite": "--overwrite",
    "source_storage_options": "--source-storage-options",
    "storage_options": "--storage-options",
    "workspace": "--workspace",
}

#: Python keyword of a per-source mapping (``{source name: value}``) -> the flag
#: that gives one source's entry as ``NAME=VALUE`` (repeated, one source each)
SOURCE_OPTION_FLAGS = {
    "source_layers": "--layer",
    "source_workspaces": "--workspace",
}

#: Python keywords no command takes: a message names them only to Python callers
NO_COMMAND_LINE_FLAG = frozenset({"layout"})

_lock = threading.Lock()
_command_line_depth = 0


def _command_line() -> bool:
    return _command_line_depth > 0


def on_command_line() -> bool:
    """Whether messages are read at a shell (inside :func:`command_line_names`), for a
    remedy that differs there (a command instead of a function, a Python-only edit
    left out). An option is named through :func:`option_name`, :func:`option_given`
    or :func:`source_option_given` and their tables, never by testing this.

    >>> on_command_line()
    False
    """
    return _command_line()


def callers_form(python: str, shell: str) -> str:
    """A remedy that is a function in Python and a command at a shell, in the form
    the caller reads: ``shell`` inside :func:`command_line_names`, else ``python``.

    >>> callers_form("cv.write_counts(DEST, PATH)", "cytearc-vfs write PATH DEST")
    'cv.write_counts(DEST, PATH)'
    >>> with command_line_names():
    ...     callers_form("cv.write_counts(DEST, PATH)", "cytearc-vfs write PATH DEST")
    'cytearc-vfs write PATH DEST'
    """
    return shell if _command_line() else python


def option_name(keyword: str) -> str:
    """The name a caller uses for the option ``keyword`` (a Python keyword argument)."""
    if _command_line():
        return COMMAND_LINE_FLAGS.get(keyword, keyword)
    return keyword


class Placeholder(str):
    """A part of an example the caller fills in (``NAME``, ``LAYER``): written bare in
    both forms, where a value is quoted in Python's.

    >>> repr(Placeholder("LAYER"))
    'LAYER'
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def shell_word(value: str) -> str:
    """``value`` as one word a shell reads back unchanged: quoted when it holds a
    space or another character the shell treats specially; a :class:`Placeholder`
    stays bare, for the caller to replace.

    >>> shell_word("my layer")
    "'my layer'"
    >>> shell_word("raw/X")
    'raw/X'
    >>> shell_word(Placeholder("LAYER"))
    'LAYER'
    """
    if isinstance(value, Placeholder):
        return str(value)
    return shlex.quote(value)


def option_given(keyword: str, value: str) -> str:
    """How a caller gives the option ``keyword`` the text ``value``.

    >>> option_given("assay", "A")
    "assay='A'"
    >>> with command_line_names():
    ...     option_given("assay", "A")
    '--assay A'
    """
    if _command_line() and keyword in COMMAND_LINE_FLAGS:
        return f"{COMMAND_LINE_FLAGS[keyword]} {shell_word(value)}"
    return f"{keyword}={value!r}"


def options_given(*pairs: tuple[str, str]) -> str:
    """How a caller gives several options at once (``(keyword, value)`` pairs).

    >>> options_given(("assay", "A"), ("workspace", "W"))
    "assay='A', workspace='W'"
    >>> with command_line_names():
    ...     options_given(("assay", "A"), ("workspace", "W"))
    '--assay A --workspace W'
    """
    return (" " if _command_line() else ", ").join(option_given(*pair) for pair in pairs)


def source_option_given(keyword: str, source: str, value: str) -> str:
    """How a caller gives the source ``source`` the entry ``value`` of the per-source
    option ``keyword`` (a mapping by source name in Python, ``NAME=VALUE`` at a shell).

    >>> source_option_given("source_workspaces", Placeholder("NAME"), "W")
    "source_workspaces={NAME: 'W'}"
    >>> with command_line_names():
    ...     source_option_given("source_workspaces", Placeholder("NAME"), "W")
    '--workspace NAME=W'
    >>> with command_line_names():
    ...     source_option_given("source_layers", "a", "my layer")
    "--layer 'a=my layer'"
    """
    if _command_line() and keyword in SOURCE_OPTION_FLAGS:
        return f"{SOURCE_OPTION_FLAGS[keyword]} {_source_entry(source, value)}"
    return f"{keyword}={{{source!r}: {value!r}}}"


def _source_entry(source: str, value: str) -> str:
    """``NAME=VALUE`` as one shell word; placeholders stay bare and unquoted."""
    if isinstance(source, Placeholder) and isinstance(value, Placeholder):
        return f"{source}={value}"
    if isinstance(source, Placeholder):
        return f"{source}={shell_word(value)}"
    if isinstance(value, Placeholder):
        return f"{shell_word(source)}={value}"
    return shell_word(f"{source}={value}")


def switched_on(keyword: str) -> str:
    """How a caller turns the yes/no option ``keyword`` on.

    >>> switched_on("overwrite")
    'overwrite=True'
    >>> with command_line_names():
    ...     switched_on("overwrite")
    '--overwrite'
    """
    if _command_line() and keyword in COMMAND_LINE_FLAGS:
        return COMMAND_LINE_FLAGS[keyword]
    return f"{keyword}=True"


def option_offered(keyword: str) -> bool:
    """Whether the caller can give the option ``keyword`` at all (a remedy may name it).

    >>> option_offered("layout")
    True
    >>> with command_line_names():
    ...     option_offered("layout")
    False
    """
    return not (_command_line() and keyword in NO_COMMAND_LINE_FLAG)


def source_label(source: str) -> str:
    """How messages name ``source``: a composite's source by its name, or a mount's.

    >>> source_label("a"), source_label(MOUNT_SOURCE)
    ("source 'a'", "the mount's source")
    """
    return "the mount's source" if source == MOUNT_SOURCE else f"source {source!r}"


def source_options_example(source: str | None) -> str:
    """How a caller passes backend options for ``source`` (a composite's source by
    name), or for a mount's one source (``None`` or :data:`MOUNT_SOURCE`), written
    as the caller writes it."""
    if source == MOUNT_SOURCE:
        source = None
    if _command_line():
        inner = "{...}" if source is None else '{"' + source + '": {...}}'
        return f"--source-storage-options '{inner}' (JSON, or @FILE holding it)"
    inner = "{...}" if source is None else "{" + repr(source) + ": {...}}"
    return f"source_storage_options={inner}"


@contextmanager
def command_line_names() -> Iterator[None]:
    """Name options by their command-line flags while the block runs (nests)."""
    global _command_line_depth
    with _lock:
        _command_line_depth += 1
    try:
        yield
    finally:
        with _lock:
            _command_line_depth -= 1
