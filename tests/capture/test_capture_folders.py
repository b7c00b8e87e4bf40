"""Captures recognised by content (mqttwire.capture.pcap.sniff), gzip-compressed captures
read by both loops, folders as inputs (mqttwire.capture.files), the capture names, and
``mqttwire dissect`` on a folder as a user runs it, with either codec."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from capture_helpers import conversation, encode_all, frames_for, read, segments_for, write

from mqttwire.capture import read_capture
from mqttwire.capture.files import capture_name, local_inputs, unique_names
from mqttwire.capture.pcap import SNIFF_BYTES, sniff
from mqttwire.capture.writers import TcpFlow, write_pcap

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample.pcapng"
CLIENT = ("192.168.1.10", 51000)
SERVER = ("192.168.1.20", 1883)


def _session(codec: ModuleType, fmt: str = "pcapng", version: int = 5) -> bytes:
    """A whole MQTT session (every packet type of its level) as a capture."""
    flow = TcpFlow(CLIENT, SERVER)
    sent = encode_all(conversation(codec, version), version)
    return write(frames_for(flow, flow.open() + segments_for(flow, sent) + flow.close()), fmt)


def _pcap_header(byteorder: str, nanoseconds: bool) -> bytes:
    buf = io.BytesIO()
    write_pcap(buf, [], byteorder=byteorder, nanoseconds=nanoseconds)
    return buf.getvalue()


@pytest.mark.parametrize(("head", "fmt"), [
    (_pcap_header("<", False), "pcap"),  # d4c3b2a1 on disk
    (_pcap_header(">", False), "pcap"),  # a1b2c3d4
    (_pcap_header("<", True), "pcap"),  # 4d3cb2a1 (nanoseconds)
    (_pcap_header(">", True), "pcap"),  # a1b23c4d
    (SAMPLE.read_bytes()[:SNIFF_BYTES], "pcapng"),  # 0a0d0d0a
    (gzip.compress(SAMPLE.read_bytes())[:SNIFF_BYTES], "pcapng.gz"),
    (gzip.compress(_pcap_header(">", True)), "pcap.gz"),
], ids=["pcap-le", "pcap-be", "pcap-ns-le", "pcap-ns-be", "pcapng", "pcapng.gz", "pcap.gz"])
def test_sniff_knows_every_capture_magic(head: bytes, fmt: str) -> None:
    assert sniff(head).format == fmt
    assert sniff(head).reason is None
    assert sniff(head).gzip == fmt.endswith(".gz")


@pytest.mark.parametrize(("head", "reason"), [
    (b"", "empty file"),
    (b"\xd4\xc3", "not a pcap or pcapng file (only 2 bytes)"),
    (b"MIT License\n", "not a pcap or pcapng file (magic 4d495420)"),
    (b"LICENSE", "not a pcap or pcapng file (magic 4c494345)"),
    (gzip.compress(b"key: value\n"), "gzip file holding no pcap or pcapng file (magic 6b65793a)"),
    (gzip.compress(b""), "gzip file holding no capture in its first 20 bytes"),
    (b"\x1f\x8b\x08\x00" + b"\xff" * 20, "gzip data corrupt"),
], ids=["empty", "short", "text", "license", "gzip-yaml", "gzip-empty", "gzip-corrupt"])
def test_sniff_says_why_a_file_is_no_capture(head: bytes, reason: str) -> None:
    sniffed = sniff(head)
    assert sniffed.format is None
    assert sniffed.reason is not None and sniffed.reason.startswith(reason)


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_gzip_capture_reads_as_the_plain_one(codec: ModuleType, fmt: str) -> None:
    """Both loops (tests/capture/conftest.py compares them) decompress as they read: the
    records are the plain file's, field by field."""
    raw = _session(codec, fmt)
    plain = read(raw, codec, name="s")
    packed = read(gzip.compress(raw), codec, name="s")
    assert [repr(r) for r in packed] == [repr(r) for r in plain]
    assert packed and all(r.kind == "packet" for r in packed)
    # Two gzip members (as `cat a.gz b.gz` makes) are one stream, as gzip reads them.
    half = len(raw) // 2
    members = gzip.compress(raw[:half]) + gzip.compress(raw[half:])
    assert [repr(r) for r in read(members, codec, name="s")] == [repr(r) for r in plain]


def test_truncated_gzip_capture_keeps_its_records_then_says_so(codec: ModuleType) -> None:
    raw = _session(codec)
    packed = gzip.compress(raw)
    records = read(packed[: len(packed) * 2 // 3], codec, name="cut.pcapng.gz")
    last = records[-1]
    assert last.kind == "capture_error"
    assert last.error is not None and last.error.startswith("cut.pcapng.gz: gzip data truncated")
    assert "offsets in the decompressed data" in last.error
    assert any(r.kind == "packet" and r.packet_type == "CONNECT" for r in records)
    # Corrupt compressed data after an intact start: a capture_error too, not an
    # exception (from gzip, or from the capture reader over what it decompressed).
    bad = bytearray(packed)
    bad[len(bad) // 2 : len(bad) // 2 + 8] = b"\xff" * 8
    records = read(bytes(bad), codec, name="bad.gz")
    assert records[-1].kind == "capture_error" and "gzip" in (records[-1].error or "")


def test_empty_and_short_files_say_what_they_are(codec: ModuleType) -> None:
    (rec,) = read(b"", codec, name="empty.pcap")
    assert rec.error == "empty.pcap: empty file at offset 0"
    (rec,) = read(b"ab", codec, name="short")
    assert rec.error == "short: not a pcap or pcapng file (only 2 bytes) at offset 0"
    (rec,) = read(gzip.compress(b"notes"), codec, name="n.gz")
    assert rec.error is not None
    assert "gzip file holding no pcap or pcapng file (magic 6e6f7465)" in rec.error


def test_capture_names() -> None:
    assert capture_name("/data/a.pcap", "/data/a.pcap") == "a.pcap"
    assert capture_name("/data/dir", "/data/dir/sub/a.pcap") == "dir/sub/a.pcap"
    assert capture_name("/data/dir/", "/data/dir/a.pcap") == "dir/a.pcap"
    assert capture_name("file:/data/dir", "file:/data/dir/a.pcap") == "dir/a.pcap"
    assert capture_name(".", "./sub/a.pcap") == "sub/a.pcap"  # "." names nothing
    assert capture_name("hdfs://nn:8020/", "hdfs://nn:8020/a.pcap") == "a.pcap"
    assert unique_names([("/x/d/a.pcap", "d/a.pcap"), ("/y/d/a.pcap", "d/a.pcap"),
                         ("/y/b.pcap", "b.pcap")]) == ["x/d/a.pcap", "y/d/a.pcap", "b.pcap"]
    # Only the scheme or host differs: the whole URIs.
    assert unique_names([("file:/a.pcap", "a.pcap"), ("hdfs://nn/a.pcap", "a.pcap")]) == [
        "file:/a.pcap", "hdfs://nn/a.pcap"]


def make_folder(root: Path, codec: ModuleType) -> Path:
    """A folder as users keep captures: captures at the top and in sub-folders (two of
    one base name, one gzip-compressed), a truncated one, and files that are not
    captures: a README, a LICENSE, YAML, an empty file; and hidden files."""
    top = root / "dir"
    (top / "sub" / "deeper").mkdir(parents=True)
    (top / ".git").mkdir()
    sample = SAMPLE.read_bytes()
    (top / "sample.pcapng").write_bytes(sample)
    (top / "sub" / "sample.pcapng").write_bytes(sample)
    (top / "sub" / "session.pcap").write_bytes(_session(codec, "pcap", 4))
    (top / "sub" / "deeper" / "sample.pcapng.gz").write_bytes(gzip.compress(sample))
    (top / "cut.pcapng").write_bytes(sample[:1000])
    (top / "README.md").write_text("# Captures\n\nFrom the lab.\n")
    (top / "LICENSE").write_text("MIT License\n")
    (top / "sub" / "config.yaml").write_text("broker: localhost\n")
    (top / "empty.pcap").write_bytes(b"")
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (top / "_SUCCESS").write_bytes(b"")
    return top


def test_local_inputs_take_a_folders_captures(tmp_path: Path, codec: ModuleType) -> None:
    top = make_folder(tmp_path, codec)
    notes = tmp_path / "notes.txt"
    notes.write_text("not a capture\n")
    files, skipped = local_inputs([str(top), str(notes), str(tmp_path / "gone.pcap")])
    assert [(f.name, f.problem) for f in files] == [
        ("dir/cut.pcapng", None), ("dir/sample.pcapng", None),
        ("dir/sub/deeper/sample.pcapng.gz", None), ("dir/sub/sample.pcapng", None),
        ("dir/sub/session.pcap", None),
        ("notes.txt", None),  # named by the user: read, and its reader says what it is
        ("gone.pcap", "no such file or directory")]
    assert [(s.name, s.reason) for s in skipped] == [
        ("dir/LICENSE", "not a pcap or pcapng file (magic 4d495420)"),
        ("dir/README.md", "not a pcap or pcapng file (magic 23204361)"),
        ("dir/empty.pcap", "empty file"),
        ("dir/sub/config.yaml", "not a pcap or pcapng file (magic 62726f6b)")]
    (only,), skipped = local_inputs([str(top / "sub" / "config.yaml")])
    assert only.problem is None and skipped == []  # asked for by name: read
    os.remove(top / "sub" / "session.pcap")
    files, _ = local_inputs([str(top / "sub" / "deeper"), str(top / "sub")])
    # Each file once; dir/sub/deeper's file is named from the first input.
    assert [f.name for f in files] == ["deeper/sample.pcapng.gz", "sub/sample.pcapng"]


def _run(*args: str, pure: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("MQTTWIRE_PURE_PYTHON", None)
    if pure:
        env["MQTTWIRE_PURE_PYTHON"] = "1"
    return subprocess.run([sys.executable, "-m", "mqttwire", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


@pytest.mark.parametrize("pure", [False, pytest.param(True, marks=pytest.mark.pure_twin)],
                         ids=["cython", "python"])
def test_dissect_a_folder(tmp_path: Path, pure: bool) -> None:
    """`mqttwire dissect DIR` as a user runs it: the captures of the folder and its
    sub-folders, each named by its path from the input; the other files skipped on one
    line; the truncated capture's records, then exit status 1 naming why."""
    import mqttwire._pure as mw

    top = make_folder(tmp_path, mw)
    proc = _run("dissect", str(top), pure=pure)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.splitlines()
    assert err == [
        "mqttwire: skipped 4 file(s) of the input folders that are not captures: "
        "dir/LICENSE, dir/README.md, dir/empty.pcap, dir/sub/config.yaml",
        "mqttwire: dir/cut.pcapng: pcapng block claims 104 bytes but the file ends after "
        "16 at offset 984"]
    lines = proc.stdout.splitlines()
    by_capture: dict[str, int] = {}
    for line in lines:
        capture = line.split()[1].split("#")[0]
        by_capture[capture] = by_capture.get(capture, 0) + 1
    sample = sum(1 for r in read_capture(SAMPLE))
    assert by_capture == {"dir/cut.pcapng": 3, "dir/sample.pcapng": sample,
                          "dir/sub/deeper/sample.pcapng.gz": sample,
                          "dir/sub/sample.pcapng": sample,
                          "dir/sub/session.pcap": by_capture["dir/sub/session.pcap"]}
    # Every capture read to its end: 0, and nothing on stderr but the skipped files.
    os.remove(top / "cut.pcapng")
    proc = _run("dissect", str(top), pure=pure)
    assert proc.returncode == 0 and len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("pure", [False, pytest.param(True, marks=pytest.mark.pure_twin)],
                         ids=["cython", "python"])
def test_dissect_names_why_each_input_was_not_read(tmp_path: Path, pure: bool) -> None:
    """A file named by the user that is no capture is an error (it was asked for), as
    are an empty file, a folder without captures and a missing path; the others are
    read on: one exit status for all, 1."""
    (tmp_path / "LICENSE.txt").write_text("LICENSE\n")
    (tmp_path / "empty.pcap").write_bytes(b"")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.yaml").write_text("a: 1\n")
    (tmp_path / "ok.pcapng").write_bytes(SAMPLE.read_bytes())
    proc = _run("dissect", *(str(tmp_path / n) for n in
                             ("LICENSE.txt", "empty.pcap", "docs", "ok.pcapng", "gone")),
                pure=pure)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "mqttwire: skipped 1 file(s) of the input folders that are not captures: "
        "docs/notes.yaml",
        "mqttwire: LICENSE.txt: not a pcap or pcapng file (magic 4c494345) at offset 0",
        "mqttwire: empty.pcap: empty file at offset 0",
        "mqttwire: docs: no capture file there (1 other file(s) skipped)",
        "mqttwire: gone: no such file or directory"]
    assert proc.stdout.count(" ok.pcapng#") == sum(1 for _ in read_capture(SAMPLE))
    # The first 1,000 bytes of the sample: its 3 packets, then 1, as the pipeline.
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(SAMPLE.read_bytes()[:1000])
    proc = _run("dissect", str(cut), pure=pure)
    assert (proc.returncode, len(proc.stdout.splitlines())) == (1, 3)
    assert "cut.pcapng: pcapng block claims 104 bytes but the file ends" in proc.stderr
