"""The checks that compare the compiled capture loop with the pure one, shared by this
directory's conftest.py and its tests (imported by this module's own name: a module
named "conftest" may be tests/spark's when both directories run in one process)."""

from __future__ import annotations

import dataclasses
import importlib
import io
import os
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from mqttwire.capture import MqttStreams, Record
from mqttwire.capture.loop import _read_pure, _read_pure_chain
from mqttwire.capture.sets import FileChain

__all__ = ["assert_same_records", "bytes_chain", "cython_codec", "fast_expected",
           "record_values", "reference_chain_records", "reference_records"]

FIELDS = [f.name for f in dataclasses.fields(Record)]


def cython_codec() -> ModuleType:
    """mqttwire._speedups, imported when a test needs it: where it is not built, the
    ImportError fails that test (a pure-Python pass deselects those tests with
    --no-c-extensions), and the other tests of this directory still run."""
    return importlib.import_module("mqttwire._speedups")


def fast_expected(codec: ModuleType) -> bool:
    """Whether read_capture must take the compiled loop with ``codec``: with the Cython
    codec, unless a pure-Python run was asked for (then the module is not even loaded)."""
    return codec.__name__ == "mqttwire._speedups" and not os.environ.get("MQTTWIRE_PURE_PYTHON")


def record_values(rec: Record) -> list[tuple[str, type, Any]]:
    """Every field with its type, so that 1 and True, or 0 and None, differ."""
    assert type(rec) is Record
    return [(name, type(getattr(rec, name)), getattr(rec, name)) for name in FIELDS]


def assert_same_records(fast: list[Record], reference: list[Record]) -> None:
    assert len(fast) == len(reference)
    for a, b in zip(fast, reference):
        assert record_values(a) == record_values(b)
        assert repr(a) == repr(b)


def reference_records(raw: bytes, name: str, ports: Iterable[int], payload_limit: int | None,
                      codec: ModuleType, version: int | None, max_pending: int,
                      stream_ends: bool, keep: Callable[[int], bool] | None = None,
                      unconnected: bool = True) -> list[Record]:
    """The pure loop's records for the capture ``raw``, whatever the codec."""
    handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                          version=version, max_pending=max_pending, stream_ends=stream_ends,
                          keep=keep, unconnected=unconnected)
    return list(_read_pure(io.BytesIO(raw), handler))


def bytes_chain(raws: list[tuple[str, bytes | OSError]]) -> FileChain:
    """A set's files, (name, contents) each, as a FileChain over memory (an OSError for
    contents: the file cannot be opened, with that error)."""
    def opener(raw: bytes | OSError) -> Callable[[], io.BytesIO]:
        def open_it() -> io.BytesIO:
            if isinstance(raw, OSError):
                raise raw
            return io.BytesIO(raw)
        return open_it

    return FileChain([(label, opener(raw)) for label, raw in raws])


def reference_chain_records(chain: FileChain, name: str, ports: Iterable[int],
                            payload_limit: int | None, codec: ModuleType,
                            version: int | None, max_pending: int,
                            stream_ends: bool) -> list[Record]:
    """The pure loop's records for a set's files, whatever the codec."""
    handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                          version=version, max_pending=max_pending, stream_ends=stream_ends)
    return list(_read_pure_chain(chain, handler))
