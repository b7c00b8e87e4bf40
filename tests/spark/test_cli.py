"""The ``mqttwire`` command line: decode, dissect, pipeline's checks before Spark, bench,
and ``python -m mqttwire``.  None of these start Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spark_scenarios import CLIENT, Step, capture_b, flow, write_capture

import mqttwire._pure as mw
from mqttwire import cli
from mqttwire.cli import main
from mqttwire.spark import PipelineResult
from mqttwire.spark.inputs import CaptureFile

REPO = Path(__file__).resolve().parents[2]


def test_decode_prints_the_packet(capsys: pytest.CaptureFixture[str]) -> None:
    # PUBLISH QoS 0 at level 4: 0x30, Remaining Length 12 = 2+5 topic "a/b/c" + 5 "hello".
    assert main(["decode", "30 0c 0005 612f622f63 68656c6c6f", "--version", "4"]) == 0
    assert capsys.readouterr().out.strip() == "Publish(topic='a/b/c', payload=b'hello')"


def test_decode_reports_malformed_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    # 0x36: PUBLISH with both QoS bits set, forbidden by [MQTT-3.3.1-4].
    assert main(["decode", "3603000178"]) == 1
    err = capsys.readouterr().err
    assert "MalformedPacket" in err and "MQTT-3.3.1-4" in err


def test_decode_without_version_hints_at_the_level(capsys: pytest.CaptureFixture[str]) -> None:
    # PUBLISH QoS 0 "a/b" payload "x" at 3.1.1: 0x30, Remaining Length 6 = 2+3 topic + 1.
    # Read as 5.0 (the default), the payload's 0x78 is a property length past the end.
    assert main(["decode", "30060003612f6278"]) == 1
    err = capsys.readouterr().err
    assert "MalformedPacket" in err
    assert ("read as MQTT 5.0, the default; it decodes at level 4 (MQTT 3.1.1): add "
            "--version 4") in err
    # Given the level, no hint: the bytes are wrong as they are.
    assert main(["decode", "30060003612f6278", "--version", "5"]) == 1
    assert "the default" not in capsys.readouterr().err
    # Wrong at every level: said so.  (0x36: both QoS bits set, [MQTT-3.3.1-4].)
    assert main(["decode", "3603000178"]) == 1
    assert "it does not decode at level 4 or 3 either" in capsys.readouterr().err
    # A CONNECT carries its own level: nothing to hint.  (Remaining Length 12 holds the
    # variable header, 10 bytes, and the client id's length, 1, but not its byte.)
    assert main(["decode", "100c00044d5154540402003c0001"]) == 1
    assert "the default" not in capsys.readouterr().err


def test_decode_rejects_non_hex() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["decode", "zz"])
    assert exc.value.code == 2


def test_dissect_prints_one_line_per_record(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    written = capture_b(tmp_path / "b.pcap")
    assert main(["dissect", str(written.path), "--payload-limit", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # CONNECT, CONNACK, PUBLISH g/x, then the malformed PUBLISH as an error record.
    assert len(lines) == 4
    assert "Connect(client_id='gamma'" in lines[0] and " c2s @0 " in lines[0]
    assert "ConnAck(" in lines[1] and " s2c @0 " in lines[1]
    assert "Publish(topic='g/x'" in lines[2] and "payload=b'1'" in lines[2]
    assert " ERROR " in lines[3] and "MQTT-3.3.1-4" in lines[3] and "@27" in lines[3]


def test_dissect_infers_or_assumes_the_version(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # The capture starts in the middle of the connection: no handshake, no CONNECT.
    written = write_capture(tmp_path / "mid.pcapng", {"mid": (flow(50010), 4)},
                            [Step("mid", CLIENT, mw.Publish("m/x", b"1"))],
                            mid_stream=frozenset({"mid"}))
    assert main(["dissect", str(written.path)]) == 0
    # b"1" would be a 5.0 property length of 0x31 bytes, past the packet's end: 3.1.1.
    note, line = capsys.readouterr().out.splitlines()
    assert note == ("# mid.pcapng#1: no usable CONNECT in the capture; protocol level 4 "
                    "inferred from its traffic")
    assert "Publish(topic='m/x', payload=b'1')" in line
    assert main(["dissect", str(written.path), "--assume-version", "4"]) == 0
    (line,) = capsys.readouterr().out.splitlines()  # told: nothing to announce
    assert "Publish(topic='m/x', payload=b'1')" in line
    # A PINGREQ fits both levels: 3.1.1, and said so.
    pings = write_capture(tmp_path / "ping.pcapng", {"mid": (flow(50011), 5)},
                          [Step("mid", CLIENT, mw.PingReq())], mid_stream=frozenset({"mid"}))
    assert main(["dissect", str(pings.path)]) == 0
    note, line = capsys.readouterr().out.splitlines()
    assert "fits 3.1.1 and 5.0 alike; decoded at level 4" in note and "PingReq()" in line


def test_dissect_says_which_connections_are_websocket(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mqttwire.capture.writers import (
        Frame,
        TcpFlow,
        websocket_frame,
        websocket_request,
        websocket_response,
        write_pcapng,
    )

    ws = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", 9001))
    request = websocket_request()
    segs = (ws.open() + ws.send(0, request) + ws.send(1, websocket_response())
            + ws.send(0, websocket_frame(mw.Connect("w", protocol_version=4).encode(4),
                                         mask=b"\x01\x02\x03\x04")))
    path = tmp_path / "ws.pcapng"
    with open(path, "wb") as f:
        write_pcapng(f, [Frame(1_700_000_000_000_000_000 + i, ws.ip(s))
                         for i, s in enumerate(segs)])
    assert main(["dissect", str(path)]) == 0
    note, line = capsys.readouterr().out.splitlines()
    assert note == ("# ws.pcapng#1: MQTT over WebSocket: @ is the TCP stream offset of the "
                    "frame that holds the packet's first byte")
    assert "Connect(client_id='w'" in line and f" c2s @{len(request)} " in line


def test_dissect_fails_on_a_file_that_is_no_capture(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("These are notes, not a capture.\n")
    assert main(["dissect", str(notes)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "notes.txt: not a pcap or pcapng file" in err


def test_dissect_of_a_cut_capture_prints_what_it_read(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    written = capture_b(tmp_path / "b.pcap")
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(written.path.read_bytes()[:-3])  # the last frame cut short
    # Not read to its end: exit status 1, with the records before the fault printed.
    assert main(["dissect", str(cut)]) == 1
    out, err = capsys.readouterr()
    assert "Connect(client_id='gamma'" in out
    assert "cut.pcap: pcap record claims 54 bytes but the file ends" in err


def test_dissect_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["dissect", str(tmp_path / "nope.pcap")]) == 1
    assert "nope.pcap" in capsys.readouterr().err


def test_pipeline_without_java_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert main(["pipeline", "x.pcap", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "JAVA_HOME" in err and "Java 17" in err
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    assert main(["pipeline", "x.pcap", "--out", str(tmp_path / "out")]) == 2
    assert "Java was not found" in capsys.readouterr().err


def test_pipeline_without_the_spark_extra_says_so(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("mqttwire.spark.find_java", lambda: "/usr/bin/java")
    # None in sys.modules makes the import fail, whether or not the extra is installed.
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert main(["pipeline", "x.pcap", "--out", str(tmp_path / "out")]) == 2
    assert "pyspark is not installed: install the spark extra" in capsys.readouterr().err


def test_pipeline_needs_out() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pipeline", "x.pcap"])
    assert exc.value.code == 2


@pytest.mark.spark  # main() checks that pyspark is installed before it runs the pipeline
def test_pipeline_memory_options_reach_spark(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    from mqttwire.spark import PipelineOptions

    monkeypatch.setattr("mqttwire.spark.find_java", lambda: "/usr/bin/java")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.pcap").touch()  # an input that is there: the run goes on to Spark
    seen: list[PipelineOptions] = []
    monkeypatch.setattr("mqttwire.spark.run_pipeline",
                        lambda options: seen.append(options) or _result(2, bad=0))
    assert main(["pipeline", "x.pcap", "--out", str(tmp_path), "--driver-memory", "2G",
                 "--executor-memory", "512m"]) == 0
    (options,) = seen
    assert options.memory_conf() == {"spark.driver.memory": "2g",
                                     "spark.executor.memory": "512m"}
    assert main(["pipeline", "x.pcap", "--out", str(tmp_path)]) == 0
    assert seen[1].memory_conf() == {}  # Spark's defaults
    assert seen[1].spark_ui is False
    assert main(["pipeline", "x.pcap", "--out", str(tmp_path), "--spark-ui"]) == 0
    assert seen[2].spark_ui is True


@pytest.mark.spark
def test_session_conf_stops_the_jit_at_c1_only_where_the_tasks_write(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The driver JVM's quick JIT (pipeline.QUICK_JIT) and plans without whole-stage code
    generation (INTERPRETED_PLANS) where the JVM does little: a local master and the tasks
    writing the tables; Spark's defaults wherever it does the heavy lifting (a split,
    Spark's writer), and on a cluster."""
    from mqttwire.spark import PipelineOptions
    from mqttwire.spark.run import INTERPRETED_PLANS, QUICK_JIT

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)  # not under spark-submit
    jit = {"spark.driver.extraJavaOptions": QUICK_JIT, **INTERPRETED_PLANS}
    out = str(tmp_path)

    def conf(**kw: Any) -> dict[str, str]:
        settings = PipelineOptions(["x.pcap"], kw.pop("out", out), **kw).session_conf()
        assert settings.pop("spark.ui.enabled") == "false"  # test_session_conf_spark_ui
        return settings

    assert QUICK_JIT == "-XX:TieredStopAtLevel=1"
    assert INTERPRETED_PLANS == {"spark.sql.codegen.wholeStage": "false"}
    assert conf() == jit  # local[*], the tasks writer
    assert conf(master="local[2]", writer="tasks") == jit
    assert conf(master="local[1]", driver_memory="2g") == {**jit, "spark.driver.memory": "2g"}
    assert conf(master="local[2]", writer="spark") == {}
    assert conf(master="local[2]", split_size=1 << 20) == {}
    assert conf(master="local[2]", split_size="auto") == jit  # auto: no split on local
    assert conf(master="spark://127.0.0.1:7077") == {}
    assert conf(master="local[2]", out="hdfs://nn/tables") == {}
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # spark-submit's master and JVM
    assert PipelineOptions(["x.pcap"], out).session_conf() == {}


@pytest.mark.spark
def test_session_conf_spark_ui(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Spark's web UI is off in the sessions the pipeline makes, on any master, unless
    asked for; under spark-submit its --conf decides (nothing set here)."""
    from mqttwire.spark import PipelineOptions
    from mqttwire.spark.run import NO_UI

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert NO_UI == {"spark.ui.enabled": "false"}
    for master in ("local[2]", "spark://127.0.0.1:7077", None):
        options = PipelineOptions(["x.pcap"], str(tmp_path), master=master)
        assert options.session_conf()["spark.ui.enabled"] == "false"
        options.spark_ui = True
        assert "spark.ui.enabled" not in options.session_conf()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    assert "spark.ui.enabled" not in PipelineOptions(["x.pcap"], str(tmp_path)).session_conf()


@pytest.mark.spark
def test_class_archive_option_reads_or_writes(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """The JVM option of a class archive (session.ClassArchive): write one at exit when
    there is none (under a name of this process's), else map it; both with the JVM's
    CDS log off; and both after QUICK_JIT in the driver's options."""
    from mqttwire.spark import PipelineOptions
    from mqttwire.spark.run import INTERPRETED_PLANS, NO_UI, QUICK_JIT
    from mqttwire.spark.startup import ClassArchive

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))  # none: nothing in it
    archive = ClassArchive(str(tmp_path / "cache"))
    assert archive.path.startswith(str(tmp_path / "cache" / "spark-"))
    assert archive.path.endswith(".jsa")
    part = f"{archive.path}.{os.getpid()}.part"
    assert archive.java_option() == f"-XX:ArchiveClassesAtExit={part} -Xlog:cds*=off"
    assert archive.writing == part and (tmp_path / "cache").is_dir()
    assert "writing" in repr(archive)

    Path(archive.path).write_bytes(b"x")
    again = ClassArchive(str(tmp_path / "cache"))
    assert again.path == archive.path
    assert again.java_option() == f"-XX:SharedArchiveFile={again.path} -Xlog:cds*=off"
    assert again.writing is None and again.finish() is False  # nothing to move
    spaced = ClassArchive(str(tmp_path / "a b"))  # Spark splits the options as a shell
    assert spaced.java_option() == f'"-XX:ArchiveClassesAtExit={spaced.writing}" -Xlog:cds*=off'
    options = PipelineOptions(["x.pcap"], str(tmp_path), master="local[2]")
    assert options.session_conf(again) == {
        **NO_UI, **INTERPRETED_PLANS,
        "spark.driver.extraJavaOptions": f"{QUICK_JIT} {again.java_option()}"}


@pytest.mark.spark
def test_no_class_archive_asked_for_with_files_in_sparks_conf_folder(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Spark puts its configuration folder first on the driver's class path, and Java
    writes no archive while a class-path folder holds files (found as the JVM exits,
    after every run): with files there, no archive is asked for, and the reason is kept
    for the run to say.  An archive that is there is still mapped."""
    from mqttwire.spark.startup import ClassArchive

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    empty = ClassArchive(str(tmp_path / "cache"))
    assert empty.java_option().startswith("-XX:ArchiveClassesAtExit=")  # an empty folder
    assert empty.unwritable is None
    (conf / "spark-defaults.conf").write_text("spark.driver.memory 2g\n")
    archive = ClassArchive(str(tmp_path / "cache"))
    assert archive.java_option() == "-Xlog:cds*=off"
    assert archive.writing is None and archive.finish() is False
    assert archive.unwritable == (
        f"Spark's configuration folder {conf} holds files, and Java writes no class "
        "archive while a folder on the class path does (Spark puts that one first)")
    Path(archive.path).write_bytes(b"x")
    assert ClassArchive(str(tmp_path / "cache")).java_option() == (
        f"-XX:SharedArchiveFile={archive.path} -Xlog:cds*=off")


def _result(files: int, bad: int) -> PipelineResult:
    """What run_pipeline returns after reading ``files`` inputs, ``bad`` of them not (or
    not to the end)."""
    names = [f"f{i}.pcap" for i in range(files)]
    return PipelineResult([CaptureFile(f"file:/d/{n}", 1, n) for n in names], 0, 0, bad,
                          1.0, "summary.md", None, "", {}, names[:bad],
                          failures={n: f"{n}: pcap record header truncated at offset 24"
                                    for n in names[:bad]})


@pytest.mark.spark  # main() checks that pyspark is installed before it runs the pipeline
@pytest.mark.parametrize(("files", "bad", "status"), [(2, 2, 1), (2, 1, 1), (1, 0, 0)])
def test_pipeline_fails_when_any_input_was_not_read_to_its_end(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        files: int, bad: int, status: int) -> None:
    """One rule with dissect's: 1 as soon as one input was not read to its end, each
    named with why (once: its reader's message names the file already)."""
    monkeypatch.setattr("mqttwire.spark.find_java", lambda: "/usr/bin/java")
    monkeypatch.setattr("mqttwire.spark.run_pipeline", lambda options: _result(files, bad))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.pcap").touch()
    assert main(["pipeline", "x.pcap", "--out", str(tmp_path)]) == status
    err = capsys.readouterr().err
    for i in range(bad):
        assert (f"mqttwire pipeline: f{i}.pcap: pcap record header truncated at offset 24\n"
                in err)
    assert (f"{bad} of {files} input file(s) could not be read to the end" in err) == bool(bad)
    assert "no input could be read" not in err


MISSING_ONLY = """
import sys
from mqttwire.cli import main
status = main(["pipeline", *sys.argv[1:]])
print("pyspark" in sys.modules)  # imported: Spark could have started
sys.exit(status)
"""


@pytest.mark.spark  # the command looks for the spark extra before the inputs
def test_pipeline_of_inputs_that_are_not_there_says_so_without_spark(tmp_path: Path) -> None:
    """Every input a local path that does not exist: one line, status 1, and pyspark not
    even imported (so no JVM started)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run([sys.executable, "-c", MISSING_ONLY, "/no/such.pcap",
                           str(tmp_path / "gone"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"mqttwire pipeline: no such file or directory: /no/such.pcap, "
                           f"{tmp_path / 'gone'}\n")
    assert done.stdout == "False\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.spark  # main() checks that pyspark is installed before it runs the pipeline
@pytest.mark.parametrize("how", ["--remote", "SPARK_REMOTE"])
def test_pipeline_master_and_remote_are_a_usage_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        how: str) -> None:
    ran: list[object] = []
    monkeypatch.setattr("mqttwire.spark.run_pipeline", ran.append)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    args = ["pipeline", str(tmp_path), "--out", str(tmp_path / "out"), "--master", "local[1]"]
    if how == "--remote":
        args += ["--remote", "sc://127.0.0.1:15002"]
    else:
        monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"mqttwire pipeline: error: --master and {how} cannot both be given (a master "
        "starts Spark here; a remote is a Spark Connect server)\n")
    assert not ran


@pytest.mark.spark  # main() checks that pyspark is installed before it runs the pipeline
def test_pipeline_takes_spark_remote_as_pyspark_does(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """SPARK_REMOTE, or --remote over it, names the Connect server; relative paths are
    made absolute here (the server has a directory of its own); no Java is needed."""
    from mqttwire.spark import PipelineOptions

    seen: list[PipelineOptions] = []
    monkeypatch.setattr("mqttwire.spark.run_pipeline",
                        lambda options: seen.append(options) or _result(1, bad=0))
    monkeypatch.setattr("mqttwire.spark.find_java", lambda: pytest.fail("Java looked for"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPARK_REMOTE", "sc://server:15002")
    assert main(["pipeline", "x.pcap", "hdfs:///c/", "--out", "out"]) == 0
    assert main(["pipeline", "x.pcap", "--out", "/o", "--remote", "sc://other:1"]) == 0
    assert [(o.remote, list(o.inputs), o.out) for o in seen] == [
        ("sc://server:15002", [str(tmp_path / "x.pcap"), "hdfs:///c/"], str(tmp_path / "out")),
        ("sc://other:1", [str(tmp_path / "x.pcap")], "/o")]


def test_pipeline_keeps_payloads_whole_unless_told(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["pipeline", "x.pcap", "--out", str(tmp_path)])
    assert args.payload_limit is None  # PipelineOptions: None keeps payloads whole
    args = parser.parse_args(["pipeline", "x.pcap", "--out", "o", "--payload-limit", "16"])
    assert args.payload_limit == 16


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--port", "abc", "not a TCP port (1 to 65535): 'abc'"),
    ("--port", "70000", "not a TCP port (1 to 65535): 70000"),
    ("--payload-limit", "x", "not a whole number: 'x'"),
    ("--payload-limit", "-1", "must be 0 or more: -1"),
    ("--progress", "soon", "not a number of seconds: 'soon'"),
    ("--progress", "nan", "must be 0 or more: nan"),
    ("--split-size", "big", "not a size such as 128m, 1g or 4096: 'big'"),
    ("--split-size", "1.5g", "not a size such as 128m, 1g or 4096: '1.5g'"),
    ("--split-size", "-1", "not a size such as 128m, 1g or 4096: '-1'"),
])
def test_bad_option_values_say_what_is_wrong(option: str, value: str, says: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pipeline", "x.pcap", "--out", "o", option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {says}" in err, err
    assert "_port" not in err and "invalid" not in err


def _options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: list[str]) -> Any:
    """The PipelineOptions that ``mqttwire pipeline x.pcap --out DIR GIVEN`` runs with."""
    from mqttwire.spark import PipelineOptions

    monkeypatch.setattr("mqttwire.spark.find_java", lambda: "/usr/bin/java")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.pcap").touch()  # an input that is there: the run goes on to Spark
    seen: list[PipelineOptions] = []
    monkeypatch.setattr("mqttwire.spark.run_pipeline",
                        lambda options: seen.append(options) or _result(1, bad=0))
    assert main(["pipeline", "x.pcap", "--out", str(tmp_path), *given]) == 0
    return seen[0]


@pytest.mark.spark  # main() checks that pyspark is installed before it runs the pipeline
@pytest.mark.parametrize(("given", "split_size"), [
    ([], "auto"), (["--split-size", "1k"], 1024), (["--split-size", "128M"], 128 << 20),
    (["--split-size", "4096"], 4096), (["--split-size", "0"], None),
    (["--split-size", "AUTO"], "auto")])
def test_pipeline_split_size(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                             given: list[str], split_size: int | str | None) -> None:
    assert _options(monkeypatch, tmp_path, given).split_size == split_size  # None: never


@pytest.mark.spark
def test_the_default_split_size_is_a_clusters_only() -> None:
    """``auto`` splits files over 128 MiB on a cluster's master, none on a local one
    (where shares cost less: benchmarks/capture.md); a size given is kept anywhere."""
    from mqttwire.spark import PipelineOptions

    auto = PipelineOptions(["x.pcap"], "out", split_size="auto")
    assert auto.split_for("local[2]") is None and auto.split_for("local[*]") is None
    assert auto.split_for("spark://10.0.0.1:7077") == 128 << 20
    assert auto.split_for("yarn") == 128 << 20
    for given in (None, 4096):
        assert PipelineOptions(["x.pcap"], "out", split_size=given).split_for("yarn") == given


@pytest.mark.parametrize("size", ["2", "g", "2gb", "-1g", "0m", "1.5g"])
def test_pipeline_rejects_a_bad_memory_size(size: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pipeline", "x.pcap", "--out", "o", f"--driver-memory={size}"])
    assert exc.value.code == 2
    assert "not a memory size" in capsys.readouterr().err


def test_bench_runs_pytest_benchmarks(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, cwd=None: calls.append(cmd) or 0)
    if not (Path(cli.__file__).resolve().parents[1] / "benchmarks").is_dir():
        # An installed wheel has no benchmarks beside the package: the command says so.
        assert main(["bench"]) == 2
        assert "not installed with the package" in capsys.readouterr().err
        assert calls == []
        return
    assert main(["bench", "-k", "publish"]) == 0
    (cmd,) = calls
    assert cmd[:3] == [sys.executable, "-m", "pytest"]
    assert cmd[3] == str(REPO / "benchmarks") and cmd[4:] == ["--benchmark-only", "-k", "publish"]


def test_python_dash_m() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "mqttwire", "decode", "c000"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    # 0xC0 0x00: PINGREQ (12 << 4), Remaining Length 0.
    assert proc.returncode == 0 and proc.stdout.strip() == "PingReq()"


@pytest.mark.spark  # main() checks that pyspark is installed before it runs the pipeline
@pytest.mark.parametrize(("given", "writer"), [
    ([], "auto"), (["--writer", "tasks"], "tasks"), (["--writer", "spark"], "spark")])
def test_pipeline_writer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                         given: list[str], writer: str) -> None:
    assert _options(monkeypatch, tmp_path, given).writer == writer


def test_pipeline_rejects_an_unknown_writer(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pipeline", "x.pcap", "--out", "o", "--writer", "hand"])
    assert exc.value.code == 2
    assert "argument --writer: invalid choice: 'hand'" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.parametrize(("given", "cache"), [([], None), (["--jvm-cache", "c"], "c")])
def test_pipeline_jvm_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                            given: list[str], cache: str | None) -> None:
    assert _options(monkeypatch, tmp_path, given).jvm_cache == cache


@pytest.mark.spark
@pytest.mark.parametrize(("given", "share_size"), [
    ([], 32 << 20), (["--share-size", "64m"], 64 << 20), (["--share-size", "0"], None)])
def test_pipeline_share_size(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                             given: list[str], share_size: int | None) -> None:
    assert _options(monkeypatch, tmp_path, given).share_size == share_size


def test_pipeline_rejects_a_share_size_that_is_no_size(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pipeline", "x.pcap", "--out", "o", "--share-size", "big"])
    assert exc.value.code == 2
    assert "argument --share-size: not a size" in capsys.readouterr().err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.spark  # the command checks for Java and the spark extra first
@pytest.mark.parametrize("master, said", [
    ("spark://127.0.0.1:{port}", "spark://127.0.0.1:{port}: no Spark master answers "
                                 "(127.0.0.1:{port}: Connection refused)"),
    ("bogus://x", "bogus://x: not a Spark master URL"),
    ("local[x]", "local[x]: not a Spark master URL"),
    ("spark://127.0.0.1", "spark://127.0.0.1: not a Spark master URL ('127.0.0.1' is not "
                          "HOST:PORT)"),
])
def test_a_master_that_cannot_work_is_one_line_before_spark_starts(
        tmp_path: Path, master: str, said: str) -> None:
    """Run as a user runs it: a master URL of no form Spark knows, or a standalone master
    where nothing listens, is said in one line on stderr with exit status 1, before
    Spark starts (Spark itself retried for a minute and printed some 200 lines)."""
    port = _free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "mqttwire", "pipeline", str(REPO / "examples" / "sample.pcapng"),
         "--out", str(tmp_path / "out"), "--master", master.format(port=port)],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"mqttwire pipeline: --master {said.format(port=port)}")
    assert not (tmp_path / "out").exists()


@pytest.mark.spark  # the command checks for Java and the spark extra first
def test_a_failed_run_is_one_line_unless_verbose(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Any failure of the run: its cause in one line and exit status 1; --verbose raises
    it with its trace."""
    import mqttwire.spark

    def fail(options: Any) -> None:
        raise RuntimeError("Cannot call methods on a stopped SparkContext.\nmore lines")

    monkeypatch.setattr(mqttwire.spark, "run_pipeline", fail)
    args = ["pipeline", str(REPO / "examples" / "sample.pcapng"), "--out", "o",
            "--master", "local[1]"]
    assert main(args) == 1
    assert capsys.readouterr().err.splitlines() == [
        "mqttwire pipeline: failed: Cannot call methods on a stopped SparkContext. "
        "(--verbose shows the trace)"]
    with pytest.raises(RuntimeError, match="stopped SparkContext"):
        main([*args, "--verbose"])
