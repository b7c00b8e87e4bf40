"""A byte range of a capture as a pcapng section per connection
(mqttwire.capture.sections): the compiled loop (``sections_c.SectionPacker``) gives exactly
what the pure one (``sections.sections_pure``) gives, for every range of every format the
range reader takes, and hands a range it does not read to the pure loop; the sections
hold the range's frames, each connection's in its own section.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_capture_ranges import write  # the same files as the range reader's tests

from mqttwire.capture import pcap
from mqttwire.capture.ranges import chain_problem, plan_ranges
from mqttwire.capture.sections import flow_key, range_sections
from mqttwire.capture.writers import Frame, TcpFlow

T0 = 1_700_000_000_123_456_789  # ns
NAME = "sections.cap"

# (format, byte order, nanosecond pcap, Simple Packet Blocks)
FORMATS = [
    ("pcap", "<", False, False),
    ("pcap", ">", True, False),
    ("pcapng", "<", False, False),
    ("pcapng", ">", False, False),
    ("pcapng", "<", False, True),
]


def flows_frames(sizes: Sequence[int], flows: int = 3, interfaces: int = 3,
                 seed: int = 0) -> list[Frame]:
    """Segments of ``flows`` TCP connections interleaved (one per size, in turn), with
    a frame that is not TCP (UDP) now and then; times forward by about a second, now
    and then back."""
    rng = random.Random(seed)
    tcp = [TcpFlow((f"10.0.0.{i + 1}", 50000 + i), ("10.0.0.9", 1883)) for i in range(flows)]
    packets = [flow.ip(seg) for flow in tcp for seg in flow.open()]
    for i, size in enumerate(sizes):
        flow = tcp[i % flows]
        side = i // flows % 2
        segs = flow.send(side, rng.randbytes(size), sizes=[size]) if size else [flow.ack(side)]
        packets += [flow.ip(seg) for seg in segs]
        if i % 4 == 2:
            udp = bytearray(packets[-1])
            udp[9] = 17  # IPv4 protocol: UDP
            packets.append(bytes(udp))
    return [Frame(T0 + i * 1_000_003_000 - (500_000_000 if i % 5 == 3 else 0), data,
                  interface=i % interfaces) for i, data in enumerate(packets)]


def outcome(raw: bytes, split: int, piece_bytes: int, compiled: bool) -> list[Any]:
    """Every range's sections and facts (or its error), and which loop read it."""
    out: list[Any] = []
    for start, end in plan_ranges(len(raw), split):
        result = range_sections(io.BytesIO(raw), start, end, NAME, piece_bytes, compiled)
        try:
            sections = list(result)
        except pcap.CaptureFormatError as exc:
            out.append(("error", str(exc), exc.offset))
            continue
        read = result.read
        assert read is not None
        out.append((sections, result.last_ts, result.last_parsed, result.problem,
                    read.count, read.next, read.sync, read.late_head_block,
                    result.compiled))
    return out


def same(raw: bytes, split: int, piece_bytes: int = 32 << 20) -> list[Any]:
    """The compiled loop's outcome, checked equal to the pure loop's (all but which
    loop read each range); the pure loop never says compiled."""
    fast = outcome(raw, split, piece_bytes, True)
    pure = outcome(raw, split, piece_bytes, False)
    assert [r[:-1] if r[0] != "error" else r for r in fast] == [
        r[:-1] if r[0] != "error" else r for r in pure]
    assert not any(r[-1] for r in pure if r[0] != "error")
    return fast


pytestmark = pytest.mark.c_extension  # the compiled loop against the pure one


@pytest.mark.parametrize("fmt, byteorder, nanoseconds, simple", FORMATS)
@pytest.mark.parametrize("split", [97, 5000, 1 << 20])
def test_compiled_and_pure_sections_are_the_same(fmt: str, byteorder: str,
                                                 nanoseconds: bool, simple: bool,
                                                 split: int) -> None:
    from mqttwire.capture import sections_c  # noqa: F401  # fails loudly where not built

    raw = write(fmt, flows_frames([0, 60, 1400, 3, 9000, 200, 17, 1460] * 3,
                                  interfaces=1 if simple else 3),
                byteorder, nanoseconds, simple)
    ranges = same(raw, split)
    read = [r for r in ranges if r[0] != "error" and r[0]]
    assert read, "no range held a section"
    # The compiled loop read every range with frames, but Simple Packet Blocks (not its
    # case): those went to the pure loop.
    assert all(r[-1] is not simple for r in read)


@pytest.mark.parametrize("piece_bytes", [1, 500, 4000])
def test_pieces_are_cut_alike(piece_bytes: int) -> None:
    """A connection's frames of a range are cut at ``piece_bytes`` (1: a frame each)."""
    raw = write("pcapng", flows_frames([1400, 60, 3000, 0, 17] * 6))
    ranges = same(raw, 30000, piece_bytes)
    pieces = [piece for r in ranges for (_key, piece, _numbers, _section) in r[0]]
    frames = sum(len(numbers) // 8 for r in ranges for (_k, _p, numbers, _s) in r[0])
    assert len(pieces) == frames if piece_bytes == 1 else 0 < max(pieces) < frames


def test_the_sections_hold_each_connection_s_frames() -> None:
    """Read back, the sections of all ranges are the file's TCP frames, by connection,
    with their times and data, numbered within their range."""
    frames = flows_frames([60, 1400, 0, 300] * 4, interfaces=1)
    raw = write("pcap", frames, nanoseconds=True)
    whole = list(pcap.iter_frames(io.BytesIO(raw), NAME))
    got: dict[bytes, list[tuple[int, int, bytes]]] = {}
    done = 0
    for start, end in plan_ranges(len(raw), 2000):
        result = range_sections(io.BytesIO(raw), start, end, NAME)
        for key, _piece, numbers, section in result:
            from array import array

            back = list(pcap.iter_frames(io.BytesIO(section), "section"))
            got.setdefault(key, []).extend(
                (done + n, f.ts, bytes(f.data)) for n, f in zip(array("q", numbers), back))
        assert result.compiled and result.read is not None
        done += result.read.count
    want: dict[bytes, list[tuple[int, int, bytes]]] = {}
    from mqttwire.capture.link import parse_frame

    for f in whole:
        seg = parse_frame(f.linktype, f.data)
        if seg is not None:
            want.setdefault(flow_key(seg), []).append((f.number, f.ts, bytes(f.data)))
    assert got == want and len(want) == 3


def test_a_truncated_file_reads_as_the_pure_loop_reads_it() -> None:
    """Cut inside its last records: the same sections, facts or errors as the pure
    loop's, and the chain check fails on the compiled loop's ranges."""
    raw = write("pcap", flows_frames([1400, 60] * 5))
    for cut in (5, 20, 700):
        same(raw[:-cut], 1000)
        reads = []
        for start, end in plan_ranges(len(raw) - cut, 1000):
            result = range_sections(io.BytesIO(raw[:-cut]), start, end, NAME)
            try:
                list(result)
            except pcap.CaptureFormatError:
                break
            reads.append(result.read)
        else:
            assert chain_problem(reads) is not None


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_hypothesis_random_frames_splits_and_pieces(data: st.DataObject) -> None:
    fmt, byteorder, nanoseconds, simple = data.draw(st.sampled_from(FORMATS))
    sizes = data.draw(st.lists(st.one_of(st.integers(0, 300), st.integers(0, 6000)),
                               max_size=14))
    frames = flows_frames(sizes, data.draw(st.integers(1, 4)), 1 if simple else 3,
                          data.draw(st.integers(0, 1000)))
    raw = write(fmt, frames, byteorder, nanoseconds, simple)
    split = data.draw(st.integers(max(1, len(raw) // 100), len(raw) + 50))
    same(raw, split, data.draw(st.sampled_from([1, 700, 32 << 20])))
