"""``info`` and ``hierarchy`` name every data type in words.

A data type with a configuration (fixed-length text, as AnnData writes its
ids, dates, durations) used to be printed as its raw JSON,
``{"name": "fixed_length_utf32", "configuration": {"length_bytes": 20}}``.
"""

from __future__ import annotations

import pytest
import zarr

from cytearc_vfs.arrays import hierarchy, info


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        ("U5", "fixed_length_utf32 (length_bytes 20)"),
        ("M8[s]", "numpy.datetime64 (unit s, scale_factor 1)"),
        ("m8[ms]", "numpy.timedelta64 (unit ms, scale_factor 1)"),
        ("u2", "uint16"),
        (str, "string"),
    ],
)
@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
def test_data_types_are_named_in_words(dtype: object, name: str) -> None:
    group = zarr.open_group({}, mode="w")
    group.create_array("a", shape=(3,), dtype=dtype)
    assert info(group["a"]).dtype == name
    assert f"  data type  : {name}\n" in str(info(group["a"]))
    assert f"a (array) {name} 3, chunks 3" in str(hierarchy(group))
