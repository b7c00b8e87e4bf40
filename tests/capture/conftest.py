"""Every read_capture call in these tests runs through the loop it should, and with the
Cython codec through both loops: the compiled one (mqttwire.capture.loop_c) must yield
exactly the records of the pure-Python reference loop, field by field."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import BinaryIO

import pytest
from loop_checks import (
    assert_same_records,
    check_columnar,
    check_decoded,
    columnar_packets_table,
    fast_expected,
    reference_chain_records,
    reference_records,
)
from loop_checks import (
    bytes_chain as _bytes_chain,
)

import mqttwire.capture as capture
from mqttwire.capture import MqttStreams, Record
from mqttwire.capture.sets import FileChain


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
        fast = capture.loop_c is not None and isinstance(loop, capture.loop_c.FastReader)
        assert fast == fast_expected(codec), "read_capture took the wrong loop"
        chosen.append(fast)
        records = list(loop)
        if fast:
            reference = reference_records(raw, *args)
            assert_same_records(records, reference)
            # The same reading into Arrow columns, without Records (FastReader.fill).
            handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                                  version=version, max_pending=max_pending,
                                  stream_ends=stream_ends)
            check_columnar(lambda: columnar_packets_table(
                capture.loop_c.FastReader(io.BytesIO(raw), handler), handler), reference)
            # And a decoding task's five tables, with the derived ones (decode_capture).
            check_decoded(raw, None, name, ports, payload_limit, version)
        return iter(records)

    select_chain = capture._read_chain

    def checked_chain(chain: FileChain, name: str, ports: Iterable[int],
                      payload_limit: int | None, codec: ModuleType, version: int | None,
                      max_pending: int, stream_ends: bool) -> Iterator[Record]:
        """The same for the files of a set, read as one capture."""
        ports = list(ports)
        raws = []
        for label, opener in chain.files:
            try:
                with opener() as f:
                    raws.append((label, f.read()))
            except OSError as exc:  # raised again where the loops open the file
                raws.append((label, exc))
        args = (name, ports, payload_limit, codec, version, max_pending, stream_ends)
        used = _bytes_chain(raws)
        loop = select_chain(used, *args)
        fast = capture.loop_c is not None and isinstance(loop, capture.loop_c.FastReader)
        assert fast == fast_expected(codec), "read_capture took the wrong loop"
        chosen.append(fast)
        records = list(loop)
        if fast:
            reference = reference_chain_records(_bytes_chain(raws), *args)
            assert_same_records(records, reference)
            handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                                  version=version, max_pending=max_pending,
                                  stream_ends=stream_ends)
            chain_used = _bytes_chain(raws)
            check_columnar(lambda: columnar_packets_table(
                capture.loop_c.FastReader(None, handler, chain_used), handler, chain_used),
                reference, lambda r: used.file_of(r.frame))
            check_decoded(None, lambda: _bytes_chain(raws), name, ports, payload_limit,
                          version)
        # The caller's chain, for file_of: the files as the loop opened them.
        chain.starts[:], chain.names[:] = used.starts, used.names
        return iter(records)

    monkeypatch.setattr(capture, "_read", checked)
    monkeypatch.setattr(capture, "_read_chain", checked_chain)
    yield chosen
