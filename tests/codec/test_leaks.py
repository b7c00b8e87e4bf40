"""Reference leaks and memory growth: decoding and encoding every vector, and refusing
malformed input, over and over, leaves memory flat.

Each implementation is measured in a fresh subprocess (this file run as a script), so
nothing else the suite does moves the numbers:

1. RSS (on Linux): after a warm-up, the workload runs ROUNDS more times; the resident
   set may not grow by more than RSS_BOUND.  Leaking one 8-byte bytes object (41 bytes
   with its header) per decode grows it by about 5.6 MB here.
2. tracemalloc: after a warm-up, the workload again TRACED_ROUNDS times; the memory
   traced (every object and PyMem allocation, in either implementation) may not grow by
   more than TRACED_BOUND.  The same leak grows it by about 1.4 MB.

The workload (``workload``) covers the success paths (decode, decode_from, encode,
encode_into, StreamDecoder, topic validation) and the error paths (truncated, reserved,
trailing-garbage and oversized input, an invalid packet refused by encode, a failed
StreamDecoder fed again), and counts the errors it caught, so the test knows the error
paths really ran.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import pickle
import subprocess
import sys
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "valid.json"

WARMUP_ROUNDS = 30
ROUNDS = 300
RSS_BOUND = 2 << 20  # 2 MiB
TRACED_ROUNDS = 30
TRACED_BOUND = 64 << 10  # 64 KiB
# Under AddressSanitizer (scripts/sanitize.sh) freed memory waits in ASan's quarantine, so
# RSS grows by design there; tracemalloc still checks.
UNDER_ASAN = "libclang_rt.asan" in os.environ.get("LD_PRELOAD", "")


def load_vectors() -> list[tuple[bytes, int]]:
    corpus = json.loads(VECTORS.read_text())
    return [(bytes.fromhex(e["hex"]), e["version"]) for _, e in sorted(corpus.items())]


def malformed(vectors: list[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
    """Bad inputs for decode(): each vector cut short by a byte (IncompletePacket), with
    a byte of garbage after it (MalformedPacket), and with first byte 0x00 (packet type
    0 is reserved, MalformedPacket)."""
    out = []
    for data, level in vectors:
        out += [(data[:-1], level), (data + b"\x00", level), (b"\x00" + data[1:], level)]
    return out


def workload(m: ModuleType, vectors: list[tuple[bytes, int]],
             bad: list[tuple[bytes, int]]) -> int:
    """One round over every vector and every bad input; returns the errors caught."""
    errors = 0
    buf = bytearray()
    for data, level in vectors:
        packet = m.decode(data, version=level)
        m.decode_from(memoryview(data), 0, version=level)  # dropped, properties unread
        m.encode(packet, version=level)  # a decoded property block, copied
        del buf[:]
        packet.encode_into(buf, level)
        m.StreamDecoder(level).feed(bytearray(data))
        if level == 5 and type(packet).__name__ == "Publish" and packet.topic:
            # Forwarded from the block, the properties unread (issue 16).
            m.PreparedPublish(m.decode(data, version=5)).encode(
                5, subscription_identifiers=[1], message_expiry_interval=5)
        props = getattr(packet, "properties", None)
        if props is not None:
            pickle.loads(pickle.dumps(props))  # builds the values of a decoded block
        repr(packet)
    for data, level in bad:
        try:
            m.decode(data, version=level)
        except ValueError:
            errors += 1
    for data, level in vectors[:20]:
        dec = m.StreamDecoder(level, max_packet_size=2)
        for _ in range(2):  # the error, then the same error again from the failed decoder
            try:
                dec.feed(data)
            except ValueError:
                errors += 1
    for name in ("a/+/b", "a\x00b", "#/a"):
        try:
            m.Publish(name, b"x").encode(5)  # wildcard or NUL in a topic name
        except ValueError:
            errors += 1
        try:
            m.validate_topic_name(name)
        except ValueError:
            errors += 1
    return errors


def rss() -> int:
    """The resident set size now, in bytes, after a garbage collection; 0 where it is not
    measured (it is read from Linux's /proc/self/statm; elsewhere tracemalloc alone
    checks)."""
    gc.collect()
    if not os.path.exists("/proc/self/statm"):
        return 0
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(module_name: str) -> dict[str, Any]:
    m = importlib.import_module(module_name)
    vectors = load_vectors()
    bad = malformed(vectors)
    for _ in range(WARMUP_ROUNDS):
        errors = workload(m, vectors, bad)
    rss_before = rss()
    for _ in range(ROUNDS):
        assert workload(m, vectors, bad) == errors
    rss_after = rss()
    tracemalloc.start()
    for _ in range(3):
        workload(m, vectors, bad)
    # A failed StreamDecoder keeps its error, whose traceback refers back to the decoder:
    # a reference cycle, freed by the cycle collector, not by reference counting.
    gc.collect()
    traced_before = tracemalloc.get_traced_memory()[0]
    for _ in range(TRACED_ROUNDS):
        workload(m, vectors, bad)
    gc.collect()
    traced_after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        "errors_per_round": errors,
        "rss_growth": rss_after - rss_before,
        "traced_growth": traced_after - traced_before,
    }


def test_memory_stays_flat(codec: ModuleType) -> None:
    """Decode/encode of every vector and every error path, ROUNDS times: RSS and traced
    memory stay flat (see the module docstring for the bounds)."""
    import mqttwire

    root = str(Path(mqttwire.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, __file__, codec.__name__], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    vectors = load_vectors()
    # Every bad decode input; 2 x 17 stream failures (the first 20 vectors, less the
    # three 2-byte ones that max_packet_size=2 admits); 3 encodes, 3 validations refused.
    short = sum(len(data) <= 2 for data, _ in vectors[:20])
    assert result["errors_per_round"] == 3 * len(vectors) + 2 * (20 - short) + 6, result
    assert UNDER_ASAN or result["rss_growth"] < RSS_BOUND, result
    assert result["traced_growth"] < TRACED_BOUND, result


def test_decoded_properties_keep_only_their_block(codec: ModuleType) -> None:
    """A decoded property block keeps nothing else alive (issue 16): not the input buffer
    (it is freed when the caller drops it), and the Properties refers to nothing but its
    values and one copy of the block, before and after its values are built."""
    import weakref

    class Buffer(bytearray):  # weakly referable
        pass

    # 30 19 | 0003 "a/b" | 12 | 02 0000012c | 08 0003 "r/1" | 26 0001 6b 0001 76 | "x" ...
    # (Message Expiry 300, Response Topic "r/1", User Property k=v), then 1 KiB of another
    # packet's bytes in the same receive buffer.
    wire = bytes.fromhex("3019 0003612f62 12 020000012c 080003722f31 2600016b000176 78")
    buf = Buffer(wire + b"\xee" * 1024)
    ref = weakref.ref(buf)
    packet, _ = codec.decode_from(memoryview(buf), 0, version=5)
    props = packet.properties
    block = bytes.fromhex("020000012c 080003722f31 2600016b000176")
    for built in (False, True):
        if built:
            assert props.response_topic == "r/1"
        referents = gc.get_referents(props)
        assert not any(r is buf or isinstance(r, memoryview) for r in referents)
        # The block in a tuple (the fallback's (block, kind, ...)) or bare (the
        # extension's, when ``properties`` built the values).
        held = [r[0] if isinstance(r, tuple) else r for r in referents
                if isinstance(r, (tuple, bytes))]
        assert held and held[0] == block and type(held[0]) is bytes
        # The block (or its tuple), the class, and the values, each in its slot; None in
        # the slot of every absent property.
        values = (300, "r/1", [("k", "v")])
        assert all(type(r) in (tuple, type, bytes) or r is None or r in values
                   for r in referents), referents
    del buf
    gc.collect()
    assert ref() is None
    assert packet.encode(5) == wire


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1])))
