"""Which files are captures, and the name each capture gets: for the inputs of
``mqttwire dissect`` (local paths, :func:`local_inputs`) and of the pipeline
(mqttwire/spark/inputs.py lists through Hadoop and uses :func:`capture_name` and
:func:`unique_names`).

The rules, the same for both commands:

- A file named by the user is read, whatever it holds: a file that is not a capture is
  an error, since it was asked for.
- A folder is read recursively; of its files (hidden ones, named ``.*`` or ``_*`` as
  Hadoop and Spark write them, left out), the captures are read and the others are
  *skipped*: listed once, with why, but not errors.  A capture is recognised by its
  content (:func:`~mqttwire.capture.pcap.sniff`), not by its name.  A folder without a
  capture is an error.
- The ``capture`` name of a file is its path from the input it was found through: a file
  named by the user is named by its base name (``a.pcap``), a file found in a folder by
  that folder's name and its path below it (``dir/sub/a.pcap``).  Where two files would
  get one name, each gets more of its parent folders until they differ (``x/a.pcap``,
  ``y/a.pcap``), so that connection ids and the packets table's partitions stay unique.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from .pcap import SNIFF_BYTES, Sniffed, sniff

__all__ = ["LocalInput", "Skipped", "capture_name", "is_hidden", "local_inputs",
           "skipped_line", "sniff_path", "unique_names"]


@dataclass
class Skipped:
    """A file of a folder that is not a capture: its name (as a capture's would be)
    and why it was skipped."""

    name: str
    reason: str


@dataclass
class LocalInput:
    """One file to read (or an input that cannot be read: ``problem``)."""

    path: str
    name: str
    problem: str | None = None


def is_hidden(name: str) -> bool:
    """A name that listings leave out: ``.*`` (dot files) and ``_*`` (Hadoop's and
    Spark's own, such as ``_SUCCESS``)."""
    return name.startswith((".", "_"))


def sniff_path(path: str) -> Sniffed:
    """:func:`~mqttwire.capture.pcap.sniff` of a local file (one open, one read)."""
    with open(path, "rb") as f:
        return sniff(f.read(SNIFF_BYTES))


def _path_of(path: str) -> str:
    """The path of a URI (without scheme and host), or ``path`` itself."""
    parts = urlsplit(path)
    # A one-letter scheme is a Windows drive.
    return parts.path if len(parts.scheme) > 1 else path


def _last_part(path: str) -> str:
    """The last component of a path or URI as given; "" for ".", ".." and roots, whose
    names say nothing of what is in them."""
    last = _path_of(path).rstrip("/").rsplit("/", 1)[-1]
    return "" if last in (".", "..") else last


def capture_name(found_through: str, path: str) -> str:
    """The name of the file ``path``, found through the input path or URI
    ``found_through`` (a file or a folder; ``path`` starts with it, then "/"): see the
    module docstring."""
    top = found_through.rstrip("/")
    if path.rstrip("/") == top or not path.startswith(top + "/"):
        return _last_part(path) or path
    below = path[len(top) + 1 :]
    folder = _last_part(top)
    return f"{folder}/{below}" if folder else below


def unique_names(entries: Sequence[tuple[str, str]]) -> list[str]:
    """The names of ``entries``, (path or URI, name) pairs whose name is the end of its
    path, made unique: names that clash take one more parent folder at a time; where
    the paths differ only before that (another scheme or host), the whole URI."""
    parts = [[p for p in _path_of(path).split("/") if p] for path, _ in entries]
    names = [name for _, name in entries]
    depth = [name.count("/") + 1 for name in names]
    while True:
        counts = Counter(names)
        clashing = [i for i, name in enumerate(names) if counts[name] > 1]
        if not clashing:
            return names
        grew = False
        for i in clashing:
            if depth[i] < len(parts[i]):
                depth[i] += 1
                names[i] = "/".join(parts[i][-depth[i]:])
                grew = True
        if not grew:
            for i in clashing:
                names[i] = entries[i][0]
            return names


def local_inputs(inputs: Iterable[str]) -> tuple[list[LocalInput], list[Skipped]]:
    """The files to read for ``inputs`` (local paths: files, or folders read
    recursively, in name order) and the files of those folders that were skipped."""
    found: list[tuple[str, str]] = []  # (path, name)
    problems: dict[int, str] = {}  # index in found: why that input cannot be read
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for arg in inputs:
        if not os.path.isdir(arg):
            if not os.path.exists(arg):
                problems[len(found)] = "no such file or directory"
            if os.path.realpath(arg) not in seen:
                seen.add(os.path.realpath(arg))
                found.append((arg, capture_name(arg, arg)))
            continue
        taken = 0  # files to read: captures, and files that could not be looked at
        before = len(skipped)
        below: list[str] = []
        for root, dirs, names in os.walk(arg):
            dirs[:] = [d for d in dirs if not is_hidden(d)]
            below += [os.path.join(root, n) for n in names if not is_hidden(n)]
        # In path order, as the pipeline lists a folder (sub/deeper/ before sub/x).
        for path in sorted(below):
            label = capture_name(arg, path)
            try:
                sniffed = sniff_path(path)
            except OSError as exc:  # it may be a capture: an error, not a skip
                problems[len(found)] = f"cannot read: {exc.strerror or exc}"
                found.append((path, label))
                taken += 1
                continue
            if sniffed.format is None:
                skipped.append(Skipped(label, sniffed.reason or "not a capture"))
            elif os.path.realpath(path) not in seen:
                seen.add(os.path.realpath(path))
                found.append((path, label))
                taken += 1
        if not taken:
            others = len(skipped) - before
            problems[len(found)] = ("no capture file there"
                                    + (f" ({others} other file(s) skipped)" if others else ""))
            found.append((arg, capture_name(arg, arg)))
    names = unique_names(found)
    return ([LocalInput(path, name, problems.get(i)) for i, ((path, _), name)
             in enumerate(zip(found, names))], skipped)


def skipped_line(count: int, names: Sequence[str], shown: int = 5) -> str:
    """The one stderr line about the files of the input folders that were skipped: how
    many, and the names of the first ``shown``."""
    more = f" and {count - shown} more" if count > shown else ""
    return (f"mqttwire: skipped {count} file(s) of the input folders that are not "
            f"captures: {', '.join(names[:shown])}{more}")
