"""The ``mqttwire`` command line (also ``python -m mqttwire``).

Subcommands:

- ``decode HEX [--version N]``: decode one packet given as hex and print it;
- ``dissect CAPTURE... [--port N]``: print the MQTT records of pcap/pcapng captures
  (files, or folders: their captures);
- ``pipeline INPUT... --out DIR``: the Spark pipeline (needs the ``spark`` extra and Java);
- ``bench``: run the benchmark suite.

Only ``pipeline`` needs pyspark, and imports it when it runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .capture import CaptureSet, Record

__all__ = ["build_parser", "main"]


def _hex_bytes(text: str) -> bytes:
    """Hex digits, with any spaces, colons or a leading 0x ignored."""
    cleaned = "".join(text.split()).replace(":", "")
    if cleaned[:2].lower() == "0x":
        cleaned = cleaned[2:]
    try:
        return bytes.fromhex(cleaned)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not hex bytes: {text!r}") from None


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None


def _port(text: str) -> int:
    value = _integer(text, "a TCP port (1 to 65535)")
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"not a TCP port (1 to 65535): {text}")
    return value


def _non_negative(text: str) -> int:
    value = _integer(text, "a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


def _memory(text: str) -> str:
    """A JVM memory size as Spark takes it: digits and a unit k, m, g or t (512m, 2g)."""
    value = text.strip().lower()
    if not (value[:-1].isdigit() and value[-1] in "kmgt" and int(value[:-1]) > 0):
        raise argparse.ArgumentTypeError(f"not a memory size such as 512m or 2g: {text!r}")
    return value


_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _split_size(text: str) -> int | str:
    """``auto`` or a size in bytes (:func:`_bytes`)."""
    return "auto" if text.strip().lower() == "auto" else _bytes(text)


def _bytes(text: str) -> int:
    """A size in bytes: digits, with or without a unit k, m, g or t (powers of 1024)."""
    value = text.strip().lower()
    unit = _UNITS.get(value[-1:], 1)
    digits = value[:-1] if unit > 1 else value
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"not a size such as 128m, 1g or 4096: {text!r}")
    return int(digits) * unit


#: The exit status rule of ``dissect`` and ``pipeline`` (their --help and
#: docs/command-line.md, "Exit status", say it too).
EXIT_STATUS = ("Exit status 0 when every capture was read to its end; 1 when an input "
               "could not be read at all, or stopped being a capture part way (truncated "
               "or corrupt: the records before the fault are still output), each named "
               "on stderr with the reason; 2 for a usage error.  Files in a folder that "
               "are not captures are skipped (named, not errors).")

GROUP_HELP = ("which input files are pieces of one capture, read as one (a TCP connection "
              "followed across them): auto (the files of a dumpcap -b ring buffer, an "
              "editcap -c/-i split or tcpdump -C, by their names, or files named alike "
              "but for their numbers, as tcpdump -G names them, that a TCP connection "
              "crosses; when their frame times follow on: files that overlap in time "
              "stay separate; the default), never (each file its own capture), one (all "
              "files one capture, in their names' or else their times' order)")

ASSUME_HELP = ("the protocol level (3, 4 or 5) of connections whose CONNECT is not in the "
               "capture; without it, the level is inferred from their traffic (3.1.1 when "
               "the traffic fits both 3.1.1 and 5.0, as PINGs do)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mqttwire", description="MQTT 3.1/3.1.1/5.0 wire codec: decode packets, "
        "dissect captures, run the capture pipeline on Spark.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("decode", help="decode one MQTT packet given in hex",
                       description="Decode one MQTT control packet and print it.")
    p.add_argument("hex", nargs="+", type=_hex_bytes, metavar="HEX",
                   help="the packet's bytes in hex (several arguments are concatenated)")
    p.add_argument("--version", type=int, choices=(3, 4, 5),
                   help="protocol level: 3 (MQTT 3.1), 4 (3.1.1), 5 (5.0, the default); "
                   "a CONNECT carries its own")

    p = sub.add_parser("dissect", help="print the MQTT records of captures (no Spark)",
                       description="Read pcap or pcapng captures (gzip-compressed too), "
                       "reassemble TCP, and print one line per MQTT packet, error or gap.  "
                       "Files that are pieces of one capture (a ring buffer) are read as "
                       "one: see --group.  Where a file stops being a capture, it says so on "
                       "stderr and goes on with the next capture.  " + EXIT_STATUS)
    p.add_argument("captures", nargs="+", metavar="CAPTURE",
                   help="a pcap or pcapng file, or a folder: its captures, recursively")
    p.add_argument("--group", choices=("auto", "never", "one"), default="auto",
                   help=GROUP_HELP)
    p.add_argument("--port", type=_port, action="append", dest="ports", metavar="N",
                   help="an MQTT server port (repeatable; default 1883); a connection on "
                   "another port counts too when it starts with a CONNECT")
    p.add_argument("--payload-limit", type=_non_negative, metavar="N",
                   help="also print each PUBLISH payload, cut to N bytes")
    p.add_argument("--assume-version", type=int, choices=(3, 4, 5), metavar="LEVEL",
                   help=ASSUME_HELP)

    p = sub.add_parser(
        "pipeline", help="captures to Parquet tables and a summary, on Spark",
        description="Decode capture files on Spark (one task per file or set of files "
        "that are one capture (--group), per share of the "
        "connections of a file of at least --share-size, or per range of a file larger "
        "than --split-size) and write the "
        "tables packets, connections, messages, retained and errors as Parquet under "
        "DIR, then print a summary and write DIR/summary.md with a message-rate chart.  "
        "An input that cannot be read to its end also gets a row in the errors table.  "
        + EXIT_STATUS)
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="capture files, folders (their captures, recursively) or globs: "
                   "local paths or any URI that Spark's Hadoop filesystems read (hdfs://, "
                   "s3a://, ...)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory (local path or URI); its tables are replaced")
    p.add_argument("--master", metavar="URL",
                   help="Spark master: local[N], spark://host:7077, yarn, ... (default "
                   "local[*]; under spark-submit, spark-submit's --master)")
    p.add_argument("--remote", metavar="URL",
                   help="run on the Spark Connect server at URL, sc://HOST:PORT (default: "
                   "the SPARK_REMOTE environment variable, as for PySpark); the inputs "
                   "and DIR are then paths the server reads and writes.  Not with "
                   "--master (nor is SPARK_REMOTE)")
    p.add_argument("--port", type=_port, action="append", dest="ports", metavar="N",
                   help="an MQTT server port (repeatable; default 1883)")
    p.add_argument("--payload-limit", type=_non_negative, metavar="N",
                   help="cut PUBLISH payloads to N bytes in the tables (default: keep "
                   "them whole; 0 keeps none)")
    p.add_argument("--assume-version", type=int, choices=(3, 4, 5), metavar="LEVEL",
                   help=ASSUME_HELP)
    p.add_argument("--reader", choices=("auto", "stream", "binaryfile"), default="auto",
                   help="how tasks read files: stream (open the path, any size; local or "
                   "shared filesystems), binaryfile (Spark's binaryFile source, any Hadoop "
                   "URI, files under 2 GiB), auto (stream for local paths, else "
                   "binaryfile; the default)")
    p.add_argument("--split-size", type=_split_size, default="auto", metavar="SIZE",
                   help="read a capture (or a set of files read as one) larger than SIZE "
                   "(bytes, or with a unit k, m, g) in ranges of SIZE, a Spark task "
                   "each, and decode it per TCP connection; the tables are the same.  "
                   "Files that tasks open by path only (not with --reader binaryfile).  "
                   "0: never.  Default auto: 128m on a cluster's master, never on a local "
                   "one (shares cost less on a few cores: see docs/cluster.md)")
    p.add_argument("--share-size", type=_bytes, default=None, metavar="SIZE",
                   help="when the tasks write the tables, read a capture of at least SIZE "
                   "bytes with several tasks at once (one per SIZE, at most one per core), "
                   "each keeping a share of its TCP connections; the tables are the same.  "
                   "0: never.  Default 32m")
    p.add_argument("--group", choices=("auto", "never", "one"), default="auto",
                   help=GROUP_HELP + ".  A set is read by one task (or by --share-size's "
                   "tasks, each reading all of it), or, larger than --split-size, its "
                   "files in ranges as a split file's; only files that tasks open by "
                   "path are grouped")
    p.add_argument("--writer", choices=("auto", "tasks", "spark"), default="auto",
                   help="who writes the Parquet files: tasks (each decoding task writes "
                   "its own with pyarrow, the driver moves them into place; DIR must be a "
                   "local path that every executor mounts), spark (Spark's writer, any "
                   "URI, slower), auto (tasks for a local DIR, else spark; the default)")
    p.add_argument("--jvm-cache", metavar="DIR",
                   help="keep an archive of the driver JVM's classes in DIR (about 150 MB, "
                   "written by the first run, which takes some seconds longer): later runs "
                   "start Spark sooner.  Default: none")
    p.add_argument("--spark-ui", action="store_true",
                   help="serve Spark's web UI while the run lasts (off by default: it "
                   "delays Spark's start; under spark-submit, its --conf decides)")
    p.add_argument("--progress", type=_seconds, default=5.0, metavar="SECONDS",
                   help="seconds between progress lines (0: none; default 5)")
    p.add_argument("--summary-dir", metavar="DIR",
                   help="where summary.md and the chart go (default: --out when it is a "
                   "local path, else the current directory)")
    p.add_argument("--driver-memory", type=_memory, metavar="SIZE",
                   help="heap of the driver JVM (spark.driver.memory), e.g. 2g (default: "
                   "Spark's, 1g, enough whatever the captures' sizes); with local[N] the "
                   "tasks run in the driver, so this is their memory too.  Under "
                   "spark-submit, give spark-submit's --driver-memory instead")
    p.add_argument("--executor-memory", type=_memory, metavar="SIZE",
                   help="heap of each executor on a cluster (spark.executor.memory), e.g. "
                   "2g (default: Spark's, 1g); no effect with local[N]")
    p.add_argument("--verbose", action="store_true",
                   help="when the run fails, show the whole Python (and Java) trace; "
                   "without it, the cause in one line.  Also shows the JVM's start-up "
                   "lines (its warnings, log4j's profile)")

    sub.add_parser("bench", help="run the benchmarks (pytest-benchmark)",
                   usage="mqttwire bench [PYTEST-ARGS...]",
                   description="Run `pytest benchmarks/ --benchmark-only` from the source "
                   "checkout; any further arguments go to pytest.")
    return parser


_LEVELS = {3: "MQTT 3.1", 4: "MQTT 3.1.1", 5: "MQTT 5.0"}


def _decode(args: argparse.Namespace) -> int:
    import mqttwire

    data = b"".join(args.hex)
    version = args.version or 5
    try:
        packet = mqttwire.decode(data, version=version)
    except mqttwire.MQTTWireError as exc:
        print(f"mqttwire: {type(exc).__name__}: {exc}", file=sys.stderr)
        if args.version is None and data[:1] and data[0] >> 4 != 1:
            # Only a CONNECT says its level; any other packet was read as 5.0, and a
            # 3.1.1 packet of a type with properties at 5.0 fails so.
            fits = [v for v in (4, 3) if _decodes(data, v)]
            hint = (f"it decodes at level {fits[0]} ({_LEVELS[fits[0]]}): add --version "
                    f"{fits[0]}" if fits else "it does not decode at level 4 or 3 either")
            print(f"mqttwire: read as {_LEVELS[5]}, the default; {hint}", file=sys.stderr)
        return 1
    print(repr(packet))
    return 0


def _decodes(data: bytes, version: int) -> bool:
    import mqttwire

    try:
        mqttwire.decode(data, version=version)
    except mqttwire.MQTTWireError:
        return False
    return True


def _dissect(args: argparse.Namespace) -> int:
    from .capture.files import local_inputs, skipped_line
    from .capture.sets import CaptureSet, group_files

    told: set[str] = set()  # connections whose inferred level was announced
    files, skipped = local_inputs(args.captures)
    if skipped:
        print(skipped_line(len(skipped), [s.name for s in skipped]), file=sys.stderr)
    failed = 0  # inputs not read to their end (EXIT_STATUS)
    readable = [item for item in files if item.problem is None]
    # Files that are pieces of one capture (a ring buffer, a split) are read as one
    # (mqttwire.capture.sets); each capture in turn, where its first file is among the
    # inputs.
    plan = group_files([f.path for f in readable], args.group,
                       labels=[f.name for f in readable])
    for note in plan.notes:
        print(f"mqttwire: {note}", file=sys.stderr)
    sets = {id(readable[members[0]]): CaptureSet(
                tuple(readable[i].path for i in members),
                labels=tuple(readable[i].name for i in members), how=how)
            for members, how in zip(plan.sets, plan.how)}
    try:
        for item in files:
            if item.problem is not None:
                print(f"mqttwire: {item.name}: {item.problem}", file=sys.stderr)
                failed += 1
                continue
            capture_set = sets.get(id(item))
            if capture_set is None:
                continue  # read with the set that it is part of
            if len(capture_set.paths) > 1:
                print(f"mqttwire: {len(capture_set.paths)} files read as one capture, named "
                      f"{capture_set.name} ({capture_set.how}): "
                      f"{', '.join(capture_set.labels)}", file=sys.stderr)
            failed += _dissect_one(args, capture_set, told)
    except BrokenPipeError:  # `mqttwire dissect x.pcap | head`: the reader has gone
        # Keep the interpreter's final flush of stdout from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 1 if failed else 0


def _dissect_one(args: argparse.Namespace, capture_set: CaptureSet, told: set[str]) -> int:
    """Print one capture's records (a file, or a set's files: a comment line where the
    next file begins); 1 if it could not be read to its end (the reason on stderr),
    else 0.  ``told``: the connections whose inferred level was announced."""
    from .capture import read_capture

    ports = args.ports or [1883]
    several = len(capture_set.paths) > 1
    source: str | CaptureSet = capture_set if several else capture_set.paths[0]
    current = capture_set.labels[0]
    websocket: set[str] = set()  # WebSocket connections announced
    try:
        for rec in read_capture(source, ports=ports, payload_limit=args.payload_limit,
                                version=args.assume_version, name=capture_set.name):
            if rec.kind == "capture_error":
                # The capture stops here (the last record): what came before it was
                # printed; the error names the file and the offset.
                print(f"mqttwire: {rec.error}", file=sys.stderr)
                return 1
            if several and capture_set.file_of(rec) != current:
                current = capture_set.file_of(rec)
                chain = capture_set.chain
                assert chain is not None  # set by the reading
                start = chain.starts[chain.names.index(current)]
                print(f"# {capture_set.name}: file {current} (its frames from {start})")
            if rec.transport == "websocket" and rec.connection_id not in websocket:
                websocket.add(rec.connection_id)  # type: ignore[arg-type]  # set here
                print(f"# {rec.connection_id}: {_WEBSOCKET}")
            if rec.version_source in _INFERRED and rec.connection_id not in told:
                told.add(rec.connection_id)  # type: ignore[arg-type]  # set with a level
                print(f"# {rec.connection_id}: "
                      + _INFERRED[rec.version_source].format(rec.protocol_version))
            print(_record_line(rec))
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"mqttwire: {exc.filename or capture_set.name}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0


#: What ``dissect`` says before the first record of a connection whose level was not
#: given by a CONNECT or the option.
_INFERRED = {
    "inferred": "no usable CONNECT in the capture; protocol level {} inferred from its "
                "traffic",
    "default": "no usable CONNECT in the capture, and its traffic fits 3.1.1 and 5.0 "
               "alike; decoded at level {} (3.1.1, the default; --assume-version sets it)",
}


#: What ``dissect`` says before the first record of a WebSocket connection: its offsets
#: are not those of plain MQTT on TCP (mqttwire/capture/websocket.py).
_WEBSOCKET = ("MQTT over WebSocket: @ is the TCP stream offset of the frame that holds "
              "the packet's first byte")


def _record_line(rec: Record) -> str:
    """One line for a record: time, connection, direction, stream offset, then the
    packet or what went wrong."""
    when = f"{rec.ts / 1e9:.6f}" if rec.ts is not None else "-"
    where = f"{rec.connection_id or '-'} {rec.direction or '-'} @{rec.stream_offset}"
    if rec.kind == "packet":
        extra = f" payload={rec.payload!r}" if rec.payload is not None else ""
        return f"{when} {where} {rec.packet!r}{extra}"
    return f"{when} {where} {rec.kind.upper()} len={rec.length}: {rec.error}"


def _pipeline(args: argparse.Namespace) -> int:
    from .spark import JavaMissing, PipelineOptions, find_java
    from .spark.inputs import local_path

    # As PySpark takes it: SPARK_REMOTE names the Connect server (PySpark's builder
    # would connect there even when given a master).
    remote = args.remote or os.environ.get("SPARK_REMOTE") or None
    if args.master is not None and remote is not None:
        given = "--remote" if args.remote is not None else "SPARK_REMOTE"
        print(f"mqttwire pipeline: error: --master and {given} cannot both be given "
              "(a master starts Spark here; a remote is a Spark Connect server)",
              file=sys.stderr)
        return 2
    if remote is None:
        try:
            find_java()
        except JavaMissing as exc:
            print(f"mqttwire pipeline: {exc}", file=sys.stderr)
            return 2
    # pandas too: pyspark's mapInArrow refuses to run without it.  Found, not imported:
    # importing pandas and matplotlib here would delay Spark's start (the run imports
    # what it uses when it uses it).
    for module in ("pyspark", "pyarrow", "pandas", "matplotlib"):
        if importlib.util.find_spec(module) is None:
            print(f"mqttwire pipeline: {module} is not installed: install the spark extra, "
                  "`pip install 'mqttwire[spark]'`", file=sys.stderr)
            return 2
    # Every input a local path that is not there: said at once, without starting Spark.
    # (On Spark Connect the paths are the server's, which this machine cannot check.)
    if remote is None:
        paths = [local_path(arg) for arg in args.inputs]
        if all(path is not None and not any(c in path for c in "*?[{")
               and not os.path.lexists(path) for path in paths):
            print(f"mqttwire pipeline: no such file or directory: "
                  f"{', '.join(args.inputs)}", file=sys.stderr)
            return 1
    from .spark import run_pipeline
    from .spark.startup import MasterError, check_master

    # What can be checked before Spark starts: a master URL of no known form, or a
    # standalone master where nothing answers (Spark would retry for a minute and print
    # hundreds of lines of traces).
    try:
        check_master(args.master)
        if remote is not None and not remote.startswith("sc://"):
            raise MasterError(f"{remote}: not a Spark Connect URL (sc://HOST:PORT)")
    except MasterError as exc:
        option = "--master" if args.master is not None or remote is None else "--remote"
        print(f"mqttwire pipeline: {option} {exc}", file=sys.stderr)
        return 1
    if remote is not None:
        # The server reads and writes the paths, from a directory of its own: a relative
        # one is taken from here (the same machine, or a filesystem mounted alike).
        args.inputs = [_absolute(arg) for arg in args.inputs]
        args.out = _absolute(args.out)
    options = PipelineOptions(
        inputs=args.inputs, out=args.out, master=args.master, remote=remote,
        ports=args.ports or (1883,),
        payload_limit=args.payload_limit, version=args.assume_version, reader=args.reader,
        split_size=args.split_size or None, writer=args.writer,
        progress_interval=args.progress,
        summary_dir=args.summary_dir, driver_memory=args.driver_memory,
        executor_memory=args.executor_memory, jvm_cache=args.jvm_cache, group=args.group,
        jvm_lines=args.verbose, spark_ui=args.spark_ui)
    if args.share_size is not None:
        options.share_size = args.share_size or None
    try:
        result = run_pipeline(options)
    except Exception as exc:  # any failure of the run, said in one line
        if args.verbose:
            raise
        print(f"mqttwire pipeline: failed: {_cause(exc)} (--verbose shows the trace)",
              file=sys.stderr)
        return 1
    # EXIT_STATUS: each input not read to its end, named with why (the summary and the
    # errors table have them too), then 1.
    for name in result.bad_captures:
        why = result.failures.get(name) or "not read to its end (see the errors table)"
        why = why.removeprefix(f"{name}: ")  # a reader's error names the file itself
        print(f"mqttwire pipeline: {name}: {why}", file=sys.stderr)
    if result.bad_captures:
        print(f"mqttwire pipeline: {len(result.bad_captures)} of {len(result.files)} "
              "input file(s) could not be read to the end; the tables hold what was read "
              "before each fault", file=sys.stderr)
        return 1
    return 0


def _absolute(arg: str) -> str:
    """A relative local path made absolute (from the current directory); any other
    input as given."""
    from .spark.inputs import local_path

    path = local_path(arg)
    return os.path.abspath(arg) if path is not None and path == arg else arg


def _cause(exc: BaseException) -> str:
    """The first line of what went wrong: for a Java exception raised through py4j, the
    Java exception's own message rather than py4j's wrapping of it."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first or type(exc).__name__


def _bench(args: argparse.Namespace, pytest_args: list[str]) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    benchmarks = os.path.join(root, "benchmarks")
    if not os.path.isdir(benchmarks):
        print("mqttwire bench: the benchmarks are not installed with the package: from a "
              "source checkout, run `pip install -e '.[bench]'` then `mqttwire bench` (or "
              "`pytest benchmarks/ --benchmark-only`)", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "pytest", benchmarks, "--benchmark-only", *pytest_args]
    print("running: " + " ".join(command), file=sys.stderr)
    return subprocess.call(command, cwd=root)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    # Only bench takes arguments of its own (pytest's), which argparse cannot declare.
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":
        return _bench(args, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handlers = {"decode": _decode, "dissect": _dissect, "pipeline": _pipeline}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
