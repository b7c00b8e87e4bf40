"""The Spark that run_pipeline starts for itself: one SparkSession (make_session), with
the pipeline's settings, whatever the reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from spark_scenarios import capture_b

from mqttwire.spark.startup import BUSY_JARS

# once: which Spark objects the driver makes does not depend on the codec implementation
pytestmark = [pytest.mark.spark, pytest.mark.once]

REPO = Path(__file__).resolve().parents[2]

# Counts the SQL sessions made in the driver, runs the pipeline twice (the tasks write
# from a local file; then the binaryFile reader), and reads the settings of a session
# made as the pipeline makes it.
SCRIPT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    from mqttwire.spark import PipelineOptions, run_pipeline
    from mqttwire.spark.startup import make_session

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
    conf = make_session("local[1]").conf
    seen["conf"] = {key: conf.get(key) for key in (
        "spark.sql.session.timeZone", "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.log.level")}
    seen["class_path"] = conf.get("spark.driver.extraClassPath")
    print(json.dumps(seen))
""")


def test_the_pipeline_makes_one_session_with_its_settings(tmp_path: Path) -> None:
    capture = capture_b(tmp_path / "b.pcap").path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(capture), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["stream"]["sessions"] == seen["binaryfile"]["sessions"] == 1
    assert seen["stream"]["packets"] == seen["binaryfile"]["packets"] > 0
    assert seen["stream"]["counts"] == seen["binaryfile"]["counts"]
    assert seen["conf"] == {"spark.sql.session.timeZone": "UTC",
                            "spark.sql.execution.arrow.maxRecordsPerBatch": "1",
                            "spark.log.level": "WARN"}
    # The busiest jars first on the driver's class path (startup.busy_jars_first), each
    # one of Spark's own.
    head = seen["class_path"].split(os.pathsep)
    assert Path(head[0]).name.startswith("spark-catalyst_")
    assert Path(head[1]).name.startswith("scala-library-")
    assert len(head) == len(BUSY_JARS)
    assert all(Path(jar).is_file() and Path(jar).parent.name == "jars" for jar in head)
