"""Choose the implementation once, at import: the Cython extension or the pure fallback.

The fallback is used when ``MQTTWIRE_PURE_PYTHON`` is set to a non-empty value, when the
interpreter is not CPython, or when the extension is not installed.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING or os.environ.get("MQTTWIRE_PURE_PYTHON") or sys.implementation.name != "cpython":
    from . import _pure as impl

    IMPLEMENTATION = "python"
else:
    try:
        from . import _speedups as impl  # type: ignore[no-redef]

        IMPLEMENTATION = "cython"
    except ImportError:
        from . import _pure as impl  # type: ignore[no-redef]

        IMPLEMENTATION = "python"

__all__ = ["impl", "IMPLEMENTATION"]
