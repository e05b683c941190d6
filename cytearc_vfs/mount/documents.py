"""Group documents a mount copies from its source into its target.

The copy must describe the target alone: a source document's consolidated
metadata lists the source's members, and zarr opening the target directly
would show those instead of the target's own.
"""

from __future__ import annotations

import json

from zarr.core.buffer import Buffer, default_buffer_prototype

__all__ = ["unconsolidated"]


def unconsolidated(document: Buffer) -> Buffer:
    """A group document without its ``consolidated_metadata`` (as it is, when it has none)."""
    try:
        parsed = json.loads(document.to_bytes())
    except ValueError:  # not JSON: copied as it is, zarr refuses it on either side
        return document
    if not isinstance(parsed, dict) or parsed.get("consolidated_metadata") is None:
        return document
    plain = {name: value for name, value in parsed.items() if name != "consolidated_metadata"}
    return default_buffer_prototype().buffer.from_bytes(json.dumps(plain, indent=2).encode())
