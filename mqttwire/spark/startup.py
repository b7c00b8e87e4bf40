"""Starting Spark for the pipeline: the Java check, the environment, the session.

Facts behind the settings (docs/cluster.md):
Python workers start whatever ``python3`` is on PATH unless PYSPARK_PYTHON names the
interpreter that has mqttwire and pyarrow; and a host whose name resolves to 127.0.0.1
makes Spark pick another interface's address unless the driver is pinned to loopback.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession

__all__ = ["ClassArchive", "JavaMissing", "MasterError", "WorkerPythonError",
           "SESSION_SQL", "BUSY_JARS", "busy_jars_first", "check_master", "check_python_workers",
           "connect_session",
           "cores_of", "default_master", "find_java", "is_connect", "is_on_this_host",
           "jvm_lines_hidden",
           "make_session", "master_of", "spark_conf_dir", "under_spark_submit"]

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


class MasterError(ValueError):
    """A Spark master URL that cannot work, found before Spark starts (:func:`check_master`)."""


#: The master URLs Spark takes (Spark's "Master URLs" in its submitting-applications
#: guide): local, local[N], local[*], local[N,F], local[*,F], local-cluster[N,C,M],
#: spark://HOST:PORT[,HOST:PORT...], yarn, k8s://...
_LOCAL = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]")


def check_master(master: str | None, timeout: float = 3.0) -> None:
    """Raise :class:`MasterError`, in one line, for a master URL Spark could not use: one
    of no form Spark knows, or a standalone master (spark://) where nothing answers on
    any of its host:port pairs within ``timeout`` seconds.  Spark itself would take a
    minute of retries and some hundred lines of traces to say the same.  None (spark-
    submit's master) and the forms this cannot check (yarn, k8s://) pass."""
    if master is None or _LOCAL.fullmatch(master) or master == "yarn" \
            or master.startswith("k8s://"):
        return
    if not master.startswith("spark://"):
        raise MasterError(f"{master}: not a Spark master URL (local[N], spark://HOST:PORT, "
                          "yarn or k8s://...)")
    problems = []
    for pair in master[len("spark://"):].split(","):
        host, _, port = pair.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise MasterError(f"{master}: not a Spark master URL ({pair!r} is not "
                              "HOST:PORT)")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout):
                return  # something listens: Spark says the rest if it is no master
        except OSError as exc:
            problems.append(f"{pair}: {exc.strerror or exc}")
    raise MasterError(f"{master}: no Spark master answers ({'; '.join(problems)})")


def make_session(master: str | None = "local[*]", *, app_name: str = "mqttwire-pipeline",
                 conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession for the pipeline; ``master`` None takes spark-submit's (or Spark's
    configured) master.

    Sets PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON to this interpreter unless already set.
    When ``master`` runs on this host, Spark is kept on loopback and the executors import
    mqttwire from where this process does (so an uninstalled checkout works too); on a
    real cluster the executors need mqttwire and pyarrow themselves (docs/cluster.md).
    The log level is WARN from the start (``spark.log.level``), without a SparkContext
    call.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in _settings(master, conf).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


#: The JVM's start-up lines that say nothing to a user of the command: Java's note on
#: the incubating vector module, log4j's default profile, the native Hadoop library's
#: absence (pip's pyspark has none), and the log level's notes.
JVM_START_LINES = ("WARNING: Using incubator modules", "Using Spark's default log4j profile",
                   "Unable to load native-hadoop library", "Setting default log level to",
                   "To adjust logging level use", "Setting Spark log level to")


@contextlib.contextmanager
def jvm_lines_hidden() -> Iterator[None]:
    """While this runs, a process started (the JVM, by pyspark) gets a pipe for its
    stderr; a thread copies what it writes there to this process's stderr, without
    :data:`JVM_START_LINES`, for as long as it runs.  Nothing changes when stderr is
    not a file descriptor (under pytest's capture, say)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    sys.stderr.flush()
    original = os.dup(fd)
    read, write = os.pipe()
    threading.Thread(target=_copy_lines, args=(read, original), daemon=True,
                     name="mqttwire-jvm-stderr").start()
    os.dup2(write, fd)
    os.close(write)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(original, fd)  # this process's own lines go straight there again


def _copy_lines(read: int, out: int) -> None:
    with os.fdopen(read, "rb") as lines:
        for line in lines:
            text = line.decode(errors="replace")
            if not any(noise in text for noise in JVM_START_LINES):
                with contextlib.suppress(OSError):
                    os.write(out, line)
    os.close(out)


def connect_session(url: str) -> SparkSession:
    """A session on the Spark Connect server at ``url`` (``sc://HOST:PORT``).  The server
    has its own settings and PYSPARK_PYTHON; the pipeline sets only the SQL settings it
    needs on the session (:data:`SESSION_SQL`).  (PySpark then marks the process as a
    Connect client, with the environment variable SPARK_CONNECT_MODE_ENABLED: a classic
    session made later in the same process needs it removed first.)"""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    for key, value in SESSION_SQL.items():
        spark.conf.set(key, value)
    return spark


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def master_of(spark: SparkSession) -> str:
    """The master of ``spark``'s Spark (a Connect server's own), from its conf."""
    return str(spark.conf.get("spark.master", None) or "")


def cores_of(spark: SparkSession) -> int:
    """The cores Spark offers ``spark``'s tasks (its default parallelism), without a
    SparkContext: ``spark.default.parallelism`` when set; for a classic session on a
    local master, its N (``local[*]``: this machine's cores); else (a cluster, or a
    Spark Connect session, whose client cannot ask the JVM) one small DataFrame job: the
    partitions of a range made without a number of partitions, which Spark makes one
    per core (``spark.sql.leafNodeDefaultParallelism``, else the default
    parallelism)."""
    value = spark.conf.get("spark.default.parallelism", None)
    if value:
        return max(1, int(value))
    if not is_connect(spark):
        local = _LOCAL_CORES.fullmatch(master_of(spark))
        if local is not None:
            n = local.group(2)
            return (os.cpu_count() or 1) if n == "*" else max(1, int(n or 1))
    from pyspark.sql import functions as F

    last = (spark.range(0, 1 << 16).select(F.spark_partition_id().alias("part"))
            .agg(F.max("part")).first())
    return max(1, int(last[0]) + 1) if last is not None and last[0] is not None else 1


_LOCAL_CORES = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?")

#: The SQL settings the pipeline's tasks need on any session it makes, classic or
#: Connect (see :func:`_settings`).
SESSION_SQL = {
    "spark.sql.session.timeZone": "UTC",
    # mapInArrow's input batches: one row per batch (a file's path, binaryFile's whole
    # content of a file, one staged batch of the pipeline, or a split capture's
    # connection rows of up to 32 MiB), so a task holds one at a time.  Output batches
    # are ours.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "1",
    # The packets table is partitioned by capture, and a task holds one capture: let
    # each task write its rows as they come through an open writer per capture,
    # instead of sorting them all by capture first (a part of the table's write time:
    # benchmarks/history/capture.md).  A task with more captures than this would sort
    # again.
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "4",
}


#: The jars of Spark's distribution whose classes a session and the pipeline's first
#: jobs load most, most first: counted with the JVM's ``-Xlog:class+load`` over a
#: pipeline run (pyspark 4.x from PyPI: these 25 of its 280 jars hold 94% of the 11,064
#: classes it loads from jars).  Named by artifact, without the version.
BUSY_JARS = ("spark-catalyst", "scala-library", "spark-core", "scala-reflect",
             "spark-sql-api", "log4j-core", "jackson-databind", "spark-sql", "janino",
             "hadoop-client-api", "arrow-vector", "spark-config", "hadoop-client-runtime",
             "spark-network-common", "netty-common", "ivy", "netty-transport",
             "jackson-module-scala", "jackson-core", "spark-common-utils", "log4j-api",
             "netty-buffer", "icu4j", "jackson-annotations", "py4j")

#: A jar's artifact name: what comes before its Scala suffix and its version.
_ARTIFACT = re.compile(r"(.+?)(?:_2\.\d+)?-\d[^/]*\.jar")


def busy_jars_first(conf: dict[str, str] | None = None) -> str | None:
    """The driver's extra class path that puts :data:`BUSY_JARS` ahead of the rest of
    Spark's jars, or None where it would change what a user set (a class path of their
    own, in ``conf`` or in spark-defaults.conf), could not apply (spark-submit started
    the JVM) or finds no jars.

    Why: the JVM looks each class up in the jars of its class path one by one, in order,
    and Spark's launcher lists its jars directory in the file system's order, where the
    busiest jar (spark-catalyst, 2,280 classes) came 52nd of 280 here; a jar that comes
    again later (in ``jars/*``) is skipped, so nothing else changes.  The JVM spent about
    a sixth less CPU making a session (benchmarks/capture.md, "The Spark session's
    start")."""
    key = "spark.driver.extraClassPath"
    if under_spark_submit() or key in (conf or {}):
        return None
    from pyspark.find_spark_home import _find_spark_home

    home = _find_spark_home()
    with contextlib.suppress(OSError), open(os.path.join(spark_conf_dir(),
                                                         "spark-defaults.conf"),
                                            encoding="utf-8", errors="replace") as defaults:
        if any(line.split(None, 1)[:1] == [key] for line in defaults):
            return None
    jars = os.path.join(home, "jars")
    try:
        by_artifact: dict[str, str] = {}
        for name in sorted(os.listdir(jars)):
            match = _ARTIFACT.fullmatch(name)
            if match is not None:
                by_artifact.setdefault(match.group(1), os.path.join(jars, name))
    except OSError:
        return None
    found = [by_artifact[artifact] for artifact in BUSY_JARS if artifact in by_artifact]
    return os.pathsep.join(found) or None


def spark_conf_dir() -> str:
    """Spark's configuration folder: where its launcher reads spark-defaults.conf, and
    the first entry of the driver's class path (SPARK_CONF_DIR, else the Spark home's
    conf/, which pip's pyspark does not have)."""
    from pyspark.find_spark_home import _find_spark_home

    return os.environ.get("SPARK_CONF_DIR") or os.path.join(_find_spark_home(), "conf")


def _settings(master: str | None, conf: dict[str, str] | None) -> dict[str, str]:
    """The settings of a context or session for ``master``, ``conf`` over them; sets the
    environment they need (see :func:`make_session`)."""
    find_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        **SESSION_SQL,
        "spark.ui.showConsoleProgress": "false",
        # The log level from the start (SparkContext.setLogLevel without the context).
        "spark.log.level": "WARN",
        # The pipeline persists its staged batches on disk (see .tables), through
        # Java serialisation, whose stream keeps every object written until it is reset:
        # by default every 100 objects, here 100 cached batches of up to 4 MB each.
        # Resetting after each one keeps a task's heap bounded by one batch.
        "spark.serializer.objectStreamReset": "1",
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
    class_path = busy_jars_first(conf)
    if class_path is not None:
        settings["spark.driver.extraClassPath"] = class_path
    settings.update(conf or {})
    return settings


class WorkerPythonError(RuntimeError):
    """The Python that Spark's workers run cannot import mqttwire or pyarrow (or does not
    run): found before a query starts (:func:`check_python_workers`)."""


#: Run in a Spark Python worker: import what the live source's and the pipeline's tasks
#: import, and say which interpreter runs and what it could not import.  Compiled here
#: as a function of ``__main__``, so that it travels by value (a function of this module
#: would travel by reference, and a worker without mqttwire could not even load it), in a
#: plain (pickled, not Arrow) Python UDF, which a worker without pyarrow runs too: the
#: check's task never fails, and Spark logs no trace for it.
_PROBE_SOURCE = """
def probe(_):
    import sys
    for name in ("pyarrow", "mqttwire.spark.live"):
        try:
            __import__(name)
        except ImportError as exc:
            return sys.executable + "\\n" + (getattr(exc, "name", None) or name)
    return sys.executable + "\\n"
"""


def _run_probe(spark: SparkSession) -> tuple[str, str | None]:
    """The interpreter of Spark's Python workers, and the module it could not import
    (None: none missing): one task of a DataFrame job."""
    from pyspark.sql import functions as F

    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(_PROBE_SOURCE, "<mqttwire worker check>", "exec"), namespace)
    probe = F.udf(cast("Callable[[int], str]", namespace["probe"]), "string", useArrow=False)
    row = spark.range(1, numPartitions=1).select(probe("id").alias("seen")).first()
    python, _, missing = str(row[0] if row is not None else "").partition("\n")
    return python, missing or None


#: The Spark applications whose workers were checked (one job per application).
_checked_apps: set[str] = set()


def check_python_workers(spark: SparkSession) -> None:
    """Raise :class:`WorkerPythonError`, naming the fix, when Spark's Python workers
    cannot import mqttwire and pyarrow: one task (a DataFrame job, so on a classic or a
    Spark Connect session alike), run once per Spark application, imports them.  Spark
    starts its Python workers with PYSPARK_PYTHON (``python3`` from PATH when unset),
    not with the driver's interpreter: from a virtualenv that is not activated, or on a
    cluster whose executors lack mqttwire, every task would fail with
    ``ModuleNotFoundError``, and a streaming query only at its first batch."""
    key = str(spark.conf.get("spark.app.id", None) or id(spark))
    if key in _checked_apps:
        return
    try:
        _, missing = _run_probe(spark)
        why = None if missing is None else f"cannot import {missing}"
    except Exception as exc:
        text = str(exc)
        if "Cannot run program" in text or "No such file" in text:
            why = "cannot be started"
        else:
            raise
    if why is not None:
        if is_connect(spark):
            raise WorkerPythonError(
                f"the Spark Connect server's Python workers (its PYSPARK_PYTHON) {why}: "
                "start the server with PYSPARK_PYTHON naming an interpreter that has "
                "mqttwire and pyarrow (pip install 'mqttwire[spark]'): docs/cluster.md")
        python = (spark.conf.get("spark.pyspark.python", None)
                  or os.environ.get("PYSPARK_PYTHON"))
        local = is_on_this_host(master_of(spark))
        fix = (f"start the session with PYSPARK_PYTHON={sys.executable} (this interpreter) "
               "in the environment, or with mqttwire.spark.startup.make_session(), which "
               "sets it for a local master" if local else
               "install mqttwire and pyarrow (pip install 'mqttwire[spark]') for that "
               "interpreter on every executor, or set PYSPARK_PYTHON (spark-submit: "
               "--conf spark.pyspark.python=...) to one that has them: docs/cluster.md")
        raise WorkerPythonError(
            f"Spark's Python workers run {python or 'python3'!r} (PYSPARK_PYTHON"
            f"{'' if python else ' unset: python3 from PATH'}), "
            f"which {why}: {fix}")
    _checked_apps.add(key)


class ClassArchive:
    """A class-data-sharing archive of the classes that the driver's JVM loads (the JDK's
    dynamic CDS archive, JEP 350): the classes parsed and verified once, mapped into
    later JVMs instead of loaded again from Spark's jars: the session starts and its
    first job runs sooner (benchmarks/history/capture.md).

    One archive per pyspark version and Java runtime, named for both, in ``directory``.
    When there is none, the JVM writes one as it exits (about 150 MB; the run takes
    seconds longer): :meth:`java_option` asks for that, and :meth:`finish`, once the
    session is stopped, ends the JVM, waits for it and moves the archive into place
    (written under a name of this process's, so that runs at once never read or write a
    half-written archive; kept only if a JVM starts with it: :func:`usable_archive`).  A
    JVM that cannot map an archive (another class path, say) runs without it.

    Java writes no archive while a folder on the class path holds files ("Cannot have
    non-empty directory in paths", as the JVM exits), and Spark puts its configuration
    folder there (:func:`spark_conf_dir`): with files in it, none is asked for, and
    :attr:`unwritable` says why.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, f"spark-{_runtime_key()}.jsa")
        self.writing: str | None = None  # the archive the JVM is asked to write at exit
        self.unwritable: str | None = None  # why none was asked for, when so

    def __repr__(self) -> str:
        return f"ClassArchive({self.path!r}, {'writing' if self.writing else 'reading'})"

    def java_option(self) -> str:
        """The JVM option that maps the archive, or that writes it at exit; where none
        can be written (:attr:`unwritable`), the JVM's CDS log off alone."""
        # Without its log, the JVM names every class it leaves out of an archive (signed
        # jars, old class files: hundreds of lines) and warns when it cannot map one.
        quiet = "-Xlog:cds*=off"
        if os.path.isfile(self.path):
            return f"{_quoted('-XX:SharedArchiveFile=' + self.path)} {quiet}"
        folder = spark_conf_dir()
        with contextlib.suppress(OSError):
            if os.listdir(folder):
                self.unwritable = (f"Spark's configuration folder {folder} holds files, and "
                                   "Java writes no class archive while a folder on the "
                                   "class path does (Spark puts that one first)")
                return quiet
        os.makedirs(self.directory, exist_ok=True)
        self.writing = f"{self.path}.{os.getpid()}.part"
        return f"{_quoted('-XX:ArchiveClassesAtExit=' + self.writing)} {quiet}"

    def finish(self) -> bool:
        """After the session's stop: when the JVM was asked to write the archive, end it
        (pyspark starts another if a session is made again), wait, and move the archive
        into place.  Whether an archive was written."""
        if self.writing is None:
            return False
        _end_jvm()
        written = os.path.isfile(self.writing) and usable_archive(self.writing)
        if written:
            os.replace(self.writing, self.path)
        elif os.path.exists(self.writing):
            os.remove(self.writing)
        self.writing = None
        return written


def _quoted(option: str) -> str:
    """A JVM option as one word of spark.driver.extraJavaOptions, which Spark splits as a
    shell does (a path with a space in it is quoted)."""
    if not any(c.isspace() or c in "'\"\\" for c in option):
        return option
    return '"' + option.replace("\\", "\\\\").replace('"', '\\"') + '"'


def usable_archive(path: str) -> bool:
    """Whether a JVM starts with the class archive ``path``.  Java 17 crashes on a
    truncated archive (a disk that filled up as it was written, say) where it ignores
    one it cannot use, so an archive is tried once before it is kept."""
    # A crashing JVM writes hs_err_pid*.log into its working directory (and may dump
    # core): a directory of its own, removed after, and no core.
    with tempfile.TemporaryDirectory(prefix="mqttwire-jvm-") as scratch:
        try:
            done = subprocess.run([find_java(), f"-XX:SharedArchiveFile={path}",
                                   "-Xlog:cds*=off", "-XX:-CreateCoredumpOnCrash", "-version"],
                                  capture_output=True, timeout=60, check=False, cwd=scratch)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


def _runtime_key() -> str:
    """What an archive belongs to: pyspark's version (its jars), the Java runtime (its
    path, size and time) and the class path's head (:func:`busy_jars_first`: an archive
    maps only into a JVM whose class path starts as the writer's did)."""
    import pyspark

    java = os.path.realpath(find_java())
    stat = os.stat(java)
    text = (f"{pyspark.__version__}|{java}|{stat.st_size}|{stat.st_mtime_ns}|"
            f"{busy_jars_first() or ''}")
    return f"{pyspark.__version__}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def jvm_running() -> bool:
    """Whether this process already has a JVM (pyspark's gateway, or spark-submit's)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None or under_spark_submit()


#: How long a JVM asked to write its class archive may take to exit, in seconds: about
#: 60 on a quiet 2-core machine, over 120 seen on one loaded by other work.
ARCHIVE_WAIT = 900.0


def _end_jvm(timeout: float = ARCHIVE_WAIT) -> None:
    """End the JVM that pyspark started for this process (its session stopped), and wait
    for it: the JVM exits when its standard input closes (PythonGatewayServer).  One still
    running after ``timeout`` seconds is killed: its archive is then not written, and
    the run, whose output is complete, does not fail for it."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)  # None when spark-submit started the JVM
    if process is None:
        return
    SparkContext._gateway = None
    SparkContext._jvm = None
    gateway.close()
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
