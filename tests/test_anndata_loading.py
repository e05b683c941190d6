"""``to_anndata(lazy=False)``: ``X`` made once at its size, and refused when it cannot fit.

Real stores on disk. The memory the system reports is replaced only where a
test needs the refusal (no test machine is that small); everything else is
the real load.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from cytearc_vfs_adapters.anndata_output import loading
from cytearc_vfs_adapters.anndata_output.conversion import cell_bands
from cytearc_vfs_adapters.anndata_output.opened import open_assay

import cytearc_vfs as cv
from cytearc_vfs.errors import VfsError


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("loading")
    counts = sp.csr_matrix(realistic_counts(700, 300, density=0.08, seed=3))
    signed = counts.astype(np.int32)
    signed.data[::7] *= -1
    cv.write_counts(root / "u.zarr", counts)
    cv.write_counts(root / "s.zarr", signed)
    cv.write_counts(root / "b.zarr", counts[:, ::-1])
    cv.create_composite(root / "c.zarr", [root / "u.zarr", root / "b.zarr"])
    return {"root": root, "counts": counts, "signed": signed}


def _same_csr(got: sp.csr_matrix, expected: Any) -> None:
    assert isinstance(got, sp.csr_matrix)
    assert got.has_canonical_format
    assert got.indices.dtype == got.indptr.dtype == np.int32
    np.testing.assert_array_equal(got.toarray(), np.asarray(expected.toarray()))


def test_loaded_x_equals_the_counts_unsigned_and_signed(stores: dict[str, Any]) -> None:
    root = stores["root"]
    unsigned = cv.to_anndata(root / "u.zarr", lazy=False).X
    _same_csr(unsigned, stores["counts"])
    # rowPositive does not count negative values: read band by band instead
    signed = cv.to_anndata(root / "s.zarr", lazy=False).X
    _same_csr(signed, stores["signed"])
    assert signed.dtype == np.int32
    composite = cv.to_anndata(root / "c.zarr", lazy=False)
    _same_csr(composite.X, cv.to_anndata(root / "c.zarr").X.compute())


def test_many_bands_fill_the_matrix_in_place(stores: dict[str, Any]) -> None:
    opened = open_assay(stores["root"] / "u.zarr")
    # bands of a few cells each: every band lands at its rows' offsets
    got = loading.loaded_counts(opened, cell_bands(opened, band_bytes=3 * 300 * 2))
    _same_csr(got, stores["counts"])
    signed = open_assay(stores["root"] / "s.zarr")
    _same_csr(
        loading.loaded_counts(signed, cell_bands(signed, band_bytes=5 * 300 * 4)),
        stores["signed"],
    )


def _untouched() -> Iterator[tuple[slice, sp.csr_matrix]]:
    raise AssertionError("a band was read although the load was refused")
    yield  # pragma: no cover


def test_too_large_is_refused_before_any_band(
    stores: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = open_assay(stores["root"] / "u.zarr")
    nnz = stores["counts"].nnz
    # what the matrix needs: its values, int32 indices and row pointers
    needed = nnz * (opened.reader.dtype.itemsize + 4) + (700 + 1) * 4
    monkeypatch.setattr(loading, "available_memory", lambda: needed - 1)
    with pytest.raises(loading.LoadTooLargeError) as refused:
        loading.loaded_counts(opened, _untouched())
    message = str(refused.value)
    assert isinstance(refused.value, MemoryError)
    assert f"{nnz:,} stored values" in message
    assert "700 x 300" in message and "lazy=True" in message and "cytearc-vfs export" in message
    assert "Nothing was read" in message
    with pytest.raises(MemoryError, match="lazy=True"):
        cv.to_anndata(stores["root"] / "u.zarr", lazy=False)
    # exactly enough is enough
    monkeypatch.setattr(loading, "available_memory", lambda: needed)
    _same_csr(cv.to_anndata(stores["root"] / "u.zarr", lazy=False).X, stores["counts"])
    # the lazy route is not limited
    monkeypatch.setattr(loading, "available_memory", lambda: 0)
    assert cv.to_anndata(stores["root"] / "u.zarr").X.shape == (700, 300)


def test_signed_counts_are_refused_as_the_bands_show_the_size(
    stores: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = open_assay(stores["root"] / "s.zarr")
    read: list[slice] = []

    def bands() -> Iterator[tuple[slice, sp.csr_matrix]]:
        for cells, block in cell_bands(opened, band_bytes=100 * 300 * 4):
            read.append(cells)
            yield cells, block

    monkeypatch.setattr(loading, "available_memory", lambda: 1000)
    with pytest.raises(loading.LoadTooLargeError, match="bands read so far were let go"):
        loading.loaded_counts(opened, bands())
    assert read == [slice(0, 100)]


def test_summaries_that_disagree_with_the_counts_are_named(stores: dict[str, Any]) -> None:
    opened = open_assay(stores["root"] / "u.zarr")
    first = stores["counts"][:10]
    wrong = sp.csr_matrix(first.toarray() + 1)  # more entries than rowPositive counts
    with pytest.raises(VfsError, match=r"rowPositive summary counts .*cytearc-vfs verify"):
        loading.loaded_counts(opened, iter([(slice(0, 10), wrong)]))


def test_available_memory_is_what_the_system_reports() -> None:
    available = loading.available_memory()
    if not Path("/proc/meminfo").exists():
        pytest.skip("no /proc/meminfo on this system")
    assert available is not None and available > 0
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    reported = next(int(line.split()[1]) * 1024 for line in meminfo if "MemAvailable" in line)
    # within what other processes allocate or free between the two reads
    assert available <= reported * 1.5
