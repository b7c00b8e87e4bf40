"""The pipeline's inputs: capture paths or URIs (globs, folders) expanded into files.

Listing goes through Spark's Hadoop FileSystem, so every URI that Spark can read works
(file:, hdfs:, s3a:, abfs:, ... as configured).  An input that does not exist or cannot be
listed is kept as a :class:`CaptureFile` with ``problem`` set, so that it is reported by
name and gets an error row, while the other inputs are processed.

Which files are read, and the ``capture`` name of each, follow
:mod:`mqttwire.capture.files` (as ``mqttwire dissect`` does): a file named by the user is
read whatever it holds; the files found in a folder (recursively, hidden ones left out)
or matched by a glob are read only when their first bytes are a capture's magic number
(pcap, pcapng, or either gzip-compressed), and the others are listed apart as skipped.

Looking at a file's first bytes costs one open and one read per file, on the driver.
Local files (``file:`` and plain paths) are read by Python, which costs microseconds a
file.  Files on other filesystems (hdfs:, s3a:, ...) are read through Hadoop,
:data:`SNIFF_THREADS` at a time: on an object store each is a request (tens of ms), so a
folder of thousands of files takes seconds to list; the alternative, letting each task
find out, would hand whole non-capture files to Spark's binaryFile reader and turn them
into tasks.  A remote file named by the user is not looked at (it is read anyway).  The
driver also learns which files are gzip-compressed, which cannot be read in byte ranges
or shares (their stream only reads from the start): those are read whole, one task each.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..capture.files import Skipped, capture_name, is_hidden, unique_names
from ..capture.pcap import SNIFF_BYTES, Sniffed, sniff

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["SNIFF_THREADS", "CaptureFile", "Skipped", "list_inputs", "local_path",
           "name_captures"]

#: How many remote files the driver looks at at once (see the module docstring).
SNIFF_THREADS = 16


@dataclass
class CaptureFile:
    """One capture file of the run.

    Attributes:
        uri: the fully qualified URI (``file:/data/a.pcapng``), or the input as given when
            it could not be listed.
        size: its length in bytes (0 if unknown).
        name: the capture's name in every table: its path from the input it was found
            through (:mod:`mqttwire.capture.files`), made unique in the run.
        problem: why it cannot be read, or None.
        format: what its first bytes say ("pcap", "pcapng", "pcap.gz", "pcapng.gz"), or
            None when they were not looked at (a remote file named by the user) or it is
            not a capture.
    """

    uri: str
    size: int = 0
    name: str = ""
    problem: str | None = None
    format: str | None = None

    @property
    def gzip(self) -> bool:
        """Whether it is gzip-compressed (read from its start only: not split or shared)."""
        return self.format is not None and self.format.endswith(".gz")


def local_path(uri: str) -> str | None:
    """The local filesystem path of a ``file:`` URI or a plain path, else None."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return unquote(parts.path)
    if parts.scheme == "" or (len(parts.scheme) == 1 and os.name == "nt"):
        return uri
    return None


def list_inputs(sc: SparkContext, inputs: Iterable[str], *,
                skipped: list[Skipped] | None = None) -> list[CaptureFile]:
    """Expand ``inputs`` (paths, URIs, globs, folders: their files, recursively, skipping
    hidden ones) into capture files, in input order, each file once, through the Hadoop
    filesystems of ``sc``.  Files of folders and globs that are not captures are left
    out, and appended to ``skipped`` when it is given (see the module docstring)."""
    jvm = sc._jvm
    hadoop_conf = sc._jsc.hadoopConfiguration()
    Path = jvm.org.apache.hadoop.fs.Path  # type: ignore[union-attr]
    groups: list[tuple[str, list[CaptureFile]]] = []  # the files of each input
    looks: dict[str, _Look] = {}  # by URI: each file once

    for arg in inputs:
        group: list[CaptureFile] = []
        groups.append((arg, group))
        try:
            path = Path(arg)
            fs = path.getFileSystem(hadoop_conf)
            statuses = fs.globStatus(path)
        # Any Java exception (a bad scheme, no access, ...), raised through py4j: the
        # input is reported by name and the run goes on.
        except Exception as exc:  # noqa: BLE001
            group.append(CaptureFile(arg, problem=f"cannot list: {_java_message(exc)}"))
            continue
        if not statuses:
            group.append(CaptureFile(arg, problem="no such file or directory"))
            continue
        # A glob picks files by a pattern, as a folder holds them: not asked for by name.
        glob = any(c in arg for c in "*?[{")
        listed = False  # any file, even one an earlier input listed
        for status in statuses:
            top = status.getPath().toString()
            if status.isDirectory():
                listing = fs.listFiles(status.getPath(), True)
                found = []
                while listing.hasNext():
                    child = listing.next()
                    if not _hidden_below(top, child.getPath().toString()):
                        found.append(child)
                found.sort(key=lambda child: child.getPath().toString())
                picky = True
            else:
                found, picky = [status], glob
            for child in found:
                listed = True
                uri = child.getPath().toString()
                if uri in looks:  # listed by an earlier input
                    # Named by the user here: read even if it is no capture.
                    looks[uri].picky = looks[uri].picky and picky
                    continue
                f = CaptureFile(uri, child.getLen(), capture_name(top, uri))
                group.append(f)
                looks[uri] = _Look(f, picky, fs, child.getPath())
        if not listed:
            group.append(CaptureFile(arg, problem="no files there"))
    left_out = _look(list(looks.values()))
    files: list[CaptureFile] = []
    for arg, group in groups:
        taken = [f for f in group if id(f) not in left_out]
        if group and not taken:  # a folder (or glob) of files that are no captures
            taken = [CaptureFile(arg, problem=f"no capture file there ({len(group)} other "
                                              "file(s) skipped)")]
        files += taken
    if skipped is not None:
        skipped += [Skipped(f.name, reason) for f, reason in left_out.values()]
    name_captures(files)
    return files


@dataclass
class _Look:
    """A listed file to look at: only taken when it is a capture (``picky``: found in a
    folder or by a glob), its Hadoop filesystem and path."""

    file: CaptureFile
    picky: bool
    fs: Any
    path: Any


def _hidden_below(top: str, uri: str) -> bool:
    """Whether a folder or file on the way from the folder ``top`` down to ``uri`` is
    hidden (:func:`mqttwire.capture.files.is_hidden`)."""
    top = top.rstrip("/") + "/"
    below = uri[len(top):] if uri.startswith(top) else uri.rsplit("/", 1)[-1]
    return any(is_hidden(part) for part in below.split("/"))


def _look(looks: list[_Look]) -> dict[int, tuple[CaptureFile, str]]:
    """Look at the first bytes of the files (setting their ``format``); the picky ones
    that are not captures, with why, by ``id`` of their CaptureFile."""
    def one(look: _Look) -> Sniffed | None:
        local = local_path(look.file.uri)
        if local is None and not look.picky:
            return None  # read anyway: its task finds out what it is
        try:
            if local is not None:
                with open(local, "rb") as stream:
                    return sniff(stream.read(SNIFF_BYTES))
            return sniff(_remote_head(look.fs, look.path))
        except Exception as exc:  # noqa: BLE001  # OSError, or Java's through py4j
            # It may be a capture: an error of its own, not a file skipped.
            why = getattr(exc, "strerror", None) or _java_message(exc)
            look.file.problem = f"cannot read: {why}"
            return None

    remote = sum(1 for look in looks if local_path(look.file.uri) is None)
    if remote > 1:
        with ThreadPoolExecutor(min(SNIFF_THREADS, remote)) as pool:
            found = list(pool.map(one, looks))
    else:
        found = [one(look) for look in looks]
    left_out: dict[int, tuple[CaptureFile, str]] = {}
    for look, sniffed in zip(looks, found):
        if sniffed is None:
            continue
        look.file.format = sniffed.format
        if look.picky and sniffed.format is None:
            left_out[id(look.file)] = (look.file, sniffed.reason or "not a capture")
    return left_out


def _remote_head(fs: Any, path: Any) -> bytes:
    """The first :data:`SNIFF_BYTES` bytes of a file, through its Hadoop filesystem: one
    open and one read (py4j hands the Java byte[] over as bytes)."""
    stream = fs.open(path)
    try:
        return bytes(stream.readNBytes(SNIFF_BYTES))
    finally:
        stream.close()


def name_captures(files: list[CaptureFile]) -> None:
    """Make the names of ``files`` unique (:func:`mqttwire.capture.files.unique_names`),
    so that connection ids and the packets partitions stay unique; a file without a name
    is named by its base name first."""
    def base(uri: str) -> str:
        return uri.rstrip("/").rsplit("/", 1)[-1] or uri

    names = unique_names([(f.uri, f.name or base(f.uri)) for f in files])
    for f, name in zip(files, names):
        f.name = name


def _java_message(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)
    if java is not None:
        return str(java.toString())
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
