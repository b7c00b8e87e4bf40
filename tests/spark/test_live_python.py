"""Which Python Spark's workers run, for the live source: examples/live_to_parquet.py run
with a PYSPARK_PYTHON that cannot import mqttwire's dependencies stops before the query
starts, in one line naming the fix; for a cluster master the fix named is the cluster's
(its branch checked with a stand-in session: a standalone cluster costs a minute).  (The
common case, the example run from a virtualenv with no PYSPARK_PYTHON and no virtualenv
on PATH, is test_live.py's Ctrl-C test.)"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from local_servers import HOST, free_port
from test_live import EXAMPLE, REPO

pytestmark = [pytest.mark.spark]


@pytest.mark.once  # no codec in it
def test_workers_that_cannot_import_mqttwire_stop_the_example_before_its_query(
        tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a Python without pyarrow (nor mqttwire)
    python = str(bare / "bin" / "python")
    env = dict(os.environ, SPARK_LOCAL_IP=HOST, PYSPARK_PYTHON=python)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), f"mqtt://{HOST}:{free_port()}", "t", str(out),
         str(tmp_path / "checkpoint")],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    said = done.stderr
    assert done.returncode == 1, said[-3000:]
    line = (f"live_to_parquet: Spark's Python workers run {python!r} (PYSPARK_PYTHON), "
            f"which cannot import pyarrow: start the session with "
            f"PYSPARK_PYTHON={sys.executable} (this interpreter)")
    assert line in said, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    assert not out.exists()  # the query never started


class _Session:
    """A classic SparkSession stand-in: its conf (the master, spark.pyspark.python)."""

    def __init__(self, master: str) -> None:
        self.settings = {"spark.master": master, "spark.app.id": f"app-{master}",
                         "spark.pyspark.python": "/opt/python3"}
        self.conf = self

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.settings.get(key, default)


@pytest.mark.parametrize(("master", "fix"), [
    ("spark://10.0.0.5:7077", "install mqttwire and pyarrow (pip install 'mqttwire[spark]') "
     "for that interpreter on every executor, or set PYSPARK_PYTHON (spark-submit: --conf "
     "spark.pyspark.python=...) to one that has them: docs/cluster.md"),
    ("local[2]", f"start the session with PYSPARK_PYTHON={sys.executable} (this interpreter)"
     " in the environment, or with mqttwire.spark.startup.make_session(), which sets it for"
     " a local master"),
])
def test_the_worker_check_names_the_fix_for_the_master(
        master: str, fix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster case without a cluster (its branch of the message): executors whose
    python lacks mqttwire, PYSPARK_PYTHON unset (the session's spark.pyspark.python
    names it)."""
    from mqttwire.spark.startup import WorkerPythonError, check_python_workers

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    # The worker's answer: its interpreter, and the module it could not import.
    monkeypatch.setattr("mqttwire.spark.startup._run_probe",
                        lambda spark: ("/opt/python3", "mqttwire"))
    spark = _Session(master)
    with pytest.raises(WorkerPythonError) as exc:
        check_python_workers(spark)  # type: ignore[arg-type]
    assert str(exc.value) == (
        "Spark's Python workers run '/opt/python3' (PYSPARK_PYTHON), which cannot import "
        f"mqttwire: {fix}")
