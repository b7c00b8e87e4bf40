"""mqttwire against the other Python MQTT codecs, on the same packets in one run.

Run (from the repository root; the peers are in benchmarks/requirements-peers.txt):

    python -m pytest benchmarks/bench_peers.py --benchmark-only --benchmark-group-by=group \
        --benchmark-min-time=0.002 --benchmark-max-time=0.4 \
        --benchmark-json=benchmarks/peers.json
then:
    python benchmarks/chart.py benchmarks/peers.json   # table (stdout) and benchmarks/peers.png

Decode and encode are timed in batches of PER_CALL operations per timed call, as in
bench_codec.py: pytest-benchmark calls the timed function with ``*args, **kwargs``, which
costs about 65 ns, a third of a 200 ns operation, and the same for every codec, so unbatched
ratios would be pulled towards 1.  chart.py divides each median by ``extra_info["ops"]``.

Each peer is checked to decode (or encode) the packet correctly before it is timed; a peer
that cannot handle a packet type or protocol level is skipped as "n/a", one that gets it
wrong as "incorrect".  A peer that is not installed is skipped, so this file also runs in
an environment without any of them (and without the built extension).
"""

from __future__ import annotations

import ctypes
import resource
import tracemalloc
from typing import Any

import pytest
from peers import OPS, PEERS, PER_CALL, STREAM_OP, Op, Peer, batched, check_decode, check_encode

from mqttwire import _pure

STREAM_PACKETS = 10_000
CHUNK = 64 * 1024


def _peer_or_skip(peer: Peer) -> None:
    """Skip when the peer (or the extension, before ``setup.py build_ext``) cannot import."""
    if not peer.available():
        pytest.skip(f"{peer.name} is not installed ({peer.module} does not import)")


def _tag(benchmark: Any, group: str, peer: Peer, op: str, direction: str) -> None:
    benchmark.group = group
    benchmark.extra_info.update(
        codec=peer.name,
        op=op,
        direction=direction,
        pure_python=peer.pure_python,
        version=peer.version(),
    )


def _ids(p: Peer) -> str:
    return p.name.split(" (")[0].replace(" ", "-")


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.id.replace(" ", "-"))
@pytest.mark.parametrize("peer", PEERS, ids=_ids)
def test_decode(benchmark: Any, peer: Peer, op: Op) -> None:
    _peer_or_skip(peer)
    decode = peer.decoder(op) if op.level in peer.levels else None
    if decode is None:
        pytest.skip(f"n/a: {peer.name} does not decode {op.id}")
    wrong = check_decode(peer, op)
    if wrong:
        pytest.skip(f"incorrect: {peer.name} on {op.id}: {wrong}")
    _tag(benchmark, f"decode {op.id}", peer, op.id, "decode")
    benchmark.extra_info["ops"] = PER_CALL
    benchmark(batched(decode, op.wire()))


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.id.replace(" ", "-"))
@pytest.mark.parametrize("peer", PEERS, ids=_ids)
def test_decode_read(benchmark: Any, peer: Peer, op: Op) -> None:
    """Decode, then read every field the correctness check compares (``peer.view``): what a
    consumer pays, whether a codec builds its field objects when decoding (mqttwire before
    issue 16, the pure-Python peers) or on first access (mqtt5's getters, mqttwire's MQTT
    5.0 properties).  Timing ``decode`` alone compares different work."""
    _peer_or_skip(peer)
    read = peer.reader(op)
    if read is None:
        pytest.skip(f"n/a: {peer.name} does not decode {op.id}")
    wrong = check_decode(peer, op)
    if wrong:
        pytest.skip(f"incorrect: {peer.name} on {op.id}: {wrong}")
    _tag(benchmark, f"decode and read {op.id}", peer, op.id, "decode and read")
    benchmark.extra_info["ops"] = PER_CALL
    benchmark(batched(read, op.wire()))


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.id.replace(" ", "-"))
@pytest.mark.parametrize("peer", PEERS, ids=_ids)
def test_encode(benchmark: Any, peer: Peer, op: Op) -> None:
    _peer_or_skip(peer)
    enc = peer.encoder(op) if op.level in peer.levels else None
    if enc is None:
        pytest.skip(f"n/a: {peer.name} does not encode {op.id}")
    wrong = check_encode(peer, op)
    if wrong:
        pytest.skip(f"incorrect: {peer.name} on {op.id}: {wrong}")
    _tag(benchmark, f"encode {op.id}", peer, op.id, "encode")
    benchmark.extra_info["ops"] = PER_CALL
    fn, native = enc
    benchmark(batched(fn, native))


def test_call_floor(benchmark: Any) -> None:
    """The least any operation above can cost here: an adapter lambda, as every codec's
    is, calling a C method that does no work (``int.bit_length`` on a small int: no
    arguments, returns a cached int), PER_CALL times per timed call.  An encoder that
    must be twice as fast as mqtt5's PUBACK encode has to fit under half its time."""
    benchmark.group = "call floor"
    benchmark.extra_info.update(codec="call floor", op="call floor", direction="floor",
                                pure_python=False, version="-", ops=PER_CALL)
    benchmark(batched(lambda n: n.bit_length(), 5))


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("level", [4, 5], ids=["v4", "v5"])
@pytest.mark.parametrize("peer", PEERS, ids=_ids)
def test_stream(benchmark: Any, peer: Peer, level: int) -> None:
    """10,000 small QoS 0 PUBLISH packets (190 bytes short of 200 KB) in 64 KiB chunks."""
    _peer_or_skip(peer)
    run = peer.streamer(level) if level in peer.levels else None
    if run is None:
        pytest.skip(f"n/a: {peer.name} has no stream path at v{level}")
    chunks = _chunks(STREAM_OP[level].wire() * STREAM_PACKETS, CHUNK)
    op = f"stream {STREAM_PACKETS:,} small PUBLISH v{level}"
    if run(chunks) != STREAM_PACKETS:
        pytest.skip(f"incorrect: {peer.name} did not return {STREAM_PACKETS} packets")
    _tag(benchmark, op, peer, op, "stream")
    benchmark.extra_info["packets"] = STREAM_PACKETS
    assert benchmark(run, chunks) == STREAM_PACKETS


# --- StreamDecoder is linear in the input, however it is chunked ------------------------

MQTTWIRE = [p for p in PEERS if p.module.startswith("mqttwire")]
CHUNK_SIZES = [1, 64, 4096, 65536]


@pytest.fixture(scope="module", autouse=True)
def _steady_allocator() -> None:
    """Serve multi-MiB blocks from glibc's heap, whatever the process freed before.

    By default glibc gives a block above its mmap threshold fresh mmapped pages (a page
    fault per 4 KiB touched) and raises that threshold only when such a block is freed, so
    whether a 4 MiB buffer costs ~1,000 page faults depends on the session's history, not
    on the decoder: in one run the extension's large-packet rows paid them and the fallback's
    did not, and looked 4x slower.  A fixed mmap threshold of 64 MiB (which turns off the
    adjustment) and a trim threshold of 128 MiB (so that the heap's top is not handed back
    to the kernel after each packet, to be faulted in again) remove that.  Not glibc (no
    libc.so.6): nothing is changed."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
    libc.mallopt(m_mmap_threshold, 64 << 20)
    libc.mallopt(m_trim_threshold, 128 << 20)


def _timed_rounds(benchmark: Any, run: Any, chunks: list[bytes], rounds: int = 3) -> Any:
    """Three rounds of ``run(chunks)``, recording the process's minor page faults per
    round, which show whether the allocator (not the decoder) is part of a figure."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    result = benchmark.pedantic(run, (chunks,), rounds=rounds, iterations=1)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    benchmark.extra_info["minor_faults_per_round"] = round(faults / rounds)
    return result


@pytest.mark.parametrize("chunk", CHUNK_SIZES)
@pytest.mark.parametrize("packets", [2_500, 10_000])
@pytest.mark.parametrize("peer", MQTTWIRE, ids=_ids)
def test_chunking_many_small(benchmark: Any, peer: Peer, packets: int, chunk: int) -> None:
    """Many small packets: time per byte must not grow with the input or shrink chunks."""
    _peer_or_skip(peer)
    wire = STREAM_OP[5].wire() * packets
    chunks = _chunks(wire, chunk)
    run = peer.streamer(5)
    assert run is not None
    _tag(benchmark, f"chunking: small PUBLISH x{packets:,}", peer, f"{chunk} B chunks", "chunking")
    benchmark.extra_info.update(bytes=len(wire), chunk=chunk, packets=packets)
    assert _timed_rounds(benchmark, run, chunks) == packets


@pytest.mark.parametrize("chunk", [64, 4096, 65536])
@pytest.mark.parametrize(
    "payload", [256 * 1024, 1024 * 1024, 4096 * 1024], ids=["256KiB", "1MiB", "4MiB"]
)
@pytest.mark.parametrize("peer", MQTTWIRE, ids=_ids)
def test_chunking_one_large(benchmark: Any, peer: Peer, payload: int, chunk: int) -> None:
    """One large PUBLISH split in many chunks: a decoder that re-joins or re-scans its buffer
    on every chunk would be quadratic here."""
    _peer_or_skip(peer)
    wire = _pure.Publish("big/blob", b"\xa5" * payload, qos=1, packet_id=1).encode(5)
    chunks = _chunks(wire, chunk)
    run = peer.streamer(5)
    assert run is not None
    _tag(
        benchmark,
        f"chunking: one {payload // 1024} KiB PUBLISH",
        peer,
        f"{chunk} B chunks",
        "chunking",
    )
    benchmark.extra_info.update(bytes=len(wire), chunk=chunk, packets=1)
    assert _timed_rounds(benchmark, run, chunks) == 1


# --- Zero copy: a 1 MiB PUBLISH costs at most one copy of its payload ---------------------

BIG = Op("publish-qos0-small", "publish", 5)  # picks each peer's v5 QoS 0 PUBLISH decoder
MIB = 1024 * 1024


def _big_wire() -> bytes:
    return _pure.Publish("fleet/truck/42/telemetry", b"x" * MIB).encode(5)


@pytest.mark.parametrize("peer", PEERS, ids=_ids)
def test_decode_1mib_memory(benchmark: Any, peer: Peer) -> None:
    """Time the decode of a PUBLISH with a 1 MiB payload and record the tracemalloc peak of
    one decode (Python-heap allocations only: a Rust or C peer's own buffers are invisible
    to tracemalloc; only the Python objects it returns are counted)."""
    _peer_or_skip(peer)
    decode = peer.decoder(BIG)
    if decode is None:
        pytest.skip(f"n/a: {peer.name} does not decode v5 PUBLISH")
    wire = _big_wire()
    result = decode(wire)
    assert len(peer.view("publish", result)[1]) == MIB
    del result
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = decode(wire)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    del result
    _tag(benchmark, "decode publish-1MiB v5", peer, "publish-1MiB v5", "decode")
    benchmark.extra_info.update(tracemalloc_peak=peak, payload_copies=round(peak / MIB, 2))
    if peer.module.startswith("mqttwire"):
        # The target of the issue: no more than one copy of the payload (plus small change).
        assert peak < MIB + 64 * 1024, f"{peer.name}: peak {peak} bytes for a 1 MiB payload"
    benchmark(decode, wire)
