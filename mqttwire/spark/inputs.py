"""The pipeline's inputs: capture paths or URIs (globs, directories) expanded into files.

Listing goes through Spark's Hadoop FileSystem, so every URI that Spark can read works
(file:, hdfs:, s3a:, abfs:, ... as configured).  An input that does not exist or cannot be
listed is kept as a :class:`CaptureFile` with ``problem`` set, so that it is reported by
name and gets an error row, while the other inputs are processed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["CaptureFile", "list_inputs", "local_path", "name_captures"]


@dataclass
class CaptureFile:
    """One capture file of the run.

    Attributes:
        uri: the fully qualified URI (``file:/data/a.pcapng``), or the input as given when
            it could not be listed.
        size: its length in bytes (0 if unknown).
        name: the capture's name in every table (its base name, made unique in the run).
        problem: why it cannot be read, or None.
    """

    uri: str
    size: int = 0
    name: str = ""
    problem: str | None = None


def local_path(uri: str) -> str | None:
    """The local filesystem path of a ``file:`` URI or a plain path, else None."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return unquote(parts.path)
    if parts.scheme == "" or (len(parts.scheme) == 1 and os.name == "nt"):
        return uri
    return None


def list_inputs(sc: SparkContext, inputs: Iterable[str]) -> list[CaptureFile]:
    """Expand ``inputs`` (paths, URIs, globs, directories: their files, recursively,
    skipping hidden ones) into capture files, in input order, each file once, through
    the Hadoop filesystems of ``sc``."""
    jvm = sc._jvm
    hadoop_conf = sc._jsc.hadoopConfiguration()
    Path = jvm.org.apache.hadoop.fs.Path  # type: ignore[union-attr]
    files: list[CaptureFile] = []
    seen: set[str] = set()

    def add(status: object) -> None:
        uri = status.getPath().toString()  # type: ignore[attr-defined]
        if uri not in seen:
            seen.add(uri)
            files.append(CaptureFile(uri, status.getLen()))  # type: ignore[attr-defined]

    for arg in inputs:
        try:
            path = Path(arg)
            fs = path.getFileSystem(hadoop_conf)
            statuses = fs.globStatus(path)
        # Any Java exception (a bad scheme, no access, ...), raised through py4j: the
        # input is reported by name and the run goes on.
        except Exception as exc:  # noqa: BLE001
            files.append(CaptureFile(arg, problem=f"cannot list: {_java_message(exc)}"))
            continue
        if not statuses:
            files.append(CaptureFile(arg, problem="no such file"))
            continue
        before = len(files)
        for status in statuses:
            if not status.isDirectory():
                add(status)
                continue
            found = fs.listFiles(status.getPath(), True)
            while found.hasNext():
                child = found.next()
                if not child.getPath().getName().startswith((".", "_")):
                    add(child)
        if len(files) == before:
            files.append(CaptureFile(arg, problem="no files there"))
    name_captures(files)
    return files


def name_captures(files: list[CaptureFile]) -> None:
    """Name each capture by its base name; where two share one, by the rest of the path
    too (so connection ids and the packets partitions stay unique)."""
    def base(uri: str) -> str:
        return uri.rstrip("/").rsplit("/", 1)[-1] or uri

    counts: dict[str, int] = {}
    for f in files:
        counts[base(f.uri)] = counts.get(base(f.uri), 0) + 1
    for f in files:
        f.name = base(f.uri) if counts[base(f.uri)] == 1 else f.uri


def _java_message(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)
    if java is not None:
        return str(java.toString())
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
