"""The pipeline on a standalone Spark cluster: a master and two workers started from the
pyspark package on 127.0.0.1, driven through the command line with --master, once; its
tables must equal the local run's, and its tasks must use both workers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from spark_scenarios import comparable_rows, read_rows

# once: the scheduling over a standalone cluster's workers is Spark's, whichever
# implementation decodes in them (the pipeline tests cover the pure one, on local[2]);
# scripts/test.sh runs it in its first pass only.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.once,
              # the local run's tables and its ring buffer, the reference of the cluster's
              # (tests/spark/conftest.py)
              pytest.mark.local_run("stream", "mixed")]

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 90.0  # seconds for the master and both workers to be up
RUN_TIMEOUT = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _spark_class(*args: str, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    with open(log, "wb") as out:
        # A new session (process group), so that the JVM that spark-class execs, and
        # anything it starts, is stopped with the group.
        return subprocess.Popen([os.path.join(spark_home, "bin", "spark-class"), *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{ui_port}/json/", timeout=2) as resp:
            return int(json.load(resp).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and two 1-core workers on 127.0.0.1; yields the master URL."""
    from mqttwire.spark import find_java

    find_java()  # the autouse fixture has skipped already if there is none
    logs = tmp_path_factory.mktemp("cluster")
    env = dict(os.environ, SPARK_LOCAL_IP=HOST, PYSPARK_PYTHON=sys.executable)
    # The daemons' JVMs with the compiler of the test run's other JVMs (tests/conftest.py,
    # SPARK_TEST_DEFAULTS): their options come from here, not from spark-defaults.conf.
    env.setdefault("SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1")
    port, ui = free_port(), free_port()
    url = f"spark://{HOST}:{port}"
    procs = [_spark_class("org.apache.spark.deploy.master.Master", "--host", HOST,
                          "--port", str(port), "--webui-port", str(ui),
                          log=logs / "master.log", env=env)]
    try:
        for i in (1, 2):
            work = logs / f"worker{i}"
            work.mkdir()
            procs.append(_spark_class(
                "org.apache.spark.deploy.worker.Worker", url, "--host", HOST, "--cores", "1",
                "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(work),
                log=logs / f"worker{i}.log", env=env))
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while _alive_workers(ui) < 2:
            for proc in procs:
                assert proc.poll() is None, f"a Spark daemon exited; see the logs in {logs}"
            assert time.monotonic() < deadline, f"the cluster did not start; logs in {logs}"
            time.sleep(0.5)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)


@dataclass(frozen=True)
class ClusterRun:
    proc: subprocess.CompletedProcess[str]
    out: Path
    events: Path  # Spark's event log


@pytest.fixture(scope="module")
def cluster_run(cluster: str, captures: Any, local_run: Any,
                tmp_path_factory: pytest.TempPathFactory) -> ClusterRun:
    """The command line's pipeline on the cluster, once (a run costs a minute of CI), over
    the generated captures and a ring buffer (a folder of editcap -c's files, one
    capture), with a split size of 1 KiB: a.pcapng (5 KiB) and the ring's files are read
    in ranges."""
    top = tmp_path_factory.mktemp("cluster-run")
    out, events, conf = top / "out", top / "events", top / "conf"
    events.mkdir()
    conf.mkdir()
    # The test run's settings (tests/conftest.py, SPARK_TEST_DEFAULTS), and this run's.
    run_defaults = Path(os.environ.get("SPARK_CONF_DIR") or conf, "spark-defaults.conf")
    (conf / "spark-defaults.conf").write_text(
        (run_defaults.read_text() if run_defaults.is_file() else "")
        + f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n"
        "spark.eventLog.compress false\nspark.eventLog.rolling.enabled false\n"
        # Both executors up before the first job, so that its tasks can use both.
        "spark.scheduler.minRegisteredResourcesRatio 1.0\n")
    env = dict(os.environ, SPARK_CONF_DIR=str(conf), PYTHONPATH=os.pathsep.join(
        [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    proc = subprocess.run(
        [sys.executable, "-m", "mqttwire", "pipeline", *captures.inputs,
         str(local_run.ring), "--out", str(out), "--master", cluster, "--payload-limit",
         "4", "--progress", "2", "--split-size", "1k"],
        capture_output=True, text=True, env=env, cwd=top, timeout=RUN_TIMEOUT,
        check=False)
    return ClusterRun(proc, out, events)


def test_cluster_tables_equal_local(cluster_run: ClusterRun, local_run: Any) -> None:
    """The tables of the captures but the ring buffer are the local run's; the inputs that
    could not be read are named, and the run says so in its exit status."""
    proc = cluster_run.proc
    # 1: inputs that could not be read (named on stderr), the others in the tables.
    assert proc.returncode == 1, proc.stderr[-4000:]
    # The last line gives the totals; the bad inputs are named on stderr.
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("done: ") and "(3 unreadable or corrupt)" in last, last
    assert "missing.pcap: no such file" in proc.stderr
    ring = "ring/" + min(path.name for path in local_run.ring.iterdir())
    for table in ("packets", "connections", "messages", "retained", "errors"):
        rows = read_rows(cluster_run.out, table)
        assert [row for row in rows if row["capture"] != ring] == read_rows(
            local_run.out["stream"], table), table


def test_cluster_splits_one_capture_over_both_workers(cluster_run: ClusterRun,
                                                      local_run: Any) -> None:
    """The ring buffer, read in its files' ranges, has the tables read_tables gives it
    when one task reads it; and the ranges' tasks ran on both workers (as Spark's event
    log shows)."""
    # The capture's name: its first file's, by its path in the folder given.
    ring = "ring/" + min(path.name for path in local_run.ring.iterdir())
    for table in ("packets", "connections", "messages", "retained", "errors"):
        rows = read_rows(cluster_run.out, table)
        ring_rows = comparable_rows([row for row in rows if row["capture"] == ring])
        assert ring_rows == [row for row in local_run.mixed["whole"][table]
                             if row["capture"] == ring], table
        assert ring_rows or table == "errors", table
    lines = [line for path in sorted(cluster_run.events.rglob("*")) if path.is_file()
             for line in path.read_text().splitlines()]
    stages: dict[int, str] = {}
    executors: dict[int, set[str]] = {}
    for line in lines:
        event = json.loads(line)
        if event["Event"] == "SparkListenerStageSubmitted":
            info = event["Stage Info"]
            stages[info["Stage ID"]] = info["Stage Name"] + " " + info.get("Details", "")
        elif event["Event"] == "SparkListenerTaskEnd":
            executors.setdefault(event["Stage ID"], set()).add(
                event["Task Info"]["Executor ID"])
    ranges = [stage for stage, text in stages.items() if "split.py" in text]
    assert ranges, f"no stage of mqttwire/spark/split.py among {sorted(stages.values())}"
    # The ranges, the openings over the shuffle, the decoding (whose tasks go where the
    # shuffle's blocks are, either worker).
    assert len(ranges) >= 3, sorted(stages.values())
    assert any(len(executors.get(stage, ())) == 2 for stage in ranges), executors
