"""The plan of a run: its inputs, listed once, turned into typed tasks.

Nothing here needs Spark: :func:`make_plan` takes the listing (:class:`Listing`, which
:func:`~.tables.list_units` makes through Spark), the reading options, the cores and
Spark's file packing settings, and gives a :class:`Plan`: which files the streaming
reader's tasks open by path (each task a list of :class:`Task`), which Spark's
``binaryFile`` source hands over, which are read in byte ranges by several tasks
(:mod:`.split`), and why each input that cannot be read cannot (its :class:`Task` only
makes the capture's error row).  Both :func:`~.tables.read_tables` and the command
(:mod:`.run`) build their tasks this way.

How files become tasks:

* a file on a filesystem that every task mounts (a local path) is opened by path, a
  file elsewhere (``hdfs:``, ``s3a:``, ...) comes through ``binaryFile``, which refuses
  files over 2 GiB (``reader`` can ask for either);
* a file (or a set of files: :mod:`.set_files`) larger than ``split_size`` that tasks open
  by path, not gzip-compressed, is read in byte ranges (:mod:`.split`);
* a file of at least ``share_size`` bytes is read by several tasks, each keeping a share
  of its connections (:mod:`.connection_shares`: only when the tasks write the tables);
* the other files that a task reads whole are packed into tasks by size as Spark's file
  sources pack them (:mod:`.packing`); a set, a gzip file and a shared file are tasks of
  their own; the largest tasks first, so that one big task does not start last.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..capture.files import Skipped
from ..capture.sets import GROUP_MODES
from .inputs import CaptureFile, local_path
from .packing import Packing
from .set_files import SetFile, set_lines

if TYPE_CHECKING:
    from .decoding import Decoding

__all__ = ["BINARY_FILE_LIMIT", "CLUSTER_SPLIT_SIZE", "SHARE_SIZE", "Listing", "Plan",
           "Task", "check_reading", "make_plan", "route", "share_count", "tasks_of"]

#: The default ``share_size`` (.connection_shares): smaller files are read by one task
#: each.  A share pays only where the decoding is long next to a task's start and a second
#: reading of the file (benchmarks/capture.md): a judgement.
SHARE_SIZE = 32 << 20

#: The split size (.split) when none is given and the master is a cluster's (not local):
#: Hadoop's block size and Spark's ``maxPartitionBytes``.  On a local master a file is
#: not split unless asked: shares (.connection_shares) cost less there
#: (benchmarks/capture.md).
CLUSTER_SPLIT_SIZE = 128 << 20

#: binaryFile refuses files over 2 GiB (and Arrow's binary columns end there too).
BINARY_FILE_LIMIT = (1 << 31) - 1

#: Why a file cannot be read, by the reader that would have to.
TOO_LARGE = ("over 2 GiB, too large for Spark's binaryFile source: put it on a filesystem "
             "that every executor mounts (or a local path)")
NOT_LOCAL = "not a local path: the streaming reader opens files by path"


@dataclass(frozen=True)
class Task:
    """One input of a streaming task: a file read whole, a share of one, a set of files
    read as one capture, or an input that cannot be read (``problem``)."""

    #: The capture's name in the tables.
    name: str
    #: The local path the task opens (None for a set, or an input that cannot be read).
    path: str | None
    size: int
    #: Why it cannot be read: the task makes only its error row.
    problem: str | None = None
    #: This task's share of the file's connections, of ``shares`` (.connection_shares).
    share: int = 0
    shares: int = 1
    #: A set's files, in reading order (.set_files.SetFile.parts), else None.
    parts: str | None = None


@dataclass(frozen=True)
class Listing:
    """The inputs as listed (:mod:`.inputs`) and grouped (:mod:`.set_files`)."""

    #: Every input file, with the problem of each that could not be listed.
    files: list[CaptureFile]
    #: The units of work: each file alone, or a set of files (.set_files.SetFile).
    units: list[CaptureFile]
    #: The grouping's notes, to show.
    notes: list[str] = field(default_factory=list)
    #: The files of the input folders (and globs) that are not captures, not read.
    skipped: list[Skipped] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """How a run reads its inputs (see the module docstring)."""

    #: Every input file as listed, with why each unreadable one cannot be read.
    files: list[CaptureFile]
    how: Decoding
    #: The streaming reader's tasks, largest first.
    tasks: list[list[Task]]
    #: The files that Spark's binaryFile source hands to the tasks.
    binary: list[CaptureFile]
    #: The files (or sets) to read in byte ranges (.split).
    split: list[CaptureFile]
    #: The files of the input folders (and globs) that are not captures, not read.
    skipped: list[Skipped] = field(default_factory=list)
    #: The sets of files read as one capture (.set_files.set_lines), and the grouping's notes.
    sets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: What :meth:`reading_whole` needs to make tasks of more files.
    share_size: int | None = None
    cores: int = 1
    packing: Packing | None = None

    def reading_whole(self, files: list[CaptureFile]) -> Plan:
        """This plan with ``files`` (of :attr:`split`: those whose ranges could not be
        joined up, .split) read whole instead."""
        if not files:
            return self
        whole = [f for f in self.split if any(f is g for g in files)]
        return replace(self, split=[f for f in self.split if all(f is not g for g in files)],
                       tasks=_sorted(self.tasks + tasks_of(whole, self.share_size,
                                                           self.cores, self.packing)))

    @property
    def names(self) -> dict[str, str]:
        """The capture name of each binaryFile input, by URI."""
        return {f.uri: f.name for f in self.binary}


def check_reading(reader: str, split_size: int | None, share_size: int | None,
                  group: str = "auto") -> None:
    """Raise ValueError for a bad ``reader``, ``split_size``, ``share_size`` or
    ``group``."""
    if reader not in ("auto", "stream", "binaryfile"):
        raise ValueError(f"reader must be auto, stream or binaryfile, not {reader!r}")
    if group not in GROUP_MODES:
        raise ValueError(f"group must be one of {', '.join(GROUP_MODES)}, not {group!r}")
    if group == "one" and reader == "binaryfile":
        raise ValueError("group 'one' needs the files opened by path (the stream reader), "
                         "not the binaryFile reader")
    for option, value in (("split_size", split_size), ("share_size", share_size)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{option} must be a positive number of bytes or None, "
                             f"not {value!r}")


def _routed(f: CaptureFile, reader: str) -> tuple[CaptureFile, bool]:
    """``f``, or a copy with why it cannot be read, and whether binaryFile reads it
    (else the streaming reader opens it by path, or makes its error row)."""
    if f.problem is not None:
        return f, False
    local = local_path(f.uri) is not None
    if reader == "binaryfile" or (reader == "auto" and not local):
        return (replace(f, problem=TOO_LARGE), False) if f.size > BINARY_FILE_LIMIT \
            else (f, True)
    return (f, False) if local else (replace(f, problem=NOT_LOCAL), False)


def route(units: list[CaptureFile], reader: str
          ) -> tuple[list[CaptureFile], list[CaptureFile]]:
    """The units of work for the streaming reader (opened by path; those that cannot be
    read as copies that say why) and for binaryFile, in their order."""
    routed = [_routed(f, reader) for f in units]
    return [g for g, binary in routed if not binary], [g for g, binary in routed if binary]


def share_count(size: int, share_size: int | None, cores: int) -> int:
    """How many tasks read a file of ``size`` bytes (.connection_shares): one per
    ``share_size`` bytes, at most ``cores``; 1 when ``share_size`` is None."""
    if share_size is None or size < share_size:
        return 1
    return max(1, min(cores, size // share_size))


def _splittable(f: CaptureFile, split_size: int) -> bool:
    """Whether ``f`` is read in byte ranges: larger than ``split_size``, every file of
    it opened by path and not gzip-compressed (whose ranges cannot be read without all
    that precedes them).  A set (a ring buffer) is read the same way, each of its files
    in ranges of its own."""
    return f.problem is None and f.size > split_size and all(
        local_path(m.uri) is not None and not m.gzip
        for m in (f.members if isinstance(f, SetFile) else [f]))


def _packable(f: CaptureFile, share_size: int | None, cores: int) -> bool:
    """Whether ``f`` may share a task with other files: a plain file read whole by one
    task, or an input that cannot be read (its task only makes its error row).  A set,
    a gzip file (its size says little of its decoding) and a file read in shares stay
    units of their own."""
    if f.problem is not None:
        return True
    return (not isinstance(f, SetFile) and not f.gzip
            and share_count(f.size, share_size, cores) == 1)


def _tasks_of_file(f: CaptureFile, share_size: int | None, cores: int) -> list[Task]:
    """A task per share of ``f`` (one unless it is read in shares; a gzip stream reads
    from its start only, so each share would decompress the whole file)."""
    count = 1 if f.problem is not None or f.gzip else share_count(f.size, share_size, cores)
    parts = f.parts() if isinstance(f, SetFile) else None
    path = local_path(f.uri) if f.problem is None and parts is None else None
    return [Task(f.name, path, f.size, f.problem, index, count, parts)
            for index in range(count)]


def _sorted(tasks: list[list[Task]]) -> list[list[Task]]:
    """Largest first (stable), so that one big task does not start last."""
    return sorted(tasks, key=lambda task: -sum(t.size for t in task))


def tasks_of(files: list[CaptureFile], share_size: int | None, cores: int,
             packing: Packing | None) -> list[list[Task]]:
    """The streaming reader's tasks for ``files``: the small files packed by
    ``packing`` (None: a task each), the others a task each (a task per share)."""
    files = sorted(files, key=lambda f: -f.size)
    if packing is None:
        return [[t] for f in files for t in _tasks_of_file(f, share_size, cores)]
    tasks = [[t] for f in files if not _packable(f, share_size, cores)
             for t in _tasks_of_file(f, share_size, cores)]
    small = [t for f in files if _packable(f, share_size, cores)
             for t in _tasks_of_file(f, None, cores)]
    tasks += [[small[i] for i in task] for task in packing.pack([t.size for t in small])]
    return _sorted(tasks)


def make_plan(listing: Listing, *, reader: str = "auto", ports: Sequence[int] = (1883,),
              payload_limit: int | None = None, version: int | None = None,
              split_size: int | None = None, share_size: int | None = None,
              cores: Callable[[], int], packing: Callable[[], Packing | None]) -> Plan:
    """The plan of ``listing``'s inputs (see the module docstring); ``cores`` and
    ``packing`` are asked only when the plan needs them (files that tasks open by
    path)."""
    routed = [_routed(f, reader) for f in listing.units]
    stream = [g for g, by_binary in routed if not by_binary]
    binary = [g for g, by_binary in routed if by_binary]
    # The listed files with the problems that routing found (copies of those units).
    copies = {id(f): g for f, (g, _) in zip(listing.units, routed) if g is not f}
    files = [copies.get(id(f), f) for f in listing.files]
    split: list[CaptureFile] = []
    if split_size is not None and reader != "binaryfile":
        split = [f for f in stream if _splittable(f, split_size)]
        stream = [f for f in stream if all(f is not g for g in split)]
    from .decoding import Decoding  # here: the plan is made without pyarrow

    # read_capture keeps no payload without a limit: the pipeline keeps them whole.
    limit = sys.maxsize if payload_limit is None else payload_limit
    n = cores() if stream or split else 1
    pack = packing() if stream or split else None
    return Plan(files, Decoding(tuple(ports), limit, version),
                tasks_of(stream, share_size, n, pack), binary, split, listing.skipped,
                set_lines(listing.units), listing.notes, share_size, n, pack)
