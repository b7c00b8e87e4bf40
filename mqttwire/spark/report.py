"""The run's summary: packets by type and version, top topics, QoS exchanges that did not
complete, errors; written as summary.md with a PNG chart of the message rate.

Every figure is an aggregate over the tables as written (:mod:`.aggregates`: Spark jobs, or
Arrow on the driver when it can see the files); only aggregates reach the driver, never
rows by the million.  The figures are independent, so they are computed at once, in two
waves (the second needs the first's counts and time span): with Spark, one job plans and
compiles while another runs, where one after another each waited for the last.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from .aggregates import ERRORS_COLUMNS, TOP

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .aggregates import ArrowAggregates, SparkAggregates
    from .inputs import CaptureFile, Skipped

    Aggregates = ArrowAggregates | SparkAggregates

__all__ = ["ROUND_WIDTHS", "Report", "count", "duration_text", "markdown_table",
           "rate_buckets", "rate_figure", "write_summary"]

CHART_BUCKETS = 100  # bars of the message-rate chart, at most
SKIPPED_SHOWN = 100  # files skipped in the input folders, named in the summary at most


@dataclass
class Report:
    """The summary's text (Markdown), where it was written, the row counts, and the
    captures that could not be read to the end (a "capture_error" row), with why."""

    text: str
    path: str
    chart_path: str | None
    counts: dict[str, int]
    bad_captures: list[str]
    #: Why each of ``bad_captures`` could not be read to its end, by name.
    failures: dict[str, str] = field(default_factory=dict)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (``|`` in cells escaped, None shown empty)."""
    def cell(value: Any) -> str:
        return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


#: Round bucket widths of the message-rate chart, in microseconds: 1, 2 and 5 times a power
#: of ten, from 1 us to 5e12 us (58 days).
ROUND_WIDTHS: tuple[int, ...] = tuple(m * 10**e for e in range(13) for m in (1, 2, 5))


def rate_buckets(first_us: int, last_us: int, buckets: int = CHART_BUCKETS) -> int:
    """The bucket width in microseconds that cuts the time span [first_us, last_us] into
    at most ``buckets`` buckets: the smallest round one (:data:`ROUND_WIDTHS`) that does,
    so that the chart's axis reads in whole milliseconds or seconds."""
    span = max(last_us - first_us, 0)
    for width in ROUND_WIDTHS:
        if span // width + 1 <= buckets:
            return width
    return ROUND_WIDTHS[-1] * (span // (ROUND_WIDTHS[-1] * (buckets - 1)) + 1)


def duration_text(us: int) -> str:
    """A bucket width as people write it: "1 us", "20 ms", "5 s", "200 s"."""
    for unit, size in (("s", 1_000_000), ("ms", 1_000)):
        if us >= size:
            return f"{us / size:g} {unit}"
    return f"{us} us"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular or plural as ``n`` asks: "1 file", "3 files"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _connections_text(total: int, joined: dict[str | None, int], websocket: int = 0) -> str:
    """How many connections there were (``websocket`` of them MQTT over WebSocket), how
    many were joined mid-stream (no CONNECT in the capture), and how their protocol
    levels were known (``joined``: counts by the connections table's
    ``version_source``)."""
    if not total:
        return "No MQTT connection in the captures."
    text = count(total, "MQTT connection")
    if websocket:
        text += f" ({websocket} over WebSocket)"
    n = sum(joined.values())
    if not n:
        return text + ("; its CONNECT is in the capture." if total == 1
                       else "; the CONNECT of each is in the captures.")
    if total == 1:
        who = "it joined mid-stream (its CONNECT is not in the capture: it was open when "
        who += "the capture began, or the CONNECT was lost)"
    else:
        who = "all of them" if n == total else str(n)
        who += (" joined mid-stream (no CONNECT of theirs in the captures: open when a "
                "capture began, or the CONNECT was lost)")

    def how(source: str | None, k: int) -> str:
        its = "its" if k == 1 else "their"
        if source == "inferred":
            return f"the level of {k} inferred from {its} traffic"
        if source == "default":
            return (f"3.1.1 assumed for {k}, {its} traffic fitting 3.1.1 and 5.0 alike (PINGs "
                    "only, say)")
        if source == "option":
            return f"the level of {k} given by --assume-version"
        return f"the level of {k} unknown" if source is None else f"{k}: {source}"

    detail = "; ".join(how(source, k) for source, k
                       in sorted(joined.items(), key=lambda kv: str(kv[0])))
    return f"{text}; {who}: {detail}."


def _all_complete_text(any_exchange: bool) -> str:
    """What to say when no QoS 1 or 2 exchange is left unfinished."""
    if any_exchange:
        return "Every QoS 1 and 2 exchange in the captures completed."
    return "No PUBLISH at QoS 1 or 2 in the captures: no exchange to complete."


def _unmatched_text(n: int) -> str:
    """What to say of ``n`` acknowledgements that answer no PUBLISH of the captures."""
    what = "acknowledgement answers" if n == 1 else "acknowledgements answer"
    return (f"{n} {what} no PUBLISH of the captures (a PUBACK, PUBREC, PUBREL or PUBCOMP "
            "whose PUBLISH was sent before a capture began, or was lost, or that repeats "
            "one already counted): not messages, and not listed above; the connections "
            "table counts them per connection (`unmatched_acks`).")


def _retained_text(topics: int, sent: int) -> str:
    """What the retained table holds (``topics`` rows), given ``sent`` PUBLISH packets
    with RETAIN set from clients to the server."""
    if not sent:
        return ("No client sent a PUBLISH with the RETAIN flag set, so the retained table "
                "is empty: it holds what a broker would keep after the captures.")
    if not topics:
        each = "its topic" if sent == 1 else "each topic"
        return (f"{count(sent, 'retained PUBLISH packet')} from clients, {each} cleared "
                "again by a retained PUBLISH with an empty payload: the retained table, "
                "what a broker keeps after the captures, is empty.")
    hold = "holds" if topics == 1 else "hold"
    return (f"{count(sent, 'retained PUBLISH packet')} from clients; at the end of the "
            f"captures {count(topics, 'topic')} {hold} a retained message (the retained "
            "table).")


def _together(jobs: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run ``jobs`` (each one figure) on threads at once; their results by name.
    The first error is raised once all have ended."""
    with ThreadPoolExecutor(max(1, len(jobs)), thread_name_prefix="summary") as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def write_summary(figures: Aggregates, counts: dict[str, int], directory: str, *,
                  options: Any, files: list[CaptureFile],
                  skipped: Sequence[Skipped] = (), sets: Sequence[str] = (),
                  notes: Sequence[str] = ()) -> Report:
    """Compute the summary's ``figures`` (:mod:`.aggregates`; ``counts``: the tables' row
    counts, except ``errors``), write ``directory``/summary.md and message_rate.png,
    and return it.  The figures are computed in two concurrent waves.  ``skipped``: the
    files of the input folders that are not captures, named in a section of their own;
    ``sets`` and ``notes``: the files read as one capture, and what to know about that
    (.set_files)."""
    os.makedirs(directory, exist_ok=True)
    first = _together({"overview": figures.overview, "error_kinds": figures.error_kinds,
                       "known": figures.known,
                       "top": figures.top, "qos": figures.qos,
                       "retained_sent": figures.retained_sent,
                       "unmatched_acks": figures.unmatched_acks})

    overview = first["overview"]
    by_kind: dict[str, int] = {}
    grid: dict[str, dict[Any, int]] = {}
    for r in overview:
        if r["kind"] == "packet":
            grid.setdefault(r["packet_type"], {})[r["protocol_version"]] = r["count"]
    for r in first["error_kinds"]:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["count"]
    counts = dict(counts, errors=sum(by_kind.values()))

    parts = ["# mqttwire pipeline summary", ""]
    parts += [f"Inputs: {count(len(files), 'capture file')}; output: `{options.out}`.", ""]
    if skipped:
        shown = [[s.name, s.reason] for s in skipped[:SKIPPED_SHOWN]]
        more = len(skipped) - len(shown)
        are = "is not a capture" if len(skipped) == 1 else "are not captures"
        parts += [f"{count(len(skipped), 'file')} in the input folders {are} (by their "
                  "first bytes) and were skipped" + (f"; the first {len(shown)}:" if more
                                                     else ":"), "",
                  markdown_table(["file", "why"], shown), ""]
    if sets or notes:
        # Files that are pieces of one capture (mqttwire.capture.sets).
        parts += ["## Capture sets", ""] + [f"- {line}" for line in [*sets, *notes]] + [""]
    parts += [markdown_table(["table", "rows"], sorted(counts.items(), key=_table_order)), ""]

    levels = sorted({v for row in grid.values() for v in row if v is not None})
    names = {3: "3.1", 4: "3.1.1", 5: "5.0"}
    rows = [[ptype] + [grid[ptype].get(v, 0) for v in levels] + [sum(grid[ptype].values())]
            for ptype in sorted(grid, key=lambda t: (-sum(grid[t].values()), t))]
    parts += ["## Packets by type and protocol version", "",
              markdown_table(["packet type"] + [f"MQTT {names.get(v, v)}" for v in levels]
                             + ["total"], rows), ""]

    # Connections, and how the level of each was known.
    known = first["known"]
    total = sum(r["count"] for r in known)
    joined: dict[str | None, int] = {}
    for r in known:
        if r["joined_mid_stream"]:
            joined[r["version_source"]] = joined.get(r["version_source"], 0) + r["count"]
    websocket = sum(r["count"] for r in known if r["transport"] == "websocket")
    parts += ["## Connections", "", _connections_text(total, joined, websocket), ""]

    # Top topics.
    top = first["top"]
    parts += [f"## Top topics (by PUBLISH packets, at most {TOP})", "",
              markdown_table(["topic", "PUBLISH packets", "published (c2s)", "delivered (s2c)",
                              "payload bytes"],
                             [[r["topic"], r["messages"], r["published"], r["delivered"],
                               r["payload_bytes"]] for r in top]), ""]

    # QoS exchanges.
    qos = first["qos"]
    n_unfinished = sum(r["n"] for r in qos if r["status"] in ("incomplete", "failed"))
    spans = [(r["first_us"], r["last_us"]) for r in qos if r["first_us"] is not None]
    second: dict[str, Callable[[], Any]] = {}
    if n_unfinished:
        second["unfinished"] = figures.unfinished
    if by_kind:
        second["bad"] = figures.bad
        second["first_errors"] = figures.first_errors
    if spans:
        lo = min(lo for lo, _ in spans)
        hi = max(hi for _, hi in spans)
        width = rate_buckets(lo, hi)
        second["rate"] = partial(figures.rate, lo, width)
    later = _together(second)

    parts += ["## QoS 1 and 2 exchanges", ""]
    exchanges = [r for r in qos if r["qos"]]
    if exchanges:
        parts += [markdown_table(["QoS", "status", "messages", "median latency (ms)",
                                  "max latency (ms)"],
                                 [[r["qos"], r["status"], r["n"], _ms(r["median_ms"]),
                                   _ms(r["max_ms"])] for r in exchanges]), ""]
    if n_unfinished:
        unfinished = later["unfinished"]
        first_few = (f"; the first {len(unfinished)}" if len(unfinished) < n_unfinished
                     else "")
        parts += [f"{count(n_unfinished, 'exchange')} did not complete{first_few}:", "",
                  markdown_table(["capture", "connection", "client id", "direction", "topic",
                                  "QoS", "packet id", "status", "ack reason", "last step"],
                                 [[r["capture"], r["connection_id"], r["client_id"],
                                   r["direction"], r["topic"], r["qos"], r["packet_id"],
                                   r["status"], _hex(r["ack_reason_code"]), _last_step(r)]
                                  for r in unfinished]), ""]
    else:
        parts += [_all_complete_text(bool(exchanges)), ""]
    if first["unmatched_acks"]:
        parts += [_unmatched_text(first["unmatched_acks"]), ""]

    # Retained messages: what the table holds, and why it may be empty.
    parts += ["## Retained messages", "", _retained_text(counts.get("retained", 0),
                                                         first["retained_sent"]), ""]

    # Errors.
    parts += ["## Errors", ""]
    bad: list[dict[str, Any]] = []
    if by_kind:
        bad = later["bad"]
        first_errors = later["first_errors"]
        parts += [markdown_table(["kind", "records"], sorted(by_kind.items())), "",
                  f"The first {len(first_errors)}:", "",
                  markdown_table(["capture", "kind", "connection", "direction", "stream offset",
                                  "bytes", "what"],
                                 [[r[c] for c in ERRORS_COLUMNS] for r in first_errors]), ""]
    else:
        parts += ["No errors: every byte of every MQTT stream decoded.", ""]
    # A reader's error begins with the capture's name: said once.
    bad = [dict(r, error=r["error"].removeprefix(f"{r['capture']}: ")) for r in bad]
    if bad:
        parts += ["Inputs that could not be read to the end:", ""]
        parts += [f"- `{r['capture']}`: {r['error']}" for r in bad] + [""]

    chart = None
    if spans:
        chart = _rate_chart(later["rate"], directory, lo, hi, width)
        parts += ["## Message rate", "",
                  f"![PUBLISH packets over time]({os.path.basename(chart)})", ""]
    text = "\n".join(parts)
    path = os.path.join(directory, "summary.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return Report(text, path, chart, counts, [r["capture"] for r in bad],
                  {r["capture"]: r["error"] for r in bad})


def _rate_chart(counts: list[Any], directory: str, lo: int, hi: int, width: int) -> str:
    """Plot PUBLISH packets over time (:func:`rate_figure`); return the PNG's path."""
    path = os.path.join(directory, "message_rate.png")
    rate_figure(counts, lo, hi, width).savefig(path, format="png")
    return path


def rate_figure(counts: list[Any], lo: int, hi: int, width: int) -> Figure:
    """PUBLISH packets over time (published and delivered) between the times ``lo`` and
    ``hi`` (microseconds, the first and last message), ``counts`` per bucket of ``width``
    (the figures' ``rate``).  Buckets of a second or more are shown as packets per
    second; shorter ones as packets per bucket, since a rate scaled up from a few packets
    in a millisecond would mislead.

    The rate axis starts at 0, so that a dip reads as its true size.  The last bucket
    ends at the last message, not a bucket's width later: where it is shorter than the
    others, it is drawn as wide as it is, on a shaded band that says it is partial, so
    that its lower count does not read as a drop in the traffic."""
    # A bare Figure, not pyplot: no display and no global backend is touched; savefig
    # renders PNG with Agg.
    from matplotlib.figure import Figure

    n = (hi - lo) // width + 1
    last = hi - lo + 1 - (n - 1) * width  # microseconds of the last bucket in the span
    seconds = width / 1e6
    per_second = width >= 1_000_000
    scale = seconds if per_second else 1.0
    x = [i * seconds for i in range(n)] + [((n - 1) * width + last) / 1e6]
    fig = Figure(figsize=(9, 4), dpi=100)
    ax = fig.subplots()
    if n > 1 and last < width:
        ax.axvspan(x[-2], x[-1], color="0.9", zorder=0,
                   label=f"last bucket partial ({duration_text(last)} of "
                   f"{duration_text(width)}): the captures end")
    for direction, label in (("c2s", "published (client to server)"),
                             ("s2c", "delivered (server to client)")):
        series = [0.0] * (n + 1)  # the last value closes the last bucket's step
        for r in counts:
            if r["direction"] == direction:
                series[r["bucket"]] = r["count"] / scale
        series[n] = series[n - 1]
        ax.step(x, series, where="post", label=label)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"seconds since the first message (buckets of {duration_text(width)})")
    ax.set_ylabel("PUBLISH packets per second" if per_second
                  else f"PUBLISH packets per {duration_text(width)}")
    ax.set_title("Message rate")
    ax.legend()
    fig.tight_layout()
    return fig


def _table_order(item: Sequence[Any]) -> int:
    order = ("packets", "connections", "messages", "retained", "errors")
    return order.index(item[0]) if item[0] in order else len(order)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _hex(code: int | None) -> str:
    return "" if code is None else f"0x{code:02X}"


def _last_step(r: Any) -> str:
    if r["pubrel_ts"] is not None:
        return "PUBREL (no PUBCOMP)"
    if r["pubrec_ts"] is not None:
        return "PUBREC" + (" (no PUBREL)" if r["status"] == "incomplete" else "")
    if r["puback_ts"] is not None:
        return "PUBACK"
    return "PUBLISH (no answer)"
