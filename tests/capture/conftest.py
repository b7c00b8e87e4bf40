"""Every read_capture call in these tests runs through the loop it should, and with the
Cython codec through both loops: the compiled one (mqttwire.capture._fast) must yield
exactly the records of the pure-Python reference loop, field by field."""

from __future__ import annotations

import dataclasses
import importlib
import io
import os
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any, BinaryIO

import pytest

import mqttwire.capture as capture
from mqttwire.capture import MqttStreams, Record
from mqttwire.capture.loop import _read_pure

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
                      stream_ends: bool) -> list[Record]:
    """The pure loop's records for the capture ``raw``, whatever the codec."""
    handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                          version=version, max_pending=max_pending, stream_ends=stream_ends)
    return list(_read_pure(io.BytesIO(raw), handler))


@pytest.fixture(autouse=True)
def _both_capture_loops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Wrap read_capture's loop selector: assert which loop it chose, and with the
    Cython codec compare its records with the pure loop's on the same bytes.  Yields the
    list of choices made (True: compiled), for tests that check it."""
    chosen: list[bool] = []
    select = capture._read

    def checked(f: BinaryIO, name: str, ports: Iterable[int], payload_limit: int | None,
                codec: ModuleType, version: int | None, max_pending: int,
                stream_ends: bool) -> Iterator[Record]:
        ports = list(ports)
        raw = f.read()
        args = (name, ports, payload_limit, codec, version, max_pending, stream_ends)
        loop = select(io.BytesIO(raw), *args)
        fast = capture._fast is not None and isinstance(loop, capture._fast.FastReader)
        assert fast == fast_expected(codec), "read_capture took the wrong loop"
        chosen.append(fast)
        records = list(loop)
        if fast:
            assert_same_records(records, reference_records(raw, *args))
        return iter(records)

    monkeypatch.setattr(capture, "_read", checked)
    yield chosen
