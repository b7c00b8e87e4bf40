"""The pipeline and the live source on a Spark Connect session: a Connect server started
here from the installed pyspark (sbin/start-connect-server.sh, local[2], on 127.0.0.1 and
a free port), once for the module, and stopped after.

- read_tables on the Connect session gives the classic session's tables row for row
  (tests/spark/conftest.py's local run: every input kind, whole and split, a ring buffer);
- ``mqttwire pipeline`` with SPARK_REMOTE (as PySpark takes it) writes the tables the
  classic command writes, and says which inputs it could not read;
- the live source, registered on the Connect session, writes every message that
  Mosquitto took into Parquet.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_brokers import mosquitto
from local_servers import HOST, free_port
from spark_scenarios import read_rows, table_rows

# once: the session kind is Spark's, whichever codec decodes in the tasks (the classic
# runs cover both codecs); scripts/test.sh runs it in its first pass only.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.once]

REPO = Path(__file__).resolve().parents[2]
#: The server's line once it listens (its log, $SPARK_LOG_DIR/*.out).
STARTED = "Spark Connect server started"
START_TIMEOUT = 120.0
RUN_TIMEOUT = 300.0
TABLES = ("packets", "connections", "messages", "retained", "errors")


def _server_env(folder: Path) -> dict[str, str]:
    import pyspark

    return dict(os.environ, SPARK_HOME=os.path.dirname(pyspark.__file__),
                PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP=HOST,
                SPARK_PID_DIR=str(folder), SPARK_LOG_DIR=str(folder),
                SPARK_IDENT_STRING="mqttwire-test",
                PYTHONPATH=os.pathsep.join(filter(None, [str(REPO),
                                                         os.environ.get("PYTHONPATH")])))


def _script(env: dict[str, str], name: str) -> str:
    return os.path.join(env["SPARK_HOME"], "sbin", name)


def _stop_server(env: dict[str, str]) -> None:
    subprocess.run(["bash", _script(env, "stop-connect-server.sh")], env=env,
                   capture_output=True, timeout=60, check=False)


def _started(folder: Path, timeout: float) -> bool:
    """Whether the server's log says it listens before ``timeout``; False once it says
    it failed (a port taken meanwhile) or its process is gone."""
    deadline = time.monotonic() + timeout
    pids = list(folder.glob("*.pid"))
    while time.monotonic() < deadline:
        text = "".join(p.read_text(errors="replace") for p in folder.glob("*.out"))
        if STARTED in text:
            return True
        if "BindException" in text or "Address already in use" in text:
            return False
        if pids and not _alive(pids[0]):
            return False
        pids = pids or list(folder.glob("*.pid"))
        time.sleep(0.2)
    return False


def _alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server (local[2]) on 127.0.0.1 and a free port: its sc:// URL.
    Three tries on new ports."""
    from mqttwire.spark import find_java

    find_java()  # the autouse fixture has skipped already if there is none
    for attempt in range(3):
        folder = tmp_path_factory.mktemp(f"connect-{attempt}")
        env = _server_env(folder)
        port = free_port()
        subprocess.run(
            ["bash", _script(env, "start-connect-server.sh"), "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", f"spark.driver.host={HOST}", "--conf", f"spark.driver.bindAddress={HOST}",
             "--conf", "spark.ui.enabled=false"],
            env=env, capture_output=True, timeout=60, check=True)
        try:
            if _started(folder, START_TIMEOUT):
                yield f"sc://{HOST}:{port}"
                return
        finally:
            _stop_server(env)
    logs = "".join(p.read_text(errors="replace")[-3000:] for p in folder.glob("*.out"))
    pytest.fail(f"the Spark Connect server did not start on three ports:\n{logs}")


@pytest.fixture(scope="module")
def connect(connect_url: str) -> Iterator[Any]:
    """A Spark Connect session on the module's server, with the settings that the
    pipeline sets on the sessions it makes."""
    from mqttwire.spark.startup import connect_session

    mode = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    spark = connect_session(connect_url)
    try:
        yield spark
    finally:
        spark.stop()
        # PySpark marks the process as Connect's (this variable) when it makes a remote
        # session: the later tests of this worker make classic ones.
        if mode is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


@pytest.mark.local_run("read_tables", "mixed")  # tests/spark/conftest.py
def test_read_tables_on_connect_equals_the_classic_session(connect: Any, captures,
                                                           local_run) -> None:
    """The same read_tables calls as the classic local run's (tests/spark/conftest.py),
    on a Connect session: every table row for row.  The inputs: three captures, a file
    that is no capture, a path that does not exist; then those, the mixed capture in
    both formats and a ring buffer (a folder of editcap's files), whole and split."""
    from mqttwire.spark import read_tables
    from mqttwire.spark.startup import is_connect

    assert is_connect(connect)
    assert table_rows(read_tables(connect, captures.inputs)) == local_run.frames
    inputs = captures.inputs + [str(path) for path in captures.mixed] + [str(local_run.ring)]
    # tests/spark/conftest.py's SPLIT_SIZE
    split = read_tables(connect, inputs, split_size=1000, payload_limit=4)
    assert split.split is not None
    assert sorted(f.name for f in split.split.files) == local_run.split_files
    assert table_rows(split) == local_run.mixed["split"]
    assert table_rows(read_tables(connect, inputs, split_size=None, payload_limit=4)) \
        == local_run.mixed["whole"]
    totals = split.totals()  # the tasks' reports, as the Connect session returns them
    assert totals.packets == sum(1 for row in local_run.mixed["split"]["packets"]
                                 if row["kind"] == "packet")


@pytest.mark.local_run("stream")
def test_the_command_on_spark_remote(connect_url: str, captures, local_run,
                                     tmp_path: Path) -> None:
    """``mqttwire pipeline`` with SPARK_REMOTE set (no --master), from another directory
    with relative paths: the classic command's tables, the unreadable inputs named, and
    no line of a JVM started here."""
    out = tmp_path / "out"
    work = tmp_path / "work"
    work.mkdir()
    inputs = [os.path.relpath(arg, work) for arg in captures.inputs]
    env = dict(os.environ, SPARK_REMOTE=connect_url, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "mqttwire", "pipeline", *inputs, "--out",
         os.path.relpath(out, work), "--payload-limit", "4"],
        capture_output=True, text=True, env=env, cwd=work, timeout=RUN_TIMEOUT, check=False)
    # 1: inputs that could not be read (named on stderr), the others in the tables.
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert f"Spark Connect {connect_url}, master local[2]" in proc.stderr
    assert "missing.pcap: no such file or directory" in proc.stderr
    assert "log4j" not in proc.stderr and "WARNING" not in proc.stderr, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("done: 5 files (3 unreadable or corrupt)"), last
    assert (out / "summary.md").is_file()
    for table in TABLES:
        assert read_rows(out, table) == read_rows(local_run.out["stream"], table), table


def test_the_live_source_on_connect(connect: Any, tmp_path: Path) -> None:
    """The mqtt source registered on the Connect session (its worker check a DataFrame
    job there): a query into Parquet writes every message that Mosquitto took from a
    paho-mqtt publisher, at QoS 1."""
    import paho.mqtt.client as mqtt
    import pyarrow.dataset as ds

    from mqttwire.spark.live import register, use_filesystem_checkpoints

    register(connect)
    assert use_filesystem_checkpoints(connect)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    count = 40
    with mosquitto(tmp_path) as broker:
        query = (connect.readStream.format("mqtt")
                 .option("url", broker.url).option("topics", "connect/#").option("qos", "1")
                 .option("clientId", "connect-test")
                 .load().writeStream.format("parquet")
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="500 milliseconds").start(str(out)))
        try:
            # The source subscribes as the query starts: publish once Mosquitto says so.
            deadline = time.monotonic() + 60
            while "connect/# (QoS 1)" not in broker.log_text():
                assert time.monotonic() < deadline, broker.log_text()[-3000:]
                assert query.exception() is None, query.exception()
                time.sleep(0.1)
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, "connect-pub")
            client.connect(HOST, broker.port)
            client.loop_start()
            try:
                for n in range(count):
                    client.publish(f"connect/{n}", f"m{n}".encode(), qos=1).wait_for_publish(30)
            finally:
                client.loop_stop()
                client.disconnect()
            payloads: list[bytes] = []
            while len(payloads) < count:
                assert time.monotonic() < deadline + 60, payloads
                assert query.exception() is None, query.exception()
                time.sleep(0.5)
                with contextlib.suppress(Exception):  # a file being written
                    payloads = ds.dataset(out, format="parquet", exclude_invalid_files=True
                                          ).to_table().column("payload").to_pylist()
        finally:
            query.stop()
    assert sorted(payloads) == sorted(f"m{n}".encode() for n in range(count))
