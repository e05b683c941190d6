"""A hypothesis state machine drives random writes, deletes, reads and listings
through a MountStore and checks each against a model of the resolution rules."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import MemoryStore

import cytearc_vfs as cv
from cytearc_vfs.mount.records import MountedAssay, MountRecord
from cytearc_vfs.mount.resolution import place_of

ROOTS = ("artifacts", "RNA/artifacts")
KINDS = ("pca", "umap")
SOURCE_IDS = ("s1", "s2")
OTHER_IDS = ("t1", "t2")
LEAVES = ("zarr.json", "data/zarr.json", "data/c/0/0")
FP = "sha256:" + "0" * 64

keys = st.one_of(
    st.builds(
        lambda r, k, i, leaf: f"{r}/{k}/{i}/{leaf}",
        st.sampled_from(ROOTS),
        st.sampled_from(KINDS),
        st.sampled_from(SOURCE_IDS + OTHER_IDS),
        st.sampled_from(LEAVES),
    ),
    st.builds(lambda r, k: f"{r}/{k}/zarr.json", st.sampled_from(ROOTS), st.sampled_from(KINDS)),
    st.builds(lambda r: f"{r}/zarr.json", st.sampled_from(ROOTS)),
    st.sampled_from(["cellData/ids/zarr.json", "RNA/featureData/c/0", "pipeline/runs/x/zarr.json"]),
)
values = st.binary(min_size=1, max_size=8)


def put(store: MemoryStore, key: str, value: bytes) -> None:
    sync(store.set(key, default_buffer_prototype().buffer.from_bytes(value)))


class MountMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.source_backing = MemoryStore()
        self.source: dict[str, bytes] = {}
        for root in ROOTS:
            for key, value in (
                (f"{root}/zarr.json", b"root-doc"),
                (f"{root}/pca/zarr.json", b"kind-doc"),
            ):
                put(self.source_backing, key, value)
                self.source[key] = value
            for artifact in SOURCE_IDS:
                for leaf in LEAVES:
                    key = f"{root}/pca/{artifact}/{leaf}"
                    value = f"src:{key}".encode()
                    put(self.source_backing, key, value)
                    self.source[key] = value
        record = MountRecord("/source", None, {"RNA": MountedAssay(FP, FP, True)})
        self.target_backing = MemoryStore()
        self.target: dict[str, bytes] = {}
        # roots and kinds whose document the mount has seen to in the target
        self.held: set[str] = set()
        self.mount = cv.MountStore(
            self.target_backing, self.source_backing.with_read_only(True), record, {}
        )

    def owner(self, group: str) -> str | None:
        if f"{group}/zarr.json" in self.target:
            return "target"
        if f"{group}/zarr.json" in self.source:
            return "source"
        return None

    def expected(self, key: str) -> bytes | None:
        place = place_of(key, ROOTS)
        if place.kind == "target":
            return self.target.get(key)
        if place.kind in ("root_doc", "kind_doc"):
            return self.target.get(key, self.source.get(key))
        assert place.group is not None
        if self.owner(place.group) == "source":
            return self.source.get(key)
        return self.target.get(key)

    def forbidden(self, key: str) -> bool:
        place = place_of(key, ROOTS)
        return (
            place.kind == "group"
            and place.group is not None
            and self.owner(place.group) == "source"
        )

    def undeletable(self, key: str) -> bool:
        """Inside a source group, or a directory document the source holds
        (deleted, it would still show through the mount)."""
        documents = place_of(key, ROOTS).kind in ("root_doc", "kind_doc")
        return self.forbidden(key) or (documents and key in self.source)

    @rule(key=keys, value=values)
    def write(self, key: str, value: bytes) -> None:
        buffer = default_buffer_prototype().buffer.from_bytes(value)
        if self.forbidden(key):
            with pytest.raises(PermissionError):
                sync(self.mount.set(key, buffer))
        else:
            sync(self.mount.set(key, buffer))
            place = place_of(key, ROOTS)
            if place.kind == "group" and place.group is not None:
                # a group's root and kind get the target's own documents (the source's)
                kind = place.group.rsplit("/", 1)[0]
                for directory in (kind.rsplit("/", 1)[0], kind):
                    document = f"{directory}/zarr.json"
                    unheld = directory not in self.held and document not in self.target
                    if unheld and document in self.source:
                        self.target[document] = self.source[document]
                    self.held.add(directory)
            self.target[key] = value

    @rule(key=keys)
    def delete(self, key: str) -> None:
        if self.undeletable(key):
            with pytest.raises(PermissionError):
                sync(self.mount.delete(key))
        else:
            sync(self.mount.delete(key))
            self.target.pop(key, None)
            gone = key.removesuffix("/zarr.json")
            self.held = {d for d in self.held if d != gone and not d.startswith(gone + "/")}

    @rule(key=keys)
    def read(self, key: str) -> None:
        got = sync(self.mount.get(key, prototype=default_buffer_prototype()))
        assert (None if got is None else got.to_bytes()) == self.expected(key)
        assert sync(self.mount.exists(key)) == (self.expected(key) is not None)

    @rule(directory=st.sampled_from([*ROOTS, *(f"{r}/{k}" for r in ROOTS for k in KINDS)]))
    def listing(self, directory: str) -> None:
        async def collect() -> set[str]:
            return {name async for name in self.mount.list_dir(directory)}

        children = set()
        for key in (*self.target, *self.source):
            if key.startswith(directory + "/"):
                children.add(key[len(directory) + 1 :].split("/", 1)[0])
        assert sync(collect()) == children

    @invariant()
    def source_never_changes(self) -> None:
        async def snapshot() -> dict[str, bytes]:
            out = {}
            async for key in self.source_backing.list():
                value = await self.source_backing.get(key, prototype=default_buffer_prototype())
                assert value is not None
                out[key] = value.to_bytes()
            return out

        if hasattr(self, "source_backing"):
            assert sync(snapshot()) == self.source

    @invariant()
    def target_holds_exactly_the_model(self) -> None:
        async def snapshot() -> dict[str, bytes]:
            out = {}
            async for key in self.target_backing.list():
                value = await self.target_backing.get(key, prototype=default_buffer_prototype())
                assert value is not None
                out[key] = value.to_bytes()
            return out

        if hasattr(self, "target_backing"):
            assert sync(snapshot()) == self.target


MountMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestMountStateMachine = MountMachine.TestCase
