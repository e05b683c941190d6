"""The refusal of an assay that a store does not hold, naming those it holds.

One message for every store kind (an ordinary store, a composite, a mount),
so that each names the assays the same way and says how to ask for one.
"""

from __future__ import annotations

from collections.abc import Iterable

from .option_names import Placeholder, options_given, source_option_given
from .paths import AssayPaths

__all__ = ["missing_assay_error"]


def missing_assay_error(where: str, paths: AssayPaths, held: Iterable[AssayPaths]) -> ValueError:
    """The refusal of an assay (or workspace) that ``where`` does not hold, naming those it holds.

    One message for every store kind: an ordinary store, a composite, a mount.
    """
    label = f"{where}: assay {paths.assay!r}" + (
        f" of workspace {paths.workspace!r}" if paths.workspace else ""
    )
    held = list(held)
    names = [f"{p.workspace}/{p.assay}" if p.workspace else p.assay for p in held]
    # 'ws/ADT' is not an assay name (names hold no '/'): say how to ask for it
    how = ["give one of them"]
    if any(p.workspace for p in held):
        # no command takes 'W/A' as an assay: each names the workspace apart
        given = options_given(("assay", "A"), ("workspace", "W"))
        source = source_option_given("source_workspaces", Placeholder("NAME"), "W")
        how.append(
            f"'W/A' is assay 'A' of workspace 'W': give {given} (a composite's source: {source})"
        )
    if paths.workspace and any(not p.workspace for p in held):
        how.append("a name without 'W/' is in the root layout: give no workspace")
    hint = f"; its assays: {names} ({'; '.join(how)})" if names else ""
    return ValueError(f"{label} does not exist (no group at {paths.assay_group!r}){hint}")
