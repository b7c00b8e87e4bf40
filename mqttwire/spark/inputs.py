"""The pipeline's inputs: capture paths or URIs (globs, folders) expanded into files.

Local paths (plain or ``file:``) are listed by Python (:class:`LocalFiles`), named as
Hadoop's local filesystem names them; every other URI that Spark reads (hdfs:, s3a:,
abfs:, ... as configured) through Spark's ``binaryFile`` source, with DataFrame jobs
(:class:`SparkFiles`), so the listing needs no SparkContext and no py4j and works on a
Spark Connect session too.  The paths are the Spark side's: on a Connect session the
local listing runs in a task of the server's (the pipeline's :func:`~.pipeline.on_server`).
An input that does not exist or cannot be
listed is kept as a :class:`CaptureFile` with ``problem`` set, so that it is reported by
name and gets an error row, while the other inputs are processed.

Which files are read, and the ``capture`` name of each, follow
:mod:`mqttwire.capture.files` (as ``mqttwire dissect`` does): a file named by the user is
read whatever it holds; the files found in a folder (recursively, hidden ones left out)
or matched by a glob are read only when their first bytes are a capture's magic number
(pcap, pcapng, or either gzip-compressed), and the others are listed apart as skipped.

Looking at a file's first bytes costs one open and one read per file, where the listing
runs (local files: microseconds a file).  The remote files found in folders or by globs
are looked at by one DataFrame job over Spark's ``binaryFile`` source, which reads each
file whole to hand over its first bytes: a folder of large remote captures is read once
more for it; the alternative, letting each task find out, would turn whole non-capture
files into tasks.  A remote file named by the user is not looked at (it is read
anyway).  The listing also learns which files are gzip-compressed, which cannot be read
in byte ranges or shares (their stream only reads from the start): those are read
whole, one task each.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from ..capture.files import Skipped, capture_name, is_hidden, unique_names
from ..capture.pcap import SNIFF_BYTES, Sniffed, sniff

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CaptureFile", "LocalFiles", "Skipped", "SparkFiles", "list_inputs",
           "local_path", "name_captures"]


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


def list_inputs(spark: SparkSession | None, inputs: Iterable[str], *,
                skipped: list[Skipped] | None = None) -> list[CaptureFile]:
    """Expand ``inputs`` (paths, URIs, globs, folders: their files, recursively, skipping
    hidden ones) into capture files, in input order, each file once.  Local paths
    (plain, ``file:``) are listed by Python (:class:`LocalFiles`), in this process: on
    a Spark Connect session, call it in a task of the server's (:func:`on_server`); any
    other URI through Spark's Hadoop filesystems with DataFrame jobs of ``spark``
    (:class:`SparkFiles`).  Files of folders and globs that are not captures are left
    out, and appended to ``skipped`` when it is given (see the module docstring)."""
    local = LocalFiles()
    remote = SparkFiles(spark) if spark is not None else None
    groups: list[tuple[str, list[CaptureFile]]] = []  # the files of each input
    looks: dict[str, _Look] = {}  # by URI: each file once

    for arg in inputs:
        group: list[CaptureFile] = []
        groups.append((arg, group))
        fs: LocalFiles | SparkFiles | None = local if local_path(arg) is not None else remote
        if fs is None:
            group.append(CaptureFile(arg, problem="cannot list: not a local path"))
            continue
        try:
            tops = fs.glob(arg)
        # Any failure to list (a bad scheme, no access, ...): the input is reported by
        # name and the run goes on.
        except Exception as exc:
            group.append(CaptureFile(arg, problem=f"cannot list: {_first_line(exc)}"))
            continue
        if not tops:
            group.append(CaptureFile(arg, problem="no such file or directory"))
            continue
        # A glob picks files by a pattern, as a folder holds them: not asked for by name.
        glob = any(c in arg for c in "*?[{")
        listed = False  # any file, even one an earlier input listed
        for top, found, is_dir in tops:
            picky = is_dir or glob
            for uri, size in found:
                if is_dir and _hidden_below(top, uri):
                    continue
                listed = True
                if uri in looks:  # listed by an earlier input
                    # Named by the user here: read even if it is no capture.
                    looks[uri].picky = looks[uri].picky and picky
                    continue
                f = CaptureFile(uri, size, capture_name(top, uri))
                group.append(f)
                looks[uri] = _Look(f, picky)
        if not listed:
            group.append(CaptureFile(arg, problem="no files there"))
    left_out = _look(list(looks.values()), remote)
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


#: What a listing gives per match of an input: the match (file or folder) as a URI, its
#: files (URI, size), and whether it is a folder.
Match = tuple[str, list[tuple[str, int]], bool]


class LocalFiles:
    """Local paths listed by Python, named as Hadoop's local filesystem names them
    (``file:/abs/path``): relative paths from the current directory, globs with
    ``*``, ``?``, ``[...]`` and ``{a,b}``, a folder's files recursively in path order."""

    def glob(self, arg: str) -> list[Match]:
        path = local_path(arg)
        assert path is not None
        path = os.path.abspath(path)
        if any(c in path for c in "*?[{"):
            paths = sorted({p for pattern in _braces(path) for p in glob.glob(pattern)})
        else:
            paths = [path] if os.path.lexists(path) else []
        matches: list[Match] = []
        for p in paths:
            top = _file_uri(p)
            if os.path.isdir(p):
                found = []
                for root, _dirs, names in os.walk(p):
                    for name in names:
                        child = os.path.join(root, name)
                        try:
                            found.append((_file_uri(child), os.path.getsize(child)))
                        except OSError:
                            continue  # gone, or a broken link: Hadoop lists neither
                found.sort()
                matches.append((top, found, True))
            elif os.path.exists(p):
                matches.append((top, [(top, os.path.getsize(p))], False))
        return matches


def _file_uri(path: str) -> str:
    """A local path as Hadoop's local filesystem writes its URI."""
    return "file:" + os.path.normpath(path)


def _braces(pattern: str) -> list[str]:
    """A glob's ``{a,b}`` alternatives (as Hadoop's globs have them) expanded."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    return [out for choice in match.group(1).split(",")
            for out in _braces(pattern[:match.start()] + choice + pattern[match.end():])]


class SparkFiles:
    """Any Hadoop URI listed through ``spark``'s ``binaryFile`` source (its file index:
    globs, folders recursively), with DataFrame jobs only, so on a classic or a Spark
    Connect session alike; the files' contents are not read for the listing."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def glob(self, arg: str) -> list[Match]:
        from pyspark.errors import AnalysisException

        try:
            frame = (self.spark.read.format("binaryFile")
                     .option("recursiveFileLookup", "true").load(arg))
            # Every file (empty ones too, which the scan leaves out), and the sizes.
            everything = frame.inputFiles()
            sizes: dict[str, int] = dict(frame.select("path", "length").collect())
        except AnalysisException as exc:
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                return []
            raise
        rows = [(path, sizes.get(path, 0)) for path in map(_hadoop_form, everything)]
        pattern = _parts(arg)
        matches: dict[str, Match] = {}
        for path, size in sorted(rows):
            # The match (a file, or a folder of the input's glob) is where the input's
            # path (made absolute by Spark, if relative) ends.
            head, parts = _split_uri(path)
            depth = _match_end(parts, pattern)
            top = head + "/" + "/".join(parts[:depth])
            match = matches.setdefault(top, (top, [], len(parts) > depth))
            match[1].append((path, int(size)))
        if not matches:  # an empty folder: Spark lists it without files
            return [(arg, [], True)]
        return list(matches.values())

    def heads(self, uris: list[str]) -> dict[str, bytes]:
        """The first :data:`SNIFF_BYTES` bytes of each file, by URI: one DataFrame job
        (Spark's binaryFile source reads each file whole to hand it over)."""
        from pyspark.sql import functions as F

        rows = (self.spark.read.format("binaryFile").load(uris)
                .select("path", F.substring("content", 1, SNIFF_BYTES).alias("head"))
                .collect())
        heads = {path: bytes(head) for path, head in rows}
        return {uri: heads.get(uri, b"") for uri in uris}  # empty files: not scanned


def _hadoop_form(uri: str) -> str:
    """A URI as Hadoop's Path writes it (and binaryFile's ``path`` column): without the
    empty authority of ``file:///x`` (which ``inputFiles`` gives)."""
    scheme, sep, rest = uri.partition(":///")
    return f"{scheme}:/{rest}" if sep and "/" not in scheme else uri


def _match_end(parts: list[str], pattern: list[str]) -> int:
    """Where, in a listed file's path ``parts``, the input's path ``pattern`` (parts,
    globs allowed) ends: the first place it matches part by part (a relative input's
    qualified path ends there too)."""
    n = len(pattern)
    for i in range(len(parts) - n + 1):
        if all(any(fnmatch.fnmatchcase(parts[i + k], choice) for choice in _braces(part))
               for k, part in enumerate(pattern)):
            return i + n
    return len(parts)


def _parts(uri: str) -> list[str]:
    return [p for p in urlsplit(uri).path.split("/") if p]


def _split_uri(uri: str) -> tuple[str, list[str]]:
    """A URI's scheme and authority (``hdfs://nn:8020``, ``file:``), and its path's parts."""
    parts = urlsplit(uri)
    head = f"{parts.scheme}:" + (f"//{parts.netloc}" if parts.netloc or "//" in uri else "")
    return head, [p for p in parts.path.split("/") if p]


@dataclass
class _Look:
    """A listed file to look at: only taken when it is a capture (``picky``: found in a
    folder or by a glob)."""

    file: CaptureFile
    picky: bool


def _hidden_below(top: str, uri: str) -> bool:
    """Whether a folder or file on the way from the folder ``top`` down to ``uri`` is
    hidden (:func:`mqttwire.capture.files.is_hidden`)."""
    top = top.rstrip("/") + "/"
    below = uri[len(top):] if uri.startswith(top) else uri.rsplit("/", 1)[-1]
    return any(is_hidden(part) for part in below.split("/"))


def _look(looks: list[_Look], remote: SparkFiles | None) -> dict[int, tuple[CaptureFile, str]]:
    """Look at the first bytes of the files (setting their ``format``); the picky ones
    that are not captures, with why, by ``id`` of their CaptureFile."""
    far = [look.file.uri for look in looks
           if local_path(look.file.uri) is None and look.picky]
    heads: dict[str, bytes] = {}
    if far and remote is not None:
        try:
            heads = remote.heads(far)
        except Exception as exc:  # each file then says it
            for look in looks:
                if look.file.uri in far:
                    look.file.problem = f"cannot read: {_first_line(exc)}"

    def one(look: _Look) -> Sniffed | None:
        local = local_path(look.file.uri)
        if local is None:
            if not look.picky or look.file.uri not in heads:
                return None  # read anyway: its task finds out what it is
            return sniff(heads[look.file.uri])
        try:
            with open(local, "rb") as stream:
                return sniff(stream.read(SNIFF_BYTES))
        except OSError as exc:
            # It may be a capture: an error of its own, not a file skipped.
            look.file.problem = f"cannot read: {exc.strerror or exc}"
            return None

    left_out: dict[int, tuple[CaptureFile, str]] = {}
    for look in looks:
        sniffed = one(look)
        if sniffed is None:
            continue
        look.file.format = sniffed.format
        if look.picky and sniffed.format is None:
            left_out[id(look.file)] = (look.file, sniffed.reason or "not a capture")
    return left_out


def name_captures(files: list[CaptureFile]) -> None:
    """Make the names of ``files`` unique (:func:`mqttwire.capture.files.unique_names`),
    so that connection ids and the packets partitions stay unique; a file without a name
    is named by its base name first."""
    def base(uri: str) -> str:
        return uri.rstrip("/").rsplit("/", 1)[-1] or uri

    names = unique_names([(f.uri, f.name or base(f.uri)) for f in files])
    for f, name in zip(files, names):
        f.name = name


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Spark's errors run to many lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
