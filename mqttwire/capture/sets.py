"""One capture in several files: which files are pieces of one capture (a *set*), and
reading a set as one capture.

Long captures are written as rotating files: Wireshark's ring buffer (``dumpcap -b
filesize:KB`` or ``-b duration:S``) and ``editcap -c N`` / ``-i S`` name them
``PREFIX_NNNNN_YYYYMMDDhhmmss.EXT``; ``tcpdump -C MB -w F`` writes ``F``, ``F1``, ``F2``,
... (with ``-W N``: ``F0``, ``F1``, ... zero-padded to one width).  Read file by file,
every TCP connection that crosses a boundary would become one connection per file, each
after the first "joined mid-stream", and every QoS exchange cut by a boundary would look
incomplete.  Read as one capture (:class:`FileChain`: one reassembler and one MQTT decoder
state over the frames of all files, frame numbers counting on from file to file), a set
gives the records of the file that ``mergecap -a`` would make of it.

How :func:`group_files` recognises sets (mode "auto"): **names propose, times confirm.**

1. Names.  Files of one directory whose names follow one of the two schemes above with
   the same PREFIX and EXT (or the same F) are candidates, ordered by their number
   (``F`` alone is number 0).  So are, among the other files of a directory, those whose
   names are alike but for their numbers (``tcpdump -G``'s strftime names:
   ``cap-20261126184501.pcap``), ordered by those numbers; but names alike say less
   than a tool's scheme (separate runs are often named so), so these must also show a
   TCP connection going on across each boundary (step 3).
2. Times.  Each candidate's first and last frame times are read (every record header of
   the file: a pass over the file before it is decoded, only for candidates).  A file
   joins the set of the one before it when its first frame is at or after that file's
   last frame.  Where it is earlier, the two overlap in time (two capture points of the
   same traffic, or a set and a copy of one of its files): the set is cut there, both
   parts read as separate captures, and a note says so.  Where the number order does not
   follow on in time but the time order does (``tcpdump -W``'s numbers wrap around),
   the time order is taken.  A file that cannot be read to its end ends its set (the
   set's capture ends with that file's capture error, as one file's would), and a note
   says so.  Numbers that skip one (a file missing) are noted too: its traffic shows as
   gaps.
3. TCP, for names alike only.  Some direction of a TCP connection whose segments end
   the first file (among its last :data:`EDGE_FRAMES` frames, not ended by a FIN or
   RST) must begin the next (among its first EDGE_FRAMES, without a SYN) at a sequence
   number close to where it stopped (:func:`continues`).  Where none does, the files
   are read as separate captures, and a note says so (``--group one`` joins them).
   This reads the whole of those files once more (:func:`tcp_edges`).

Mode "never" reads every file as a capture of its own; mode "one" reads all of them as
one capture, in the order of their names' numbers when they are all one candidate group,
else in the order of their first frames (the order given breaks ties), and notes any
overlap it stitches.  A set's name (the ``capture`` of its records and connection ids) is
its first file's name; each record's file is known from its frame number
(:meth:`FileChain.file_of`).

Which file a record came from is not a field of :class:`~.record.Record`: Record's
fields are filled by position in the compiled loop's hot path (shared_slots.py's
RECORD_FIELDS), and a field that is the same for every record of a file would cost every
record of every capture a slot.  The file follows from the frame number instead: the
chain keeps the first frame number of each file (:meth:`FileChain.file_of`,
:meth:`CaptureSet.file_of`), and the pipeline's ``file`` column is made from it a batch
at a time.

Only the standard library and the capture reader are used here: no Spark.
"""

from __future__ import annotations

import os
import re
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import attrgetter, lt
from typing import TYPE_CHECKING, Any, BinaryIO

from .pcap import (
    _EPB,
    _IDB,
    _OPB,
    _PCAP_MAGIC_NS,
    _PCAP_MAGIC_US,
    _SHB,
    _SPB,
    CHUNK,
    MAX_FRAME,
    CaptureFormatError,
    _Pcapng,
    _Source,
    iter_frames,
)

if TYPE_CHECKING:
    from .record import Record

__all__ = ["GROUP_MODES", "CaptureSet", "FileChain", "FileTimes", "SetPlan", "TcpEdges",
           "alike_key", "continues", "group_files", "plan_sets", "probe_file", "scan_file",
           "set_name_key", "tcp_edges"]

#: The values of the grouping option (``--group``, ``read_capture``'s ``group``).
GROUP_MODES = ("auto", "never", "one")

#: dumpcap -b and editcap -c/-i: PREFIX_NNNNN_YYYYMMDDhhmmss.EXT (NNNNN from 00001 for
#: dumpcap, 00000 for editcap; EXT whatever the first file was named with, maybe none).
_RING = re.compile(r"^(?P<prefix>.+)_(?P<number>\d{5,})_(?P<stamp>\d{14})(?P<ext>(\.[^.]*)*)$")
#: tcpdump -C: F, F1, F2, ... (-W: F0, F1, ... padded): the number ends the name.
_TCPDUMP = re.compile(r"^(?P<stem>.*\D)(?P<number>\d+)$")

#: The schemes, as notes name them.
RING_NAMES = "dumpcap -b / editcap -c, -i file names"
TCPDUMP_NAMES = "tcpdump -C file names"
ALIKE_NAMES = ("names alike but for their numbers (tcpdump -G's, say), a TCP connection "
               "going on across each boundary")

#: How many frames at each end of a file tell whether a TCP connection goes on across
#: the boundary (:func:`tcp_edges`).
EDGE_FRAMES = 64
#: A segment's sequence number this close to where the connection's last segment in the
#: file before ended (either way: retransmissions, bytes in flight) continues it; a new
#: connection on the same addresses and ports starts at a random number, 2**32 wide.
SEQ_SLACK = 1 << 20


@dataclass(frozen=True)
class FileTimes:
    """What :func:`probe_file` found in one file.

    Attributes:
        first_ts, last_ts: the times (ns) of its first and last frames; None if it holds
            none.
        frames: how many frames it holds (up to ``error``); None where they were not
            counted (a pcapng file whose last frame was found from its end).
        error: why it cannot be read to its end, or None.
    """

    first_ts: int | None
    last_ts: int | None
    frames: int | None
    error: str | None = None


def probe_file(path: str) -> FileTimes:
    """The frame times of the capture file at ``path``, read without decoding its frames
    (see :func:`scan_file` for the reference).  Raises OSError if it cannot be opened.

    The driver probes every candidate file of a set before the reading starts, so this
    must cost little next to the reading: a classic pcap file's record headers are
    hopped through (no frame is sliced out); a pcapng file's last packet block is found
    from its end (each block ends with its length), so only its first and last blocks
    are read.  Whatever that shortcut cannot vouch for (a block that does not match its
    length: a file cut short; a section, interface or packet block of another kind among
    the last blocks; a last time before the first) is scanned whole, as scan_file does.
    The last packet's interface is taken as numbered in the first packet's section:
    dumpcap, editcap and mergecap write one section a file; in a file of several
    sections with other interfaces, the last time could be misjudged, which matters
    only to the grouping."""
    name = os.path.basename(path)
    with open(path, "rb") as f:
        magic = f.read(4)
        try:
            if magic == b"\x0a\x0d\x0d\x0a":
                quick = _pcapng_ends(f, name)
                if quick is not None:
                    return quick
            else:
                for endian in "<>":
                    (value,) = struct.unpack(endian + "I", magic) if len(magic) == 4 else (0,)
                    if value in (_PCAP_MAGIC_US, _PCAP_MAGIC_NS):
                        return _pcap_hop(f, name, endian, value == _PCAP_MAGIC_NS)
        except CaptureFormatError as exc:
            return FileTimes(None, None, 0, str(exc))
        f.seek(0)
        return _scan(f, name)


def scan_file(path: str) -> FileTimes:
    """The frame times of the capture file at ``path``, every frame read (the
    reference of :func:`probe_file`)."""
    with open(path, "rb") as f:
        return _scan(f, os.path.basename(path))


def _scan(f: BinaryIO, name: str) -> FileTimes:
    first = last = None
    frames = 0
    error = None
    try:
        for frame in iter_frames(f, name):
            if first is None:
                first = frame.ts
            last = frame.ts
            frames += 1
    except CaptureFormatError as exc:
        error = str(exc)
    return FileTimes(first, last, frames, error)


def _pcap_hop(f: BinaryIO, name: str, endian: str, nanos: bool) -> FileTimes:
    """A classic pcap file's frame times, from its record headers (read a chunk at a
    time; the data between them skipped).  The errors are pcap.py's."""
    size = os.fstat(f.fileno()).st_size
    if size < 24:
        raise CaptureFormatError(name, 0, "pcap file header truncated (24 bytes needed)")
    unpack = struct.Struct(endian + "IIII").unpack_from
    scale = 1 if nanos else 1000
    first = last = None
    frames = 0
    off = 24  # the file offset of the chunk's first record header
    try:
        while off < size:
            f.seek(off)
            buf = f.read(CHUNK)
            n = len(buf)
            if n < 16:
                raise CaptureFormatError(name, off, "pcap record header truncated")
            pos = 0
            while n - pos >= 16:
                sec, frac, caplen, _ = unpack(buf, pos)
                if caplen > MAX_FRAME:
                    raise CaptureFormatError(
                        name, off + pos, f"pcap record length {caplen} is implausible "
                                         "(corrupt file)")
                end = pos + 16 + caplen
                if off + end > size:
                    raise CaptureFormatError(
                        name, off + pos, f"pcap record claims {caplen} bytes but the file "
                                         f"ends after {size - off - pos - 16}")
                last = sec * 1_000_000_000 + frac * scale
                if first is None:
                    first = last
                frames += 1
                pos = end
            off += pos  # past the chunk when its last record goes on after it
    except CaptureFormatError as exc:
        return FileTimes(first, last, frames, str(exc))
    return FileTimes(first, last, frames)


def _pcapng_ends(f: BinaryIO, name: str) -> FileTimes | None:
    """A pcapng file's first and last frame times: the blocks from the start to the
    first frame, then the blocks from the end back to the last packet block; None where
    that cannot be trusted (then the caller scans the whole file)."""
    f.seek(0)
    reader = _Pcapng(_Source(f, name))
    while True:
        block = reader.block()  # raises CaptureFormatError
        if block is False:
            return FileTimes(None, None, 0)  # read to its end: no frames
        if block is not True:
            first: int = block.ts
            first_end = reader.src.base + reader.src.pos
            break
    endian, interfaces = reader.endian, reader.interfaces
    size = os.fstat(f.fileno()).st_size
    pos = size
    head = struct.Struct(endian + "II")
    # After the last packet come at most a few blocks (interface statistics, name
    # resolution, a custom block): walking back further is not worth it.
    for _ in range(16):
        if pos - 12 < first_end:
            return None
        f.seek(pos - 4)
        (total,) = struct.unpack(endian + "I", f.read(4))
        if total < 12 or total & 3 or total > pos - first_end:
            return None
        f.seek(pos - total)
        data = f.read(min(total, 28))
        block_type, length = head.unpack_from(data)
        if length != total or block_type in (_SHB, _IDB, _SPB, _OPB):
            return None  # a file cut short, another section or interface: scan it
        if block_type == _EPB:
            if total < 32:
                return None
            if_id, ts_hi, ts_lo = struct.unpack_from(endian + "III", data, 8)
            if if_id >= len(interfaces):
                return None
            last = interfaces[if_id].ns((ts_hi << 32) | ts_lo)
            return FileTimes(first, last, None) if last >= first else None
        pos -= total
    return None


@dataclass(frozen=True)
class SetPlan:
    """How some files are read: :func:`group_files`'s answer.

    Attributes:
        sets: the captures, each a tuple of indices into the files given, in reading
            order; every file is in exactly one.  The sets come in the order of their
            first-given file.
        how: for each set, why its files are one capture ("one file", the names'
            scheme, "--group one").
        notes: what a user should know (overlaps not stitched, files not read to their
            end, missing numbers), each a sentence naming the files.
    """

    sets: list[tuple[int, ...]]
    how: list[str]
    notes: list[str] = field(default_factory=list)


def set_name_key(name: str) -> tuple[str, str, int] | None:
    """(scheme, key, number) of a file's base name under one of the rotating tools'
    schemes, or None.  Files with equal scheme and key (in one directory) are
    candidates for one set, ordered by number."""
    m = _RING.match(name)
    if m:
        return RING_NAMES, f"{m['prefix']}\0{m['ext']}", int(m["number"])
    m = _TCPDUMP.match(name)
    if m:
        return TCPDUMP_NAMES, m["stem"], int(m["number"])
    return None


#: A file's place in its name group: its name's numbers.
Numbers = tuple[int, ...]


def alike_key(name: str) -> tuple[str, Numbers] | None:
    """A name with every run of digits replaced by "#", and those numbers; None for a
    name without digits.  Files of one directory with equal keys are alike."""
    numbers = tuple(int(n) for n in re.findall(r"\d+", name))
    return (re.sub(r"\d+", "#", name), numbers) if numbers else None


def _candidates(paths: Sequence[str | None]) -> list[tuple[str, list[tuple[Numbers, int]]]]:
    """The name groups of two files or more: (scheme, [(numbers, index)...] by number):
    the rotating tools' schemes first, then names alike among the other files."""
    groups: dict[tuple[str, str, str], list[tuple[Numbers, int]]] = {}
    names: dict[tuple[str, str], int] = {}
    for i, path in enumerate(paths):
        if path is not None:
            names[(os.path.dirname(path), os.path.basename(path))] = i
    for (directory, base), i in names.items():
        found = set_name_key(base)
        if found is None:
            continue
        scheme, key, number = found
        groups.setdefault((directory, scheme, key), []).append(((number,), i))
    # tcpdump -C's first file, F, has no number: it joins the group of F1, F2, ...
    for (directory, scheme, key), members in groups.items():
        if scheme == TCPDUMP_NAMES and (directory, key) in names:
            members.append(((0,), names[(directory, key)]))
    out = []
    taken: set[int] = set()
    # A name such as "cap_00001_20260101000000" (no extension) fits both schemes: the
    # ring scheme, tried first, keeps it.
    for (_, scheme, _), members in groups.items():
        members = sorted(m for m in members if m[1] not in taken)
        if len(members) >= 2:
            out.append((scheme, members))
            taken.update(i for _, i in members)
    alike: dict[tuple[str, str], list[tuple[Numbers, int]]] = {}
    for (directory, base), i in names.items():
        if i not in taken and (key_numbers := alike_key(base)) is not None:
            alike.setdefault((directory, key_numbers[0]), []).append((key_numbers[1], i))
    out += [(ALIKE_NAMES, sorted(members)) for members in alike.values() if len(members) > 1]
    return out


def _follows(before: FileTimes, after: FileTimes) -> bool:
    """Whether ``after`` starts at or after ``before``'s last frame (a file without
    frames fits anywhere)."""
    return before.last_ts is None or after.first_ts is None or after.first_ts >= before.last_ts


def _in_time(order: Sequence[int], times: dict[int, FileTimes]) -> bool:
    framed = [times[i] for i in order if times[i].first_ts is not None]
    return all(_follows(a, b) for a, b in zip(framed, framed[1:]))


def group_files(paths: Sequence[str | None], mode: str = "auto", *,
                labels: Sequence[str] | None = None,
                probe: Callable[[str], FileTimes] = probe_file) -> SetPlan:
    """Which of ``paths`` are one capture (see the module's docstring).

    Args:
        paths: local paths of the files, or None for a file that cannot be opened here
            (read alone, whatever the mode).
        mode: "auto", "never" or "one" (:data:`GROUP_MODES`).
        labels: the files' names in notes; default their base names.
        probe: reads a file's frame times (:func:`probe_file`); called only for files
            that may join a set, and at most once each.

    A file that ``probe`` cannot open (OSError) is read alone, so that its reading
    reports the problem.
    """
    if mode not in GROUP_MODES:
        raise ValueError(f"group must be one of {', '.join(GROUP_MODES)}, not {mode!r}")
    names = list(labels) if labels is not None else [
        os.path.basename(p) if p is not None else f"#{i}" for i, p in enumerate(paths)]
    if len(names) != len(paths):
        raise ValueError("labels and paths differ in length")
    notes: list[str] = []
    times: dict[int, FileTimes] = {}

    def probed(indices: Iterable[int]) -> list[int]:
        """The indices whose files could be probed (the others are read alone)."""
        ok = []
        for i in indices:
            path = paths[i]
            if path is None:
                continue
            if i not in times:
                try:
                    times[i] = probe(path)
                except OSError as exc:
                    notes.append(f"{names[i]}: cannot be read ({exc.strerror or exc}): "
                                 "read alone")
                    continue
            ok.append(i)
        return ok

    chains: list[tuple[list[int], str]] = []
    if mode == "one" and sum(p is not None for p in paths) > 1:
        members = probed(range(len(paths)))
        alone = [i for i in range(len(paths)) if i not in set(members)]
        groups = _candidates([paths[i] for i in members])
        if len(groups) == 1 and len(groups[0][1]) == len(members):
            order = [members[j] for _, j in groups[0][1]]
        else:
            # By first frame, the order given breaking ties (a file without frames
            # first: it adds nothing wherever it goes).
            order = sorted(members, key=lambda i: (
                -1 if times[i].first_ts is None else times[i].first_ts, i))
        framed = [i for i in order if times[i].first_ts is not None]
        for a, b in zip(framed, framed[1:]):
            if not _follows(times[a], times[b]):
                notes.append(f"{names[b]} begins before the end of {names[a]} (they "
                             "overlap in time): stitched all the same, as --group one "
                             "asked; traffic that both hold is read twice (again as new "
                             "connections, or as retransmissions of open ones)")
        if order:
            chains.append((order, "--group one"))
        chains += [([i], "one file") for i in alone]
    elif mode == "auto":
        grouped: set[int] = set()
        edges: dict[int, TcpEdges] = {}
        for scheme, candidates in _candidates(paths):
            ok = set(probed(i for _, i in candidates))
            numbered = [(n, i) for n, i in candidates if i in ok]
            order = [i for _, i in numbered]
            wrapped = False
            if not _in_time(order, times):
                by_time = sorted(order, key=lambda i: (times[i].first_ts is None,
                                                       times[i].first_ts or 0))
                if _in_time(by_time, times):
                    order, wrapped = by_time, True
            if not wrapped and scheme == RING_NAMES:
                for ((n,), a), ((m,), b) in zip(numbered, numbered[1:]):
                    if m > n + 1:
                        notes.append(f"{names[a]} and {names[b]}: the numbers between "
                                     f"{n} and {m} are missing; their traffic shows as "
                                     "gaps")
            for chain in _cut(order, times, names, notes):
                if scheme == ALIKE_NAMES:
                    # Names alike say less than a tool's: separate runs are often named
                    # so.  A TCP connection going on from one file into the next says
                    # they are pieces of one capture.
                    parts = _cut_tcp(chain, paths, times, names, notes, edges)
                else:
                    parts = [chain]
                for part in parts:
                    chains.append((part, scheme if len(part) > 1 else "one file"))
                    grouped.update(part)
        chains += [([i], "one file") for i in range(len(paths)) if i not in grouped]
    else:
        chains = [([i], "one file") for i in range(len(paths))]
    chains.sort(key=lambda c: min(c[0]))
    return SetPlan([tuple(c) for c, _ in chains], [how for _, how in chains], notes)


@dataclass(frozen=True)
class TcpEdges:
    """The TCP segments at the ends of a file (:func:`tcp_edges`).

    Attributes:
        head: per direction (source address and port, destination address and port),
            the sequence number and flags of its first segment among the file's first
            :data:`EDGE_FRAMES` frames.
        tail: per direction, the sequence number after its last segment among the
            file's last EDGE_FRAMES frames (SYN and FIN count one), unless a RST or FIN
            ended it there.
    """

    head: dict[tuple[bytes, int, bytes, int], tuple[int, int]]
    tail: dict[tuple[bytes, int, bytes, int], int]


def tcp_edges(path: str) -> TcpEdges:
    """The TCP segments at the ends of the capture file at ``path`` (every frame is read;
    the first and last :data:`EDGE_FRAMES` are parsed).  Raises OSError if it cannot be
    opened; a file that stops being a capture gives what was read before."""
    from collections import deque

    from .link import TcpSegment, parse_frame

    head: dict[tuple[bytes, int, bytes, int], tuple[int, int]] = {}
    last: deque[tuple[int, bytes]] = deque(maxlen=EDGE_FRAMES)
    with open(path, "rb") as f:
        try:
            for frame in iter_frames(f, os.path.basename(path)):
                if frame.number <= EDGE_FRAMES:
                    seg = parse_frame(frame.linktype, frame.data)
                    if isinstance(seg, TcpSegment):
                        head.setdefault((seg.src, seg.sport, seg.dst, seg.dport),
                                        (seg.seq, seg.flags))
                last.append((frame.linktype, bytes(frame.data)))
        except CaptureFormatError:
            pass
    tail: dict[tuple[bytes, int, bytes, int], int] = {}
    for linktype, data in last:
        seg = parse_frame(linktype, memoryview(data))
        if not isinstance(seg, TcpSegment):
            continue
        key = (seg.src, seg.sport, seg.dst, seg.dport)
        if seg.flags & 0x05:  # FIN or RST: that direction does not go on
            tail.pop(key, None)
            continue
        tail[key] = (seg.seq + seg.wire_len + (seg.flags >> 1 & 1)) & 0xFFFFFFFF
    return TcpEdges(head, tail)


def continues(before: TcpEdges, after: TcpEdges) -> bool:
    """Whether a TCP connection goes on from the end of one file into the next: a
    direction whose first segment in ``after`` is no SYN and carries on, by its sequence
    number, from where it stopped in ``before``."""
    for key, (seq, flags) in after.head.items():
        nxt = before.tail.get(key)
        if nxt is None or flags & 0x02:
            continue
        if min((seq - nxt) & 0xFFFFFFFF, (nxt - seq) & 0xFFFFFFFF) < SEQ_SLACK:
            return True
    return False


def _cut_tcp(chain: list[int], paths: Sequence[str | None], times: dict[int, FileTimes],
             names: Sequence[str], notes: list[str],
             edges: dict[int, TcpEdges]) -> list[list[int]]:
    """``chain`` (of files whose names are alike) cut where no TCP connection goes on
    from one file with frames into the next."""
    def edge(i: int) -> TcpEdges:
        if i not in edges:
            path = paths[i]
            assert path is not None  # probed
            try:
                edges[i] = tcp_edges(path)
            except OSError:
                edges[i] = TcpEdges({}, {})
        return edges[i]

    parts: list[list[int]] = [[]]
    last: int | None = None
    for i in chain:
        if last is not None and times[i].first_ts is not None:
            if not continues(edge(last), edge(i)):
                notes.append(f"{names[last]} and {names[i]}: names alike and times that "
                             "follow on, but no TCP connection goes on from one into the "
                             "other: read as separate captures (--group one joins them)")
                parts.append([])
        parts[-1].append(i)
        if times[i].first_ts is not None:
            last = i
    return [part for part in parts if part]


def _cut(order: list[int], times: dict[int, FileTimes], names: Sequence[str],
         notes: list[str]) -> list[list[int]]:
    """``order`` cut where a file overlaps the one before it in time, and after a file
    that cannot be read to its end."""
    chains: list[list[int]] = []
    last: int | None = None  # the chain's last file with frames
    for i in order:
        t = times[i]
        if not chains:
            chains.append([i])
        elif times[chains[-1][-1]].error is not None:
            notes.append(f"{names[chains[-1][-1]]} cannot be read to its end "
                         f"({times[chains[-1][-1]].error}): its set ends with it, and "
                         f"{names[i]} begins another")
            chains.append([i])
            last = None
        elif last is not None and not _follows(times[last], t):
            notes.append(f"{names[i]} begins before the end of {names[last]} (they overlap "
                         "in time: two capture points, or a copy?): read as separate "
                         "captures, not stitched (--group one stitches them)")
            chains.append([i])
            last = None
        else:
            chains[-1].append(i)
        if t.first_ts is not None:
            last = i
    return chains


# ---------------------------------------------------------------------------------------
# Reading a set


#: Opens one file of a set for reading.
Opener = Callable[[], BinaryIO]

_FRAME = attrgetter("frame")


class FileChain:
    """The files of one set as the capture loops read them: opened one at a time, in
    order, each closed when the next is asked for (a ring buffer of a thousand files
    holds one open), and the number of each file's first frame in the set kept, so that
    a record's file is known from its frame.

    The loops call :meth:`open_next` at the start and at each file's clean end,
    :meth:`failed` when a file stops being a capture (the set ends there, as one file's
    capture would), and :meth:`close` at the end.
    """

    def __init__(self, files: Sequence[tuple[str, Opener]]) -> None:
        if not files:
            raise ValueError("a set holds one file at least")
        self.files = list(files)
        #: The number of the first frame of each file opened so far, and its name.
        self.starts: list[int] = []
        self.names: list[str] = []
        self._open: BinaryIO | None = None

    def open_next(self, frames: int) -> tuple[BinaryIO, str] | None:
        """The next file and its name, ``frames`` frames having been read before it;
        None after the last.  The first file's OSError propagates (as one file's
        would); a later file that cannot be opened ends the set with a
        CaptureFormatError, the records so far kept."""
        self.close()
        n = len(self.starts)
        if n == len(self.files):
            return None
        name, opener = self.files[n]
        try:
            f = opener()
        except OSError as exc:
            if not n:
                raise
            # Counted as opened: the capture error is this file's (file_of).
            self.starts.append(frames + 1)
            self.names.append(name)
            raise self.failed(CaptureFormatError(
                name, 0, f"cannot open it ({exc.strerror or exc})")) from exc
        self._open = f
        self.starts.append(frames + 1)
        self.names.append(name)
        return f, name

    def failed(self, exc: CaptureFormatError) -> CaptureFormatError:
        """``exc``, saying also which later files of the set were not read."""
        rest = [name for name, _ in self.files[len(self.starts):]]
        if rest and not getattr(exc, "_set_noted", False):
            exc.args = (f"{exc.args[0]}; the set's reading stops there: "
                        f"{len(rest)} later file{'' if len(rest) == 1 else 's'} not read "
                        f"({', '.join(rest)})",)
            exc._set_noted = True  # type: ignore[attr-defined]
        return exc

    def close(self) -> None:
        if self._open is not None:
            f, self._open = self._open, None
            f.close()

    def __enter__(self) -> FileChain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def file_of(self, frame: int | None) -> str:
        """The name of the file that holds frame number ``frame`` of the set; for a
        record of no frame (a capture error), the last file opened."""
        if frame is None or not self.starts:
            return self.names[-1] if self.names else self.files[0][0]
        return self.names[max(0, bisect_right(self.starts, frame) - 1)]

    def files_of(self, records: Sequence[object]) -> list[str]:
        """:meth:`file_of` each record's ``frame``.  A batch of records mostly lies in
        one file: then one name for all, without a look-up each.  Else it is a few runs
        of rising frames (a connection's records in order, then the next connection's:
        a split ring buffer's decoding task, whose batch of one connection spans a dozen
        small files), each cut where a file starts, by bisection: no Python per record
        (a look-up per record was a fifth of such a task's CPU)."""
        if len(self.names) == 1:
            return [self.names[0]] * len(records)
        return self.files_of_frames(list(map(_FRAME, records)))

    def files_of_frames(self, frames: list[Any]) -> list[str]:
        """:meth:`files_of` for the records of frames ``frames``."""
        if len(self.names) == 1:
            return [self.names[0]] * len(frames)
        if not frames:
            return []
        if None in frames:
            file_of = self.file_of
            return [file_of(frame) for frame in frames]
        starts, names = self.starts, self.names
        first = bisect_right(starts, min(frames))
        if first == bisect_right(starts, max(frames)):
            return [names[max(0, first - 1)]] * len(frames)
        # Where a frame is lower than the one before, a new run begins.
        cuts = list(compress(range(1, len(frames)), map(lt, islice(frames, 1, None), frames)))
        out: list[str] = []
        for lo, hi in zip([0, *cuts], [*cuts, len(frames)]):
            run = frames[lo:hi]
            pos = 0
            while pos < len(run):
                k = max(0, bisect_right(starts, run[pos]) - 1)
                end = (bisect_left(run, starts[k + 1], pos) if k + 1 < len(starts)
                       else len(run))
                out += [names[k]] * (end - pos)
                pos = end
        return out


@dataclass
class CaptureSet:
    """Files read as one capture, in order (see the module's docstring).

    Attributes:
        paths: the files, in reading order.
        name: the capture's name (in records and connection ids); default the first
            file's base name.
        labels: each file's name (in errors, and from :meth:`file_of`); default their
            base names (their paths where two base names are equal).
        how: why they are one capture, in words.
    """

    paths: tuple[str, ...]
    name: str = ""
    labels: tuple[str, ...] = ()
    how: str = ""
    #: The chain of the last (or current) reading, for :meth:`file_of`.
    chain: FileChain | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.paths = tuple(os.fspath(p) for p in self.paths)
        if not self.paths:
            raise ValueError("a capture set holds one file at least")
        if not self.labels:
            self.labels = tuple(os.path.basename(p) for p in self.paths)
            if len(set(self.labels)) < len(self.labels):  # files of several directories
                self.labels = self.paths
        if len(self.labels) != len(self.paths):
            raise ValueError("a capture set needs one label per file")
        if not self.name:
            self.name = self.labels[0]

    def open_chain(self) -> FileChain:
        """A new :class:`FileChain` over the files (kept for :meth:`file_of`)."""
        self.chain = FileChain([(label, _opener(path))
                                for label, path in zip(self.labels, self.paths)])
        return self.chain

    def file_of(self, record: Record) -> str:
        """The file (its label) of a record of this set's last reading."""
        if self.chain is None:
            raise ValueError("the set has not been read")
        return self.chain.file_of(record.frame)


def _opener(path: str) -> Opener:
    return lambda: open(path, "rb")


def plan_sets(paths: Sequence[str], mode: str = "auto", *,
              probe: Callable[[str], FileTimes] = probe_file) -> tuple[list[CaptureSet],
                                                                        list[str]]:
    """``paths`` as :class:`CaptureSet` objects (:func:`group_files`), and the notes."""
    paths = [os.fspath(p) for p in paths]
    plan = group_files(paths, mode, probe=probe)
    return ([CaptureSet(tuple(paths[i] for i in members), how=how)
             for members, how in zip(plan.sets, plan.how)], plan.notes)
