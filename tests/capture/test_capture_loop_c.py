"""The compiled capture loop (mqttwire.capture.loop_c) against the pure-Python reference.

conftest.py already checks, for every read_capture call of this directory, that the
compiled loop ran exactly when the Cython codec was given and that its records equal the
pure loop's.  Here: that choice itself, captures large enough to cross the reader's
chunks, hypothesis-made captures with everything the hand-over must get right
(reordering, retransmissions, losses, snapshot cuts, resets, several connections and
interfaces, every link type), and the pure-Python switch.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from capture_helpers import T0, conversation, encode_all, segments_for, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop_checks import (
    assert_same_records,
    check_columnar,
    check_decoded,
    columnar_packets_table,
    cython_codec,
    fast_expected,
    reference_records,
)

from mqttwire.capture import MqttStreams, loop_c, read_capture
from mqttwire.capture.link import (
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)
from mqttwire.capture.pcap import CHUNK
from mqttwire.capture.writers import Frame, Segment, TcpFlow, ipv4_fragments, ipv4_packet
from mqttwire.spark.connection_shares import Share

REPO = Path(__file__).resolve().parents[2]


def _compare(raw: bytes, **kw: Any) -> list[Any]:
    """The compiled loop's records for ``raw`` (Cython codec), checked against the pure
    loop's; returns them."""
    args = dict(name="t.pcapng", ports=[1883], payload_limit=None, codec=cython_codec(),
                version=None, max_pending=1 << 20, stream_ends=False)
    args.update(kw)
    handler = _fast_handler(**args)
    fast = list(loop_c.FastReader(io.BytesIO(raw), handler))
    reference = reference_records(raw, **args)
    assert_same_records(fast, reference)
    # The same reading into Arrow columns (FastReader.fill), without Records.
    handler = _fast_handler(**args)
    check_columnar(lambda: columnar_packets_table(loop_c.FastReader(io.BytesIO(raw), handler),
                                                  handler), reference)
    return fast


def _fast_handler(name: str, ports: list[int], payload_limit: int | None, codec: ModuleType,
                  version: int | None, max_pending: int, stream_ends: bool,
                  keep: Callable[[int], bool] | None = None,
                  unconnected: bool = True) -> MqttStreams:
    return MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                       version=version, max_pending=max_pending, stream_ends=stream_ends,
                       keep=keep, unconnected=unconnected)


def _kept(records: list[Any], keep: Callable[[int], bool], unconnected: bool = True
          ) -> list[Any]:
    """The records of a whole read that a read keeping the connections ``keep`` keeps:
    those of its connections, and, if ``unconnected``, those of no connection
    (fragments, a capture error)."""
    return [r for r in records
            if (unconnected if r.connection_id is None
                else keep(int(r.connection_id.rsplit("#", 1)[1])))]


def test_loop_choice(codec: ModuleType, _both_capture_loops: list[bool]) -> None:
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 1883))
    sent = encode_all(conversation(codec, 4), 4)
    raw = write(flow_frames(flow, flow.open() + segments_for(flow, sent) + flow.close()))
    records = list(read_capture(io.BytesIO(raw), codec=codec))
    assert len(records) == len(sent)
    assert _both_capture_loops == [fast_expected(codec)]
    if codec.__name__ == "mqttwire._speedups":
        assert loop_c is not None  # built and loaded: a missing module is a failure


def flow_frames(flow: TcpFlow, segs: list[Segment], start: int = 0, **kw: Any) -> list[Frame]:
    return [Frame(T0 + (start + i) * 1000, flow.ip(s), **kw) for i, s in enumerate(segs)]


@pytest.mark.c_extension  # the compiled loop itself: not in a pure-Python pass
@pytest.mark.slow  # over ten seconds each
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_records_across_chunks(fmt: str) -> None:
    """Over 2 MiB of small PUBLISHes in two connections: frames straddle the reader's
    1 MiB chunks, and the compiled loop matches the pure one frame for frame."""
    flows = [TcpFlow((f"10.0.0.{i}", 40000 + i), ("10.0.0.9", 1883), isn_client=i << 30)
             for i in (1, 2)]
    frames: list[Frame] = []
    for n, flow in enumerate(flows):
        mw = cython_codec()
        body = [(0, mw.Connect(f"c{n}", protocol_version=4 + n))]
        body += [(0, mw.Publish(f"t/{i % 7}", bytes(i % 50), qos=i % 2,
                                packet_id=i if i % 2 else None)) for i in range(1, 30000)]
        sent = encode_all(body, 4 + n)
        segs = flow.open() + segments_for(flow, sent, sizes=[333, 1000, 77]) + flow.close()
        frames += flow_frames(flow, segs, start=len(frames))
    raw = write(frames, fmt)
    assert len(raw) > 2 * CHUNK
    records = _compare(raw)
    assert sum(r.packet_type == "PUBLISH" for r in records) == 2 * 29999


LINKS = [LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, LINKTYPE_NULL,
         LINKTYPE_LOOP, LINKTYPE_RAW]


@st.composite
def captures(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    """A capture of one to three MQTT connections (and some other traffic), cut into
    segments of random sizes, then reordered, repeated, dropped and cut short at random,
    in a random file flavour and link type."""
    mw = cython_codec()
    v6 = draw(st.booleans())
    plans: list[list[tuple[TcpFlow, Segment]]] = []
    for n in range(draw(st.integers(1, 3))):
        version = draw(st.sampled_from([3, 4, 5]))
        host = f"fd00::{n + 1}" if v6 else f"10.0.0.{n + 1}"
        server = ("fd00::99" if v6 else "10.0.0.99",
                  draw(st.sampled_from([1883, 1883, 8883])))
        flow = TcpFlow((host, 40000 + n), server,
                       isn_client=draw(st.sampled_from([0, 0xFFFFFF00, 12345])),
                       isn_server=draw(st.sampled_from([7, 0xFFFFFFF0])))
        sent = encode_all(conversation(mw, version, f"c{n}"), version)
        sizes = draw(st.lists(st.integers(1, 400), min_size=1, max_size=4))
        segs = segments_for(flow, sent, sizes=sizes)
        if draw(st.booleans()):
            segs = flow.open() + segs
        ending = draw(st.sampled_from(["fin", "rst", "none"]))
        if ending == "fin":
            segs += flow.close(first=draw(st.integers(0, 1)))
        elif ending == "rst":
            segs.append(flow.reset(draw(st.integers(0, 1))))
        # Disorder: swap neighbours, repeat, drop.
        for _ in range(draw(st.integers(0, 6))):
            i = draw(st.integers(0, len(segs) - 1))
            action = draw(st.sampled_from(["swap", "repeat", "drop"]))
            if action == "swap" and i + 1 < len(segs):
                segs[i], segs[i + 1] = segs[i + 1], segs[i]
            elif action == "repeat":
                segs.insert(i, segs[i])
            elif action == "drop" and len(segs) > 1:
                del segs[i]
        plans.append([(flow, s) for s in segs])
    linktype = draw(st.sampled_from(LINKS + ([LINKTYPE_IPV6] if v6 else [LINKTYPE_IPV4])))
    vlan = tuple(draw(st.lists(st.integers(1, 4000), max_size=2))) \
        if linktype == LINKTYPE_ETHERNET else ()
    frames: list[Frame] = []
    while any(plans):
        plan = draw(st.sampled_from([p for p in plans if p]))
        flow, seg = plan.pop(0)
        snaplen = None
        if draw(st.integers(0, 30)) == 0:  # now and then a frame cut by the snapshot length
            snaplen = draw(st.integers(20, 120))
        frames.append(Frame(T0 + len(frames) * 1001, flow.ip(seg), vlan=vlan,
                            snaplen=snaplen, interface=draw(st.integers(0, 1))))
    if not v6 and linktype != LINKTYPE_IPV6 and draw(st.booleans()):
        src, dst = bytes([10, 9, 9, 1]), bytes([10, 9, 9, 2])
        frames.insert(draw(st.integers(0, len(frames))),
                      Frame(T0, ipv4_fragments(src, dst, bytes(60), 16, ident=5)[0], vlan=vlan))
        frames.insert(draw(st.integers(0, len(frames))),
                      Frame(T0, ipv4_packet(src, dst, bytes(12), proto=17), vlan=vlan))
    fmt = draw(st.sampled_from(["pcap", "pcapng"]))
    byteorder = draw(st.sampled_from(["<", ">"]))
    if fmt == "pcap":
        for f in frames:
            f.interface = 0
        raw = write(frames, "pcap", linktype=linktype, byteorder=byteorder,
                    nanoseconds=draw(st.booleans()))
    else:
        raw = write(frames, linktypes=[linktype, linktype], byteorder=byteorder,
                    tsresol=[draw(st.sampled_from([6, 9, 3])), 9])
    if draw(st.integers(0, 9)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]  # a truncated file
    options = dict(
        payload_limit=draw(st.sampled_from([None, 0, 3])),
        version=draw(st.sampled_from([None, 4, 5])),
        stream_ends=draw(st.booleans()),
        max_pending=draw(st.sampled_from([1 << 20, 100])),
    )
    return raw, options


@pytest.mark.c_extension
@pytest.mark.slow  # about 50 seconds
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
@given(capture=captures())
def test_hypothesis_captures_differential(capture: tuple[bytes, dict[str, Any]]) -> None:
    raw, options = capture
    _compare(raw, **options)
    # A decoding task's five tables through the columnar path, against the reference.
    check_decoded(raw, None, "t.pcapng", [1883], options["payload_limit"],
                  options["version"])


@pytest.mark.c_extension
@pytest.mark.slow  # about 30 seconds
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
@given(capture=captures(), share=st.sampled_from([(0, 2), (1, 2), (1, 3), (2, 3)]),
       unconnected=st.booleans())
def test_hypothesis_captures_keeping_some_connections(capture: tuple[bytes, dict[str, Any]],
                                                      share: tuple[int, int],
                                                      unconnected: bool) -> None:
    """A reader that keeps a share of the connections (MqttStreams' ``keep``, as a
    pipeline task does) makes, in both loops, exactly the whole read's records of those
    connections: the others are ignored as they open, not decoded and filtered; and
    the records of no connection only if asked (``unconnected``)."""
    raw, options = capture
    index, count = share

    def keep(n: int) -> bool:
        return (n - 1) % count == index

    assert_same_records(_compare(raw, keep=keep, unconnected=unconnected, **options),
                        _kept(_compare(raw, **options), keep, unconnected))
    if unconnected == (index == 0):  # as a pipeline task keeps them
        check_decoded(raw, None, "t.pcapng", [1883], options["payload_limit"],
                      options["version"], Share(index, count))


@pytest.mark.c_extension
@pytest.mark.parametrize("end", ["rst", "fin"])
def test_a_4_tuple_reused_after_an_ignored_connection(end: str) -> None:
    """An ignored connection ends and a new one opens on the same 4-tuple: the compiled
    loop, which remembers the streams it has seen, must not take the new connection's
    segments for the ignored one's (tcp.py marks a forgotten stream ended)."""
    mw = cython_codec()
    client, server = ("10.0.0.1", 40000), ("10.0.0.2", 1883)
    first = TcpFlow(client, server, isn_client=1000, isn_server=5000)
    second = TcpFlow(client, server, isn_client=900_000, isn_server=700_000)
    segs = first.open() + segments_for(first, encode_all(conversation(mw, 4, "a"), 4))
    segs += [first.reset(0)] if end == "rst" else first.close()
    frames = flow_frames(first, segs)
    segs2 = (second.open() + segments_for(second, encode_all(conversation(mw, 4, "b"), 4))
             + second.close())
    frames += flow_frames(second, segs2, start=len(frames))
    raw = write(frames)

    def keep(n: int) -> bool:
        return n == 2

    kept = _compare(raw, keep=keep, stream_ends=True)
    assert kept and {r.connection_id for r in kept} == {"t.pcapng#2"}
    assert_same_records(kept, _kept(_compare(raw, stream_ends=True), keep))


def test_pure_python_switch_leaves_the_compiled_loop_out() -> None:
    code = ("import mqttwire, mqttwire.capture as c; "
            "assert mqttwire.IMPLEMENTATION == 'python' and c.loop_c is None; print('ok')")
    env = dict(os.environ, MQTTWIRE_PURE_PYTHON="1", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
