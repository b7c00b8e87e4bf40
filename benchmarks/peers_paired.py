"""Issue 44's verdict in time: the extension against mqtt5, timed in alternating pairs.

    PYTHONPATH=$PWD python benchmarks/peers_paired.py [--pairs 400] [--json out.json]
    PYTHONPATH=$PWD python benchmarks/peers_paired.py --pure [--pairs 60] [--json out.json]
    python benchmarks/peers_paired.py --across A.json B.json C.json   # a column per run

With ``--pure``: the pure twin (mqttwire._pure) against each pure-Python peer (zmqtt,
paho-mqtt's internals, gmqtt, amqtt) on every row that peer runs correctly, v4 and v5; the
need is 1.0x (faster), and the call floor does not enter it (these operations take
microseconds).

bench_peers.py (pytest-benchmark) times every round of one codec, then every round of the
next, a second or more later.  On a shared host whose speed drifts by 2x within minutes
that turns the drift into the ratio: the same row of the same code measured 0.70x in one
run and 1.24x in the next (benchmarks/peers.md, "The paired verdict").  Here the two codecs
and the call floor take turns in short blocks, a few hundred microseconds each, so that
each pair of blocks runs at (nearly) one machine speed; the verdict of a row is the
median of its per-pair ratios, mqtt5's time over the extension's, with the quartiles as
its spread.

The work is bench_peers.py's: the same adapters and packets (``peers.py``), a timed call
of PER_CALL operations (``peers.batched``) for decode, decode and read and encode, one
call per 10,000-packet stream.  A block is one untimed call (the caches warm for that
codec) and REPEATS timed calls, of which the fastest counts (the one least
disturbed by the host).  The order of the three in a pair rotates, so that none always
runs first or after the same one.  The call floor is bench_peers.test_call_floor's: an
adapter lambda calling a C method that does no work.

A row whose two times are both within 1.2x of the floor needs 1.0x, any other 1.2x
(chart.py's NEED, NEAR_FLOOR): here both are judged per pair, the larger of the two times
over the floor's.  The control row times the extension's small-PUBLISH decode against
itself through two separate adapters: its median should be 1.00 and its quartiles show
what the method cannot tell apart.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, for peers.py

import peers
from peers import OPS, PER_CALL, STREAM_OP, batched, check_decode, check_encode

STREAM_PACKETS, CHUNK = 10_000, 64 * 1024  # as bench_peers
REPEATS = 3  # timed calls per block, after one untimed
NEED, NEED_AT_FLOOR, NEAR_FLOOR = 1.2, 1.0, 1.2  # as chart.py
NEED_PURE = 1.0  # the pure twin beats every pure-Python peer

CYTHON = peers.MqttWire("mqttwire._speedups", "mqttwire cython", False)
MQTT5 = peers.Mqtt5()
PURE = peers.MqttWire("mqttwire._pure", "mqttwire python", True)
PURE_PEERS = [p for p in peers.PEERS
              if p.pure_python and not p.module.startswith("mqttwire") and p.available()
              and not p.name.startswith("struct")]




def _stream(fn: Callable[[list], int], chunks: list) -> Callable[[], int]:
    return lambda: fn(chunks)


Row = tuple[str, Callable[[], Any], Callable[[], Any], int]


def rows() -> list[Row]:
    """(row, the extension's timed call, mqtt5's, operations per call) for every v5 row
    of the peers table that both codecs run, each checked correct first, as bench_peers
    does."""
    out = []
    for op in OPS:
        if op.level != 5:
            continue
        for peer in (CYTHON, MQTT5):
            wrong = check_decode(peer, op) or check_encode(peer, op)
            if wrong:
                raise SystemExit(f"{peer.name} is wrong on {op.id}: {wrong}")
        out.append((f"decode {op.id}", batched(CYTHON.decoder(op), op.wire()),
                    batched(MQTT5.decoder(op), op.wire()), PER_CALL))
        out.append((f"decode and read {op.id}", batched(CYTHON.reader(op), op.wire()),
                    batched(MQTT5.reader(op), op.wire()), PER_CALL))
        out.append((f"encode {op.id}", batched(*CYTHON.encoder(op)),
                    batched(*MQTT5.encoder(op)), PER_CALL))
    wire = STREAM_OP[5].wire() * STREAM_PACKETS
    chunks = [wire[i : i + CHUNK] for i in range(0, len(wire), CHUNK)]
    cy, m5 = CYTHON.streamer(5), MQTT5.streamer(5)
    assert m5 is not None and cy(chunks) == m5(chunks) == STREAM_PACKETS
    out.append((f"stream {STREAM_PACKETS:,} small PUBLISH v5", _stream(cy, chunks),
                _stream(m5, chunks), STREAM_PACKETS))
    return out


def pure_rows() -> list[Row]:
    """(row, the pure twin's timed call, the peer's, operations per call) for every row of
    the peers table that a pure-Python peer runs and gets right (bench_peers skips the
    others as n/a or incorrect, and so does this)."""
    out: list[Row] = []
    for op in OPS:
        for peer in PURE_PEERS:
            if op.level not in peer.levels:
                continue
            if peer.decoder(op) is not None and check_decode(peer, op) is None:
                out.append((f"decode {op.id}: {peer.name}",
                            batched(PURE.decoder(op), op.wire()),
                            batched(peer.decoder(op), op.wire()), PER_CALL))
                reader = peer.reader(op)
                assert reader is not None
                out.append((f"decode and read {op.id}: {peer.name}",
                            batched(PURE.reader(op), op.wire()),
                            batched(reader, op.wire()), PER_CALL))
            if peer.encoder(op) is not None and check_encode(peer, op) is None:
                out.append((f"encode {op.id}: {peer.name}", batched(*PURE.encoder(op)),
                            batched(*peer.encoder(op)), PER_CALL))
    for level, op in STREAM_OP.items():
        wire = op.wire() * STREAM_PACKETS
        chunks = [wire[i : i + CHUNK] for i in range(0, len(wire), CHUNK)]
        ours = PURE.streamer(level)
        for peer in PURE_PEERS:
            theirs = peer.streamer(level) if level in peer.levels else None
            if theirs is None or theirs(chunks) != STREAM_PACKETS:
                continue
            assert ours(chunks) == STREAM_PACKETS
            out.append((f"stream {STREAM_PACKETS:,} small PUBLISH v{level}: {peer.name}",
                        _stream(ours, chunks), _stream(theirs, chunks), STREAM_PACKETS))
    return out


def control() -> tuple[str, Callable[[], Any], Callable[[], Any], int]:
    """The extension's small-PUBLISH decode against itself (two adapters, two loops)."""
    op = OPS[1]
    assert op.id == "publish-qos0-small v5"
    return ("control: decode publish-qos0-small v5, extension against itself",
            batched(CYTHON.decoder(op), op.wire()), batched(CYTHON.decoder(op), op.wire()),
            PER_CALL)


def floor_call() -> Callable[[], Any]:
    """bench_peers.test_call_floor's timed call."""
    return batched(lambda n: n.bit_length(), 5)


def _block(run: Callable[[], Any], clock: Callable[[], int] = time.perf_counter_ns) -> int:
    """One block: a call to warm the caches for this codec, then the fastest of REPEATS
    timed calls, in ns."""
    run()
    best = None
    for _ in range(REPEATS):
        t0 = clock()
        run()
        t = clock() - t0
        best = t if best is None or t < best else best
    assert best is not None
    return best


def paired(cy: Callable[[], Any], m5: Callable[[], Any], floor: Callable[[], Any],
           pairs: int) -> list[tuple[int, int, int]]:
    """``pairs`` triples of block times (extension, mqtt5, floor), the order rotating."""
    runs = (cy, m5, floor)
    out = []
    for i in range(pairs):
        got = [0, 0, 0]
        for k in range(3):
            j = (i + k) % 3 if i % 2 == 0 else (i - k) % 3
            got[j] = _block(runs[j])
        out.append((got[0], got[1], got[2]))
    return out


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


def summarise(name: str, triples: list[tuple[int, int, int]], ops: int,
              pure: bool = False) -> dict[str, Any]:
    ratios = [m5 / cy for cy, m5, _ in triples]
    # A stream call is 10,000 packets, not comparable with a call of the floor's loop.
    batched = ops == PER_CALL and not pure
    near = [max(cy, m5) / fl for cy, m5, fl in triples] if batched else []
    need = NEED_AT_FLOOR if near and statistics.median(near) <= NEAR_FLOOR else NEED
    if pure:
        need = NEED_PURE
    q1, med, q3 = quartiles(ratios)
    if name.startswith("control"):
        need = 1.0  # no target: the spread is what is read
    return {
        "row": name,
        "pairs": len(triples),
        "cython_ns": statistics.median(cy for cy, _, _ in triples) / ops,
        "mqtt5_ns": statistics.median(m5 for _, m5, _ in triples) / ops,
        "floor_ns": statistics.median(fl for _, _, fl in triples) / PER_CALL,
        "ratio_q1": q1,
        "ratio_median": med,
        "ratio_q3": q3,
        "share_above_need": sum(r >= need for r in ratios) / len(ratios),
        "near_floor_median": statistics.median(near) if near else None,
        "need": need,
        "met": med >= need,
    }


def _ns(x: float) -> str:
    return f"{x / 1e3:,.2f} us" if x >= 1e4 else f"{x:,.0f} ns"


def _met(r: dict[str, Any]) -> str:
    if r["row"].startswith("control"):
        return "(control)"
    return "yes" if r["met"] else "**no**"


def table(results: list[dict[str, Any]], pure: bool = False) -> list[str]:
    ours, theirs = ("pure twin", "peer") if pure else ("extension", "mqtt5")
    out = [
        f"| row | {ours} | {theirs} | floor | {theirs} / {ours}: median (quartiles) | "
        "pairs at or above the need | need | met |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        out.append(
            f"| {r['row']} | {_ns(r['cython_ns'])} | {_ns(r['mqtt5_ns'])} | "
            f"{_ns(r['floor_ns'])} | **{r['ratio_median']:.2f}x** ({r['ratio_q1']:.2f}-"
            f"{r['ratio_q3']:.2f}) | {100 * r['share_above_need']:.0f}% | {r['need']:g}x | "
            f"{_met(r)} |"
        )
    return out


def across(paths: list[str]) -> list[str]:
    """The verdict of several runs (one per interpreter, or two of one), a column each:
    the median ratio, its quartiles, and whether it meets the row's need."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    head = "| row | " + " | ".join(f"CPython {r['python']} ({r['started'][11:16]})"
                                    for r in runs) + " |"
    out = [head, "|---" + "|---:" * len(runs) + "|"]
    by_row = [{r["row"]: r for r in run["results"]} for run in runs]
    for name in by_row[0]:
        cells = []
        for rows_ in by_row:
            r = rows_.get(name)
            if r is None:
                cells.append("n/a")
                continue
            mark = "" if r["met"] or name.startswith("control") else (
                f" **below {r['need']:g}x**")
            cells.append(f"{r['ratio_median']:.2f}x ({r['ratio_q1']:.2f}-{r['ratio_q3']:.2f})"
                         f"{mark}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    if sys.argv[1:2] == ["--across"]:
        print("\n".join(across(sys.argv[2:])))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=400, help="pairs per batched row")
    ap.add_argument("--stream-pairs", type=int, default=40, help="pairs for the stream row")
    ap.add_argument("-k", default="", help="only rows whose name contains this")
    ap.add_argument("--json", help="write the results (and every triple) here")
    ap.add_argument("--pure", action="store_true",
                    help="the pure twin against the pure-Python peers")
    args = ap.parse_args()
    # The extension's path for the heading: not needed, nor there, for --pure alone.
    subject = ("mqttwire._pure" if args.pure
               else importlib.import_module("mqttwire._speedups").__file__)

    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    load = os.getloadavg()
    floor = floor_call()
    results, raw = [], {}
    for name, cy, m5, ops in pure_rows() if args.pure else [control(), *rows()]:
        if args.k not in name:
            continue
        triples = paired(cy, m5, floor, args.stream_pairs if ops != PER_CALL else args.pairs)
        results.append(summarise(name, triples, ops, args.pure))
        raw[name] = triples
        gc.collect()  # each row starts from the same heap state, as a pytest test would
    ended = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    versions = (", ".join(f"{p.name} {p.version()}" for p in PURE_PEERS) if args.pure
                else f"mqtt5 {MQTT5.version()}")
    head = (f"CPython {platform.python_version()}, {subject}, {versions}, "
            f"{started}-{ended[11:]} UTC, load average "
            f"{load[0]:.2f} at the start and {os.getloadavg()[0]:.2f} at the end")
    print(head + "\n")
    print("\n".join(table(results, args.pure)))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"python": platform.python_version(), "extension": subject, "started": started,
             "ended": ended, "load": [load[0], os.getloadavg()[0]], "per_call": PER_CALL,
             "repeats": REPEATS, "results": results, "triples": raw}, indent=1))


if __name__ == "__main__":
    main()
