"""Arrow columns of the pipeline's tables, from Python objects.

:func:`arrays` builds the columns of a batch from a list of objects (a capture's
:class:`~mqttwire.capture.Record` objects, or the row dicts of
:mod:`mqttwire.spark.derive`).  The reference way is one Python list of values per
column, converted by ``pa.array``; where the compiled :mod:`mqttwire.spark.columns_c` is
built, it writes the Arrow buffers of the common column types straight from the objects
instead (several times faster: benchmarks/history/capture.md), and every column it declines is
built the reference way.  Both give equal arrays (tests/spark/test_columns.py).

Times arrive as integer nanoseconds since the epoch; a ``timestamp[us]`` column (Spark's
TIMESTAMP has microseconds) takes them rounded down to microseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

from .schema import TIMESTAMP

try:
    from . import columns_c
except ImportError:  # the pure-Python wheel, or a build without the extension
    columns_c = None  # type: ignore[assignment]

__all__ = ["COMPILED", "arrays", "reference_array"]

#: Whether :func:`arrays` uses the compiled buffers by default.
COMPILED = columns_c is not None

#: A column's source: a list of its values (one per object), or the name of the attribute
#: (or dict key) that holds the value in each object.
Source = list[Any] | str


def reference_array(values: list[Any], field: pa.Field) -> pa.Array:
    """One column from the list of its values, by ``pa.array``."""
    if field.type == TIMESTAMP:
        values = [None if v is None else v // 1000 for v in values]
    return pa.array(values, type=field.type)


def arrays(objs: Sequence[Any], sources: Sequence[Source], schema: pa.Schema, *,
           mapping: bool = False, compiled: bool | None = None) -> list[pa.Array]:
    """The columns of ``schema`` for ``objs``: column ``c`` from ``sources[c]`` (see
    :data:`Source`; a dict key when ``mapping``).  ``compiled``: whether to use the
    compiled buffers (default: when built)."""
    if not isinstance(objs, list):
        objs = list(objs)  # read once per column below
    getter = itemgetter if mapping else attrgetter
    built: list[Any] = [None] * len(schema)
    if compiled if compiled is not None else COMPILED:
        kinds = b"".join(columns_c.KINDS.get(str(f.type), b"-") for f in schema)
        built = columns_c.buffers(objs, list(sources), kinds, mapping)
    out = []
    for field, source, parts in zip(schema, sources, built):
        if parts is None:
            values = source if isinstance(source, list) else list(map(getter(source), objs))
            out.append(reference_array(values, field))
            continue
        nulls, validity, values, offsets = parts
        bufs = [None if validity is None else pa.py_buffer(validity)]
        if offsets is not None:
            bufs.append(pa.py_buffer(offsets))
        bufs.append(pa.py_buffer(values))
        out.append(pa.Array.from_buffers(field.type, len(objs), bufs, null_count=nulls))
    return out
