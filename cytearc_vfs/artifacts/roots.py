"""Artifact roots: the places of a store's layout that hold artifacts.

A root is ``artifacts`` (the datastore's), ``{assay}/artifacts``,
``{workspace}/artifacts`` or ``{workspace}/{assay}/artifacts``, for an
assay and a workspace the store holds. Those are the only places that
listings (:func:`artifact_roots`, ``describe_artifacts``), mounts and
rewrites look in, so publishing anywhere else (a typo such as
``RNA/artifact``, an assay the store lacks, ``cellData``) would write an
artifact that nothing ever finds, or a group that makes the store
unrecognisable to its writers. :func:`check_root` refuses a malformed root
by its text alone; :func:`check_root_in_store` refuses one the store's
layout does not have, reading at most three metadata documents and never
listing, so it works on every writable store, a mount's included.
"""

from __future__ import annotations

from zarr.abc.store import Store

from ..format.paths import RESERVED_TOP_LEVEL, check_name, join
from ..format.source_store import node_attrs, read_contents
from ..format.store_contents import StoreContents

__all__ = [
    "ROOT_FORMS",
    "artifact_roots",
    "check_root",
    "check_root_in_store",
    "roots_listed",
    "roots_of",
]

#: The artifact roots a store can have, for messages.
ROOT_FORMS = (
    "'artifacts', '{assay}/artifacts', '{workspace}/artifacts' or '{workspace}/{assay}/artifacts'"
)


def check_root(root: str) -> str:
    """``root`` without surrounding slashes, if its text has one of the root forms.

    Raises
    ------
    ValueError
        An empty root, a segment that is not a plain name, a root that does
        not end in ``artifacts``, has more than three segments, or names a
        group of the layout (``cellData``, ``matrices``...) as its assay or
        workspace.
    """
    if not isinstance(root, str) or not root.strip("/"):
        raise ValueError(
            f"artifact root must be a non-empty path such as 'artifacts', not {root!r}"
        )
    normalized = root.strip("/")
    segments = normalized.split("/")
    for segment in segments:
        check_name(segment, what=f"segment of artifact root {root!r}")
    _check_form(segments, f"artifact root {root!r}")
    return normalized


def _check_form(segments: list[str], what: str) -> None:
    owners = segments[:-1]
    reserved = [name for name in owners if name in RESERVED_TOP_LEVEL]
    if segments[-1] != "artifacts" or len(owners) > 2 or reserved:
        why = (
            f"{reserved[0]!r} is a group of the store layout, not an assay or a workspace"
            if reserved and segments[-1] == "artifacts" and len(owners) <= 2
            else "it is not an artifact root"
        )
        raise ValueError(f"{what}: {why}; an artifact root is {ROOT_FORMS}")


def check_root_in_store(store: Store, key_prefix: str, root: str, where: str) -> None:
    """Refuse ``root`` (below ``key_prefix``) unless the store's layout has it.

    Reads the root group's document and those of the assay and workspace
    the root names; writes nothing.

    Raises
    ------
    ValueError
        No Zarr group at the store's root, a root whose full path (with
        ``key_prefix``) is not one of the root forms, or an assay or
        workspace the store does not hold; the message names the roots it
        has.
    """
    full = join(key_prefix, root)
    shown = f"{root!r} (at {full!r}, below group {key_prefix!r})" if key_prefix else repr(root)
    what = f"cannot publish an artifact under {shown} in {where}"
    segments = full.split("/")
    _check_form(segments, what)
    if node_attrs(store, "", where=where)[0] != "group":
        raise ValueError(
            f"{what}: its root is not a Zarr group (no zarr.json, or an array's); check the "
            "location, or write a store there with cytearc_vfs.write_counts first"
        )
    owners = segments[:-1]
    if not owners:
        return
    if len(owners) == 1:
        (name,) = owners
        if _is_assay(store, name, where) or _is_workspace(store, name, where):
            return
        missing = (
            f"{name!r} is neither an assay (a group with is_assay) nor a workspace (a group "
            "with cellData) of the store"
        )
    else:
        workspace, assay = owners
        if not _is_workspace(store, workspace, where):
            missing = f"{workspace!r} is not a workspace (a group with cellData) of the store"
        elif not _is_assay(store, join(workspace, assay), where):
            missing = f"workspace {workspace!r} has no assay {assay!r} (a group with is_assay)"
        else:
            return
    raise ValueError(
        f"{what}: {missing}, so nothing would ever list the artifact{_roots_hint(store, where)}"
    )


def _is_assay(store: Store, path: str, where: str) -> bool:
    kind, attrs = node_attrs(store, path, where=where)
    return kind == "group" and attrs.get("is_assay") is True


def _is_workspace(store: Store, name: str, where: str) -> bool:
    # As read_contents recognises one: a top-level group holding a cellData group.
    return node_attrs(store, join(name, "cellData"), where=where)[0] == "group"


def _roots_hint(store: Store, where: str) -> str:
    """``; its artifact roots: [...]`` for a refusal, or the root forms when they cannot be read."""
    return roots_listed(store, where) or (
        f"; an artifact root is {ROOT_FORMS} for an assay or workspace the store holds"
    )


def roots_listed(store: Store, where: str) -> str:
    """``; its artifact roots: [...] (give one of them)``, or ``""`` when they cannot be read."""
    try:
        roots = artifact_roots(store, where)
    except Exception:  # the refusal stands without the hint
        return ""
    return f"; its artifact roots: {roots} (give one of them)"


def artifact_roots(store: Store, where: str) -> list[str]:
    """Every artifact root the store's layout has: the datastore's, each workspace's and assay's."""
    return roots_of(read_contents(store, where=where))


def roots_of(contents: StoreContents) -> list[str]:
    """The artifact roots of a store whose contents were read already (:func:`artifact_roots`
    without reading them again)."""
    workspaces = sorted({paths.workspace for paths in contents.assays if paths.workspace})
    roots = ["artifacts", *(join(workspace, "artifacts") for workspace in workspaces)]
    roots += [join(paths.assay_group, "artifacts") for paths in contents.assays]
    return roots
