"""The fuzz targets of tests/fuzz/, run briefly in the normal suite.

Each target gets its seed corpus (built from tests/vectors/valid.json) and a few thousand
inputs mutated from it by a seeded random mutator: byte flips, interesting values,
insertions, deletions, duplicated runs and splices of two seeds, the moves libFuzzer makes.
This is not coverage-guided (atheris is not needed here, see tests/fuzz/README.md for the
long runs), but it is deterministic, runs both implementations on every input through the
targets' agreement checks, and replays each finding of the long runs as a named test.

``MQTTWIRE_FUZZ_SCALE`` multiplies the input counts (e.g. 20 for a longer search).
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

# The targets compare the extension with the fallback: a run without the extension
# (--no-c-extensions) leaves this module out.
pytestmark = pytest.mark.c_extension

SCALE = int(os.environ.get("MQTTWIRE_FUZZ_SCALE", "1"))

#: Mutated inputs per target (plus its seeds): sized so that the whole module runs in
#: about 15 s on a slow machine, the slower capture targets getting fewer.
COUNTS = {
    "decode_from": 5000,
    "body": 5000,
    "stream": 3000,
    "topics": 5000,
    "capture": 1000,
    "reassembler": 2000,
}

_INTERESTING = (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, 0xFE, 0x3F, 0x40, 0xC0)


def mutate(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """One to four random edits of ``data`` (``other`` is a second seed, for splicing)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip a bit
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # an interesting byte value
            buf[rng.randrange(len(buf))] = rng.choice(_INTERESTING)
        elif op == 2:  # insert random bytes
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and buf:  # delete a run
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 4 and buf:  # duplicate a run
            run = buf[pos : pos + rng.randint(1, 32)]
            buf[pos:pos] = run * rng.randint(1, 4)
        elif op == 5:  # splice: a head of data, a tail of the other seed
            buf = buf[:pos] + other[rng.randrange(len(other) + 1) :]
        elif op == 6 and len(buf) >= 2:  # a 16-bit field set to an edge value
            i = rng.randrange(len(buf) - 1)
            buf[i : i + 2] = rng.choice((0, 1, 0x7FFF, 0x8000, 0xFFFF)).to_bytes(2, "big")
    return bytes(buf)


@pytest.fixture(scope="module")
def fuzz() -> tuple[ModuleType, ModuleType]:
    """(fuzz_targets, fuzz_seeds), imported here so that collection never needs the
    extension."""
    import fuzz_seeds
    import fuzz_targets

    return fuzz_targets, fuzz_seeds


@pytest.mark.parametrize("target", sorted(COUNTS))
def test_bounded_fuzz(fuzz: tuple[ModuleType, ModuleType], target: str) -> None:
    """The seeds, then COUNTS[target] mutants of them: both implementations agree and
    every target invariant holds (see tests/fuzz/fuzz_targets.py)."""
    targets, seeds_module = fuzz
    run: Callable[[bytes], None] = targets.TARGETS[target]
    seeds = seeds_module.seeds(target)
    assert seeds
    rng = random.Random(f"mqttwire-fuzz-{target}")
    for data in seeds:
        run(data)
    for i in range(COUNTS[target] * SCALE):
        data = mutate(rng, rng.choice(seeds), rng.choice(seeds))
        try:
            run(data)
        except BaseException:
            # The input, for `python tests/fuzz/run.py replay` and a regression test.
            print(f"{target} input #{i}: {data.hex()}")
            raise


def test_seed_layouts(fuzz: tuple[ModuleType, ModuleType]) -> None:
    """The seeds reach what they claim to: every decode_from and body seed is its vector
    at its level, as the targets read their input layouts, and the vector decodes in both
    implementations; every capture and reassembler seed yields the session's 13 packets."""
    targets, seeds_module = fuzz
    vectors = seeds_module.vectors()
    from_seeds = seeds_module.seeds("decode_from")
    body_seeds = seeds_module.seeds("body")
    assert len(from_seeds) == len(body_seeds) == len(vectors)
    for (name, data, level), from_seed, body_seed in zip(vectors, from_seeds, body_seeds):
        assert targets.LEVELS[from_seed[0] % 3] == level and from_seed[1:] == data, name
        # body seed: [first byte][cfg] body, the header rebuilt from the body's length.
        body = body_seed[2:]
        assert targets.LEVELS[(body_seed[1] & 0x7F) % 3] == level, name
        assert bytes([body_seed[0]]) + targets.encode_varint(len(body)) + body == data, name
        for m in targets.CODECS:
            m.decode(data, version=level)
    import io

    from mqttwire import _speedups
    from mqttwire.capture import MqttStreams, read_capture

    for capture in seeds_module.seeds("capture"):
        records = list(read_capture(io.BytesIO(capture), codec=_speedups))
        assert [r.kind for r in records] == ["packet"] * 13
    for seed in seeds_module.seeds("reassembler"):
        max_pending, segments = targets.segments(seed)
        handler = MqttStreams("seed", ports=(1883,), codec=_speedups)
        for ts, seg in enumerate(segments):
            handler.reassembler.add(ts, seg)
        handler.reassembler.flush(len(segments))
        assert [r.kind for r in handler.out] == ["packet"] * 13


def test_encode_varint_by_hand(fuzz: tuple[ModuleType, ModuleType]) -> None:
    """The targets' own Remaining Length writer (MQTT 5.0 §1.5.5), checked by hand:
    127 = 0x7F; 128 = 0x80 0x01 (0 + 1*128); 16,383 = 0xFF 0x7F (127 + 127*128);
    268,435,455 = 0xFF 0xFF 0xFF 0x7F."""
    targets, _ = fuzz
    assert targets.encode_varint(0) == b"\x00"
    assert targets.encode_varint(127) == b"\x7f"
    assert targets.encode_varint(128) == b"\x80\x01"
    assert targets.encode_varint(16_383) == b"\xff\x7f"
    assert targets.encode_varint(268_435_455) == b"\xff\xff\xff\x7f"


# ---------------------------------------------------------------------------------------
# Findings of the fuzz runs (tests/fuzz/README.md), each replayed by name.


def _open_connections_capture(count: int) -> bytes:
    """A pcap of ``count`` MQTT connections, opened in turn (client ports 40001...), each
    sending a CONNECT, none closed: the end of the capture ends them all."""
    import io

    from mqttwire import _pure
    from mqttwire.capture.writers import Frame, TcpFlow, write_pcap

    connect = _pure.Connect("c", protocol_version=4).encode(4)
    frames = []
    for i in range(count):
        flow = TcpFlow(("10.0.0.1", 40001 + i), ("10.0.0.2", 1883))
        for seg in flow.open() + flow.send(0, connect):
            frames.append(Frame(1_700_000_000_000_000_000 + len(frames), flow.ip(seg)))
    buf = io.BytesIO()
    write_pcap(buf, frames)
    return buf.getvalue()


def test_capture_end_records_in_connection_order() -> None:
    """Finding F1 (capture target): read twice, the same capture gave its "end" records
    in different orders.  ``TcpReassembler.flush`` walks ``{st.conn for st in ...}``, a
    set of connection objects, whose order follows their memory addresses.  Expected:
    the connections still open at the end of the capture end in connection order (their
    index, the order of their first segment), each client-to-server direction first, the
    same on every read."""
    import io

    from mqttwire import _pure
    from mqttwire.capture import read_capture

    capture = _open_connections_capture(8)
    expected = [(f"t#{i}", d) for i in range(1, 9) for d in ("c2s", "s2c")]
    ballast = []
    for attempt in range(5):
        ballast.append([object() for _ in range(97 * attempt)])  # other addresses
        records = list(read_capture(io.BytesIO(capture), codec=_pure, name="t",
                                    stream_ends=True))
        assert [r.kind for r in records] == ["packet"] * 8 + ["end"] * 16
        assert [(r.connection_id, r.direction) for r in records[8:]] == expected


class _Deliveries:
    """A reassembler handler that records what it is given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []
        self.connections: list[Any] = []

    def on_connection(self, conn: Any) -> bool:
        self.connections.append(conn)
        return True

    def on_data(self, stream: object, offset: int, data: bytes, ts: int,
                boundary: bool) -> None:
        self.events.append(("data", offset, len(data)))

    def on_gap(self, stream: object, offset: int, length: int, ts: int) -> None:
        self.events.append(("gap", offset, length))

    def on_end(self, stream: object, ts: int, reason: str) -> None:
        self.events.append(("end", 0, 0))


def test_reassembler_holds_at_most_max_pending() -> None:
    """Finding F2 (reassembler target): with max_pending=16, a stream held 100 bytes after
    add() returned.  Segments after the SYN (ISN 999, so offset 0 is sequence 1000): 1
    byte at offset 10, then 100 bytes at offset 100.  The second push holds 101 > 16
    bytes, so the reassembler declares the hole 0..10 lost and delivers offset 10, but
    stops there: the 100 bytes at offset 100 stay held behind the hole 11..100.
    Expected (tcp.py: "at most max_pending bytes per stream; beyond that the hole is
    declared lost"): holes are declared lost until at most 16 bytes are held, here all
    of them: gap 0+10, data 10+1, gap 11+89, data 100+100."""
    from mqttwire.capture import TcpReassembler, TcpSegment

    client, server = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])

    def seg(seq: int, flags: int, payload: bytes = b"") -> TcpSegment:
        return TcpSegment(client, server, 40000, 1883, seq, 0, flags, memoryview(payload),
                          len(payload))

    handler = _Deliveries()
    reassembler = TcpReassembler(handler, max_pending=16)
    reassembler.add(0, seg(999, 0x02))  # SYN
    reassembler.add(1, seg(1010, 0x00, b"a"))  # offset 10: held (1 byte)
    reassembler.add(2, seg(1100, 0x00, b"b" * 100))  # offset 100: 101 bytes held
    [conn] = handler.connections
    assert conn.streams[0].pending_bytes <= 16
    assert handler.events == [("gap", 0, 10), ("data", 10, 1), ("gap", 11, 89),
                              ("data", 100, 100)]
