"""One capture in several files (mqttwire.capture.sets): real captures of one MQTT session
taken into ring buffers by dumpcap -b and tcpdump -C and cut by editcap -c and -i, each
set read as one capture, against the file that mergecap -a makes of it; files that
overlap in time, the grouping options, files missing or cut short."""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ring_captures import RingCaptures, make_ring_captures, merged

from mqttwire.capture import CaptureSet, CaptureSetWarning, Record, read_capture
from mqttwire.capture.sets import (
    ALIKE_NAMES,
    RING_NAMES,
    TCPDUMP_NAMES,
    FileTimes,
    TcpEdges,
    alike_key,
    continues,
    group_files,
    plan_sets,
    probe_file,
    scan_file,
    set_name_key,
)

pytestmark = pytest.mark.interop

SCHEMES = {"editcap -c": RING_NAMES, "editcap -i": RING_NAMES,
           "dumpcap -b filesize": RING_NAMES, "tcpdump -C": TCPDUMP_NAMES}


@pytest.fixture(scope="module")
def rings(tmp_path_factory: pytest.TempPathFactory) -> RingCaptures:
    return make_ring_captures(tmp_path_factory.mktemp("rings"))


@pytest.fixture(scope="module")
def merges(rings: RingCaptures, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """mergecap -a of each set, by the set's name."""
    out = tmp_path_factory.mktemp("merged")
    return {name: merged(files, out / f"{name.replace(' ', '_')}.pcapng")
            for name, files in rings.sets().items()}


def comparable(records: list[Record]) -> list[list[tuple[str, Any]]]:
    """Every field of every record, but the capture's name (in ``capture`` and in the
    connection ids): a set is named after its first file, the merged file otherwise."""
    out = []
    for rec in records:
        fields = []
        for f in dataclasses.fields(Record):
            value = getattr(rec, f.name)
            if f.name == "capture":
                continue
            if f.name == "connection_id" and value is not None:
                value = value.rsplit("#", 1)[1]
            fields.append((f.name, repr(value)))
        out.append(fields)
    return out


def read(source: Any, port: int, codec: ModuleType, **kw: Any) -> list[Record]:
    return list(read_capture(source, ports=[port], codec=codec, payload_limit=64,
                             stream_ends=True, **kw))


def test_the_tools_cut_the_session(rings: RingCaptures) -> None:
    """Every set has several files (else the tests below prove nothing)."""
    for name, files in rings.sets().items():
        assert len(files) >= 3, (name, files)


def test_sets_are_recognised_by_name_and_time(rings: RingCaptures) -> None:
    """Given every file at once, in no particular order: each tool's files are one set,
    in their order, and the whole capture is read alone; nothing to note."""
    everything = [rings.whole] + [f for files in rings.sets().values() for f in files]
    given = [str(p) for p in reversed(everything)]
    plan = group_files(given)
    assert plan.notes == []
    got = sorted((tuple(given[i] for i in members), how)
                 for members, how in zip(plan.sets, plan.how))
    want = sorted([((str(rings.whole),), "one file")] + [
        (tuple(str(f) for f in files), SCHEMES[name]) for name, files in rings.sets().items()])
    assert got == want


def test_each_set_reads_as_its_merged_file(codec: ModuleType, rings: RingCaptures,
                                           merges: dict[str, Path]) -> None:
    """Each set read as one capture gives the records of its mergecap -a file, field by
    field (the capture's name aside), in both capture loops (conftest.py); each record's
    file is the one that holds its frame."""
    for name, files in rings.sets().items():
        (capture_set,), notes = plan_sets([str(f) for f in files])
        assert notes == [] and capture_set.paths == tuple(str(f) for f in files)
        assert capture_set.name == files[0].name
        records = read(capture_set, rings.port, codec)
        whole = read(merges[name], rings.port, codec)
        assert comparable(records) == comparable(whole), name
        assert {r.capture for r in records} == {files[0].name}
        # Each file's frames, as the file alone numbers them, follow on in the set.
        first, spans = 1, []
        for f in files:
            frames = scan_file(str(f)).frames
            spans.append((first, first + frames - 1, f.name))
            first += frames
        for rec in records:
            assert rec.frame is not None
            (file,) = [n for lo, hi, n in spans if lo <= rec.frame <= hi]
            assert capture_set.file_of(rec) == file
        # Every file holds some of the session's records.
        assert {capture_set.file_of(r) for r in records} == {f.name for f in files}


def test_a_set_of_pcap_and_pcapng_files(codec: ModuleType, rings: RingCaptures,
                                        merges: dict[str, Path], tmp_path: Path) -> None:
    """A set's files need not share a format: editcap -c's pieces (pcapng), every other
    one rewritten as classic pcap, read as the merged file."""
    import subprocess

    files = []
    for i, piece in enumerate(rings.editcap_c):
        if i % 2:
            files.append(str(piece))
            continue
        copy = tmp_path / piece.name
        subprocess.run(["editcap", "-F", "pcap", str(piece), str(copy)], check=True,
                       timeout=60)
        assert copy.read_bytes()[:4] == b"\xd4\xc3\xb2\xa1"  # classic pcap, microseconds
        files.append(str(copy))
    records = read(CaptureSet(tuple(files)), rings.port, codec)
    assert comparable(records) == comparable(read(merges["editcap -c"], rings.port, codec))


def test_the_session_whole(codec: ModuleType, rings: RingCaptures) -> None:
    """What the set gives and files read one by one do not: the four clients, each one
    connection from its CONNECT to its DISCONNECT, and every QoS 1 and 2 exchange."""
    files = [str(f) for f in rings.editcap_c]
    records = read(files, rings.port, codec)  # a list of paths: grouped ("auto")
    connections = {r.connection_id: r.client_id for r in records if r.kind == "packet"}
    assert sorted(connections.values()) == ["pub4", "pub5", "sub4", "sub5"]
    assert Counter(r.packet_type for r in records if r.packet_type in (
        "CONNECT", "DISCONNECT")) == {"CONNECT": 4, "DISCONNECT": 4}
    assert [r for r in records if r.kind not in ("packet", "end")] == []
    # PUBLISH QoS 1 and 2 from the publishers and to the subscribers (sub4 at QoS 1 at
    # most: its subscription's), each acknowledged.
    sent = Counter(q for *_, q in _messages())
    expected = {1: 3 * sent[1] + sent[2], 2: 2 * sent[2]}
    for qos, acks in ((1, ("PUBACK",)), (2, ("PUBREC", "PUBREL", "PUBCOMP"))):
        published = {(r.connection_id, r.direction, r.packet_id) for r in records
                     if r.packet_type == "PUBLISH" and r.qos == qos}
        assert len(published) == expected[qos]
        for ack in acks:
            acked = {(r.connection_id, r.direction, r.packet_id) for r in records
                     if r.packet_type == ack}
            assert {(c, p) for c, _, p in published} <= {(c, p) for c, _, p in acked}
    # Read file by file ("never"), the same traffic is many connections, most of them
    # without their CONNECT.
    alone = read(files, rings.port, codec, group="never")
    ids = {r.connection_id for r in alone if r.kind == "packet"}
    assert len(ids) > 4 * (len(files) - 1)
    assert len({r.capture for r in alone}) == len(files)
    assert sum(1 for r in alone if r.kind == "packet" and r.client_id is None) > 0


def test_probe_file_as_scan_file(rings: RingCaptures, merges: dict[str, Path],
                                 tmp_path: Path) -> None:
    """The driver's quick look at a file (record headers hopped; a pcapng file's last
    packet found from its end) finds the times and errors of a full read: on every
    file here (classic pcap and pcapng) and on copies cut short in a header, in a
    frame and in a pcapng block."""
    files = [rings.whole, *merges.values()] + [f for s in rings.sets().values() for f in s]
    for source, cut in ((rings.whole, 8), (rings.whole, 5000), (rings.tcpdump_c[1], 3),
                        (rings.dumpcap[1], 10), (rings.dumpcap[2], 4000),
                        (rings.editcap_c[0], 1)):
        copy = tmp_path / f"{cut}-{source.name}"
        data = source.read_bytes()
        copy.write_bytes(data[:len(data) - cut])
        files.append(copy)
    errors = 0
    for f in files:
        quick, full = probe_file(str(f)), scan_file(str(f))
        assert (quick.first_ts, quick.last_ts, quick.error) == (
            full.first_ts, full.last_ts, full.error), f
        assert quick.frames in (None, full.frames)
        errors += full.error is not None
    assert errors == 6


def _messages() -> list[tuple[str, str, int, int]]:
    from ring_captures import MESSAGES

    return MESSAGES


def _copy(files: list[Path], directory: Path, names: list[str]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for f, name in zip(files, names):
        shutil.copy(f, directory / name)
        out.append(directory / name)
    return out


def test_overlapping_files_are_not_stitched(codec: ModuleType, rings: RingCaptures,
                                            merges: dict[str, Path], tmp_path: Path) -> None:
    """Two capture points of the same session (tcpdump's whole file, and dumpcap's ring
    merged), named as one ring buffer: their times overlap, so they are read as two
    captures, with a warning; --group one stitches them all the same, saying so."""
    a, b = _copy([rings.whole, merges["dumpcap -b filesize"]], tmp_path,
                 ["pt_00001_20260101000000.pcap", "pt_00002_20260101000001.pcap"])
    plan = group_files([str(a), str(b)])
    assert plan.sets == [(0,), (1,)]
    (note,) = plan.notes
    assert note.startswith(f"{b.name} begins before the end of {a.name} (they overlap")
    assert "read as separate captures" in note
    with pytest.warns(CaptureSetWarning, match="overlap"):
        records = read([str(a), str(b)], rings.port, codec)
    assert comparable(records) == comparable(read(a, rings.port, codec)) + comparable(
        read(b, rings.port, codec))
    assert [r.capture for r in records[:1]] + [r.capture for r in records[-1:]] == [a.name,
                                                                                    b.name]
    # Forced: one capture, in time order, with a note.
    forced = group_files([str(a), str(b)], "one")
    assert forced.sets == [(0, 1)] and forced.how == ["--group one"]
    assert "stitched all the same" in forced.notes[0]


def test_dissect_says_what_it_did_with_overlapping_files(
        rings: RingCaptures, merges: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from mqttwire.cli import main

    a, b = _copy([rings.whole, merges["dumpcap -b filesize"]], tmp_path,
                 ["pt_00001_20260101000000.pcap", "pt_00002_20260101000001.pcap"])
    assert main(["dissect", str(a), str(b), "--port", str(rings.port)]) == 0
    out, err = capsys.readouterr()
    assert err == (f"mqttwire: {b.name} begins before the end of {a.name} (they overlap in "
                   "time: two capture points, or a copy?): read as separate captures, not "
                   "stitched (--group one stitches them)\n")
    assert {line.split()[1].split("#")[0] for line in out.splitlines()} == {a.name, b.name}


def test_group_never_and_one(codec: ModuleType, rings: RingCaptures,
                             merges: dict[str, Path], tmp_path: Path) -> None:
    """Names that are not alike (neither a rotating tool's scheme, nor equal but for
    their numbers) are separate captures unless --group one says otherwise; then they
    are read in the order of their times, as their merged file.  --group never refuses a
    real set."""
    pieces = rings.editcap_i
    names = [f"g-{i}{chr(ord('z') - i)}.pcap" for i in range(len(pieces))]
    files = [str(p) for p in _copy(pieces, tmp_path, names)]
    given = list(reversed(files))
    assert group_files(given).sets == [(i,) for i in range(len(files))]
    (one,), notes = plan_sets(given, "one")
    assert notes == [] and one.paths == tuple(files) and one.how == "--group one"
    assert comparable(read(one, rings.port, codec)) == comparable(
        read(merges["editcap -i"], rings.port, codec))
    ring = [str(f) for f in rings.dumpcap]
    assert group_files(ring, "never").sets == [(i,) for i in range(len(ring))]
    assert group_files(ring, "one").sets == [tuple(range(len(ring)))]
    with pytest.raises(ValueError, match="auto, never, one"):
        group_files(ring, "always")


def test_names_alike_are_one_set_when_a_connection_goes_on(
        codec: ModuleType, rings: RingCaptures, merges: dict[str, Path],
        tmp_path: Path) -> None:
    """Names that differ only in their numbers (tcpdump -G's strftime names) are one set
    when the times follow on and a TCP connection goes on from each file into the next:
    editcap -i's pieces named as tcpdump -G names its files; but two separate sessions
    named alike (the sample capture and this one: other connections) stay apart, with a
    note."""
    import datetime

    names = []
    for piece in rings.editcap_i:
        first = scan_file(str(piece)).first_ts
        assert first is not None
        when = datetime.datetime.fromtimestamp(first / 1e9, datetime.timezone.utc)
        # To the microsecond: two pieces of a 1 s split can begin in the same second.
        names.append(f"g-{when:%Y%m%d%H%M%S%f}.pcap")
    files = [str(p) for p in _copy(rings.editcap_i, tmp_path / "g", names)]
    (capture_set,), notes = plan_sets(list(reversed(files)))
    assert notes == [] and capture_set.paths == tuple(files)
    assert capture_set.how == ALIKE_NAMES
    assert comparable(read(capture_set, rings.port, codec)) == comparable(
        read(merges["editcap -i"], rings.port, codec))
    runs = _copy([Path(__file__).resolve().parents[2] / "examples" / "sample.pcapng",
                  merges["editcap -i"]], tmp_path / "runs", ["run-1.pcapng", "run-2.pcapng"])
    plan = group_files([str(p) for p in runs])
    assert plan.sets == [(0,), (1,)]
    assert plan.notes == ["run-1.pcapng and run-2.pcapng: names alike and times that follow "
                          "on, but no TCP connection goes on from one into the other: read "
                          "as separate captures (--group one joins them)"]


def test_continues() -> None:
    key = (b"\x7f\x00\x00\x01", 40000, b"\x7f\x00\x00\x01", 1883)
    before = TcpEdges({}, {key: 0xFFFFFF00})
    assert continues(before, TcpEdges({key: (0x10, 0x18)}, {}))  # wraps around 2**32
    assert continues(before, TcpEdges({key: (0xFFFF0000, 0x10)}, {}))  # a retransmission
    assert not continues(before, TcpEdges({key: (0x10, 0x02)}, {}))  # a SYN: a new one
    assert not continues(before, TcpEdges({key: (0x7FFF0000, 0x10)}, {}))  # far off
    other = (key[0], 40001, key[2], key[3])
    assert not continues(before, TcpEdges({other: (0xFFFFFF00, 0x10)}, {}))


@pytest.mark.parametrize(("name", "key"), [
    ("g-20261126184501.pcap", ("g-#.pcap", (20261126184501,))),
    ("cap_2026-11-26_18:45:01.pcapng", ("cap_#-#-#_#:#:#.pcapng", (2026, 11, 26, 18, 45, 1))),
    ("capture.pcap", None),
])
def test_alike_key(name: str, key: tuple[str, tuple[int, ...]] | None) -> None:
    assert alike_key(name) == key


def test_a_missing_file_is_noted_and_shows_as_gaps(codec: ModuleType,
                                                   rings: RingCaptures) -> None:
    files = [str(f) for f in rings.dumpcap]
    del files[2]
    (capture_set,), notes = plan_sets(files)
    assert capture_set.paths == tuple(files)
    (note,) = notes
    assert "the numbers between 2 and 4 are missing" in note
    records = read(capture_set, rings.port, codec)
    assert [r for r in records if r.kind == "gap"]
    assert {r.kind for r in records} <= {"packet", "gap", "error", "end"}


def test_a_file_cut_short_ends_its_set(codec: ModuleType, rings: RingCaptures,
                                       tmp_path: Path) -> None:
    """A file that stops being a capture ends the set it is in (its capture error is
    the set's last record), and the next file begins another set, with a note; read as
    one set regardless, the error names the later files, not read."""
    names = [f.name for f in rings.editcap_c]
    files = _copy(rings.editcap_c, tmp_path, names)
    with open(files[1], "r+b") as f:
        f.truncate(files[1].stat().st_size - 10)
    plan = group_files([str(f) for f in files])
    assert plan.sets == [(0, 1), tuple(range(2, len(files)))]
    assert f"{names[1]} cannot be read to its end" in plan.notes[0]
    whole = CaptureSet(tuple(str(f) for f in files))
    records = read(whole, rings.port, codec)
    last = records[-1]
    assert last.kind == "capture_error" and last.error is not None
    assert last.error.startswith(f"{names[1]}: pcapng block claims")  # editcap's format
    later = len(files) - 2
    assert (f"{later} later file{'' if later == 1 else 's'} not read "
            f"({', '.join(names[2:])})") in last.error
    assert whole.file_of(last) == names[1]


def test_a_later_file_that_cannot_be_opened(codec: ModuleType, rings: RingCaptures,
                                            tmp_path: Path) -> None:
    files = [str(f) for f in rings.editcap_c[:2]] + [str(tmp_path / "gone.pcap")]
    records = read(CaptureSet(tuple(files)), rings.port, codec)
    assert records[-1].kind == "capture_error"
    assert records[-1].error == "gone.pcap: cannot open it (No such file or directory) at offset 0"
    with pytest.raises(FileNotFoundError):  # the first one: an OSError, as for one file
        read(CaptureSet((files[2], files[0])), rings.port, codec)


def test_dissect_reads_a_set_as_one(rings: RingCaptures, merges: dict[str, Path],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from mqttwire.cli import main

    files = [str(f) for f in rings.tcpdump_c]
    assert main(["dissect", *files, "--port", str(rings.port)]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"mqttwire: {len(files)} files read as one capture, named "
                          f"tc.pcap ({TCPDUMP_NAMES}): tc.pcap, tc.pcap1, ")
    lines = out.splitlines()
    starts = [line for line in lines if line.startswith("# tc.pcap: file ")]
    assert [line.split()[3] for line in starts] == [f.rsplit("/", 1)[1] for f in files[1:]]
    first = 1
    for f, line in zip(files, starts):  # each file's first frame: after the one before
        first += scan_file(f).frames or 0
        assert line.endswith(f"(its frames from {first})")
    assert main(["dissect", str(merges["tcpdump -C"]), "--port", str(rings.port)]) == 0
    whole = capsys.readouterr().out.splitlines()
    strip = [line.replace("tc.pcap#", "#") for line in lines if not line.startswith("# ")]
    assert strip == [line.replace("tcpdump_-C.pcapng#", "#") for line in whole]
    assert main(["dissect", *files, "--port", str(rings.port), "--group", "never"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "# tc.pcap: file" not in out
    assert len({line.split()[1].split("#")[0] for line in out.splitlines()
                if not line.startswith("#")}) == len(files)


# ---------------------------------------------------------------------------------------
# The names and the grouping, without files


@pytest.mark.parametrize(("name", "key"), [
    ("ring_00001_20261126183926.pcapng", (RING_NAMES, "ring\0.pcapng", 1)),
    ("cut_00000_20261126183926.pcap", (RING_NAMES, "cut\0.pcap", 0)),
    ("my_ring_00012_20261126183926", (RING_NAMES, "my_ring\0", 12)),
    ("a_b_123456_20261126183926.pcap.gz", (RING_NAMES, "a_b\0.pcap.gz", 123456)),
    ("tc.pcap7", (TCPDUMP_NAMES, "tc.pcap", 7)),
    ("tc.pcap07", (TCPDUMP_NAMES, "tc.pcap", 7)),
    ("capture.pcap", None),
    ("run1.pcap", None),
    ("ring_0001_20261126183926.pcapng", None),
])
def test_set_name_key(name: str, key: tuple[str, str, int] | None) -> None:
    assert set_name_key(name) == key


def _times(spans: dict[str, tuple[int | None, int | None]]) -> Any:
    def probe(path: str) -> FileTimes:
        first, last = spans[path.rsplit("/", 1)[-1]]
        return FileTimes(first, last, 0 if first is None else 2)

    return probe


def test_tcpdump_ring_that_wrapped_is_read_in_time_order() -> None:
    """tcpdump -C -W 3 overwrites f0, f1, f2 in turn: by number the times go back, by
    time they follow on, so the time order is taken."""
    probe = _times({"f0": (30, 39), "f1": (40, 49), "f2": (20, 29)})
    plan = group_files(["d/f0", "d/f1", "d/f2"], probe=probe)
    assert plan.sets == [(2, 0, 1)] and plan.notes == []


def test_tcpdump_first_file_has_no_number() -> None:
    probe = _times({"t.pcap": (0, 9), "t.pcap1": (10, 19), "t.pcap2": (20, 29),
                    "u.pcap1": (0, 5)})
    plan = group_files(["d/t.pcap2", "d/u.pcap1", "d/t.pcap", "d/t.pcap1"], probe=probe)
    assert plan.sets == [(2, 3, 0), (1,)]


def test_files_of_other_directories_are_not_one_set() -> None:
    probe = _times({"c_00001_20260101000000.pcap": (0, 9),
                    "c_00002_20260101000010.pcap": (10, 19)})
    plan = group_files(["x/c_00001_20260101000000.pcap", "y/c_00002_20260101000010.pcap"],
                       probe=probe)
    assert plan.sets == [(0,), (1,)]


def test_a_file_without_frames_joins_anywhere_and_probing_only_candidates() -> None:
    probed: list[str] = []
    spans = {"c_00001_20260101000000.pcap": (0, 9), "c_00002_20260101000010.pcap": (None, None),
             "c_00003_20260101000020.pcap": (10, 19)}

    def probe(path: str) -> FileTimes:
        probed.append(path)
        return _times(spans)(path)

    plan = group_files(["d/alone.pcap"] + [f"d/{n}" for n in spans], probe=probe)
    assert plan.sets == [(0,), (1, 2, 3)]
    assert "d/alone.pcap" not in probed and len(probed) == 3
    assert group_files(["d/alone.pcap"], "one", probe=probe).sets == [(0,)]
    assert group_files([None, "d/alone.pcap"], "one", probe=probe).sets == [(0,), (1,)]
    assert "d/alone.pcap" not in probed  # nothing to group it with


# ---------------------------------------------------------------------------------------
# The pipeline


@dataclass
class PipelineRuns:
    """The inputs and the tables of the pipeline runs over them, per run."""

    cut: list[Path]  # editcap -c's pieces
    merged: Path  # their mergecap -a file
    overlap: list[Path]  # two capture points of one session, named as one ring
    tables: dict[str, dict[str, list[dict[str, Any]]]]  # run -> table -> rows
    summaries: dict[str, str]
    never: list[str]  # the packets' captures of ``cut``, read with group "never"


@pytest.fixture(scope="module")
def pipeline_runs(rings: RingCaptures, merges: dict[str, Path],
                  tmp_path_factory: pytest.TempPathFactory) -> PipelineRuns:
    """The pipeline on local[2] over editcap -c's set, its mergecap -a file, and two
    overlapping files (the first pieces of tcpdump's and of tcpdump -C's capture): runs
    "tasks" (the set one task), "split" (a split size of 2 MiB: the merged file is read
    in ranges, the set whole) and "shares" (every file or set read by two tasks, each
    keeping a share of its connections); and read_tables with group "never".  One Spark
    session for all (the dumpcap and tcpdump -C sets read as theirs above: the pipeline
    reads sets through the same code)."""
    import pyarrow.dataset as ds

    from mqttwire.spark import JavaMissing, PipelineOptions, find_java, read_tables, run_pipeline
    from mqttwire.spark.startup import make_session

    try:
        find_java()
    except JavaMissing as exc:
        pytest.fail(f"Spark needs Java: {exc}")
    root = tmp_path_factory.mktemp("pipeline-inputs")
    (merged_file,) = _copy([merges["editcap -c"]], root / "merged", ["cut.pcapng"])
    overlap = _copy([rings.editcap_c[0], rings.tcpdump_c[0]], root / "overlap",
                    ["pt_00001_20260101000000.pcap", "pt_00002_20260101000001.pcap"])
    inputs = ([str(f) for f in rings.editcap_c] + [str(merged_file)]
              + [str(f) for f in overlap])
    spark = make_session("local[2]")
    tables: dict[str, dict[str, list[dict[str, Any]]]] = {}
    summaries: dict[str, str] = {}
    try:
        for run, extra in (("tasks", {"share_size": None}),
                           ("split", {"split_size": 2 << 20, "share_size": None}),
                           ("shares", {"share_size": 1})):
            out = tmp_path_factory.mktemp(f"out-{run}")
            options = PipelineOptions(inputs, str(out), master="local[2]", progress_interval=0,
                                      ports=[rings.port], **extra)  # type: ignore[arg-type]
            run_pipeline(options, spark=spark)
            tables[run] = {name: ds.dataset(out / name, format="parquet",
                                            partitioning="hive" if name == "packets" else None
                                            ).to_table().to_pylist()
                           for name in ("packets", "connections", "messages", "retained",
                                        "errors")}
            summaries[run] = (out / "summary.md").read_text()
        never = read_tables(spark, [str(f) for f in rings.editcap_c], ports=[rings.port],
                            group="never")
        captures = sorted(r["capture"] for r in never.packets.select("capture").distinct()
                          .toArrow().to_pylist())
    finally:
        spark.stop()
    return PipelineRuns(rings.editcap_c, merged_file, overlap, tables, summaries, captures)


def _rows_of(rows: list[dict[str, Any]], capture: str) -> list[str]:
    """The rows of one capture, without its name (``capture``, the connection ids) and
    without ``file``, as sorted texts."""
    out = []
    for row in rows:
        if row["capture"] != capture:
            continue
        row = {k: v for k, v in row.items() if k not in ("capture", "file")}
        if row.get("connection_id") is not None:
            row["connection_id"] = row["connection_id"].rsplit("#", 1)[1]
        out.append(repr(sorted(row.items())))
    return sorted(out)


@pytest.mark.spark
@pytest.mark.parametrize("run", ["tasks", "split", "shares"])
@pytest.mark.once
def test_pipeline_reads_a_set_as_its_merged_file(pipeline_runs: PipelineRuns, run: str) -> None:
    """Every table of a set is the merged file's, but for the capture's name; each
    packet's file is the one that holds its frame."""
    tables = pipeline_runs.tables[run]
    files = pipeline_runs.cut
    name, merged_name = files[0].name, pipeline_runs.merged.name
    for table, rows in tables.items():
        assert _rows_of(rows, name) == _rows_of(rows, merged_name), table
        if table not in ("errors", "retained"):  # no errors, no retained messages
            assert _rows_of(rows, name), table
    first, spans = 1, []
    for f in files:
        frames = scan_file(str(f)).frames
        spans.append((first, first + frames - 1, f.name))
        first += frames
    for row in tables["packets"]:
        if row["capture"] == name:
            (file,) = [n for lo, hi, n in spans if lo <= row["frame"] <= hi]
            assert row["file"] == file
        elif row["capture"] == merged_name:
            assert row["file"] == merged_name
    assert {r["file"] for r in tables["packets"] if r["capture"] == name} == {
        f.name for f in files}
    # One connection per client, none joined mid-stream, every exchange complete.
    connections = [r for r in tables["connections"] if r["capture"] == name]
    assert sorted(r["client_id"] for r in connections) == ["pub4", "pub5", "sub4", "sub5"]
    assert not any(r["joined_mid_stream"] for r in connections)
    statuses = Counter(r["status"] for r in tables["messages"] if r["capture"] == name)
    assert set(statuses) == {"complete"}, statuses
    # The overlapping files: two captures, each its own.
    captures = {r["capture"] for r in tables["packets"]}
    assert {f.name for f in pipeline_runs.overlap} <= captures
    assert len(captures) == 2 + 2


@pytest.mark.spark
@pytest.mark.once
def test_pipeline_summary_names_the_sets(pipeline_runs: PipelineRuns) -> None:
    summary = pipeline_runs.summaries["tasks"]
    assert "## Capture sets" in summary
    cut = pipeline_runs.cut
    assert (f"- {len(cut)} files read as one capture, named {cut[0].name} ({RING_NAMES}): "
            + ", ".join(f.name for f in cut)) in summary
    a, b = pipeline_runs.overlap
    assert f"- {b.name} begins before the end of {a.name} (they overlap in time" in summary
    assert f"Inputs: {len(cut) + 1 + 2} capture files" in summary


@pytest.mark.spark
@pytest.mark.once
def test_pipeline_group_never(pipeline_runs: PipelineRuns) -> None:
    assert pipeline_runs.never == sorted(f.name for f in pipeline_runs.cut)


def test_pipeline_group_option() -> None:
    from mqttwire.cli import build_parser
    from mqttwire.spark.plan import check_reading

    args = build_parser().parse_args(["pipeline", "x", "--out", "o"])
    assert args.group == "auto"
    args = build_parser().parse_args(["pipeline", "x", "--out", "o", "--group", "one"])
    assert args.group == "one"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["pipeline", "x", "--out", "o", "--group", "all"])
    with pytest.raises(ValueError, match="group must be one of auto, never, one"):
        check_reading("auto", None, None, "all")
    with pytest.raises(ValueError, match="group 'one' needs the files opened by path"):
        check_reading("binaryfile", None, None, "one")


def test_files_of_a_batch() -> None:
    """FileChain.files_of: each record's file by its frame, also for a batch across a
    boundary, out of order, or holding a record of no frame (the last file's)."""
    import io

    from mqttwire.capture.sets import FileChain

    chain = FileChain([(name, lambda: io.BytesIO(b"")) for name in ("a", "b", "c")])
    for frames in (0, 10, 10):  # a: frames 1-10, b: none, c: 11 on
        chain.open_next(frames)
    chain.close()

    def recs(*frames: int | None) -> list[Record]:
        return [Record("packet", "a", frame=f) for f in frames]

    assert chain.files_of(recs(1, 2, 10)) == ["a"] * 3
    assert chain.files_of(recs(11, 30)) == ["c", "c"]
    assert chain.files_of(recs(12, 9, 11)) == ["c", "a", "c"]
    assert chain.files_of(recs(3, None)) == ["a", "c"]
    # Rising runs across the boundary, one after the other (a split ring buffer's
    # connections, one after the other, in one batch): cut where c starts.
    assert chain.files_of(recs(2, 10, 11, 20, 4, 15, 1)) == ["a", "a", "c", "c", "a", "c",
                                                            "a"]
    assert chain.files_of([]) == []
