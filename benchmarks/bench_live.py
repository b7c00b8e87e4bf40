"""Live MQTT into Parquet: mqttwire's streaming source against a paho-mqtt source written
the way the public samples are (benchmarks/live_sources.py), in one run.

Mosquitto is started here on 127.0.0.1 (unlimited in-flight messages, a large queue).
A publisher of mqttwire's own (a socket, QoS 1 PUBLISHes sent in chunks while a thread
reads the PUBACKs, up to 20,000 unacknowledged) publishes numbered messages whose
payload carries the publish time; each source runs as a Structured Streaming query into
Parquet in a driver process of its own (``local[2]``, 250 ms trigger; another with
MQTTWIRE_BENCH_LIVE_TRIGGER, e.g. "500 milliseconds").

- ``sustained``: rounds of N messages published as fast as the publisher goes; a
  round's rate is N over the time from its first publish to the moment all N are in
  committed Parquet files, and every message must be there (no loss).  The first round
  meets a query that has only just started (``cold_msgs_per_s``): the driver JVM runs
  each micro-batch's code interpreted or barely compiled then (executing a batch took
  12.7 us a row in a first round, 6.2 us by the fourth: benchmarks/history/live.md), so the
  sustained rate is the median of the SUSTAINED_ROUNDS rounds after it.  The
  publisher's own rate is reported: it bounds what can be measured.  So is the CPU
  time that each part of the run used over those rounds, in microseconds a message
  (``cpu_us_per_msg``: Spark's JVM, the source's process, Spark's Python workers, the
  driver, Mosquitto, the publisher; from /proc, on Linux): the whole run shares the
  machine's cores, and this says which part the cores went to.
- ``latency``: a steady rate for a few seconds; per message, the time from its publish to
  the write of the Parquet file that holds it (the file's mtime), as percentiles.

Sources: ``mqtt`` (mqttwire's, plain TCP), ``mqtts`` (mqttwire's over mutual TLS: a
listener of the same Mosquitto with a CA's certificate, requiring a client certificate,
made by tests/spark/tls_certs.py; the publisher stays on plain TCP, so the difference is
the source's connection alone; ``mqtts_over_mqtt_*``: the ratios; not in the quick check
that CI runs, for CI's time: tests/spark/test_live_tls.py runs a query over TLS) and
``paho`` (the sample).

Run (about 2 minutes a source on 2 cores; MQTTWIRE_BENCH_LIVE_QUICK=1 for a small check,
``mqtt`` and ``paho`` on 2,100 messages each, about half a minute a source, most of it the
start of the query's driver; ``-k "not paho"`` for TLS beside TCP alone):

    python -m pytest benchmarks/bench_live.py --benchmark-only \
        --benchmark-json=/tmp/bench-live.json
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from local_servers import start_mosquitto, stop

import mqttwire as mw

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
JOB = Path(__file__).with_name("live_sources.py")
QUICK = bool(os.environ.get("MQTTWIRE_BENCH_LIVE_QUICK"))
SUSTAINED_N = 1000 if QUICK else 60000
SUSTAINED_ROUNDS = 1 if QUICK else 3  # after the first (cold) round
STEADY_RATE, STEADY_S = (100, 1) if QUICK else (1000, 5)
WAIT_S = 180.0  # bound on waiting for a source to catch up
TOPIC = "bench/live"


def _ready() -> None:
    import importlib.util

    for module in ("pyspark", "pyarrow", "paho"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto not installed: no mosquitto on PATH (apt-get install mosquitto)")
    from mqttwire.spark import JavaMissing, find_java

    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"Spark needs Java: {exc}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def tls_listener(tmp: Path) -> tuple[int, dict[str, str], str]:
    """A TLS listener's port, the source's options for it (mutual TLS), and its lines of
    Mosquitto's configuration; the certificates made by tests/spark/tls_certs.py."""
    import importlib.util

    path = REPO / "tests" / "spark" / "tls_certs.py"
    spec = importlib.util.spec_from_file_location("tls_certs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    certs = module.make_certs(tmp)
    port = _free_port()
    conf = (f"listener {port} {HOST}\ncafile {certs.ca}\ncertfile {certs.server_cert}\n"
            f"keyfile {certs.server_key}\nrequire_certificate true\n")
    return port, {"caFile": str(certs.ca), "certFile": str(certs.client_cert),
                  "keyFile": str(certs.client_key)}, conf


@contextlib.contextmanager
def mosquitto(tmp: Path, extra: str = "") -> Iterator[int]:
    proc, port = start_mosquitto(
        tmp, f"user {getpass.getuser()}\nallow_anonymous true\nmax_inflight_messages 0\n"
             f"max_queued_messages 1000000\n{extra}")
    try:
        yield port
    finally:
        stop(proc)


class Publisher:
    """QoS 1 PUBLISHes at level 3.1.1 over a socket, sent in chunks of 500 while a
    thread reads the PUBACKs: at most WINDOW unacknowledged (packet ids never reused
    while in use)."""

    WINDOW = 20000
    CHUNK = 500

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port))
        self.sock.sendall(mw.Connect("bench-pub", protocol_version=4).encode(4))
        self.decoder = mw.StreamDecoder(4)
        while not self.decoder.feed(self.sock.recv(1 << 16)):
            pass  # CONNACK
        self.sent = 0
        self.acked = 0
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            n = len(self.decoder.feed(data))
            with self._cond:
                self.acked += n
                self._cond.notify_all()

    def _wait_acked(self, count: int) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.acked >= count, timeout=WAIT_S):
                raise TimeoutError(f"{count - self.acked} PUBACKs missing")

    def publish(self, count: int, payload: bytes | None = None) -> None:
        """``count`` messages "<n>:<publish time ns>" padded to 40 bytes (or
        ``payload``); returns once the broker has acknowledged them."""
        end = self.sent + count
        while self.sent < end:
            n = min(self.CHUNK, end - self.sent)
            self._wait_acked(self.sent + n - self.WINDOW)
            data = b"".join(
                mw.Publish(TOPIC, payload or (b"%08d:%d" % (self.sent + i, time.time_ns())
                                              ).ljust(40, b"."),
                           qos=1, packet_id=(self.sent + i) % 65535 + 1).encode(4)
                for i in range(n))
            self.sock.sendall(data)
            self.sent += n
        self._wait_acked(end)

    def close(self) -> None:
        self.sock.sendall(mw.Disconnect().encode(4))
        self.sock.close()


@dataclass
class Query:
    proc: subprocess.Popen[Any]
    out: Path
    stopfile: Path

    def stop(self) -> None:
        self.stopfile.touch()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_query(source: str, url: str, tmp: Path, options: dict[str, str] | None = None
                ) -> Query:
    env = dict(os.environ, SPARK_LOCAL_IP=HOST)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = tmp / f"out-{source}"
    proc = subprocess.Popen(
        [sys.executable, str(JOB), source, url, TOPIC, str(out),
         str(tmp / f"checkpoint-{source}"), str(tmp / f"stop-{source}"),
         *(f"{k}={v}" for k, v in (options or {}).items())],
        stdout=subprocess.DEVNULL, stderr=(tmp / f"{source}.log").open("w"), env=env,
        start_new_session=True)
    return Query(proc, out, tmp / f"stop-{source}")


def _part(pid: str, query: Query, conf: str) -> str | None:
    """Which part of the run process ``pid`` is (see :func:`cpu_seconds`), or None."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        session = os.getsid(int(pid))
    except (OSError, ValueError):
        return None  # gone meanwhile
    if int(pid) == os.getpid():
        return "publisher"
    if conf in cmdline:
        return "mosquitto"
    if session != query.proc.pid:
        return None  # not the query's (start_new_session: its processes share a session)
    if cmdline.split(" ", 1)[0].endswith("java"):
        return "spark_jvm"
    if "python_streaming_source_runner" in cmdline:
        return "source_process"  # the source's reader: the subscriber, or paho's loop
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "spark_python_workers"
    return "driver"


def cpu_seconds(query: Query, conf: str) -> dict[str, dict[str, float]]:
    """User + system CPU seconds of every process of the run so far, by pid, per part:
    the query's (its driver, Spark's JVM, the source's process, Spark's Python workers),
    Mosquitto's (the one started with ``conf``) and this one's (the publisher).  Linux
    only (/proc): empty elsewhere."""
    parts: dict[str, dict[str, float]] = {}
    if not os.path.isdir("/proc"):
        return parts
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        part = _part(pid, query, conf)
        if part is None:
            continue
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            parts.setdefault(part, {})[pid] = (int(fields[11]) + int(fields[12])) / tick
    return parts


def cpu_used(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
             ) -> dict[str, float]:
    """CPU seconds per part between two :func:`cpu_seconds` (a process that ended in
    between is not counted; one that started is counted whole)."""
    return {part: sum(t - before.get(part, {}).get(pid, 0.0) for pid, t in pids.items())
            for part, pids in after.items()}


def committed_files(out: Path) -> list[Path]:
    """The Parquet files of committed batches (the sink's log)."""
    log = out / "_spark_metadata"
    paths: set[str] = set()
    if log.is_dir():
        for entry in log.iterdir():
            if entry.name.startswith("."):
                continue  # Hadoop's checksum files
            with contextlib.suppress(FileNotFoundError):
                paths |= {json.loads(line)["path"]
                          for line in entry.read_text().splitlines()[1:] if line}
    return [Path(unquote(urlsplit(p).path)) for p in sorted(paths)]


def committed_rows(out: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in committed_files(out))


def payloads(out: Path) -> list[tuple[bytes, float]]:
    """(payload, the file's write time as ns) of every committed row."""
    import pyarrow.parquet as pq

    rows = []
    for f in committed_files(out):
        written = f.stat().st_mtime_ns
        for value in pq.read_table(f, columns=["payload"]).column(0).to_pylist():
            rows.append((value if isinstance(value, bytes) else value.encode(), written))
    return rows


def wait_for(query: Query, count: int) -> float:
    """Wait until ``count`` rows are committed; the time it happened (perf_counter)."""
    deadline = time.monotonic() + WAIT_S
    while committed_rows(query.out) < count:
        assert query.proc.poll() is None, "the query stopped"
        assert time.monotonic() < deadline, f"not caught up in {WAIT_S} s"
        time.sleep(0.05)
    return time.perf_counter()


def subscribed(query: Query, port: int, tmp: Path) -> None:
    """Wait until the query's source has subscribed (a probe message reaches Parquet)."""
    probe = Publisher(port)
    deadline = time.monotonic() + 120
    while committed_rows(query.out) == 0:
        assert query.proc.poll() is None, "the query stopped"
        assert time.monotonic() < deadline, "the query never received a message"
        probe.publish(1, b"probe")
        time.sleep(0.5)
    probe.close()


_results: dict[str, dict[str, Any]] = {}


def sources() -> list[Any]:
    """The sources to run.  A timed run runs them in one pytest-xdist group (the module's),
    one after the other, so that their ratios are measured under the same load.  The
    QUICK check (scripts/test.sh's benchmark pass: untimed, a proof that the benchmark
    runs) gives each source a group of its own, so that on two workers both start at
    once: of its 30 to 40 s a source, the messages take under 10; the rest is starting
    the query's driver (JVM and session, the source's check of Spark's Python workers,
    the first micro-batches in a cold JVM), which fewer messages would not shorten.  Its
    ratios, then measured in two processes, are left out; they mean nothing untimed."""
    if not QUICK:
        return ["mqtt", "mqtts", "paho"]
    return [pytest.param(source, marks=pytest.mark.xdist_group(f"bench_live-{source}"))
            for source in ("mqtt", "paho")]


# slow: its groups start first on the workers (the repository's conftest.py), so that the
# run does not end on one of them alone.
@pytest.mark.slow
@pytest.mark.parametrize("source", sources())
def test_live_source(benchmark: Any, tmp_path: Path, source: str) -> None:
    _ready()
    benchmark.group = "live: Mosquitto into Parquet"
    extra, options = "", None
    if source == "mqtts":
        tls_port, options, extra = tls_listener(tmp_path)
    with mosquitto(tmp_path, extra) as port:
        url = (f"mqtts://localhost:{tls_port}" if source == "mqtts"
               else f"mqtt://{HOST}:{port}")
        query = start_query("mqtt" if source == "mqtts" else source, url, tmp_path,
                            options)
        try:
            subscribed(query, port, tmp_path)
            publisher = Publisher(port)
            info: dict[str, Any] = {}

            def sustained() -> None:
                rates, published = [], []
                conf = str(tmp_path / "mosquitto.conf")
                for n in range(1 + SUSTAINED_ROUNDS):
                    if n == 1:  # the warm rounds' CPU, from here
                        cpu, wall = cpu_seconds(query, conf), time.perf_counter()
                    base = committed_rows(query.out)
                    started = time.perf_counter()
                    publisher.publish(SUSTAINED_N)
                    published.append(SUSTAINED_N / (time.perf_counter() - started))
                    done = wait_for(query, base + SUSTAINED_N)
                    rates.append(SUSTAINED_N / (done - started))
                used = cpu_used(cpu, cpu_seconds(query, conf))
                messages = SUSTAINED_N * SUSTAINED_ROUNDS
                info["cpu_us_per_msg"] = {part: round(seconds * 1e6 / messages, 1)
                                          for part, seconds in sorted(used.items())}
                info["cpu_s_of_wall_s"] = [round(sum(used.values()), 2),
                                           round(time.perf_counter() - wall, 2)]
                info["cold_msgs_per_s"] = round(rates[0])
                info["sustained_msgs_per_s"] = round(statistics.median(rates[1:]))
                info["sustained_rounds_msgs_per_s"] = [round(r) for r in rates[1:]]
                info["publisher_msgs_per_s"] = round(statistics.median(published[1:]))

            benchmark.pedantic(sustained, rounds=1, iterations=1)
            # Steady rate: STEADY_RATE messages a second, in 10 ms slices.
            before = committed_rows(query.out)
            first = publisher.sent
            t0 = time.perf_counter()
            for tick in range(STEADY_RATE * STEADY_S // 10):
                publisher.publish(10)
                time.sleep(max(0.0, t0 + (tick + 1) * 10 / STEADY_RATE - time.perf_counter()))
            wait_for(query, before + STEADY_RATE * STEADY_S)
            publisher.close()
            rows = payloads(query.out)
        finally:
            query.stop()
    numbered = [int(p[:8]) for p, _ in rows if p[8:9] == b":"]  # not the probes
    seen = set(numbered)
    assert set(range(publisher.sent)) <= seen, "messages were lost"
    latencies = sorted((written - int(p[9:].rstrip(b".").decode())) / 1e6
                       for p, written in rows
                       if p[8:9] == b":" and int(p[:8]) >= first)
    q = statistics.quantiles(latencies, n=100)
    info.update(latency_ms_p50=round(q[49], 1), latency_ms_p95=round(q[94], 1),
                latency_ms_p99=round(q[98], 1), latency_ms_max=round(latencies[-1], 1),
                steady_rate_msgs_per_s=STEADY_RATE, messages=publisher.sent,
                trigger=os.environ.get("MQTTWIRE_BENCH_LIVE_TRIGGER", "250 milliseconds"),
                duplicates=len(numbered) - len(seen))
    _results[source] = info
    for a, b in (("mqtt", "paho"), ("mqtts", "mqtt")):
        if source in (a, b) and a in _results and b in _results:
            for key in ("sustained", "cold"):
                info[f"{a}_over_{b}_{key}"] = round(
                    _results[a][f"{key}_msgs_per_s"] / _results[b][f"{key}_msgs_per_s"], 2)
            if a == "mqtts":
                info["mqtts_over_mqtt_latency_p50"] = round(
                    _results[a]["latency_ms_p50"] / _results[b]["latency_ms_p50"], 2)
    benchmark.extra_info.update(info, load_avg=os.getloadavg())
