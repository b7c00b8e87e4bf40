"""What the Spark session the pipeline makes costs to start, with and without Spark's
busiest jars first on the driver's class path (mqttwire.spark.startup.busy_jars_first).

    python benchmarks/session_start.py [ROUNDS]

Each round runs two fresh processes, alternating: ``before`` (the class path as Spark's
launcher lists it) and ``after`` (the busiest jars first, as mqttwire's sessions have
it).  Each makes a ``local[2]`` session with the pipeline's JVM settings (web UI off,
JIT at C1), then runs one small SQL job, and prints a JSON line: the wall seconds of the
session's start and of the job, the JVM's CPU seconds after each (its /proc stat:
every thread, class loading and JIT included), and the load average.  Compare only
within one run of this script: the machine's speed varies from day to day.
"""

from __future__ import annotations

import subprocess
import sys
import time

CHILD = """
import json, os, sys, time
import mqttwire.spark.startup as startup
from mqttwire.spark.run import NO_UI, QUICK_JIT

if sys.argv[1] == "before":
    startup.busy_jars_first = lambda conf=None: None
conf = {**NO_UI, "spark.driver.extraJavaOptions": QUICK_JIT}
started = time.monotonic()
spark = startup.make_session("local[2]", conf=conf)
made = time.monotonic()
pid = spark.sparkContext._gateway.proc.pid

def jvm_cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

session_cpu = jvm_cpu()
spark.range(1000).selectExpr("sum(id)").collect()
done = time.monotonic()
print(json.dumps({"variant": sys.argv[1], "session_wall": round(made - started, 2),
                  "session_jvm_cpu": session_cpu, "job_wall": round(done - made, 2),
                  "jvm_cpu": jvm_cpu(), "load": round(os.getloadavg()[0], 2)}))
spark.stop()
"""


def main(rounds: int) -> None:
    for _ in range(rounds):
        for variant in ("before", "after"):
            done = subprocess.run([sys.executable, "-c", CHILD, variant], check=True,
                                  capture_output=True, text=True)
            print(done.stdout.strip().splitlines()[-1], flush=True)
            time.sleep(1)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
