"""The live source's soak run (not part of the suite: several minutes): the scenario of a
busy broker whose subscriber's driver is killed again and again.

Mosquitto (persistence on, ``max_inflight_messages 0``, ``max_queued_messages
100000``); two paho-mqtt publishers (MQTT 5.0 and 3.1.1) send MESSAGES numbered messages
between them, QoS 1 and 2 in turn, at RATE a second, each kept in a ledger once the
broker acknowledged it; a query (tests/spark/live_job.py: ``format("mqtt")``, QoS 2, a
fixed client id, Parquet with a checkpoint, a 500 ms trigger) reads them; its driver's
process group is SIGKILLed KILLS times (the first once its first batch committed), each
time as the query's connection is accepted by the broker, and restarted on the same
checkpoint.  It passes when every
acknowledged message is in the output and the query never failed.

    python tests/spark/soak_live_restarts.py --version 5    # and --version 4 (3.1.1)

Prints one line of figures (docs/live.md has the runs)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

from live_brokers import Mosquitto  # noqa: E402  (the path above first)
from local_servers import sample_maker  # noqa: E402
from test_live import Job, ident, rows  # noqa: E402
from test_live_restart import LedgerPublisher  # noqa: E402


def connections(broker: Mosquitto, client_id: str) -> int:
    return broker.log_text().count(f" as {client_id} (")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", type=int, choices=(4, 5), default=5,
                        help="the query's MQTT version (4: 3.1.1)")
    parser.add_argument("--messages", type=int, default=120_000)
    parser.add_argument("--rate", type=float, default=800.0, help="messages a second, in all")
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds for the run's output to hold every message")
    parser.add_argument("--capture", type=Path,
                        help="write the broker's traffic here (tcpdump, classic pcap)")
    args = parser.parse_args()
    client_id = f"soak-{args.version}"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="live-soak-") as tmp:
        folder = Path(tmp)
        broker = Mosquitto(folder, persistence=True, log_all=False)
        broker.start()
        out, checkpoint = folder / "out", folder / "checkpoint"
        job = Job(out, checkpoint, folder / "stop",
                  {"url": broker.url, "topics": "live/#", "qos": "2",
                   "clientId": client_id, "version": str(args.version)})
        os.environ["LIVE_JOB_TRIGGER"] = "500 milliseconds"
        publishers = [LedgerPublisher(broker.port or 0, 5), LedgerPublisher(broker.port or 0, 4)]
        threads = [threading.Thread(target=p.run, args=(args.messages // 2, args.rate / 2))
                   for p in publishers]
        failed = 0
        capturing = contextlib.ExitStack()
        if args.capture:
            capturing.enter_context(sample_maker().tcpdump(
                str(args.capture), broker.port or 0, buffer_kib=1 << 18, immediate=False))
        try:
            job.start(folder / "job-0.log")
            for t in threads:
                t.start()
            # The first run commits a batch before it is killed: killed while writing
            # batch 0's offsets, Spark 4 cannot restart the query on that checkpoint
            # ([STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY]), whatever the source.
            while not job.ended() and not any(
                    p.name.isdigit() for p in (checkpoint / "commits").glob("*")):
                time.sleep(0.1)
            seen = connections(broker, client_id)  # the first run's, made already
            for kill in range(1, args.kills + 1):
                # After the first, each kill comes as the restarted query connects.
                while kill > 1 and connections(broker, client_id) <= seen:
                    if job.ended():
                        failed += 1
                        print(f"the query ended before kill {kill}:\n{job.log_tail()}")
                        break
                    time.sleep(0.02)
                job.kill()
                seen = connections(broker, client_id)
                print(f"kill {kill} at {time.monotonic() - started:.0f} s, "
                      f"{len(rows(out))} rows", flush=True)
                job.start(folder / f"job-{kill}.log")
            for t in threads:
                t.join()
            ledger = set().union(*(p.ledger for p in publishers))
            deadline = time.monotonic() + args.timeout
            while not ledger <= {ident(r) for r in rows(out)} and time.monotonic() < deadline:
                if job.ended():
                    failed += 1
                    print(f"the query failed:\n{job.log_tail()}")
                    break
                time.sleep(1)
            written = {ident(r) for r in rows(out)}
            missing = ledger - written
            total_rows = len(rows(out))
            if job.stop() != 0:
                failed += 1
            logs = "".join((folder / f"job-{n}.log").read_text(errors="replace")
                           for n in range(args.kills + 1))
        finally:
            capturing.close()
            for p in publishers:
                p.stop.set()
            if job.proc is not None and job.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.proc.pid, signal.SIGKILL)
            broker.stop()
    overruns = logs.count("overran this client's in-flight window")
    print(f"v{args.version}: {len(ledger)} of {sum(p.published for p in publishers)} "
          f"messages acknowledged to the publishers, {len(ledger - missing)} written "
          f"({total_rows} rows: {total_rows - len(written)} duplicates), "
          f"{len(missing)} missing, {args.kills} kills, query failures {failed}, "
          f"overrun warnings {overruns}, {time.monotonic() - started:.0f} s")
    return 0 if not missing and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
