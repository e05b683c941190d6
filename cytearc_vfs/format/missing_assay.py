"""The refusal of an assay that a store does not hold, naming those it holds.

One message for every store kind (an ordinary store, a composite, a mount),
so that each names the assays the same way and says how to ask for one.
"""

from __future__ import annotations

from collections.abc import Iterable

from .option_names import (
    Placeholder,
    callers_form,
    option_given,
    options_given,
    shell_word,
    source_label,
    source_option_given,
)
from .paths import AssayPaths

__all__ = ["MissingAssayError", "missing_assay_error"]


class MissingAssayError(ValueError):
    """An assay (or workspace) a store does not hold; ``held`` names those it holds.

    A ``ValueError`` as before; the class lets a caller that asked for the assay
    on the user's behalf (a composite, one assay for every source) give its own
    remedy, where "give one of them" would choose for one source only.
    """

    def __init__(self, message: str, where: str, held: list[str]) -> None:
        super().__init__(message)
        self.where = where
        self.held = held

    def for_every_source(self, name: str, assay: str) -> MissingAssayError:
        """The refusal as a composite of source ``name`` gives it: one assay name is
        read from every source, so "give one of them" would pick for this one only,
        and the next source would lack it."""
        command = f"cytearc-vfs write IN OUT --assay {shell_word(assay)}"
        return MissingAssayError(
            f"{source_label(name)} at {self.where} has no assay {assay!r} (its assays: "
            f"{self.held}); a composite reads the assay of one name from every source "
            f"({option_given('assay', assay)}): write this source again with that name "
            f"({callers_form(f'write_counts(..., assay={assay!r})', command)}), or compose "
            "sources whose assays are named alike",
            self.where,
            self.held,
        )


def missing_assay_error(
    where: str, paths: AssayPaths, held: Iterable[AssayPaths]
) -> MissingAssayError:
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
    return MissingAssayError(
        f"{label} does not exist (no group at {paths.assay_group!r}){hint}", where, names
    )
