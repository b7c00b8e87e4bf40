"""The live source across broker restarts: Mosquitto with persistence, stopped and started
again on its port mid-stream under paho-mqtt publishers that keep a ledger of what the
broker acknowledged (QoS 1 and 2).  The subscriber under the source reconnects with
backoff and resumes its session, alone (both codecs, no Spark) and under a streaming
query in a driver process of its own (tests/spark/live_job.py): nothing acknowledged is
lost, the query does not fail; a broker that stays away past reconnectTimeout fails it
with "gave up after ..."."""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_live import HOST, TIMEOUT, Job, free_port, ident, rows

pytestmark = [pytest.mark.interop]


class Broker:
    """Mosquitto with persistence on a port of its own, stopped (SIGTERM: it saves its
    database as it exits) and started again on the same port with the same database."""

    def __init__(self, tmp: Path) -> None:
        program = shutil.which("mosquitto")
        if program is None:
            pytest.skip("mosquitto not installed: no mosquitto on PATH "
                        "(apt-get install mosquitto)")
        self.program = program
        self.tmp = tmp
        self.port = free_port()
        self.conf = tmp / "mosquitto.conf"
        self.log = tmp / "mosquitto.log"
        # "user": started as root, Mosquitto would switch to its own user, which cannot
        # write the database in pytest's private directory.  In-flight QoS 1/2 messages
        # unlimited (the source's Receive Maximum bounds them), and room for what is
        # published while the client is away.
        self.conf.write_text(
            f"listener {self.port} {HOST}\nallow_anonymous true\nuser {getpass.getuser()}\n"
            f"persistence true\npersistence_location {tmp}/\nmax_inflight_messages 0\n"
            "max_queued_messages 100000\nlog_type all\n")
        self.proc: subprocess.Popen[Any] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"mqtt://{HOST}:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self) -> None:
        with self.log.open("a") as out:
            self.proc = subprocess.Popen([self.program, "-c", str(self.conf)],
                                         stdout=out, stderr=out)
        self.starts += 1
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.proc.poll() is None:
            # Its own log says when it listens (a probe connection would be a client).
            if self.log_text().count("running") >= self.starts:
                return
            time.sleep(0.02)
        pytest.fail(f"mosquitto did not start on port {self.port}:\n{self.log_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.proc = None

    def restart(self, pause: float) -> None:
        """Stop, stay away ``pause`` seconds (clients' reconnections fail meanwhile),
        start again."""
        self.stop()
        time.sleep(pause)
        self.start()


@contextlib.contextmanager
def broker(tmp: Path) -> Iterator[Broker]:
    b = Broker(tmp)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@dataclass
class LedgerPublisher:
    """paho-mqtt publishing "<level>-<n>" on live/<level>/<n>, QoS 1 and 2 alternately,
    through the broker's restarts (paho reconnects by itself); ``ledger``: every message
    whose PUBACK or PUBCOMP came, i.e. that the broker took responsibility for."""

    port: int
    level: int
    ledger: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    published: int = 0

    def run(self, count: int, rate: float, gate: threading.Event | None = None,
            gate_at: int = 0) -> None:
        """Publish ``count`` messages at ``rate`` a second; before message ``gate_at``,
        wait until ``gate`` is set."""
        import paho.mqtt.client as mqtt

        protocol = mqtt.MQTTv5 if self.level == 5 else mqtt.MQTTv311
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, f"ledger-{self.level}",
                             protocol=protocol)
        client.reconnect_delay_set(0.05, 0.5)
        names: dict[int, str] = {}  # paho's message id -> the message
        acknowledged: set[int] = set()

        def on_publish(client: Any, userdata: Any, mid: int, *rest: Any) -> None:
            acknowledged.add(mid)  # QoS 1: PUBACK; QoS 2: PUBCOMP

        client.on_publish = on_publish
        client.connect(HOST, self.port)
        client.loop_start()
        try:
            for n in range(count):
                if gate is not None and n == gate_at:
                    gate.wait(TIMEOUT)
                if self.stop.is_set():
                    break
                name = f"{self.level}-{n}"
                # While the broker is away paho keeps the message and sends it once
                # reconnected (info.rc then says "not connected").
                info = client.publish(f"live/{self.level}/{n}", name.encode(), qos=1 + n % 2)
                names[info.mid] = name
                time.sleep(1 / rate)
            deadline = time.monotonic() + TIMEOUT
            while not names.keys() <= acknowledged and time.monotonic() < deadline \
                    and not self.stop.is_set():
                time.sleep(0.05)
        finally:
            client.loop_stop()
            client.disconnect()
            self.ledger |= {names[mid] for mid in acknowledged if mid in names}
            self.published = len(names)


# ---------------------------------------------------------------------------------------
# The subscriber alone


def subscriber(port: int, codec: ModuleType, client_id: str, version: int = 5,
               timeout: float = 60.0) -> Any:
    from mqttwire.session import ClientSession
    from mqttwire.spark.subscriber import Reconnect, Subscriber

    session = ClientSession(client_id, version=version, clean_start=False,
                            session_expiry_interval=600 if version == 5 else 0,
                            auto_ack=False, codec=codec)
    sub = Subscriber(HOST, port, [("live/#", 2)], session,
                     reconnect=Reconnect(0.05, 0.5, timeout))
    sub.start()
    return sub


@pytest.mark.parametrize("version", [4, 5])
def test_the_subscriber_survives_two_broker_restarts(codec: ModuleType, tmp_path: Path,
                                                     version: int) -> None:
    """A consumer that acknowledges each batch when it takes the next (as the source
    does: a batch is acknowledged after its commit), so that a taken and unacknowledged
    batch is there whenever the broker goes away.  Nothing the broker acknowledged to
    the publisher is missing; the subscriber ran on (three connections, the session
    resumed twice); and once everything taken is acknowledged, a new connection of the
    client id gets nothing again: the acknowledgements sent on the new connections for
    messages of the old ones were taken by the broker."""
    with broker(tmp_path) as b:
        sub = subscriber(b.port, codec, "restarts", version)
        got: Counter[str] = Counter()
        done = threading.Event()

        def consume() -> None:
            last = 0
            while not done.is_set():
                taken = sub.take()
                sub.ack_through(last)  # the previous batch: "committed"
                if taken:
                    last = taken[-1].seq
                    got.update(r.message.payload.decode() for r in taken)
                time.sleep(0.05)
            sub.ack_through(last)

        consumer = threading.Thread(target=consume)
        consumer.start()
        publisher = LedgerPublisher(b.port, version)
        publishing = threading.Thread(target=publisher.run, args=(1500, 500))
        publishing.start()
        try:
            for _ in range(2):
                time.sleep(0.6)
                b.restart(pause=0.5)
            publishing.join(TIMEOUT)
            deadline = time.monotonic() + TIMEOUT
            while not publisher.ledger <= set(got) and time.monotonic() < deadline:
                assert sub.error is None, sub.error
                time.sleep(0.05)
        finally:
            publisher.stop.set()
            done.set()
            consumer.join(TIMEOUT)
        assert sub.error is None, sub.error
        assert len(publisher.ledger) > 1000, len(publisher.ledger)
        missing = publisher.ledger - set(got)
        assert not missing, sorted(missing)[:20]
        assert sub.connections == 3
        log = b.log_text()
        # Resumed, not restarted: Clean Start 0 each time ("c0"; Mosquitto's "p2" is
        # 3.1.1), and the messages in flight were sent again with DUP set.
        assert log.count(f"as restarts (p{2 if version == 4 else 5}, c0") == 3
        assert "Sending PUBLISH to restarts (d1, q" in log
        duplicates = sum(n - 1 for n in got.values())
        print(f"\n{len(got)} messages, {duplicates} received twice or more")
        sub.close()
        again = subscriber(b.port, codec, "restarts", version)
        time.sleep(1.0)
        assert again.take() == []
        again.close()


def test_the_subscriber_gives_up_on_a_broker_that_stays_away(codec: ModuleType,
                                                               tmp_path: Path) -> None:
    with broker(tmp_path) as b:
        sub = subscriber(b.port, codec, "gives-up", timeout=1.0)
        b.stop()
        deadline = time.monotonic() + TIMEOUT
        while sub.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        said = str(sub.error)
        assert said.startswith(f"gave up after 1 s reconnecting to {HOST}:{b.port} "
                               "(reconnectTimeout 1 s, "), said
        assert f"the last: cannot connect to {HOST}:{b.port}: Connection refused" in said
        assert "the connection had ended: " in said
        sub.close()


def test_a_lost_session_is_said_and_can_fail(codec: ModuleType, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """A broker restarted without its database (persistence lost): Session Present 0.
    By default the subscriber logs the loss as an error and subscribes again; with
    fail_on_session_loss it ends, saying why."""
    from mqttwire.session import ClientSession
    from mqttwire.spark.subscriber import Reconnect, Subscriber

    with broker(tmp_path) as b:
        subs = []
        for fail in (False, True):
            session = ClientSession(f"lost-{fail}", version=5, clean_start=False,
                                    session_expiry_interval=600, auto_ack=False,
                                    codec=codec)
            subs.append(Subscriber(HOST, b.port, [("live/#", 1)], session,
                                   reconnect=Reconnect(0.05, 0.2, 30),
                                   fail_on_session_loss=fail))
            subs[-1].start()
        b.stop()
        (tmp_path / "mosquitto.db").unlink()
        with caplog.at_level("ERROR", logger="mqttwire.spark.subscriber"):
            b.start()
            deadline = time.monotonic() + TIMEOUT
            while (subs[0].connections < 2 or subs[1].error is None) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
        assert subs[0].error is None and subs[0].session.connected
        assert "the broker kept no session for it (Session Present 0)" in caplog.text
        assert "subscribing again" in caplog.text
        assert "the broker kept no session for it" in str(subs[1].error)
        assert b.log_text().count("Received SUBSCRIBE from lost-False") == 2
        for sub in subs:
            sub.close()


# ---------------------------------------------------------------------------------------
# A streaming query (a driver process of its own) across two broker restarts, then a
# broker that stays away


@pytest.mark.spark
@pytest.mark.once  # the subscriber under it is tested with both codecs above
def test_the_query_runs_on_across_broker_restarts_and_fails_past_the_bound(
        tmp_path: Path) -> None:
    """Publishers at 3.1.1 and 5.0 (QoS 1 and 2, a ledger of what the broker
    acknowledged) run while Mosquitto is restarted twice, the query's micro-batches under
    way: the query does not fail, and every acknowledged message is in its output.  Then
    the broker stops for good: the query fails once reconnectTimeout (8 s) has passed,
    with an error that says so.  Mid-stream whatever the speed of the query: the first
    restart once it has written rows, the second once it writes again, and the
    publishers' last 500 messages each wait for the second."""
    with broker(tmp_path) as b:
        job = Job(tmp_path / "out", tmp_path / "checkpoint", tmp_path / "stop",
                  {"url": b.url, "topics": "live/5/#,live/4/#", "qos": "2",
                   "clientId": "restart-job", "version": "5", "sessionExpiry": "600",
                   "reconnectDelay": "0.1", "reconnectMaxDelay": "1",
                   "reconnectTimeout": "8"})
        job.start(tmp_path / "job.log")
        publishers = [LedgerPublisher(b.port, 5), LedgerPublisher(b.port, 4)]
        gate = threading.Event()
        threads = [threading.Thread(target=p.run, args=(1500, 250, gate, 1000))
                   for p in publishers]
        try:
            deadline = time.monotonic() + 120  # Spark's start
            while "Sending SUBACK to restart-job" not in b.log_text():
                assert time.monotonic() < deadline and not job.ended(), job.log_tail()
                time.sleep(0.1)
            for t in threads:
                t.start()
            for _ in range(2):
                deadline = time.monotonic() + TIMEOUT
                written = len(rows(job.out))
                while len(rows(job.out)) < written + 20:  # batches are being written
                    assert time.monotonic() < deadline and not job.ended(), job.log_tail()
                    time.sleep(0.1)
                b.restart(pause=1.0)
            gate.set()
            for t in threads:
                t.join(TIMEOUT)
            ledger = set().union(*(p.ledger for p in publishers))
            assert len(ledger) > 2500, len(ledger)
            deadline = time.monotonic() + TIMEOUT
            while not ledger <= {ident(r) for r in rows(job.out)}:
                assert time.monotonic() < deadline and not job.ended(), (
                    f"missing {sorted(ledger - {ident(r) for r in rows(job.out)})[:20]}; "
                    + job.log_tail())
                time.sleep(0.3)
            deadline = time.monotonic() + TIMEOUT
            while b.log_text().count("as restart-job (p5, c0") < 3:  # resumed twice
                assert time.monotonic() < deadline and not job.ended(), job.log_tail()
                time.sleep(0.1)
            assert not job.ended(), job.log_tail()
            assert job.log_tail().count("session resumed") == 2, job.log_tail()
            got = Counter(ident(r) for r in rows(job.out))
            print(f"\n{len(ledger)} acknowledged messages, {len(got)} distinct rows, "
                  f"{sum(n - 1 for n in got.values())} duplicates")
            b.stop()  # for good
            assert job.proc is not None
            status = job.proc.wait(60)
            said = job.log_tail()
            assert status == 1, said
            assert "query failed:" in said and "gave up after" in said, said
            assert f"reconnecting to {HOST}:{b.port} (reconnectTimeout 8 s" in said, said
        finally:
            for p in publishers:
                p.stop.set()
            gate.set()
            if job.proc is not None and job.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.proc.pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------
# The re-run of a batch the sink had committed before the crash


@pytest.mark.spark
@pytest.mark.once  # the reader's side of it is a unit test in test_live.py
def test_a_batch_written_but_not_committed_before_a_crash_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver killed (SIGKILL, with its JVM and workers) after the file sink wrote a
    batch's log entry (``_spark_metadata/N``) and before the checkpoint wrote
    ``commits/N``; restarted from the checkpoint, the query runs batch N again, and the
    file sink skips it as already written.

    The question: can the source then acknowledge messages that were never written?
    The first driver never acknowledged batch N (that happens at the next trigger, after
    ``commits/N``), nor what it received after planning N.  The broker sends all of it
    again to the restarted driver.  Had the re-run batch taken those messages as its
    rows (as it once did), the skipped write would be followed by their acknowledgement,
    and the messages received after N was planned, never written, would be lost.  The
    re-run batch has no rows; the messages sent again go to batch N+1, written, then
    acknowledged.  So every message the broker acknowledged to the publishers is in the
    output (batch N's twice).

    The kill comes from inside the job (LIVE_JOB_KILL_BETWEEN_COMMITS, live_job.py): a
    thread polling both logs kills its process group in the window; the test checks that
    the checkpoint was left in that state."""
    with broker(tmp_path) as b:
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        job = Job(out, checkpoint, tmp_path / "stop",
                  {"url": b.url, "topics": "live/5/#,live/4/#", "qos": "2",
                   "clientId": "rerun-job", "version": "5", "sessionExpiry": "600"})
        monkeypatch.setenv("LIVE_JOB_KILL_BETWEEN_COMMITS", "1")
        job.start(tmp_path / "job-1.log")
        monkeypatch.delenv("LIVE_JOB_KILL_BETWEEN_COMMITS")
        publishers = [LedgerPublisher(b.port, 5), LedgerPublisher(b.port, 4)]
        threads = [threading.Thread(target=p.run, args=(1000, 200)) for p in publishers]
        try:
            # Publishing from the first (empty) batch's end on, so that the batches
            # after it each get some, and messages arrive while each runs.
            deadline = time.monotonic() + 120  # Spark's start
            while not (out / "_spark_metadata" / "0").exists():
                assert time.monotonic() < deadline and not job.ended(), job.log_tail()
                time.sleep(0.05)
            for t in threads:
                t.start()
            assert job.proc is not None
            assert job.proc.wait(TIMEOUT) == -signal.SIGKILL, job.log_tail()
            batch = max(int(p.name.split(".")[0]) for p in (out / "_spark_metadata").iterdir()
                        if p.name.split(".")[0].isdigit())
            assert (checkpoint / "offsets" / str(batch)).exists()
            assert not (checkpoint / "commits" / str(batch)).exists()
            written = Counter(ident(r) for r in rows(out))
            # The case in question: the killed driver had received messages that no
            # batch it wrote held (the broker sent more than the rows written).
            sent = b.log_text().count("Sending PUBLISH to rerun-job")
            assert sent > sum(written.values()), (sent, sum(written.values()))
            job.start(tmp_path / "job-2.log")
            deadline = time.monotonic() + 120  # Spark's start
            while b.log_text().count("as rerun-job (p5, c0") < 2:
                assert time.monotonic() < deadline and not job.ended(), job.log_tail()
                time.sleep(0.1)
            for t in threads:
                t.join(TIMEOUT)
            ledger = set().union(*(p.ledger for p in publishers))
            assert len(ledger) > 1800, len(ledger)
            deadline = time.monotonic() + TIMEOUT
            while not ledger <= {ident(r) for r in rows(out)}:
                assert time.monotonic() < deadline and not job.ended(), (
                    f"missing {sorted(ledger - {ident(r) for r in rows(out)})[:20]}; "
                    + job.log_tail())
                time.sleep(0.3)
            assert job.stop() == 0, job.log_tail()
            got = Counter(ident(r) for r in rows(out))
            print(f"\nkilled after batch {batch}'s sink commit with {sum(written.values())} "
                  f"rows written, {sent} messages received; {len(got)} distinct rows, "
                  f"{sum(n - 1 for n in got.values())} duplicates")
            assert all(n <= 2 for n in got.values())
        finally:
            for p in publishers:
                p.stop.set()
            if job.proc is not None and job.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.proc.pid, signal.SIGKILL)
