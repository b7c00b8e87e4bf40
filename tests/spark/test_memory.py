"""The pipeline's memory does not grow with the size of a capture file.

One capture file is one task, and the task's whole output (every table of the file) has
to be kept between the five table writes.  When that output was persisted at a memory
level, Spark built it in the heap first: a 200 MB capture ran out of the default 1 GiB
heap, and a 50 MB one out of a 512 MiB heap (measured with that version, which still
passed with a 20 MB capture).  This test runs the 50 MB capture in a 512 MiB heap, about
the smallest that Spark accepts (it reserves 300 MiB and wants 1.5 times that), in one
task and split over several.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# once: the heap holds Spark's side of the run (the staged rows, the Parquet writers),
# whichever implementation decodes in the Python workers; scripts/test.sh runs it in its
# first pass only.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.once]

REPO = Path(__file__).resolve().parents[2]
MAKE_CAPTURE = REPO / "benchmarks" / "make_capture.py"


@pytest.fixture(scope="module")
def big_capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """A 50 MB capture of make_capture.py, and its counts."""
    if not MAKE_CAPTURE.is_file():
        pytest.skip("needs benchmarks/make_capture.py of the source checkout")
    capture = tmp_path_factory.mktemp("memory") / "big.pcap"
    subprocess.run([sys.executable, str(MAKE_CAPTURE), str(capture), "--size-mb", "50"],
                   check=True, capture_output=True, timeout=600)
    return capture, json.loads(Path(f"{capture}.json").read_text())


# "0": the file in one task; "8m": split into 7 ranges, whose rows Spark keeps on disk and
# shuffles (its sort spills to disk when the heap is short).
@pytest.mark.parametrize("split_size", ["0", "8m"])
def test_a_big_capture_in_a_small_heap(big_capture: tuple[Path, dict[str, int]],
                                       split_size: str, tmp_path: Path) -> None:
    capture, counts = big_capture
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("PYSPARK_SUBMIT_ARGS", None)  # it would win over --driver-memory
    proc = subprocess.run(
        [sys.executable, "-m", "mqttwire", "pipeline", str(capture), "--out",
         str(tmp_path / "out"), "--master", "local[2]", "--driver-memory", "512m",
         "--progress", "0", "--split-size", split_size],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1200, check=False)
    assert "OutOfMemoryError" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = re.search(r"^done: .*?([\d,]+) packets, .*?([\d,]+) messages, in", proc.stdout,
                     re.M)
    assert done is not None, proc.stdout[-3000:]
    packets = sum(n for name, n in counts.items() if name.isupper())
    assert int(done.group(1).replace(",", "")) == packets
    assert int(done.group(2).replace(",", "")) == counts["PUBLISH"]
