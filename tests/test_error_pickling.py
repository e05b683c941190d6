"""Every error of the package pickles back whole: a dask worker process's error
reaches the caller so. Python's own pickling calls the constructor with the
message alone, which errors built from keywords do not take."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import cytearc_vfs as cv
from cytearc_vfs.format.count_totals import RowTotalOverflowError
from cytearc_vfs.read.anndata_elements import MissingElementError
from cytearc_vfs.read.direct_chunks import ChunkDecodeError
from cytearc_vfs.remote.failures import StoreAccessError
from cytearc_vfs.write.count_source import DuplicateSumOverflowError

ERRORS = [
    cv.IdentityMismatchError("source 'a' changed"),
    cv.IncompleteStoreError("not complete"),
    cv.NonFiniteArtifactError("NaN in row 3", operation="pca", array="data", row=3),
    RowTotalOverflowError(row=2, total=2**70, dtype=np.dtype(np.uint64), cell="c2"),
    DuplicateSumOverflowError(
        row=1, column=4, total=2**65, dtype=np.dtype(np.uint64), cell="c1", feature="g4"
    ),
    MissingElementError("no layer 'raw' in the store", "layers/raw"),
    ChunkDecodeError("chunk X/data/c/3 cannot be decoded"),
    StoreAccessError.naming(
        "http://127.0.0.1:9/a.zarr", ConnectionRefusedError("connection refused"), options="o"
    ),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_errors_pickle_with_their_message_and_attributes(error: cv.VfsError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error) and again.args == error.args
    assert vars(again) == vars(error)
    assert isinstance(again, cv.VfsError)
