"""Starting Spark for the pipeline: the Java check, the environment, the session.

Facts behind the settings (measured on the project's machines; docs/cluster.md):
Python workers start whatever ``python3`` is on PATH unless PYSPARK_PYTHON names the
interpreter that has mqttwire and pyarrow; and a host whose name resolves to 127.0.0.1
makes Spark pick another interface's address unless the driver is pinned to loopback.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JavaMissing", "default_master", "find_java", "is_on_this_host", "make_session",
           "under_spark_submit"]

LOOPBACK = "127.0.0.1"


class JavaMissing(RuntimeError):
    """No Java runtime: Spark cannot start."""


def find_java() -> str:
    """The ``java`` that Spark will run: $JAVA_HOME/bin/java if JAVA_HOME is set, else
    the first on PATH.  Raises :class:`JavaMissing` with what to do when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home, "bin", "java")
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        raise JavaMissing(
            f"JAVA_HOME is {home!r}, but {java} is not an executable: point JAVA_HOME at "
            "a Java 17 or 21 runtime (Spark 4 needs one), or unset it to use `java` from PATH")
    found = shutil.which("java")
    if found is None:
        raise JavaMissing(
            "Java was not found (no JAVA_HOME, no `java` on PATH): Spark 4 needs a Java 17 "
            "or 21 runtime, e.g. `apt-get install openjdk-17-jre-headless` on Debian 12, "
            "or set JAVA_HOME")
    return found


def under_spark_submit() -> bool:
    """Whether this process was started by spark-submit (which starts the JVM first and
    tells pyspark its gateway port), so that spark-submit's --master and --conf apply."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def default_master() -> str | None:
    """The master when none is asked for: spark-submit's (None: leave it to Spark),
    else ``local[*]``."""
    return None if under_spark_submit() else "local[*]"


def is_on_this_host(master: str | None) -> bool:
    """Whether ``master`` runs its executors on this machine: ``local[...]`` or a
    standalone master on a loopback address (None, spark-submit's: not known here)."""
    if master is None:
        return False
    if master.startswith("local"):
        return True
    host = urlsplit(master).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")


def make_session(master: str | None = "local[*]", *, app_name: str = "mqttwire-pipeline",
                 conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession for the pipeline; ``master`` None takes spark-submit's (or Spark's
    configured) master.

    Sets PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON to this interpreter unless already set.
    When ``master`` runs on this host, Spark is kept on loopback and the executors import
    mqttwire from where this process does (so an uninstalled checkout works too); on a
    real cluster the executors need mqttwire and pyarrow themselves (docs/cluster.md).
    """
    find_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        # mapInArrow's input batches: one row per batch (a file's path, binaryFile's whole
        # content of a file, or one staged batch of the pipeline), so a task holds one at
        # a time.  Output batches are ours.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "1",
        "spark.ui.showConsoleProgress": "false",
        # The pipeline persists its staged batches on disk (see pipeline.py), through
        # Java serialisation, whose stream keeps every object written until it is reset:
        # by default every 100 objects, here 100 cached batches of up to 4 MB each.
        # Resetting after each one keeps a task's heap bounded by one batch.
        "spark.serializer.objectStreamReset": "1",
        # The packets table is partitioned by capture, and a task holds one capture: let
        # each task write its rows as they come through an open writer per capture,
        # instead of sorting them all by capture first (measured: 13% to 25% of the
        # table's write time).  A task with more captures than this would sort again.
        "spark.sql.optimizer.plannedWrite.enabled": "false",
        "spark.sql.maxConcurrentOutputFileWriters": "4",
    }
    local = is_on_this_host(master)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        settings["spark.driver.host"] = LOOPBACK
        settings["spark.driver.bindAddress"] = LOOPBACK
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH", "")
        if package_root not in path.split(os.pathsep):
            path = package_root + (os.pathsep + path if path else "")
            os.environ["PYTHONPATH"] = path
        settings["spark.executorEnv.PYTHONPATH"] = path
        settings["spark.executorEnv.PYSPARK_PYTHON"] = os.environ["PYSPARK_PYTHON"]
    settings.update(conf or {})

    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
