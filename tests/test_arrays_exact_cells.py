"""A resize's edge chunks keep and clear cells bit for bit.

A float cell holding ``-0.0`` compares equal to a fill value of ``0.0``,
and every NaN reads as a NaN fill; ``read`` treats both as missing, which
is right for reading. Clearing an edge chunk must not: a kept ``-0.0`` is
a value (zarr stores a chunk of them), and a cut-off cell must come back
as the fill value's own bytes when the array grows again, not as the old
value.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import zarr
from zarr.storage import MemoryStore

from cytearc_vfs.arrays import read, resize

#: A quiet NaN with a payload: equal to no NaN fill bit for bit.
ODD_NAN = np.frombuffer(struct.pack("<Q", 0x7FF8000000000123), dtype="f8")[0]


def _array(dtype: str, fill: Any, values: list[Any], chunk: int) -> zarr.Array[Any]:
    array = zarr.create_array(
        MemoryStore(), shape=(len(values),), chunks=(chunk,), dtype=dtype, fill_value=fill
    )
    array[:] = np.asarray(values, dtype=dtype)
    return array


def test_kept_negative_zeros_survive_a_cut_through_their_chunk() -> None:
    array = _array("f8", 0.0, [-0.0, -0.0, 5.0], chunk=3)
    resize(array, high=[-1])
    kept = read(array, raw=True)
    assert kept.tolist() == [0.0, 0.0] and np.signbit(kept).all()  # not rewritten as +0.0
    assert "c/0" in array.store._store_dict  # the chunk was cleared, not deleted


def test_cut_off_cells_return_as_the_fill_value_bit_for_bit() -> None:
    zero = _array("f8", 0.0, [1.0, 2.0, -0.0, -0.0], chunk=4)
    resize(zero, high=[-2])
    resize(zero, high=[2])
    assert not np.signbit(read(zero, raw=True)).any()
    nan = _array("f8", np.nan, [1.0, 2.0, ODD_NAN, ODD_NAN], chunk=4)
    resize(nan, high=[-2])
    resize(nan, high=[2])
    fill = np.asarray(np.nan, dtype="f8").view("u8")
    assert (read(nan, raw=True)[2:].view("u8") == fill).all()
