"""The pipeline's capture sets: input files that are pieces of one capture (a ring buffer,
a split: :mod:`mqttwire.capture.sets`) planned as one unit of work.

The driver groups the listed files (:func:`group_inputs`, reading the frame times of the
files whose names make them candidates); a set becomes one :class:`SetFile` in the plan,
read by one task (or, at the share size, by several tasks that each read all of it and
keep a share of its connections: :mod:`.connection_shares`), its files in order, as one capture; or,
when the set is larger than the split size, by the split path (:mod:`.split`), each of
its files read in byte ranges of its own and every file's rows of a connection decoded
together.  Only files that the tasks open by path can be grouped (the binaryFile reader
hands a task one file).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from ..capture.sets import FileChain, group_files
from .inputs import CaptureFile, local_path

__all__ = ["SetFile", "group_inputs", "set_chain", "set_lines", "set_opener"]


@dataclass
class SetFile(CaptureFile):
    """A set of capture files as one unit of the plan: ``uri`` and ``name`` are its
    first file's (the capture's name is its first file's), ``size`` the files' total.

    Attributes:
        members: the files, in reading order.
        how: why they are one capture, in words.
    """

    members: list[CaptureFile] = field(default_factory=list)
    how: str = ""

    def parts(self) -> str:
        """The members as the task's listing row carries them: JSON [[name, path], ...]."""
        return json.dumps([[f.name, local_path(f.uri)] for f in self.members])


def group_inputs(files: list[CaptureFile], mode: str, *, by_path: bool = True
                 ) -> tuple[list[CaptureFile], list[str]]:
    """The units of work of ``files``: each file alone or in a :class:`SetFile`
    (:func:`~mqttwire.capture.sets.group_files` with ``mode``), and the notes to show.
    ``by_path``: whether the tasks open files by path (else nothing is grouped, and
    mode "one" is refused)."""
    if mode != "never" and not by_path:
        if mode == "one":
            raise ValueError("group 'one' needs the files opened by path (the stream "
                             "reader), not the binaryFile reader")
        return list(files), []
    paths = [local_path(f.uri) if f.problem is None else None for f in files]
    plan = group_files(paths, mode, labels=[f.name for f in files])
    notes = list(plan.notes)
    if mode == "one":
        notes += [f"{f.name}: not a local path, read alone (only files that the tasks "
                  "open by path are grouped)"
                  for f, path in zip(files, paths) if path is None and f.problem is None]
    units: list[CaptureFile] = []
    for members, how in zip(plan.sets, plan.how):
        if len(members) == 1:
            units.append(files[members[0]])
            continue
        parts = [files[i] for i in members]
        units.append(SetFile(parts[0].uri, sum(f.size for f in parts), parts[0].name,
                             members=parts, how=how))
    return units, notes


def set_chain(parts: str) -> FileChain:
    """The FileChain of a listing row's ``parts`` (:meth:`SetFile.parts`)."""
    files = json.loads(parts)
    return FileChain([(name, _opener(path)) for name, path in files])


def set_opener(parts: str) -> tuple[Callable[[], FileChain], int]:
    """What a task opens for a listing row's ``parts``: the set's FileChain (made
    when opened), and how many files it holds."""
    count = len(json.loads(parts))
    return lambda: set_chain(parts), count


def _opener(path: str) -> Callable[[], BinaryIO]:
    return lambda: open(path, "rb")


def set_lines(units: Sequence[CaptureFile]) -> list[str]:
    """A sentence per set, for stderr and the summary."""
    return [f"{len(u.members)} files read as one capture, named {u.name} ({u.how}): "
            + ", ".join(f.name for f in u.members)
            for u in units if isinstance(u, SetFile)]
