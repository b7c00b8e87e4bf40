"""Every read_capture call in these tests runs through the loop it should, and with the
Cython codec through both loops: the compiled one (mqttwire.capture._fast) must yield
exactly the records of the pure-Python reference loop, field by field."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import BinaryIO

import pytest
from loop_checks import assert_same_records, fast_expected, reference_records

import mqttwire.capture as capture
from mqttwire.capture import Record


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
