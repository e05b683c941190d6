"""``export_anndata``: write one assay of any CyteArc store as an AnnData file or store.

The output is conformant AnnData at the current encoding versions
(``anndata`` 0.1.0 root, ``dataframe`` 0.2.0, ``csr_matrix`` 0.1.0 ``X``,
variable-length UTF-8 text), ``.zarr`` (Zarr v3, consolidated) or ``.h5ad``.
``obs``, ``var`` and ``uns`` follow :mod:`.columns`; the membership rule
applies (a raw export keeps every cell, unmeasured ones included, and
declares the assay's membership column).

``X`` is streamed: bands of cells are read through the gather reader,
converted to CSR and appended, so the matrix is never whole in memory. The
bands are sized so the export keeps to ``mem_budget`` (:mod:`.export_budget`);
a budget too small is refused before anything is written.

Safe destination: everything is written under a temporary name beside the
destination (``.NAME.<random>.partial``) and renamed onto it only when
complete, so a killed export never leaves anything at the destination. An
existing destination is refused unless ``overwrite=True``, and even then
only an AnnData (an ``.h5ad`` file or a Zarr store whose root is an
``anndata`` element) is replaced, in one atomic rename or exchange where the
system offers one (:mod:`.replacement`).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Unpack, cast

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from zarr.abc.store import Store
from zarr.core.common import ZarrFormat

from cytearc_vfs.format.flags import check_flag
from cytearc_vfs.format.option_names import option_name, switched_on
from cytearc_vfs.format.sizes import parse_size
from cytearc_vfs.inspection.read_sources import stores_read_by
from cytearc_vfs.remote.failures import names_backend_failures
from cytearc_vfs.remote.locations import (
    Location,
    absolute_path,
    describe_location,
    given_location,
    local_path,
)
from cytearc_vfs.write.destination_contents import refuse_below_zarr_node
from cytearc_vfs.write.overlaps import check_no_overlap
from cytearc_vfs.write.stopping import FinishingStore, stop_work, stops_on_exception
from cytearc_vfs.write.writable import require_writable

from .columns import check_encodable, check_hdf5_text, check_hdf5_times, plain_text
from .conversion import _anndata, read_frames
from .documents import ANNDATA_ROOT, encoded_attributes
from .export_budget import EXPORT_BUDGET, STREAM_CHUNK, BandPlan, plan_bands, table_bytes
from .opened import OpenedAssay, OpenOptions, open_assay
from .replacement import move_into_place, remove_output

__all__ = ["ExportInfo", "export_anndata", "export_format"]

Format = Literal["zarr", "h5ad"]
_EMPTY_MAPPINGS = ("obsm", "varm", "obsp", "varp", "layers")
#: Root attributes of an export until it is complete: an encoding no reader knows, so
#: anndata (``IORegistryError``) and ``cytearc-vfs anndata ls`` refuse a killed one.
UNFINISHED_ROOT = {"encoding-type": "cytearc-unfinished-export", "encoding-version": "0.0.0"}
Progress = Callable[[str, int, int], None]


class _Steps:
    """The export's progress, counted in steps (``progress("export", done, total)``).

    Bands of cells alone made a bar that a one-band export (any store the
    default budget holds at once) left at 0% until the end. The steps: the
    tables read and the bands planned; ``obs``, ``var`` and ``uns`` written;
    each band read, then appended; the last chunks, the consolidated metadata
    and the rename (the last step, so 100% is an export in place).
    """

    def __init__(self, progress: Progress | None, bands: int) -> None:
        self._progress = progress
        self._done = 0
        self.total = 5 + 2 * bands

    def advance(self) -> None:
        """One more step done."""
        self._done += 1
        if self._progress is not None:
            self._progress("export", self._done, self.total)


@dataclass(frozen=True, slots=True)
class ExportInfo:
    """What an export wrote."""

    location: str
    """The destination's absolute path (as the other writers report theirs)."""
    format: Format
    """``zarr`` or ``h5ad``."""
    assay: str
    """The exported assay."""
    shape: tuple[int, int]
    """(cells, features) of ``X``."""
    dtype: np.dtype
    """dtype of ``X``."""
    nnz: int
    """Stored (non-zero) values of ``X``."""
    bands: int
    """Bands of cells read and appended."""
    band_cells: int
    """Cells of the largest band (each read densely over every feature)."""
    membership: str | None
    """The declared membership column, or ``None``."""
    seconds: float
    """Wall time of the export."""


def export_format(destination: Location) -> Format:
    """``zarr`` or ``h5ad`` from the destination's suffix; ``ValueError`` otherwise.

    The suffix is read in any case (``PBMC.H5AD``), as file systems that
    ignore case store it; a name that is the suffix alone is refused.

    >>> export_format("out/pbmc.h5ad"), export_format("pbmc.zarr/"), export_format("P.ZARR")
    ('h5ad', 'zarr', 'zarr')
    """
    name = str(destination).rstrip("/")
    base = name.rpartition("/")[2].lower()
    if base in (".h5ad", ".zarr"):
        # the suffix alone: a hidden entry named like a suffix, which listings skip
        raise ValueError(
            f"export destination {name!r} has no name before its suffix {base} (it would be "
            f"a hidden entry named {base}); give it a name, such as pbmc{base}"
        )
    if base.endswith(".h5ad"):
        return "h5ad"
    if base.endswith(".zarr"):
        return "zarr"
    raise ValueError(
        f"export destination {name!r} must end in .zarr (an AnnData Zarr store) or .h5ad "
        "(an AnnData HDF5 file)"
    )


def _is_anndata(path: Path) -> bool:
    """Whether ``path`` holds an AnnData this export may replace."""
    if path.is_file():
        with path.open("rb") as file:
            if path.suffix.lower() != ".h5ad" or file.read(8) != b"\x89HDF\r\n\x1a\n":
                return False
        return _is_anndata_hdf5(path)
    for name in ("zarr.json", ".zattrs"):
        document = path / name
        if document.is_file():
            try:
                attrs = json.loads(document.read_text())
            except ValueError:
                return False
            attrs = attrs.get("attributes", {}) if name == "zarr.json" else attrs
            return isinstance(attrs, dict) and attrs.get("encoding-type") == "anndata"
    return False


def _is_anndata_hdf5(path: Path) -> bool:
    """Whether the HDF5 file ``path`` holds an AnnData, as the Zarr check asks of a store.

    The HDF5 signature alone let ``--overwrite`` replace any HDF5 file named
    ``.h5ad`` (a renamed 10x ``.h5``). An AnnData root says ``encoding-type:
    anndata``, or (anndata 0.7) says nothing and holds ``obs`` and ``var``. A
    file HDF5 cannot open is not known to be one, so it is not replaced.
    """
    import h5py

    try:
        with h5py.File(path, "r") as file:
            kind = file.attrs.get("encoding-type")
            if isinstance(kind, bytes):
                kind = kind.decode("utf-8", "replace")
            if kind is None:
                return "obs" in file and "var" in file
            return bool(kind == "anndata")
    except OSError:
        return False


def _checked_destination(destination: Location, overwrite: bool) -> Path:
    path = local_path(destination)
    if path is None:
        raise ValueError(
            f"export writes local files; {describe_location(destination)} is not a local path. "
            "Export to a local path and upload it, or serve the store with cytearc-vfs serve"
        )
    # named as the caller wrote it (out.h5ad, ~/x.h5ad), not as the absolute path
    given = given_location(destination)
    # the export's temporary is made in its folder: a folder that is a file, /proc,
    # a read-only file system or one without permission is refused now, before the
    # source is read
    require_writable(path.parent, where=f"export destination {given!r}")
    if not path.parent.is_dir():
        raise FileNotFoundError(
            f"export destination {given}: its folder {os.path.dirname(given.rstrip('/'))} "
            "does not exist; create it first (export does not create folders)"
        )
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise FileExistsError(
                f"export destination {given} already exists; give {switched_on('overwrite')} "
                "to replace an AnnData there, or choose another destination"
            )
        if not _is_anndata(path):
            raise FileExistsError(
                f"export destination {given} holds something that is not an AnnData (.h5ad file "
                f"or AnnData Zarr store), so {switched_on('overwrite')} does not replace it; "
                "remove it yourself or choose another destination"
            )
    return path


class _Column:
    """A 1-D array of ``X`` written in order, values appended at its end.

    For a ``.zarr`` only whole chunks are written, the values past the last
    one waiting in memory (less than a chunk) for the next append: a write
    ending inside a chunk would make zarr read, merge and re-encode that
    chunk at the next append (three copies of it, and time). HDF5 merges
    partial chunks in its own cache; its writes go straight through.
    """

    def __init__(self, array: Any, chunk: int, *, resizable: bool, whole_chunks: bool) -> None:
        self._array = array
        self._chunk = chunk
        self._resizable = resizable
        self._whole_chunks = whole_chunks
        self._pending: list[npt.NDArray[Any]] = []
        self._waiting = 0
        self._written = 0

    def append(self, values: npt.NDArray[Any]) -> None:
        if not len(values):
            return
        if not self._whole_chunks:
            self._write(values)
            return
        # fill the chunk begun by the values waiting, then whole chunks straight
        # from ``values`` (a view, not a copy); the rest waits, copied
        if self._waiting:
            fill = min(len(values), self._chunk - self._waiting)
            self._pending.append(values[:fill].copy())  # not a view keeping the band
            self._waiting += fill
            values = values[fill:]
            if self._waiting < self._chunk:
                return
            self._write(np.concatenate(self._pending))
            self._pending, self._waiting = [], 0
        whole = len(values) // self._chunk * self._chunk
        if whole:
            self._write(values[:whole])
        if whole < len(values):
            self._pending, self._waiting = [values[whole:].copy()], len(values) - whole

    def finish(self) -> None:
        """Write the values still waiting."""
        if self._pending:
            self._write(np.concatenate(self._pending))
            self._pending, self._waiting = [], 0

    def _write(self, values: npt.NDArray[Any]) -> None:
        stop = self._written + len(values)
        if self._resizable:
            self._array.resize((stop,))
        self._array[self._written : stop] = values
        self._written = stop


class _CsrAppender:
    """Appends CSR bands to ``X`` of an open zarr group or h5py file, in cell order."""

    def __init__(self, group: Any, kind: Format, shape: tuple[int, int], dtype: np.dtype) -> None:
        self._x = group.create_group("X")
        self._x.attrs.update(encoded_attributes("csr_matrix", "0.1.0"))
        self._x.attrs["shape"] = list(shape)
        index_dtype = np.dtype(np.int32 if shape[1] < np.iinfo(np.int32).max else np.int64)
        self._data = self._create(kind, "data", 0, dtype)
        self._indices = self._create(kind, "indices", 0, index_dtype)
        self._indptr = self._create(kind, "indptr", shape[0] + 1, np.dtype(np.int64))
        self._indptr.append(np.zeros(1, dtype=np.int64))
        self.nnz = 0

    def _create(self, kind: Format, name: str, length: int, dtype: np.dtype) -> _Column:
        chunk = max(1, min(STREAM_CHUNK, length) if length else STREAM_CHUNK)
        if kind == "zarr":
            array = self._x.create_array(name, shape=(length,), dtype=dtype, chunks=(chunk,))
        else:
            array = self._x.create_dataset(
                name, shape=(length,), dtype=dtype, maxshape=(None,), chunks=(chunk,)
            )
        return _Column(array, chunk, resizable=not length, whole_chunks=kind == "zarr")

    def append(self, block: sp.csr_matrix) -> None:
        block.sum_duplicates()
        start = self.nnz
        self._data.append(block.data)
        self._indices.append(block.indices)
        self._indptr.append(block.indptr[1:].astype(np.int64) + start)
        self.nnz += block.nnz

    def finish(self) -> None:
        """Write what waits for a whole chunk: the last values of each array."""
        for column in (self._data, self._indices, self._indptr):
            column.finish()


def _read_tables(opened: OpenedAssay) -> tuple[list[Any], int]:
    """``[obs, var, uns]`` checked encodable, and the bytes the frames hold.

    A list, so that :func:`_write` can drop the frames once they are written
    (the budget does not hold them through the bands).
    """
    obs, var, uns = read_frames(opened)
    check_encodable(obs.columns, table=opened.paths.cell_data)
    check_encodable(var.columns, table=opened.paths.feature_data)
    return [obs, var, uns], table_bytes(obs, var)


def _write_frame(write_elem: Callable[..., None], group: Any, key: str, frame: Any) -> None:
    """Write ``frame`` as the ``dataframe`` element ``key``; datetime columns (a Zarr
    destination's: an ``.h5ad``'s are refused first) as ``datetime64`` arrays.

    anndata has no writer for a pandas datetime column (``IORegistryError``);
    the view presents one as an ``array`` element of ``datetime64``, which
    anndata reads back as a datetime column, so the export writes the same.
    """
    times = [name for name, dtype in frame.dtypes.items() if dtype.kind == "M"]
    if not times:
        write_elem(group, key, frame)
        return
    write_elem(group, key, frame.drop(columns=times))
    element = group[key]
    for name in times:
        write_elem(element, name, frame[name].to_numpy(dtype="datetime64[ns]"))
    element.attrs["column-order"] = [str(name) for name in frame.columns]


def _write(
    group: Any,
    kind: Format,
    opened: OpenedAssay,
    tables: list[Any],
    plan: BandPlan,
    steps: _Steps,
) -> tuple[int, int, int, str | None]:
    """Write every element into ``group``; returns (nnz, bands, largest band, membership).

    ``tables`` (``[obs, var, uns]``) is emptied: the frames are freed before the bands.
    """
    write_elem = _anndata().io.write_elem
    # first (a zarr root has it from creation, _unfinished_root): a root without
    # attributes is what anndata 0.7 wrote, and anndata reads it, so a killed export's
    # temporary would read as an AnnData with empty rows
    group.attrs.update(UNFINISHED_ROOT)
    obs, var, uns = tables
    tables.clear()
    _write_frame(write_elem, group, "obs", plain_text(obs))
    del obs
    steps.advance()
    _write_frame(write_elem, group, "var", plain_text(var))
    del var
    steps.advance()
    write_elem(group, "uns", uns)
    for name in _EMPTY_MAPPINGS:
        write_elem(group, name, {})
    steps.advance()
    appender = _CsrAppender(group, kind, opened.shape, opened.reader.dtype)
    bands = largest = 0
    for cells in plan.bands():
        block = opened.reader.read_sparse(cells, None)
        steps.advance()
        appender.append(block)
        del block  # before the next band is read
        steps.advance()
        bands += 1
        largest = max(largest, cells.stop - cells.start)
    appender.finish()
    membership = uns.get("cytearc", {}).get("assayMembership", {}).get(opened.assay)
    # the root says "anndata" last (replacing UNFINISHED_ROOT): a temporary interrupted
    # before it is not one
    group.attrs.update(ANNDATA_ROOT)
    return appender.nnz, bands, largest, membership


def _write_to(
    temporary: Path,
    kind: Format,
    opened: OpenedAssay,
    tables: list[Any],
    plan: BandPlan,
    steps: _Steps,
    zarr_format: int,
) -> tuple[int, int, int, str | None]:
    if kind == "h5ad":
        import h5py

        try:
            with h5py.File(temporary, "w-") as file:
                return _write(file, kind, opened, tables, plan, steps)
        except RuntimeError as exc:
            failure = _system_failure(exc, temporary)
            if failure is None:
                raise
            raise failure from exc
    import zarr

    root = _unfinished_root(temporary, cast(ZarrFormat, zarr_format))
    written = _write(root, kind, opened, tables, plan, steps)
    with warnings.catch_warnings():
        # anndata's own stores consolidate too; zarr warns that v3 has no spec for it
        warnings.filterwarnings("ignore", message=".*Consolidated metadata.*")
        zarr.consolidate_metadata(root.store)
    return written


_HDF5_ERRNO = re.compile(r"errno = (\d+), error message = '([^']*)'")


def _system_failure(exc: RuntimeError, temporary: Path) -> OSError | None:
    """The ``OSError`` behind an HDF5 ``RuntimeError`` (a full disk, a file too large).

    HDF5 reports a failed system write as a ``RuntimeError`` whose text holds
    ``errno = 28, error message = 'No space left on device'``, most often when the
    file is closed, after every write seemed to succeed.
    """
    found = _HDF5_ERRNO.search(str(exc))
    if found is None:
        return None
    code, reason = int(found.group(1)), found.group(2)
    return OSError(
        code,
        f"writing the .h5ad failed: {reason} (errno {code}, HDF5: "
        f"{str(exc).split('(', 1)[0].strip()}); the partial file is removed",
        str(temporary),
    )


def _unfinished_root(temporary: Path, zarr_format: ZarrFormat) -> Any:
    """Create the temporary's root group already marked :data:`UNFINISHED_ROOT`.

    Never attribute-less, not even for one write: anndata reads such a root as the
    0.7 layout. Zarr v3 holds the attributes in the one ``zarr.json``; for v2,
    ``.zattrs`` is written before ``.zgroup`` makes the directory a group (zarr
    writes the two concurrently, in no set order).
    """
    import zarr

    temporary.mkdir()
    if zarr_format == 2:
        (temporary / ".zattrs").write_text(json.dumps(UNFINISHED_ROOT))
    # writes already sent when an interrupt stops the export end before it is removed
    store = FinishingStore(zarr.storage.LocalStore(temporary))
    return zarr.create_group(store, zarr_format=zarr_format, attributes=dict(UNFINISHED_ROOT))


@names_backend_failures("location", "destination")
@stops_on_exception
def export_anndata(
    location: Location | Store,
    destination: Location,
    assay: str = "RNA",
    *,
    overwrite: bool = False,
    mem_budget: int | str = EXPORT_BUDGET,
    band_bytes: int | None = None,
    zarr_format: int = 3,
    progress: Progress | None = None,
    **options: Unpack[OpenOptions],
) -> ExportInfo:
    """Write one assay of a CyteArc store as an AnnData ``.zarr`` store or ``.h5ad`` file.

    Parameters
    ----------
    location
        An ordinary store, a composite or a mount.
    destination
        A local path ending in ``.zarr`` or ``.h5ad``.
    assay
        The assay whose counts become ``X``.
    overwrite
        Replace an AnnData already at ``destination`` (anything else is refused).
    mem_budget
        Bound of the export's memory (bytes, or a size such as ``"256M"``;
        default 64 MiB): the bands of cells are sized so the export's peak
        stays within it and a fixed allowance (docs/anndata-out.md).
    band_bytes
        Optional further bound of one band's dense bytes (cells x features x
        item size); ``None``: the bands are as large as ``mem_budget`` allows.
    zarr_format
        Zarr format of a ``.zarr`` destination: 3 (default) or 2 (for readers
        without Zarr v3, such as anndata < 0.11). Ignored for ``.h5ad``.
    progress
        Called as ``progress("export", steps_done, steps_total)`` after each step:
        the tables read and the bands planned (the first call), ``obs``, ``var``
        and ``uns`` written, each band read and then appended, and the finish
        (the last chunks, the consolidated metadata, the rename into place:
        ``steps_done == steps_total`` only once the export is at ``destination``).
    **options
        ``workspace``, ``storage_options``, ``source_storage_options``
        (:class:`~.opened.OpenOptions`).

    Raises
    ------
    FileExistsError
        The destination exists (without ``overwrite``), or is not an AnnData.
    ValueError
        The destination is not a local ``.zarr`` or ``.h5ad`` path, or
        ``mem_budget`` is too small for this export (naming the smallest that
        works; nothing is written).
    """
    started = time.perf_counter()
    check_flag(overwrite, "overwrite")
    kind = export_format(destination)
    if zarr_format not in (2, 3):
        raise ValueError(f"zarr_format must be 2 or 3, not {zarr_format!r}")
    budget = parse_size(mem_budget, what=option_name("mem_budget"))
    if band_bytes is not None and (isinstance(band_bytes, bool) or band_bytes < 1):
        raise ValueError(
            f"band_bytes must be a positive number of bytes or None, not {band_bytes!r}"
        )
    path = _checked_destination(destination, overwrite)
    if not isinstance(location, Store):
        # inside the store, the export would add foreign keys to it; around it, an
        # overwrite would remove the store itself
        check_no_overlap(destination, {"exported store": location}, describe=given_location)
    # read in one go and closed: each document and listing of the store read once
    opened = open_assay(location, assay, once=True, **options)
    # nor inside (or around) what a composite or a mount reads: its sources
    check_no_overlap(destination, stores_read_by(opened.store), describe=given_location)
    # nor inside any other store (an AnnData's, a CyteArc store), as write refuses: a
    # foreign member of it, or a store nested in it (after the overlaps, which say more)
    refuse_below_zarr_node(path)
    # the tables are read and the bands planned before the temporary exists: a
    # budget too small is refused with nothing written
    tables, held = _read_tables(opened)
    if kind == "h5ad":
        check_hdf5_text(tables[0], table=opened.paths.cell_data, destination=str(destination))
        check_hdf5_text(tables[1], table=opened.paths.feature_data, destination=str(destination))
        check_hdf5_times(tables[0], table=opened.paths.cell_data, destination=str(destination))
        check_hdf5_times(tables[1], table=opened.paths.feature_data, destination=str(destination))
    plan = plan_bands(opened, budget, kind, held, band_bytes)
    steps = _Steps(progress, len(plan.starts) - 1)
    steps.advance()
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    try:
        nnz, bands, largest, membership = _write_to(
            temporary, kind, opened, tables, plan, steps, zarr_format
        )
        move_into_place(temporary, path)
    except BaseException:
        # an interrupt (KeyboardInterrupt, the command line's signals) too; zarr's
        # writes still running are stopped first, so none lands after the removal
        stop_work()
        remove_output(temporary)
        raise
    steps.advance()  # the export is in place
    return ExportInfo(
        location=str(absolute_path(path)),
        format=kind,
        assay=assay,
        shape=opened.shape,
        dtype=opened.reader.dtype,
        nnz=nnz,
        bands=bands,
        band_cells=largest,
        membership=membership,
        seconds=time.perf_counter() - started,
    )
