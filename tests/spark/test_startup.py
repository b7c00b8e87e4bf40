"""The Spark that run_pipeline starts for itself: a context, and a SQL session only when
a step needs one (mqttwire.spark.pipeline._Spark, mqttwire.spark.startup.make_context)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from spark_scenarios import capture_b

# once: which Spark objects the driver makes does not depend on the codec implementation
pytestmark = [pytest.mark.spark, pytest.mark.once]

REPO = Path(__file__).resolve().parents[2]

# Counts the SQL sessions made in the driver, runs the pipeline twice (the tasks write
# from a local file; then the binaryFile reader, which runs SQL), and makes a context
# and a session on it as the pipeline would, to read the session's settings.
SCRIPT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    from mqttwire.spark import PipelineOptions, run_pipeline
    from mqttwire.spark.startup import make_context

    made = []
    init = SparkSession.__init__
    def counting(self, *args, **kwargs):
        made.append(1)
        init(self, *args, **kwargs)
    SparkSession.__init__ = counting

    capture, out = sys.argv[1], sys.argv[2]
    seen = {}
    for reader in ("stream", "binaryfile"):
        before = len(made)
        result = run_pipeline(PipelineOptions([capture], f"{out}/{reader}", master="local[1]",
                                              reader=reader, progress_interval=0))
        seen[reader] = {"sessions": len(made) - before, "packets": result.packets,
                        "counts": result.counts}
    make_context("local[1]")
    conf = SparkSession.builder.getOrCreate().conf
    seen["conf"] = {key: conf.get(key) for key in (
        "spark.sql.session.timeZone", "spark.sql.execution.arrow.maxRecordsPerBatch")}
    print(json.dumps(seen))
""")


def test_the_pipeline_makes_a_sql_session_only_when_a_step_runs_sql(tmp_path: Path) -> None:
    capture = capture_b(tmp_path / "b.pcap").path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(capture), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["stream"]["sessions"] == 0  # the tasks wrote the tables: no SQL ran
    assert seen["binaryfile"]["sessions"] == 1  # binaryFile is a SQL source
    assert seen["stream"]["packets"] == seen["binaryfile"]["packets"] > 0
    assert seen["stream"]["counts"] == seen["binaryfile"]["counts"]
    # A session made on the context later has the context's spark.sql settings.
    assert seen["conf"] == {"spark.sql.session.timeZone": "UTC",
                            "spark.sql.execution.arrow.maxRecordsPerBatch": "1"}
