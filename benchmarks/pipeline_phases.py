"""Where the pipeline's time goes, on one capture: the task's steps alone, then the run.

    python benchmarks/pipeline_phases.py FILE [--master local[2]]

The steps of one task, each run alone in this process over the whole file and timed by
wall clock and process CPU time (each row includes the ones above it):

1. ``read_capture``: reading, TCP reassembly and MQTT decoding, every record built;
2. the same, the records also fed to the derived tables (:mod:`mqttwire.spark.derive`), a
   chunk at a time as a task feeds them;
3. ``decode_capture``: the same, with every table's Arrow batches built (what a
   pipeline task runs: where the compiled loop and derived tables are built, the
   columnar path of :mod:`mqttwire.spark.columnar`, which builds no Record per packet;
   steps 1 and 2 still build them);
4. the same, each batch staged (an LZ4-compressed Arrow IPC stream in one row).

Then, alone: ``packets_table`` (:mod:`mqttwire.capture.arrow`), the packets table of
the capture as a ``pyarrow.Table`` without the derived tables.  After the table, how
the columnar path's records went (:data:`mqttwire.spark.columnar.last_counts`): records
of the compiled loop, how many of them had to be made Records for the derived tables
(the fallbacks) and how many it read without the codec's decoder (the direct reading;
the others went through the decoder), and the records the pure code made.

Then ``mqttwire pipeline FILE --out TMP`` from start to exit, with the wall seconds of its
phases as the driver reports them (list, decode, write, summary: see
``PipelineResult.timings``).  One run each: report medians of several runs in
benchmarks/capture.md only when they were measured.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _timed(run: Callable[[], int]) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    n = run()
    return time.perf_counter() - wall, time.process_time() - cpu, n


def _steps(path: str) -> list[tuple[str, float, float, int]]:
    from mqttwire.capture import read_capture
    from mqttwire.spark.decoding import BATCH_ROWS, GC_THRESHOLD, decode_capture, stage
    from mqttwire.spark.derive import CaptureTables

    name = os.path.basename(path)
    keep = sys.maxsize  # the pipeline keeps payloads whole

    def records() -> int:
        n = 0
        for _ in read_capture(path, payload_limit=keep, stream_ends=True):
            n += 1
        return n

    def derived() -> int:
        # As a task feeds them: a chunk of records at a time (add_many, the compiled
        # path where it is built).
        tables = CaptureTables(name)
        records = read_capture(path, payload_limit=keep, stream_ends=True)
        n = 0
        while chunk := list(islice(records, BATCH_ROWS)):
            tables.add_many(chunk)
            n += len(chunk)
        tables.finish()
        return n

    def batches(staged: bool) -> Callable[[], int]:
        def run() -> int:
            n = 0
            with open(path, "rb") as f:
                for table, batch in decode_capture(f, name, payload_limit=keep):
                    if staged:
                        stage(table, batch)
                    n += batch.num_rows
            return n
        return run

    def table() -> int:
        from mqttwire.capture.arrow import packets_table

        return packets_table(path, payload_limit=keep).num_rows

    steps = [("1. read_capture", records), ("2. + derived tables", derived),
             ("3. + Arrow batches", batches(False)), ("4. + staged rows", batches(True))]
    try:
        import mqttwire.capture.arrow  # noqa: F401
        steps.append(("packets_table (alone)", table))
    except ImportError:  # an earlier tree, for a before/after
        pass
    rows = []
    for label, run in steps:
        # Every step with the garbage collector's threshold of a decoding task
        # (decode_capture sets it for itself; the first two steps need it set here).
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], GC_THRESHOLD), *thresholds[1:])
        try:
            wall, cpu, n = _timed(run)
        finally:
            gc.set_threshold(*thresholds)
        rows.append((label, wall, cpu, n))
    return rows


def _pipeline(path: str, master: str) -> tuple[float, str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "mqttwire", "pipeline", path, "--out", out, "--master",
             master, "--progress", "0"], capture_output=True, text=True, env=env,
            check=False)
        wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"the pipeline failed:\n{proc.stderr[-3000:]}")
    phases = re.search(r"wall seconds by phase: (.*)", proc.stderr)
    return wall, phases.group(1) if phases else "(not reported)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    import mqttwire

    size = os.path.getsize(args.capture) / 1e6
    print(f"{args.capture}: {size:.1f} MB; mqttwire {mqttwire.IMPLEMENTATION}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| step (one task's work, alone) | wall s | CPU s | records or table rows "
          "| CPU ns per MQTT packet |")
    print("|---|---:|---:|---:|---:|")
    steps = _steps(args.capture)
    packets = steps[0][3]
    for label, wall, cpu, n in steps:
        print(f"| {label} | {wall:.2f} | {cpu:.2f} | {n:,} | {cpu / packets * 1e9:,.0f} |")
    try:
        from mqttwire.spark.columnar import AVAILABLE, last_counts
    except ImportError:  # a tree without the columnar path
        AVAILABLE = False
    if AVAILABLE:
        direct = getattr(last_counts, "direct", None)  # trees before the direct reading
        print(f"\ncolumnar path (step 4): {last_counts.fast:,} records of the compiled "
              f"loop, {last_counts.fallbacks:,} of them made Records for the derived "
              f"tables (fallbacks)"
              + ("" if direct is None else f", {direct:,} read without the decoder")
              + f"; {last_counts.side:,} records of the pure code")
    else:
        print("\ncolumnar path: not available (steps 3 and 4 build Records)")
    wall, phases = _pipeline(args.capture, args.master)
    print(f"\npipeline on {args.master}, start to exit: {wall:.1f} s wall; "
          f"its phases: {phases}")


if __name__ == "__main__":
    main()
