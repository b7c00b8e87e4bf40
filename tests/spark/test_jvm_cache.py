"""``mqttwire pipeline --jvm-cache DIR``: the driver JVM's class archive
(mqttwire.spark.startup.ClassArchive), written by a first run and mapped by the next."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from spark_scenarios import capture_b

# once: the archive is the JVM's; the Python side decoding is not involved
pytestmark = [pytest.mark.spark, pytest.mark.once]

REPO = Path(__file__).resolve().parents[2]


def _pipeline(capture: Path, out: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return subprocess.run(
        [sys.executable, "-m", "mqttwire", "pipeline", str(capture), "--out", str(out),
         "--master", "local[1]", "--progress", "0", "--jvm-cache", str(cache)],
        capture_output=True, text=True, env=env, cwd=out.parent, timeout=300, check=False)


def test_first_run_writes_the_archive_and_the_next_maps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not the test run's Spark settings (tests/conftest.py), here or in the runs: with
    # files in Spark's configuration folder no archive is asked for
    # (ClassArchive.unwritable, test_cli.py).
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    capture = capture_b(tmp_path / "b.pcap").path
    cache = tmp_path / "jvm cache"  # a space: the JVM option is quoted for Spark
    first = _pipeline(capture, tmp_path / "one", cache)
    assert first.returncode == 0, first.stderr[-3000:]
    (archive,) = cache.iterdir()  # the archive, and no part of one left behind
    assert f"wrote the JVM's class archive {archive}" in first.stderr
    assert archive.suffix == ".jsa" and archive.stat().st_size > 10 << 20
    stamp = archive.stat().st_mtime_ns

    second = _pipeline(capture, tmp_path / "two", cache)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "class archive" not in second.stderr
    assert list(cache.iterdir()) == [archive] and archive.stat().st_mtime_ns == stamp
    for run in (first, second):  # the JVM's CDS log is off (hundreds of lines when on)
        assert "[cds]" not in run.stdout + run.stderr
    summaries = [(tmp_path / name / "summary.md").read_text().replace(str(tmp_path / name),
                                                                      "OUT")
                 for name in ("one", "two")]
    assert summaries[0] == summaries[1]

    # Only an archive that a JVM starts with is kept: a truncated one crashes Java 17
    # (where one it cannot use is ignored), so ClassArchive.finish tries the archive that
    # the JVM wrote before it moves it into place.
    from mqttwire.spark import startup
    from mqttwire.spark.startup import ClassArchive, usable_archive

    assert usable_archive(str(archive))
    monkeypatch.setattr(startup, "_end_jvm", lambda: None)  # no JVM of this process's
    archive.rename(cache / "whole")
    cut = ClassArchive(str(cache))
    cut.java_option()  # asks for an archive, as a first run does
    assert cut.writing is not None
    Path(cut.writing).write_bytes((cache / "whole").read_bytes()[:4 << 20])
    monkeypatch.chdir(tmp_path)
    assert not usable_archive(cut.writing)
    assert not list(tmp_path.glob("hs_err*")) and not list(tmp_path.glob("core*"))
    assert cut.finish() is False
    assert [p.name for p in cache.iterdir()] == ["whole"]  # the cut one removed

    whole = ClassArchive(str(cache))
    whole.java_option()
    assert whole.writing is not None
    (cache / "whole").rename(whole.writing)
    assert whole.finish() is True
    assert [p.name for p in cache.iterdir()] == [Path(whole.path).name]
