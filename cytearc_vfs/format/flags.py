"""Yes/no arguments of the public functions: ``True`` or ``False``, nothing merely truthy.

``to_anndata(..., lazy="no")`` would otherwise be lazy (a non-empty string is
true), and ``overwrite="false"`` would replace a store; a flag that is not a
bool is refused with a ``TypeError`` naming the argument.

>>> check_flag(True, "lazy")
True
>>> check_flag("yes", "lazy")
Traceback (most recent call last):
...
TypeError: lazy must be True or False, not 'yes' (str)
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_flag"]


def check_flag(value: object, name: str) -> bool:
    """``value`` as a bool when it is one (numpy's included); ``TypeError`` otherwise."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, not {value!r} ({type(value).__name__})")
