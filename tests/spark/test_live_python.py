"""Which Python Spark's workers run, for the live source: examples/live_to_parquet.py run
with a PYSPARK_PYTHON that cannot import mqttwire's dependencies stops before the query
starts, in one line naming the fix.  (The common case, the example run from a virtualenv
with no PYSPARK_PYTHON and no virtualenv on PATH, is test_live.py's Ctrl-C test.)"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from test_live import EXAMPLE, HOST, REPO, free_port

pytestmark = [pytest.mark.spark, pytest.mark.once]  # no codec in it


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
