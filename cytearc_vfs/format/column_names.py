"""Names of table columns: what a column may be called, and the names reserved.

A column is a Zarr array below its table (``cellData/NAME``): its name is a
key segment and, on a local file system, a directory name. The names
``ids``, ``names`` and ``I`` are the table's own; a carried column that would
take one is renamed ``orig_<name>``, as DataStoreMerge names merged columns.
"""

from __future__ import annotations

from .store_keys import METADATA_DOCUMENTS, key_problem
from .table_names import TableName

__all__ = [
    "MAX_COLUMN_NAME_BYTES",
    "ORIG_PREFIX",
    "RESERVED_COLUMNS",
    "check_column_name",
    "column_name_problem",
    "free_column_name",
    "lone_surrogate",
]

RESERVED_COLUMNS = ("ids", "names", "I")
#: Prefix of a carried column whose name the composite reserves.
ORIG_PREFIX = "orig_"
#: Longest column name, in UTF-8 bytes: a column is a directory (``cellData/NAME``)
#: on a local file system, whose names stop at 255 bytes (NAME_MAX).
MAX_COLUMN_NAME_BYTES = 255


def column_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a column's Zarr array name, or ``None`` when it can.

    >>> column_name_problem("cell_type") is None
    True
    >>> column_name_problem("a/b")
    "it is not a non-empty string without '/', '\\\\' or a leading '.'"
    >>> column_name_problem("ü" * 128)
    'it is 256 bytes long in UTF-8, over the 255 a file name may have'
    """
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        return "it is not a non-empty string without '/', '\\' or a leading '.'"
    if name.lower() in METADATA_DOCUMENTS:
        # the column's array would sit where its table keeps its own document:
        # a file system refuses it half-way through the write, and an object
        # store keeps both keys while the column is never listed (lost)
        return "it is the key of Zarr's metadata document of the table itself"
    surrogate = lone_surrogate(name)
    if surrogate is not None:
        return f"it holds the lone surrogate {surrogate!r}, which is not UTF-8 text"
    size = len(name.encode("utf-8"))
    if size > MAX_COLUMN_NAME_BYTES:
        return f"it is {size} bytes long in UTF-8, over the {MAX_COLUMN_NAME_BYTES} a file name may have"
    # the column is a key segment: what every store refuses in a key (a
    # control character, '%2f', spaces and dots only) is refused here, before
    # anything is written, and not by the destination's store half-way through
    problem = key_problem(f"table/{name}")  # a segment below its table, as it is stored
    return None if problem is None else f"it {problem.replace('has the segment', 'is')}"


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate of ``text`` (not UTF-8 text), or ``None``.

    >>> lone_surrogate("caf\\u00e9") is None
    True
    >>> lone_surrogate("a\\udcff")
    '\\udcff'
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


def check_column_name(name: object, *, table: TableName) -> str:
    """``name`` as a column name of ``table``; raises ``ValueError`` naming the problem
    (and, for an AnnData's column, the array it would be: ``cellData/NAME``)."""
    problem = column_name_problem(name)
    if problem is not None:
        raise ValueError(
            f"{table.column(name, stored=True)} cannot be a Zarr array name ({problem}); "
            "rename it to a "
            f"non-empty string of at most {MAX_COLUMN_NAME_BYTES} UTF-8 bytes without '/', "
            "'\\', a leading '.', control characters or URL escapes of those, other than "
            "'zarr.json'"
        )
    assert isinstance(name, str)
    return name


def free_column_name(name: str, taken: set[str]) -> str:
    """``name`` prefixed with :data:`ORIG_PREFIX` until ``taken`` does not hold it (as
    DataStoreMerge names merged columns ``orig_<name>``).

    >>> free_column_name("ids", {"ids", "orig_ids"})
    'orig_orig_ids'
    """
    while name in taken:
        name = ORIG_PREFIX + name
    return name
