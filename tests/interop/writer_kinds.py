"""Rows of the interop table for the writers other than ``write_counts``.

``kinds.py`` holds the rows of the stores ``write_counts`` writes (and of
the composite and mount read through ``serve`` and ``mount-fs``). Here, what
the other writers leave on disk, read directly by every reader:

- ``write_counts`` of counts in every other dtype (uint8, uint32, uint64,
  int32, float32, float64: the Blosc containers are built by this package, for
  each type size, with whole chunks, or single blocks, stored raw where zstd
  cannot shrink them);
- ``repack`` of a row-framed store (written as before issue 14): its counts
  must read everywhere, tensorstore included, since repack is the documented
  remedy for the row frames tensorstore cannot read (docs/layout.md);
- a mount's target directory, with an artifact published through the mount;
- a composite's directory: the count summaries ``create_composite`` computes
  and stores (its counts are virtual: the ``composite-*`` rows of
  ``kinds.py`` read them through ``serve`` and ``mount-fs``);
- arrays changed by ``cytearc_vfs.arrays``: a sharded array resized at both
  ends (a grown start, a cut end whose edge shard is rewritten, then grown
  again so the cut cells show), and arrays promoted (inside a transpose
  codec; sharded), whose chunks were renamed and whose codec configurations
  were rewritten without re-encoding a byte;
- an AnnData ``.zarr`` (Zarr v3) written by ``export_anndata``: ``X``'s
  arrays, and the obs index (anndata's variable-length ``string`` type);
- a composite served as an AnnData (``cytearc-vfs serve --as-anndata``): its
  cell and feature ids as ``string`` arrays, the route for readers that do
  not know ``fixed_length_utf32``, the stored ids' type.

Expected values are computed with numpy from what was written, never read
back through this package. Registered from the end of ``kinds.py``, so
these rows follow its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

import cytearc_vfs as cv

from .kinds import ROW_FRAMED, Workspace, array_kind, cell_ids, cli_server, describe
from .readers import Target

#: The fill value of the changed arrays: not 0, so a reader that fills a missing
#: chunk with zeros instead of the fill value differs.
FILL = 7


def _values(shape: tuple[int, ...]) -> npt.NDArray[np.uint16]:
    """Distinct values, none equal to :data:`FILL`."""
    return (np.arange(int(np.prod(shape)), dtype=np.uint16) + FILL + 1).reshape(shape)


def _local(root: Path, path: str, expected: npt.NDArray[Any]) -> Target:
    return Target(str(root), path, expected, describe(root, path), scrub=(str(root),))


# ------------------------------------------------------------------ count dtypes

#: The count dtypes other than uint16 (the count rows' own), and the values that make
#: ``write_counts`` store each (docs/layout.md, "Count dtype"). The Blosc containers
#: of the inner chunks are built here, not by a Blosc library
#: (``encoding/blosc_blocks.py``): each type size, and blocks stored raw where zstd
#: cannot shrink them (random float64), must read in every reader.
DTYPES: dict[str, tuple[int, int]] = {
    "uint8": (0, 200),
    "uint32": (0, 3_000_000),
    "uint64": (0, 2**40),
    "int32": (-5_000, 5_000),
}


def _dtype_counts(name: str) -> npt.NDArray[Any]:
    """A 300 x 500 matrix, 30 % non-zero, that ``write_counts`` stores as ``name``;
    floats of random bits (finite: the top exponent bit clear), which zstd cannot
    shrink, so their Blosc blocks are stored raw: float64 every value (whole chunks
    stored raw), float32 the first 5 rows of every 8 (a chunk's first block, of 5
    rows, stored raw beside its second, of zeros, compressed)."""
    rng = np.random.default_rng(21)
    shape = (300, 500)
    present = rng.random(shape) < 0.3
    if name.startswith("float"):
        bits = np.dtype(name).itemsize * 8
        unsigned = np.dtype(f"uint{bits}")
        raw = rng.integers(0, 2**bits, shape, dtype=unsigned, endpoint=False)
        values = (raw & unsigned.type(~(1 << (bits - 2)) & (2**bits - 1))).view(name)
        present[...] = values != 0
        if name == "float32":
            present[np.arange(shape[0]) % 8 >= 5] = False
    else:
        low, high = DTYPES[name]
        values = rng.integers(low, high, shape, dtype=np.int64, endpoint=True)
        values[0, 0] = high  # the largest value decides the dtype
        present[0, 0] = True
    return np.where(present, values, 0).astype(name)


@cache
def _dtype_store(ws: Workspace, name: str) -> tuple[Path, npt.NDArray[Any]]:
    counts = _dtype_counts(name)
    path = ws.root / f"counts-{name}.zarr"
    info = cv.write_counts(path, sp.csr_array(counts), layout=("256K", "16K"))
    if info.dtype != counts.dtype:  # the row would test another dtype than it says
        raise AssertionError(f"write_counts stored {info.dtype}, expected {counts.dtype}")
    return path, counts


def _dtype_row(name: str) -> None:
    @array_kind(f"counts-{name}", f"`RNA/counts`, {name} counts", everywhere=True)
    @contextmanager
    def row(ws: Workspace) -> Iterator[Target]:
        path, counts = _dtype_store(ws, name)
        yield _local(path, "RNA/counts", counts)


for _name in (*DTYPES, "float32", "float64"):
    _dtype_row(_name)


# ------------------------------------------------------------------ repack


@cache
def _repacked(ws: Workspace) -> tuple[Path, npt.NDArray[Any]]:
    """The row-framed store repacked: (path, its counts)."""
    source = ws.ordinary(ROW_FRAMED)
    path = ws.root / "repacked.zarr"
    cv.repack(source.path, path)
    return path, source.counts


@array_kind("repack-counts", "`RNA/counts`, `repack` of a row-framed store", everywhere=True)
@contextmanager
def _repack_counts(ws: Workspace) -> Iterator[Target]:
    path, counts = _repacked(ws)
    yield _local(path, "RNA/counts", counts)


@array_kind("repack-countsT", "`RNA/countsT`, `repack` of a row-framed store", everywhere=True)
@contextmanager
def _repack_counts_t(ws: Workspace) -> Iterator[Target]:
    path, counts = _repacked(ws)
    yield _local(path, "RNA/countsT", np.ascontiguousarray(counts.T))


@array_kind(
    "mount-artifact",
    "mount: artifact written through the mount, its target read directly",
    everywhere=True,
)
@contextmanager
def _mount_artifact(ws: Workspace) -> Iterator[Target]:
    mount, path, values = ws.mount()
    yield _local(mount, path, values)


@array_kind(
    "composite-row-sums",
    "composite: `RNA/countSummaries/rowSums` (`create_composite`), read directly",
    everywhere=True,
)
@contextmanager
def _composite_row_sums(ws: Workspace) -> Iterator[Target]:
    path, counts = ws.composite()
    sums = counts.sum(axis=1, dtype=np.uint64)
    yield _local(path, "RNA/countSummaries/rowSums", sums)


# ------------------------------------------------------------------ array operations


@cache
def _changed_arrays(ws: Workspace) -> tuple[Path, dict[str, npt.NDArray[Any]]]:
    """A plain Zarr v3 store of arrays changed by resize and promote: (path, expected)."""
    import zarr
    from zarr.codecs import TransposeCodec

    from cytearc_vfs.arrays import promote, resize

    root = ws.root / "changed-arrays.zarr"
    store = zarr.storage.LocalStore(root)
    expected: dict[str, npt.NDArray[Any]] = {}

    def create(name: str, shape: tuple[int, ...], **options: Any) -> Any:
        array = zarr.create_array(
            store, name=name, shape=shape, dtype="uint16", fill_value=FILL, **options
        )
        array[...] = _values(shape)
        return array

    # a grown start (one whole shard), a cut end (9 of 12 rows: the edge shard rewritten,
    # its cut cells set to the fill value) and a grown end; then the end grown again
    resized = create("resized", (12, 4), chunks=(2, 2), shards=(4, 4))
    resize(resized, low=[4, 0], high=[-3, 2])
    resize(zarr.open_array(store, path="resized", mode="r+"), high=[2, 0])
    values = np.full((15, 6), FILL, dtype=np.uint16)
    values[4:13, :4] = _values((12, 4))[:9]
    expected["resized"] = values

    promoted = create(
        "promoted-transpose",
        (5, 4),
        chunks=(2, 2),
        filters=[TransposeCodec(order=(1, 0))],
    )
    promote(promoted, 1)
    expected["promoted-transpose"] = _values((5, 4))[:, None, :]

    sharded = create("promoted-sharded", (8, 6), chunks=(2, 3), shards=(4, 6))
    promote(sharded, 0)
    expected["promoted-sharded"] = _values((8, 6))[None]
    return root, expected


def _array_row(name: str, label: str) -> None:
    @array_kind(f"arrays-{name}", label, everywhere=True)
    @contextmanager
    def row(ws: Workspace) -> Iterator[Target]:
        root, expected = _changed_arrays(ws)
        yield _local(root, name, expected[name])


_array_row("resized", "`cytearc_vfs.arrays.resize`: sharded, both ends, a cut edge grown again")
_array_row("promoted-transpose", "`cytearc_vfs.arrays.promote` inside a transpose codec")
_array_row("promoted-sharded", "`cytearc_vfs.arrays.promote` of a sharded array")


# ------------------------------------------------------------------ AnnData export


@cache
def _exported(ws: Workspace) -> tuple[Path, sp.csr_array, list[str]]:
    """The default store exported as an AnnData Zarr v3 store: (path, X, cell ids)."""
    from cytearc_vfs_adapters.anndata_output import export_anndata

    source = ws.ordinary()
    path = ws.root / "exported.zarr"
    export_anndata(source.path, path, zarr_format=3)
    return path, sp.csr_array(source.counts), source.cells


@array_kind("export-X-data", "`export_anndata` `.zarr` (v3): `X/data`", everywhere=True)
@contextmanager
def _export_data(ws: Workspace) -> Iterator[Target]:
    path, matrix, _ = _exported(ws)
    yield _local(path, "X/data", matrix.data)


@array_kind("export-X-indptr", "`export_anndata` `.zarr` (v3): `X/indptr`", everywhere=True)
@contextmanager
def _export_indptr(ws: Workspace) -> Iterator[Target]:
    path, matrix, _ = _exported(ws)
    yield _local(path, "X/indptr", matrix.indptr.astype(np.int64))


@array_kind("export-obs-index", "`export_anndata` `.zarr` (v3): `obs/_index` (text)")
@contextmanager
def _export_obs_index(ws: Workspace) -> Iterator[Target]:
    path, _, cells = _exported(ws)
    yield _local(path, "obs/_index", np.array(cells, dtype=str))


# ------------------------------------------------------------ the AnnData view


def _served_ids(ws: Workspace, path: str, expected: list[str]) -> Iterator[Target]:
    composite, _ = ws.composite()
    with cli_server(["serve", str(composite), "--as-anndata", "--port", "0"]) as url:
        note = "the stored ids (`fixed_length_utf32`) as `string` chunks, encoded on read"
        yield Target(
            url, path, np.array(expected, dtype=str), note, scrub=(url.rstrip("/"), str(composite))
        )


@array_kind("anndata-view-obs-index", "composite `obs/_index` via `serve --as-anndata` (text)")
@contextmanager
def _view_obs_index(ws: Workspace) -> Iterator[Target]:
    # the composite's cells: its first source's, then the second's (Workspace.composite)
    second = [f"b_{cell}" for cell in cell_ids(400)]
    yield from _served_ids(ws, "obs/_index", [*ws.ordinary().cells, *second])


@array_kind("anndata-view-var-index", "composite `var/_index` via `serve --as-anndata` (text)")
@contextmanager
def _view_var_index(ws: Workspace) -> Iterator[Target]:
    yield from _served_ids(ws, "var/_index", list(ws.ordinary().features))
