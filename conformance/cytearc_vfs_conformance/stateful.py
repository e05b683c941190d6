"""zarr's store state machine for writable CyteArc stores that are never empty.

:class:`zarr.testing.stateful.ZarrStoreStateMachine` drives random ``set``,
``get``, ``delete``, ``exists``, partial reads and listings against a dict
model. It starts by clearing the store and checks ``list()`` against the
model alone. A composite or a mounted target holds its records (and, for a
composite, computed arrays) from the start and refuses ``clear()``, so
:class:`OverlayStoreStateMachine` takes the store's keys at the start as a
fixed *baseline*: every listing must be the baseline plus the model, every
baseline key must stay readable with its bytes, and ``clear()`` must be
refused.

Use it as zarr's machine is used::

    class MountMachine(OverlayStoreStateMachine):
        def __init__(self) -> None:
            super().__init__(make_writable_mount())

    TestMount = MountMachine.TestCase
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import assume, note
from hypothesis.stateful import initialize, invariant, precondition, rule
from hypothesis.strategies import DataObject
from zarr.abc.store import Store
from zarr.testing.stateful import ZarrStoreStateMachine
from zarr.testing.strategies import keys as zarr_keys

from .store_tests import CLEAR_REFUSAL

__all__ = ["OverlayStoreStateMachine"]


class OverlayStoreStateMachine(ZarrStoreStateMachine):
    """zarr's machine over a store that starts with keys it must keep."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.baseline: dict[str, bytes] = {}
        for key in self.store.list():
            value = self.store.get(key, self.prototype)
            assert value is not None, f"{key} is listed but cannot be read"
            self.baseline[key] = value.to_bytes()

    # zarr's machine clears the store first: a CyteArc store refuses that,
    # and its records are the baseline the run must keep.
    @initialize()
    def init_store(self) -> None:
        note(f"baseline of {len(self.baseline)} keys")

    @rule(key=zarr_keys(), data=st.data())
    def get_invalid_zarr_keys(self, key: str, data: DataObject) -> None:
        assume(key not in self.model and key not in self.baseline)
        assert self.store.get(key, self.prototype) is None

    @rule()
    def clear(self) -> None:
        with pytest.raises(ValueError, match=CLEAR_REFUSAL):
            self.store.clear()

    @rule()
    def is_empty(self) -> None:
        assert not self.store.is_empty("")

    @rule(key=zarr_keys())
    def exists(self, key: str) -> None:
        assert self.store.exists(key) == (key in self.model or key in self.baseline)

    @precondition(lambda self: len(self.model.keys()) > 0)
    @rule(data=st.data())
    def getsize_prefix(self, data: DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model.keys())))
        node = key.split("/")[0]
        sizes = {k: len(v) for k, v in self.baseline.items()}
        sizes.update({k: len(v) for k, v in self.model.items()})
        expected = sum(size for k, size in sizes.items() if k.startswith(node + "/"))
        assert self.store.getsize_prefix(node) == expected

    @invariant()
    def check_paths_equal(self) -> None:
        assert sorted(self.store.list()) == sorted(set(self.model) | set(self.baseline))

    @invariant()
    def check_num_zarr_keys_equal(self) -> None:
        assert len(list(self.store.list())) == len(set(self.model) | set(self.baseline))

    @invariant()
    def check_zarr_keys(self) -> None:
        assert self.store.is_empty("") is False
        for key in self.store.list():
            assert self.store.exists(key) is True

    @invariant()
    def baseline_kept(self) -> None:
        for key, value in self.baseline.items():
            if key in self.model:
                continue
            got = self.store.get(key, self.prototype)
            assert got is not None and got.to_bytes() == value, f"{key} changed"
