"""Capture throughput: mqttwire.capture.read_capture against tshark over the same file, and
the Spark pipeline end to end, in one run.

The input is a synthetic classic pcap of at least 200 MB of small MQTT PUBLISH traffic
(benchmarks/make_capture.py: 16 interleaved connections at levels 4 and 5, QoS 0 and 1
with PUBACKs, several packets per TCP segment and some packets split across segments).
It is written once into the temporary directory and reused by later runs with the same
parameters (the file name carries them and a hash of make_capture.py).

- ``read_capture``, with the Cython codec (its compiled loop, mqttwire.capture.loop_c)
  and with the pure-Python codec (the pure loop), every record consumed; and the Cython
  codec through the pure loop (``_read_pure``), to show what the compiled loop gains;
- ``tshark -r FILE -d tcp.port==1883,mqtt -Y mqtt -T fields -E occurrence=a -e ...``
  extracting time, source, message type, QoS, topic, packet id and length, output to
  /dev/null.  Before it is timed, tshark and read_capture must count the same MQTT
  packets of each type in a 2 MB capture from the same generator;
- ``python -m mqttwire pipeline FILE --out DIR``, once each as a subprocess, from start
  to exit (wall time only), in Spark's default heap: on ``local[2]`` in one task
  (``--split-size 0``), and split into ranges of SIZE / 8 bytes (9 of the 200 MB file) on
  ``local[2]`` and on ``local[1]``;
  then a capture 5 times as large (1 GB) in one task, in the same heap.

Per core, honestly: tshark is one process (mostly one thread), read_capture one thread;
each records wall time and CPU time (user + sys: ``getrusage(RUSAGE_CHILDREN)`` for
tshark, ``time.process_time()`` for read_capture), and ``extra_info`` gives MB/s (10**6
bytes) and packets/s over both, from the median round, with the machine's load average.
The tshark benchmark's ``extra_info`` holds the ratios to read_capture measured earlier
in the same run.  Skipped, with the reason, without tshark, or without Java or pyspark
for the pipeline.

Run (about 10 minutes on 2 cores; MQTTWIRE_BENCH_CAPTURE_MB=3 for a quick try):

    python -m pytest benchmarks/bench_capture.py --benchmark-only \
        --benchmark-columns=median,min,max,rounds --benchmark-json=bench-capture.json
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mqttwire._constants import PACKET_NAMES
from mqttwire.capture import MqttStreams, read_capture
from mqttwire.capture.loop import _read_pure

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_capture import write_capture  # noqa: E402

#: The capture's size in bytes; MQTTWIRE_BENCH_CAPTURE_MB overrides it (for a quick try).
SIZE = int(float(os.environ.get("MQTTWIRE_BENCH_CAPTURE_MB", "200")) * 1e6)
CHECK_SIZE = 2_000_000  # the capture tshark and read_capture must agree on
CLIENTS = 16
SEED = 1
ROUNDS = 2
TSHARK_FIELDS = ["frame.time_epoch", "ip.src", "tcp.srcport", "mqtt.msgtype", "mqtt.qos",
                 "mqtt.topic", "mqtt.msgid", "mqtt.len"]
#: Bound on one tshark or pipeline run.
TIMEOUT = 900
#: The capture of the derived tables' benchmark, whose records are held in memory.
DERIVE_SIZE = min(SIZE, 20_000_000)
#: Records handed to the derived tables at a time, as the decoding task does
#: (mqttwire.spark.decoding.BATCH_ROWS packet records, with the stream ends among them).
DERIVE_BATCH = 8192

#: Median-round figures of the read_capture benchmarks, by codec id, for the ratios.
_measured: dict[str, Measurement] = {}


@dataclass
class Capture:
    path: Path
    stats: dict[str, int]  # what make_capture wrote: frames, packets by type, bytes

    @property
    def packets(self) -> int:
        return sum(v for k, v in self.stats.items() if k.isupper())


@dataclass
class Measurement:
    wall: float
    cpu: float


def _capture(size: int) -> Capture:
    """The generated capture of ``size`` bytes, written on first use and cached."""
    source = (Path(__file__).parent / "make_capture.py").read_bytes()
    tag = hashlib.sha256(source).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "mqttwire-bench"
    folder.mkdir(exist_ok=True)
    path = folder / f"mqtt-{size}-c{CLIENTS}-s{SEED}-{tag}.pcap"
    meta = Path(f"{path}.json")
    if path.exists() and meta.exists():
        return Capture(path, json.loads(meta.read_text()))
    return Capture(path, write_capture(path, size, CLIENTS, SEED))


@pytest.fixture(scope="session")
def big_capture() -> Capture:
    return _capture(SIZE)


def _tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        pytest.skip("tshark is not installed (Debian/Ubuntu: apt-get install tshark)")
    return path


def _tshark_command(tshark: str, path: Path) -> list[str]:
    fields = [arg for field in TSHARK_FIELDS for arg in ("-e", field)]
    return [tshark, "-r", str(path), "-d", "tcp.port==1883,mqtt", "-Y", "mqtt", "-T",
            "fields", "-E", "occurrence=a", *fields]


def _record_counts(path: Path, codec: ModuleType | None = None) -> dict[str, int]:
    """read_capture's records by packet type name (by kind for any other record), with
    ``codec`` or the one ``import mqttwire`` chose."""
    counts: dict[str, int] = {}
    for rec in read_capture(path, codec=codec):
        key = rec.packet_type if rec.kind == "packet" and rec.packet_type else rec.kind
        counts[key] = counts.get(key, 0) + 1
    return counts


def _check_tshark_agrees(tshark: str) -> None:
    """tshark's MQTT packets of a small capture from the same generator, counted by
    type (mqtt.msgtype is the Control Packet type number, MQTT 5.0 §2.1.2), against
    read_capture's records and the generator's own counts."""
    small = _capture(CHECK_SIZE)
    out = subprocess.run(_tshark_command(tshark, small.path), capture_output=True,
                         text=True, check=True, timeout=TIMEOUT).stdout
    column = TSHARK_FIELDS.index("mqtt.msgtype")
    seen: dict[str, int] = {}
    for line in out.splitlines():
        for value in line.split("\t")[column].split(","):  # one per MQTT packet
            name = PACKET_NAMES[int(value)]
            seen[name] = seen.get(name, 0) + 1
    ours = _record_counts(small.path)
    assert ours == {k: v for k, v in small.stats.items() if k.isupper()}
    assert seen == ours, f"tshark {seen}, read_capture {ours}"


def _children_cpu() -> float:
    """User + sys CPU seconds of this process's ended and reaped children (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _no_cpu_clock() -> float:
    return math.nan


def _rounds(benchmark: Any, run: Callable[[], object], cpu_clock: Callable[[], float],
            rounds: int = ROUNDS) -> Measurement:
    """Run ``run`` ``rounds`` times under ``benchmark``, timing each by wall clock and by
    ``cpu_clock`` (``_no_cpu_clock``: wall time only); the medians."""
    done: list[Measurement] = []

    def timed() -> None:
        wall, cpu = time.perf_counter(), cpu_clock()
        run()
        done.append(Measurement(time.perf_counter() - wall, cpu_clock() - cpu))

    benchmark.pedantic(timed, rounds=rounds, iterations=1)
    return Measurement(statistics.median(m.wall for m in done),
                       statistics.median(m.cpu for m in done))


def _rates(info: dict[str, Any], capture: Capture, m: Measurement) -> None:
    """The capture's size and counts, times, and rates over wall and (if measured) CPU
    time, with the load average, into ``info``."""
    mb = capture.stats["bytes"] / 1e6
    info.update(file_mb=round(mb, 1), frames=capture.stats["frames"],
                mqtt_packets=capture.packets, wall_s=round(m.wall, 2),
                mb_per_s_wall=round(mb / m.wall, 1),
                packets_per_s_wall=round(capture.packets / m.wall))
    if not math.isnan(m.cpu):
        info.update(cpu_s=round(m.cpu, 2), mb_per_s_cpu=round(mb / m.cpu, 1),
                    packets_per_s_cpu=round(capture.packets / m.cpu),
                    frames_per_s_cpu=round(capture.stats["frames"] / m.cpu))
    info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]


def test_read_capture(benchmark: Any, codec: ModuleType, big_capture: Capture,
                      request: pytest.FixtureRequest) -> None:
    benchmark.group = "capture: read_capture vs tshark"
    counts: dict[str, int] = {}

    def run() -> None:
        n = 0
        for _rec in read_capture(big_capture.path, codec=codec):
            n += 1
        counts["records"] = n

    m = _rounds(benchmark, run, time.process_time)
    assert counts["records"] == big_capture.packets  # every packet, no error records
    _rates(benchmark.extra_info, big_capture, m)
    _measured[request.node.callspec.id] = m


def test_read_capture_pure_loop(benchmark: Any, big_capture: Capture,
                                speedups: ModuleType) -> None:
    """The Cython codec through the pure-Python capture loop (``_read_pure``), which
    read_capture used before the compiled loop: what the compiled loop gains."""
    benchmark.group = "capture: read_capture vs tshark"
    counts: dict[str, int] = {}

    def run() -> None:
        n = 0
        with open(big_capture.path, "rb") as f:
            handler = MqttStreams(big_capture.path.name, ports=(1883,), codec=speedups)
            for _rec in _read_pure(f, handler):
                n += 1
        counts["records"] = n

    m = _rounds(benchmark, run, time.process_time)
    assert counts["records"] == big_capture.packets
    _rates(benchmark.extra_info, big_capture, m)
    _measured["cython-pure-loop"] = m


@pytest.fixture(scope="module")
def derive_records() -> list[Any]:
    capture = _capture(DERIVE_SIZE)
    return list(read_capture(capture.path, payload_limit=sys.maxsize, stream_ends=True))


def test_derived_tables(benchmark: Any, codec: ModuleType, derive_records: list[Any],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The derived tables (connections, messages, retained: mqttwire.spark.derive) of a
    20 MB capture's records, fed as a decoding task feeds them (``add_many`` a batch at a
    time, the finished rows taken after each): with the extension, its compiled path
    (mqttwire.spark.derive_c), which must be built; without, ``CaptureTables.add`` (the
    reference).  Per core: CPU time."""
    from mqttwire.spark import derive

    compiled = codec.__name__ == "mqttwire._speedups"
    if compiled:
        importlib.import_module("mqttwire.spark.derive_c")
    monkeypatch.setattr(derive, "COMPILED", compiled)
    benchmark.group = "capture: the derived tables"
    counts: dict[str, int] = {}

    def run() -> None:
        tables = derive.CaptureTables("bench.pcap")
        rows = 0
        for start in range(0, len(derive_records), DERIVE_BATCH):
            tables.add_many(derive_records[start:start + DERIVE_BATCH])
            rows += len(tables.messages) + len(tables.connections)
            tables.messages, tables.connections = [], []
        rows += len(tables.finish()) + len(tables.messages) + len(tables.connections)
        counts["rows"] = rows

    m = _rounds(benchmark, run, time.process_time, rounds=5)
    assert counts["rows"] > len(derive_records) // 2  # a message row per PUBLISH
    benchmark.extra_info.update(
        records=len(derive_records), rows=counts["rows"], cpu_s=round(m.cpu, 3),
        wall_s=round(m.wall, 3),
        records_per_s_per_core=round(len(derive_records) / m.cpu) if m.cpu else None)


def test_tshark(benchmark: Any, big_capture: Capture) -> None:
    benchmark.group = "capture: read_capture vs tshark"
    tshark = _tshark()
    _check_tshark_agrees(tshark)
    command = _tshark_command(tshark, big_capture.path)

    m = _rounds(benchmark, lambda: subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
        timeout=TIMEOUT), _children_cpu)
    info = benchmark.extra_info
    _rates(info, big_capture, m)
    info["command"] = " ".join(["tshark", "-r", "FILE", *command[3:]])
    for codec_id, ours in _measured.items():
        info[f"tshark_over_{codec_id}_cpu"] = round(m.cpu / ours.cpu, 2)
        info[f"tshark_over_{codec_id}_wall"] = round(m.wall / ours.wall, 2)
    _measured["tshark"] = m  # for the pipeline's ratio


def _spark_ready() -> None:
    for module in ("pyspark", "pyarrow", "pandas", "matplotlib"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (the spark extra)")
    from mqttwire.spark import JavaMissing, find_java

    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"Spark needs Java: {exc}")


#: The pipeline runs: (master, split size in bytes; 0 reads the file in one task, the
#: default), and the capture's size in multiples of SIZE.  The
#: split size cuts the capture into 8 ranges, whatever its size.
PIPELINE_RUNS = {"local2-whole": ("local[2]", 0, 1, "auto"),
                 # One task on one core: what the second core adds to one task (the
                 # tasks write their row groups on a thread of their own).
                 "local1-whole": ("local[1]", 0, 1, "auto"),
                 # The same, with Spark's writer (what every run used before the tasks
                 # wrote their own files): the write path's before and after in one run.
                 "local2-whole-sparkwriter": ("local[2]", 0, 1, "spark"),
                 "local2-split": ("local[2]", SIZE // 8 + 1, 1, "auto"),
                 "local1-split": ("local[1]", SIZE // 8 + 1, 1, "auto"),
                 # Bounded memory: 5 times the capture (1 GB by default) in the same
                 # default heap.
                 "local2-whole-5x": ("local[2]", 0, 5, "auto")}
#: Wall seconds of the pipeline runs so far in this session, by run id.
_pipeline_walls: dict[str, float] = {}


@pytest.mark.parametrize("run_id", list(PIPELINE_RUNS))
def test_pipeline(benchmark: Any, big_capture: Capture, tmp_path: Path,
                  run_id: str) -> None:
    """The pipeline once, timed from process start to exit, by wall clock only: the JVM
    and the Python workers are not reaped children of the driver, so RUSAGE_CHILDREN
    would see the driver's CPU alone.  Its own "in N s" and its phases are reported
    separately, and the ratios to tshark and to the other runs measured before it."""
    benchmark.group = "capture: pipeline end to end"
    _spark_ready()
    master, split_size, times, writer = PIPELINE_RUNS[run_id]
    if times != 1:
        big_capture = _capture(SIZE * times)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("MQTTWIRE_PURE_PYTHON", None)
    # Spark's default heap (1 GiB for local[N]): the pipeline no longer needs more.
    options = ["--master", master, "--progress", "0", "--split-size", str(split_size),
               "--writer", writer]
    command = [sys.executable, "-m", "mqttwire", "pipeline", str(big_capture.path),
               "--out", str(tmp_path / "out"), *options]
    results: list[subprocess.CompletedProcess[str]] = []
    m = _rounds(benchmark, lambda: results.append(subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=TIMEOUT)),
        _no_cpu_clock, rounds=1)
    proc = results[0]
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = re.search(r"^done: .*?([\d,]+) packets.* in ([\d.]+) s;", proc.stdout, re.M)
    assert done is not None, proc.stdout[-3000:]
    assert int(done.group(1).replace(",", "")) == big_capture.packets
    info = benchmark.extra_info
    _rates(info, big_capture, m)
    # The pipeline's own timer starts once the session is up and stops before the
    # session does: the rest is interpreter start, imports, JVM and session start, stop.
    info["pipeline_reported_s"] = float(done.group(2))
    info["outside_pipeline_timer_s"] = round(m.wall - float(done.group(2)), 2)
    phases = re.search(r"wall seconds by phase: (.*)$", proc.stderr, re.M)
    if phases is not None:
        info["phases"] = phases.group(1)
    info["command"] = "python -m mqttwire pipeline FILE --out DIR " + " ".join(options)
    if times != 1:
        return  # another file: no ratios
    _pipeline_walls[run_id] = m.wall
    if "tshark" in _measured:
        info["wall_over_tshark"] = round(m.wall / _measured["tshark"].wall, 2)
    for other, wall in _pipeline_walls.items():
        if other != run_id:
            info[f"wall_over_{other}"] = round(m.wall / wall, 2)
