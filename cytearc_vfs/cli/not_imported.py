"""``cytearc-vfs write``'s note of what an AnnData import left out, in one line.

The writer imports one count matrix with its ``obs`` and ``var``
(:attr:`~cytearc_vfs.write.writer.WriteInfo.not_imported` names the rest); a
user running the command learns it here, on stderr, with how to keep it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["not_counts_line", "not_imported_line", "not_imported_summary", "not_listed_line"]

#: A group with more members than this shows its count and the first few names.
_LISTED = 4
#: Names longer than this are cut (one line must stay readable).
_NAME_CHARS = 40


def _short(name: str) -> str:
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 3] + "..."


def not_imported_summary(paths: Sequence[str]) -> str:
    """The paths grouped by their top element, abbreviated where a group holds many.

    >>> not_imported_summary(["X", "obsm/X_pca", "obsm/X_umap", "raw"])
    'X; obsm: X_pca, X_umap; raw'
    >>> not_imported_summary([f"uns/k{i}" for i in range(12)])
    'uns: 12 keys (k0, k1, k2, ...)'
    """
    groups: dict[str, list[str]] = {}
    for path in paths:
        top, _, rest = path.partition("/")
        groups.setdefault(top, [])
        if rest:
            groups[top].append(_short(rest))
    parts: list[str] = []
    for top, names in groups.items():
        if not names:
            parts.append(top)
        elif len(names) <= _LISTED:
            parts.append(f"{top}: {', '.join(names)}")
        else:
            shown = ", ".join(names[: _LISTED - 1])
            parts.append(f"{top}: {len(names)} keys ({shown}, ...)")
    return "; ".join(parts)


def not_imported_line(command: str, source: str, paths: Sequence[str]) -> str:
    """The note ``cytearc-vfs COMMAND`` prints on stderr: what of ``source`` was not
    stored, and how to keep it."""
    return (
        f"cytearc-vfs {command}: note: not imported from {source} (a CyteArc store holds the "
        f"counts and their obs and var): {not_imported_summary(paths)}; keep the AnnData "
        "beside the store, or publish a result such as an embedding as an artifact of the "
        "store (cytearc_vfs.publish_artifact; docs/artifacts.md)"
    )


def not_listed_line(command: str, source: str) -> str:
    """The note when ``source``'s elements could not be listed (``WriteInfo.not_imported``
    is ``None``): said as not known, where no note at all read as "nothing left out"."""
    return (
        f"cytearc-vfs {command}: note: what else {source} holds could not be listed (its "
        "store cannot list its keys, or its listing shows nothing), so whatever it has "
        "beside the counts, obs and var (obsm, varm, obsp, varp, uns, other layers, raw) "
        "was not imported and is not named here; list it with cytearc-vfs anndata ls "
        "through a backend that lists, keep the AnnData beside the store, or publish a "
        "result such as an embedding as an artifact of the store (docs/artifacts.md)"
    )


def not_counts_line(
    command: str, source: str, matrix: str, dtype: str, paths: Sequence[str]
) -> str | None:
    """The note when the imported matrix holds values that are not whole numbers (a
    float ``dtype``: the writer keeps a float only then), naming the layers and raw
    counts left behind that ``--layer`` imports instead; ``None`` for counts.

    Writing a log-normalized ``X`` is the import's common mistake: it succeeded
    without a word while the file's ``counts`` layer stayed behind.

    >>> line = not_counts_line("write", "a.h5ad", "X", "float32", ["layers/counts", "raw"])
    >>> line.split("; ")[1]
    'its counts may be what --layer counts or --layer raw/X imports instead (again with --overwrite)'
    >>> not_counts_line("write", "a.h5ad", "X", "uint16", ["layers/counts"]) is None
    True
    """
    if not dtype.startswith("float"):
        return None
    choices = [
        f"--layer {path.removeprefix('layers/')}" for path in paths if path.startswith("layers/")
    ]
    if "raw" in paths or "raw/X" in paths:
        choices.append("--layer raw/X")
    said = (
        f"cytearc-vfs {command}: note: {matrix} of {source} holds values that are not whole "
        f"numbers, stored as {dtype} (normalized data rather than counts?)"
    )
    if not choices:
        return said
    return (
        f"{said}; its counts may be what {' or '.join(choices[:3])} imports instead "
        "(again with --overwrite)"
    )
