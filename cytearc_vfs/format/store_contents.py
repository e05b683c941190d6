"""What the top of a store declares: its root, its assays and workspaces, read from metadata only.

Every open, verify and source binding starts here. A root that still names
its writer (``cytearc:pending_store``) is refused; pending assays are
listed, and refused later by the verifier (:mod:`.source_store`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zarr.abc.store import Store

from ..errors import IncompleteStoreError, RecordShapeError
from .option_names import callers_form, switched_on
from .paths import AssayPaths, check_name, join
from .records import PENDING_ASSAY_ATTR, PENDING_STORE_ATTR
from .store_io import get_json, innermost_store, list_dir, missing_bucket
from .store_keys import METADATA_DOCUMENTS

__all__ = [
    "DAMAGED_DOCUMENT_REMEDY",
    "StoreContents",
    "contents_documents",
    "declared_contents",
    "json_object",
    "list_root_once",
    "node_attrs",
    "raise_damaged_document",
    "read_contents",
    "unfinished_message",
]


def unfinished_message(where: str, writer: object, what: str = "the store") -> str:
    """The refusal of something a writer began and never finished, with the remedy."""
    return (
        f"{where}: {what} is unfinished: {writer!s} began writing it and never finished (it "
        "was interrupted or failed), so it does not open. Write it again with "
        f"{switched_on('overwrite')}, which replaces it"
    )


@dataclass(frozen=True, slots=True)
class StoreContents:
    """What the top of a store declares, read from metadata documents only."""

    root_attrs: Mapping[str, Any]
    """Attributes of the root group."""
    assays: tuple[AssayPaths, ...]
    """Published assays (``is_assay``), root layout first, then by workspace."""
    pending: tuple[AssayPaths, ...]
    """Pending derived assays (``cytearc:pending_assay``)."""
    zarr_format: int
    """2 or 3."""
    groups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False)
    """Attributes of the groups read on the way (top-level children, a workspace's
    assays), by path: a verification of the same store reads them from here instead
    of parsing their documents again."""
    listed: bool = field(default=True, compare=False)
    """Whether the store was listed; ``False`` when its listing was refused and only
    the assays declared beside the one read were looked at (:func:`declared_contents`)."""


#: What to do about a metadata document that is not a JSON object: no writer reads
#: past it (a repack reads it too), so it comes back from a copy or a new import.
DAMAGED_DOCUMENT_REMEDY = (
    "the document is damaged: restore it from a copy of the store, or re-import the dataset"
)


def json_object(store: Store, key: str, *, where: str) -> dict[str, Any] | None:
    """The JSON object stored at ``key``, ``None`` when absent; anything else is a record error
    naming the store as the caller names it (``where``), the document and the remedy.

    ``where`` is required: the store's own description (``wrapping-file:///...``) is
    not what a reader gave, and a message must not need it cut out again.
    """
    value = get_json(store, key, where=where, remedy=DAMAGED_DOCUMENT_REMEDY)
    if value is not None and not isinstance(value, dict):
        raise RecordShapeError(f"{where}: {key!r} is not a JSON object; {DAMAGED_DOCUMENT_REMEDY}")
    return value


def raise_damaged_document(store: Store, *, where: str) -> None:
    """Raise the :class:`RecordShapeError` of the first metadata document of ``store``
    that is not a JSON object, naming it, ``where`` and the remedy; return if none is.

    zarr opens a node whose ``zarr.json`` is damaged with ``json``'s bare
    ``JSONDecodeError`` ("Expecting value: line 1 column 1"), naming neither the
    document nor the store: a caller that met one finds it here. Lists the
    whole store, so it is for failures, not for every open.
    """
    from zarr.core.sync import sync

    async def collect() -> list[str]:
        return [key async for key in store.list()]

    for key in sorted(sync(collect())):
        if key.rpartition("/")[2] in METADATA_DOCUMENTS:
            json_object(store, key, where=where)


def node_attrs(store: Store, path: str, *, where: str) -> tuple[str | None, dict[str, Any]]:
    """(node_type, attributes) of the v3 node at ``path``, or (None, {}); a damaged
    document is refused naming the store as ``where``."""
    document = json_object(store, join(path, "zarr.json"), where=where)
    if document is None:
        return None, {}
    attrs = document.get("attributes", {})
    return document.get("node_type"), attrs if isinstance(attrs, dict) else {}


# Documents of a node, not child nodes: a listing of a group shows them among its children.
# Top-level groups of the layout that never hold an assay or a workspace.
_NOT_ASSAYS = frozenset({"matrices", "artifacts", "pipeline", "_composite"})


def contents_documents(keys: Iterable[str]) -> list[str]:
    """The ``zarr.json`` documents :func:`read_contents` reads, given every key of the store.

    A caller that listed the store fetches them in one concurrent round
    instead of one by one: the root's, each top-level child's, and for a
    child with a ``cellData`` group (a workspace) its own children's.

    >>> contents_documents(["zarr.json", "RNA/zarr.json", "RNA/counts/c/0/0", "ws/cellData/zarr.json",
    ...                     "ws/ADT/zarr.json"])
    ['zarr.json', 'RNA/zarr.json', 'RNA/cellData/zarr.json', 'ws/zarr.json', 'ws/cellData/zarr.json', 'ws/ADT/zarr.json']
    """
    listed = set(keys)
    children: dict[str, set[str]] = {}
    for key in listed:
        parts = key.split("/")
        if len(parts) > 1 and parts[0] not in METADATA_DOCUMENTS:
            below = children.setdefault(parts[0], set())
            if len(parts) > 2:
                below.add(parts[1])
    documents = ["zarr.json"]
    for child in sorted(children):
        documents.append(f"{child}/zarr.json")
        if child in _NOT_ASSAYS or child == "cellData":
            continue
        documents.append(f"{child}/cellData/zarr.json")
        if f"{child}/cellData/zarr.json" in listed:  # a workspace: its assays are one level down
            documents += [
                f"{child}/{name}/zarr.json" for name in sorted(children[child] - {"cellData"})
            ]
    return documents


def list_root_once(store: Store) -> bool | None:
    """Ask a remote ``store`` for the first page of its root listing, for what it raises;
    whether it lists anything (``None`` when it was not listed).

    S3 answers a GET of any key in a bucket that does not exist ``404``, as for
    an absent key, so a location without a root document may be a mistyped
    path or a missing bucket; only a listing says which (``NoSuchBucket``,
    raised here and named by the callers' translation of backend errors).
    Called where a root document is missing, so it costs one request only on
    the way to an error, and raises only a missing bucket. Local and in-memory
    stores are not listed (a local directory may hold any number of files). An
    object store lists nothing below a path where nothing is stored: that path
    does not exist, as a local one would not.
    """
    from zarr.core.sync import sync
    from zarr.storage import LocalStore, MemoryStore

    # wrappers (remembered reads, prefetched documents) over a local directory: an
    # empty local directory exists, and is said so by the callers
    inner = innermost_store(store)
    if isinstance(inner, LocalStore | MemoryStore) or not store.supports_listing:
        return None

    async def first_page() -> bool:
        async for _ in store.list_dir(""):
            return True
        return False

    try:
        return sync(first_page())
    except Exception as exc:
        if missing_bucket(exc):
            raise
        # anything else (a server that refuses listings) leaves the missing document
        # to be said as it is: the path is what to check
        return None


class NoZarrGroupError(ValueError):
    """A location with no Zarr group at its root (no ``zarr.json``, no ``.zgroup``)."""


class NothingStoredError(NoZarrGroupError, FileNotFoundError):
    """An object store's location under which nothing is stored: it does not exist,
    and is a ``FileNotFoundError`` as a missing local path is."""


def read_contents(store: Store, *, where: str, unlisted: AssayPaths | None = None) -> StoreContents:
    """List the assays a store declares (root layout and workspaces).

    With ``unlisted`` (the assay a caller reads), a store whose listing is
    refused (``PermissionError``: credentials that may read but not list) is
    read by path instead (:func:`declared_contents`); without it, the refusal
    is raised.
    """
    root = json_object(store, "zarr.json", where=where)
    if root is None:
        if json_object(store, ".zgroup", where=where) is not None:
            return StoreContents(json_object(store, ".zattrs", where=where) or {}, (), (), 2)
        # a missing bucket is said so, not "no zarr.json"; and a path that holds nothing
        if list_root_once(store) is False:
            raise NothingStoredError(
                f"{where} does not exist (nothing is stored there); check the path"
            )
        remedy = (
            # an AnnData file: say what it is and how to use it (not "write a store there")
            ": an .h5ad file is AnnData in HDF5, read only as input. Import it with "
            f"{callers_form('cytearc_vfs.write_counts(DEST, PATH)', 'cytearc-vfs write PATH DEST')}"
            ", or write it as an AnnData Zarr store (anndata.read_h5ad(PATH).write_zarr(DEST)), "
            "which a composite reads without conversion"
            if where.rstrip("/").endswith(".h5ad")
            else "; check the location, or write a store there with "
            + callers_form("cytearc_vfs.write_counts", "cytearc-vfs write")
        )
        raise NoZarrGroupError(f"{where} holds no Zarr group (no zarr.json at its root){remedy}")
    if root.get("node_type") != "group":
        raise ValueError(f"{where} is a Zarr {root.get('node_type')}, not a store group")
    root_attrs = root.get("attributes", {}) or {}
    if not isinstance(root_attrs, dict):
        # every reader of the root asks it for its records (composite, mount, assay
        # types): an AttributeError deep inside them said nothing of the document
        raise RecordShapeError(
            f"{where}: the attributes of its root document ('zarr.json') are not a JSON "
            f"object ({type(root_attrs).__name__}); {DAMAGED_DOCUMENT_REMEDY}"
        )
    if PENDING_STORE_ATTR in root_attrs:
        raise IncompleteStoreError(
            unfinished_message(where, root_attrs[PENDING_STORE_ATTR])
            + f" (its root still carries {PENDING_STORE_ATTR})"
        )
    assays: list[AssayPaths] = []
    pending: list[AssayPaths] = []
    groups: dict[str, Mapping[str, Any]] = {}
    try:
        children = list_dir(store, "")
    except PermissionError:
        if unlisted is None:
            raise
        return declared_contents(store, root_attrs, unlisted, where=where)
    for child in children:
        if child in METADATA_DOCUMENTS:  # the root's own document, not a child node
            continue
        kind, attrs = node_attrs(store, child, where=where)
        if kind != "group" or child in _NOT_ASSAYS:
            continue
        groups[child] = attrs
        if attrs.get("is_assay") is True:
            assays.append(AssayPaths(child))
        elif PENDING_ASSAY_ATTR in attrs:
            pending.append(AssayPaths(child))
        elif (
            child != "cellData"
            and node_attrs(store, join(child, "cellData"), where=where)[0] == "group"
        ):
            for grandchild in list_dir(store, child):
                if grandchild in METADATA_DOCUMENTS:
                    continue
                kind2, attrs2 = node_attrs(store, join(child, grandchild), where=where)
                if kind2 != "group":
                    continue
                groups[join(child, grandchild)] = attrs2
                if attrs2.get("is_assay") is True:
                    assays.append(AssayPaths(grandchild, child))
                elif PENDING_ASSAY_ATTR in attrs2:
                    pending.append(AssayPaths(grandchild, child))
    return StoreContents(root_attrs, tuple(assays), tuple(pending), 3, groups)


def declared_contents(
    store: Store, root_attrs: Mapping[str, Any], paths: AssayPaths, *, where: str
) -> StoreContents:
    """What :func:`read_contents` finds, read by path in a store that may not be listed.

    The assays looked at are the ones declared where ``paths`` lives (the
    names of ``assayTypes`` of the root, and of its workspace for a workspace
    assay) and ``paths``'s own: each one's group document is read at its key.
    A derived assay declares its type when it begins (its pending group is
    discarded with the declaration), so a pending assay there is found as a
    listing finds it. Assays of other workspaces cannot be found without a
    listing: ``StoreContents.listed`` is false.
    """
    assays: list[AssayPaths] = []
    pending: list[AssayPaths] = []
    groups: dict[str, Mapping[str, Any]] = {}
    declared = root_attrs
    if paths.workspace is not None:
        kind, declared = node_attrs(store, paths.workspace, where=where)
        if kind == "group":
            groups[paths.workspace] = declared
    types = declared.get("assayTypes")
    names = [name for name in types if isinstance(name, str)] if isinstance(types, dict) else []
    for name in dict.fromkeys([*names, paths.assay]):
        try:
            check_name(name, what="assay name")
        except ValueError:
            continue  # no group can be stored under it: nothing to read
        assay = AssayPaths(name, paths.workspace)
        kind, attrs = node_attrs(store, assay.assay_group, where=where)
        if kind != "group":
            continue
        groups[assay.assay_group] = attrs
        if attrs.get("is_assay") is True:
            assays.append(assay)
        elif PENDING_ASSAY_ATTR in attrs:
            pending.append(assay)
    return StoreContents(root_attrs, tuple(assays), tuple(pending), 3, groups, listed=False)
