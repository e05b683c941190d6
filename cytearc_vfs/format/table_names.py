"""How a message names a table: as its caller knows it, and where it is stored.

A refusal of a table's ids or columns is read by whoever gave the table. A
CyteArc store's own tables, and a table given as ``cells=`` or ``features=``,
are named as they are stored (``cellData``, ``featureData``). An AnnData's
tables (in memory, an ``.h5ad``, an AnnData Zarr store, a composite's
AnnData source) are named as anndata names them (``obs``, ``var``,
``raw/var``, the ``obs index``), which is what that user typed and sees;
where the layout explains a refusal (a reserved name, a name that becomes a
Zarr array), the message adds where the column would be stored
(``obs column 'I' (stored as cellData/I)``).

The naming travels with the table as a :class:`TableName`, and messages are
built from its phrases: nothing rewrites a finished message.

>>> CELL_DATA.column("a")
"cellData column 'a'"
>>> OBS.column("I", stored=True)
"obs column 'I' (stored as cellData/I)"
>>> RAW_VAR.ids, RAW_VAR.python, CELL_DATA.ids_path, OBS.ids_path
('raw/var index values', 'adata.raw.var', 'cellData/ids', 'obs index')
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CELL_DATA",
    "FEATURE_DATA",
    "OBS",
    "RAW_VAR",
    "VAR",
    "TableName",
    "anndata_table",
]


@dataclass(frozen=True, slots=True)
class TableName:
    """A cell or feature table as messages name it."""

    stored: str
    """The table's group in a CyteArc store: ``cellData`` or ``featureData``."""
    anndata: str | None = None
    """The AnnData element the table is (``obs``, ``var``, ``raw/var``), or ``None``
    for a table the caller knows by its stored name."""

    def __str__(self) -> str:
        """The table's name for its caller: the AnnData element, else the stored group."""
        return self.anndata or self.stored

    @property
    def of_cells(self) -> bool:
        """Whether this is the cell table (``obs``, ``cellData``)."""
        return self.stored == CELL_DATA.stored

    @property
    def ids(self) -> str:
        """The table's ids, as its caller knows them: ``cellData ids``, ``obs index values``."""
        return f"{self} index values" if self.anndata else f"{self} ids"

    @property
    def an_id(self) -> str:
        """One of the table's ids: ``cellData id``, ``obs index value``."""
        return f"{self} index value" if self.anndata else f"{self} id"

    @property
    def ids_path(self) -> str:
        """Where the table's ids are: ``cellData/ids``, ``obs index``."""
        return f"{self} index" if self.anndata else f"{self.stored}/ids"

    @property
    def python(self) -> str:
        """The Python expression of the table in a remedy: the AnnData attribute that
        holds it (``adata.obs``, ``adata.raw.var``), else ``frame`` (the DataFrame given)."""
        if self.anndata is None:
            return "frame"
        return "adata." + ".".join(self.anndata.split("/"))

    @property
    def unique_ids_call(self) -> str:
        """The anndata call that renames the table's repeated ids as ``make_unique`` does
        (for a table given as a DataFrame, anndata's function applied to its index:
        ``AnnData.var_names_make_unique()`` cannot be called on a DataFrame).

        >>> RAW_VAR.unique_ids_call
        'adata.raw.var.index = anndata.utils.make_index_unique(adata.raw.var.index)'
        >>> CELL_DATA.unique_ids_call
        'frame.index = anndata.utils.make_index_unique(frame.index)'
        """
        if self == RAW_VAR:  # Raw has no var_names_make_unique
            return f"{self.python}.index = anndata.utils.make_index_unique({self.python}.index)"
        if not self.anndata:
            return "frame.index = anndata.utils.make_index_unique(frame.index)"
        axis = "obs" if self.of_cells else "var"
        return f"adata.{axis}_names_make_unique()"

    def column(self, name: object, *, stored: bool = False) -> str:
        """Column ``name`` of the table (``obs column 'a'``); with ``stored``, an
        AnnData's column also says where it is stored (``(stored as cellData/a)``)."""
        # a name that is no string is no array's name: nothing to say where it goes
        shown = stored and self.anndata and isinstance(name, str)
        where = f" (stored as {self.stored}/{name})" if shown else ""
        return f"{self} column {name!r}{where}"


#: A CyteArc store's cell table, or a table given as ``cells=``.
CELL_DATA = TableName("cellData")
#: A CyteArc store's feature table, or a table given as ``features=``.
FEATURE_DATA = TableName("featureData")
#: An AnnData's cell table.
OBS = TableName(CELL_DATA.stored, "obs")
#: An AnnData's feature table.
VAR = TableName(FEATURE_DATA.stored, "var")
#: The feature table of an AnnData's raw counts (``raw/X``).
RAW_VAR = TableName(FEATURE_DATA.stored, "raw/var")


def anndata_table(element: str) -> TableName:
    """The table an AnnData's dataframe element ``element`` is (``obs``, ``var``,
    ``raw/var``).

    >>> anndata_table("raw/var") is RAW_VAR
    True
    """
    for table in (OBS, VAR, RAW_VAR):
        if table.anndata == element:
            return table
    raise ValueError(f"{element!r} is not an AnnData table (obs, var or raw/var)")
