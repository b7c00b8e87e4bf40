"""The derived tables of one capture: connections, messages (with their QoS exchanges) and
the retained messages at the end of the capture.

Computed per capture file, in the executor that decodes it, as its records come (in
capture order): an MQTT connection, its QoS exchanges and a broker's retained store all
live inside one capture, so no shuffle is needed, and the state held is bounded by the
open connections, the unfinished exchanges and the retained topics, not by the packets.

Rows are plain dicts whose keys are the columns of :mod:`mqttwire.spark.schema`; every
time is integer nanoseconds since the epoch (the Arrow layer converts them).

This module is the reference.  Where the extension is built, :meth:`CaptureTables.add_many`
hands the common records (PUBLISH and PUBACK of open connections) to its compiled twin,
mqttwire/spark/derive_c.pyx, which makes the same rows (tests/spark/test_derive_compiled.py)
and leaves every other record to :meth:`CaptureTables.add`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..capture import Record

try:
    from . import derive_c as derive_c  # also columnar.py's, where it is built
except ImportError:  # the pure-Python wheel, or a build without the extension
    derive_c = None  # type: ignore[assignment]

__all__ = ["COMPILED", "REJECTED", "CaptureTables", "derive"]

Row = dict[str, Any]
#: A QoS exchange's key: the direction of its PUBLISH ("c2s" or "s2c": a packet record
#: always has one) and its packet id.
Key = tuple[str, int | None]
#: The order of retained PUBLISHes, the latest last: (the frame that completed it, its
#: connection's number, its arrival among the capture's retained PUBLISHes).  Packets of
#: two connections are in different frames, except those decoded at the capture's end.
RetainOrder = tuple[int, int, int]

#: Reason codes from 0x80 up are failures (MQTT 5.0 §2.4); a PUBACK or PUBREC carrying one
#: ends the exchange (MQTT 5.0 §4.3.2, §4.3.3).
REJECTED = 0x80

_OTHER = {"c2s": "s2c", "s2c": "c2s"}

#: A messages row before its PUBLISH's fields are set (_codec.publish; the capture is set per
#: capture).
_MESSAGE: Row = {
    "capture": None, "connection_id": None, "client_id": None, "protocol_version": None,
    "direction": None, "ts": None, "frame": None, "stream_offset": None, "topic": None,
    "topic_from_alias": None, "qos": None, "retain": None, "dup": None, "packet_id": None,
    "payload_length": None, "payload": None, "status": None, "retransmissions": 0,
    "puback_ts": None, "pubrec_ts": None, "pubrel_ts": None, "pubcomp_ts": None,
    "ack_reason_code": None, "completed_ts": None, "latency_ms": None,
}
_ACKS = frozenset(("PUBACK", "PUBREC", "PUBREL", "PUBCOMP"))
#: What a step of a QoS exchange (an acknowledgement record) comes to: it advanced an
#: exchange; it will never advance one; or it may, once a record of the direction named
#: (a PUBLISH, or the step before it) has come (see CaptureTables._step).
_APPLIED, _NEVER = "applied", "never"
#: Not a value any record holds (see _Conn.client_id).
_UNSEEN = object()


class _Conn:
    """What is known of one MQTT connection, and its unfinished QoS exchanges.

    The packet and byte counters and the last time are kept here, not in ``row``, and
    written to it when the connection closes (:meth:`CaptureTables._close`): an attribute
    of a slotted object is cheaper to update, once per record, than a dict item."""

    __slots__ = ("bytes_c2s", "bytes_s2c", "client_id", "ended", "frame_c2s", "frame_s2c",
                 "held", "last_ts", "message", "older", "packets_c2s",
                 "packets_s2c", "pending", "row", "source", "unmatched", "version")

    def __init__(self, row: Row) -> None:
        self.row = row
        # (direction of the PUBLISH, packet id) -> its messages row
        self.pending: dict[Key, Row] = {}
        # The frame of the last record of each direction: the reader yields each
        # direction in capture order, but not the two directions of a connection
        # interleaved in it (a window held to find a mid-stream connection's first
        # packet comes out after the other direction's records), so a step is matched
        # to its exchange by frame (the messages row's PUBLISH frame), not by arrival.
        self.frame_c2s: int | None = None
        self.frame_s2c: int | None = None
        # Steps that came before the record they follow (held until it comes), and
        # exchanges whose packet id a later PUBLISH took while they were pending:
        # key -> [(frame of its PUBLISH, its row, frame of the PUBLISH that took the id)],
        # both frames known (_supersede keeps no others).
        self.held: dict[Key, list[Record]] = {}
        self.older: dict[Key, list[tuple[int, Row, int]]] = {}
        #: Steps that answer no PUBLISH of the capture (see CaptureTables._unmatched).
        self.unmatched = 0
        self.ended: set[str] = set()  # the directions whose TCP stream ended
        self.packets_c2s = self.packets_s2c = self.bytes_c2s = self.bytes_s2c = 0
        self.last_ts: int | None = None
        # The client id, protocol level and its source of the last record, as objects:
        # the same objects record after record, so one identity test each tells that
        # nothing changed (CaptureTables.add).
        self.client_id: object = _UNSEEN
        self.version: object = _UNSEEN
        self.source: object = _UNSEEN
        #: The messages row template of this connection's PUBLISHes (_codec.publish): the
        #: capture's with this connection's id, client id and level set.
        self.message: Row = {}


def _compiled_path() -> Any:
    """The compiled path of :meth:`CaptureTables.add_many` (mqttwire.spark.derive_c) for
    these classes, or None where it is not built or does not fit them."""
    if derive_c is None:
        return None
    try:
        return derive_c.Deriver(Record, _Conn)
    except TypeError:  # a slot it reads is not one (see derive_c.RECORD_SLOTS, CONN_SLOTS)
        return None


_FAST = _compiled_path()
#: Whether :meth:`CaptureTables.add_many` takes the common records in compiled code.
COMPILED = _FAST is not None


class CaptureTables:
    """Feed a capture's records in capture order (:meth:`add`); take the finished
    ``connections`` and ``messages`` rows from the lists of those names as they fill;
    call :meth:`finish` at the end of the capture for the rest and the ``retained`` rows.

    Read the capture with ``read_capture(..., stream_ends=True)``: the records of kind
    "end" tell how each connection's TCP streams ended, for the ``connections`` table.

    Payloads are taken from the records (``Record.payload``, present when the capture
    was read with a payload limit).
    """

    def __init__(self, capture: str) -> None:
        self.capture = capture
        self.connections: list[Row] = []
        self.messages: list[Row] = []
        self._conns: dict[str, _Conn] = {}
        # topic -> (order, row), row None where the latest retained PUBLISH removed it
        self._retained: dict[str, tuple[RetainOrder, Row | None]] = {}
        self._retains = 0  # retained PUBLISHes seen, for their order
        self._message = dict(_MESSAGE, capture=capture)

    # -- input ---------------------------------------------------------------------------

    def add(self, rec: Record) -> None:
        """Take the next record of the capture."""
        # Called once per record: attributes are read once into locals, and a row's
        # fields are written only when they change.
        kind = rec.kind
        if kind == "end":
            self._end(rec)
            return
        conn_id = rec.connection_id
        if conn_id is None:
            return  # a fragment or a capture error: no connection
        conn = self._conns.get(conn_id)
        if conn is None:
            conn = self._conns[conn_id] = _Conn(self._new_connection(rec))
        ts = rec.ts
        if ts is not None:
            if conn.last_ts is None:
                conn.row["first_ts"] = ts
            conn.last_ts = ts
        if rec.direction == "c2s":
            conn.frame_c2s = rec.frame
        else:
            conn.frame_s2c = rec.frame
        client_id = rec.client_id
        version = rec.protocol_version
        source = rec.version_source
        if client_id is not conn.client_id or version is not conn.version \
                or source is not conn.source:
            self._identity(conn, client_id, version, source)
        ptype = rec.packet_type
        if kind == "packet":
            if rec.direction == "c2s":
                conn.packets_c2s += 1
                conn.bytes_c2s += rec.length or 0
            else:
                conn.packets_s2c += 1
                conn.bytes_s2c += rec.length or 0
            if ptype == "PUBLISH":
                self._publish(conn, rec)
            elif ptype in _ACKS:
                self._ack(conn, rec)
            else:
                if ptype == "CONNECT":
                    conn.row["joined_mid_stream"] = False
                self._packet(conn, rec)
            return
        row = conn.row
        if ptype == "CONNECT":  # the error row of a bad CONNECT
            row["joined_mid_stream"] = False
        if kind == "gap":
            row["gaps"] += 1
        else:
            row["errors"] += 1

    def add_many(self, records: list[Record]) -> None:
        """Take the next records of the capture, in order: :meth:`add` for each, the
        common ones (PUBLISH and PUBACK of open connections) in compiled code where it
        is built (:data:`COMPILED`; mqttwire/spark/derive_c.pyx), with the same rows."""
        if COMPILED:
            _FAST.add_many(self, records)
            return
        add = self.add
        for rec in records:
            add(rec)

    def _identity(self, conn: _Conn, client_id: str | None, version: int | None,
                  source: str | None) -> None:
        """The record's client id, level or level source is not the previous record's:
        update the connection's row where they changed, and its messages template."""
        conn.client_id, conn.version, conn.source = client_id, version, source
        row = conn.row
        if client_id is not None and row["client_id"] != client_id:
            row["client_id"] = client_id
        if version is not None and (row["protocol_version"] != version
                                    or row["version_source"] != source):
            row["protocol_version"] = version
            row["version_source"] = source
        conn.message = dict(self._message, connection_id=row["connection_id"],
                            client_id=row["client_id"], protocol_version=version)

    def finish(self) -> list[Row]:
        """End of the capture: move every remaining connection and unfinished exchange to
        ``connections`` and ``messages``; return the ``retained`` rows (one per topic
        that holds a retained message, by topic)."""
        for conn_id in list(self._conns):
            self._close(conn_id)
        return [row for topic in sorted(self._retained)
                if (row := self._retained[topic][1]) is not None]

    # -- connections ----------------------------------------------------------------------

    def _new_connection(self, rec: Record) -> Row:
        if rec.direction == "c2s":
            client = (rec.src_ip, rec.src_port, rec.dst_ip, rec.dst_port)
        else:
            client = (rec.dst_ip, rec.dst_port, rec.src_ip, rec.src_port)
        return {
            "capture": self.capture, "connection_id": rec.connection_id,
            "client_ip": client[0], "client_port": client[1],
            "server_ip": client[2], "server_port": client[3], "transport": rec.transport,
            "client_id": None, "protocol_version": None, "version_source": None,
            "joined_mid_stream": True, "clean_start": None,
            "keep_alive": None, "username_present": None, "password_present": None,
            "will_topic": None, "will_qos": None, "will_retain": None,
            "will_payload_length": None, "connect_ts": None, "connack_ts": None,
            "connack_reason_code": None, "session_present": None,
            "first_ts": None, "last_ts": None, "close_ts": None, "close_reason": None,
            "disconnect_by": None, "disconnect_reason_code": None,
            "tcp_end": None, "tcp_closed_by": None,
            "packets_c2s": 0, "packets_s2c": 0, "bytes_c2s": 0, "bytes_s2c": 0,
            "errors": 0, "gaps": 0, "unmatched_acks": 0,
        }

    def _end(self, end: Record) -> None:
        """A direction's TCP stream ended (a record of kind "end")."""
        conn_id: str = end.connection_id  # type: ignore[assignment]  # set on end records
        conn = self._conns.get(conn_id)
        if conn is None:
            return  # an MQTT stream without a single record (no bytes): nothing to report
        row = conn.row
        side = "client" if end.direction == "c2s" else "server"
        reason = end.end_reason
        if row["tcp_end"] is None:
            # The first end decides how the connection closed.  A RST ends both
            # directions at once, so only a FIN says which side closed.
            row["tcp_end"] = reason
            row["tcp_closed_by"] = side if reason == "fin" else None
            if reason != "eof" and row["close_ts"] is None:
                row["close_ts"] = end.ts
        conn.ended.add(side)
        if len(conn.ended) == 2:
            self._close(conn_id)

    def _close(self, conn_id: str) -> None:
        conn = self._conns.pop(conn_id)
        row = conn.row
        row["last_ts"] = conn.last_ts
        row["packets_c2s"], row["packets_s2c"] = conn.packets_c2s, conn.packets_s2c
        row["bytes_c2s"], row["bytes_s2c"] = conn.bytes_c2s, conn.bytes_s2c
        if row["disconnect_by"] is not None:
            row["close_reason"] = "disconnect"
        else:
            row["close_reason"] = row["tcp_end"] or "eof"
        # Every record of the connection has come: what is still pending stays
        # "incomplete", and a step still held answers nothing.
        self.messages.extend(conn.pending.values())
        for entries in conn.older.values():
            self.messages.extend(entry[1] for entry in entries)
        row["unmatched_acks"] = conn.unmatched + sum(map(len, conn.held.values()))
        self.connections.append(row)

    # -- packets -------------------------------------------------------------------------

    def _packet(self, conn: _Conn, rec: Record) -> None:
        """A packet other than PUBLISH and its acknowledgements."""
        ptype = rec.packet_type
        row = conn.row
        if ptype == "CONNECT":
            p = rec.packet
            will = p.will
            row["connect_ts"] = rec.ts
            row["clean_start"] = bool(p.clean_start)
            row["keep_alive"] = p.keep_alive
            row["username_present"] = p.username is not None
            row["password_present"] = p.password is not None
            if will is not None:
                row["will_topic"] = will.topic
                row["will_qos"] = will.qos
                row["will_retain"] = bool(will.retain)
                row["will_payload_length"] = len(will.payload)
        elif ptype == "CONNACK":
            row["connack_ts"] = rec.ts
            row["connack_reason_code"] = rec.reason_code
            row["session_present"] = bool(rec.packet.session_present)
        elif ptype == "DISCONNECT" and row["disconnect_by"] is None:
            # From the client at any level; from the server only in MQTT 5.0 (§3.14).
            row["disconnect_by"] = "client" if rec.direction == "c2s" else "server"
            row["disconnect_reason_code"] = rec.reason_code
            row["close_ts"] = rec.ts

    def _publish(self, conn: _Conn, rec: Record) -> None:
        qos = rec.qos or 0
        # A packet record's direction is never None (the Record type allows it for others).
        key: Key = (rec.direction, rec.packet_id)  # type: ignore[assignment]
        if qos and rec.dup:
            earlier = conn.pending.get(key)
            if earlier is not None:
                # A retransmission of the message in flight under this packet id
                # [MQTT-3.3.1-1]: the same application message, not a new one.
                earlier["retransmissions"] += 1
                return
        # A copy of the connection's template and the fields set one by one: half the
        # time of a 24-key dict literal, for the one row made per PUBLISH.  (A PUBLISH
        # record's flags are bools.)
        message = conn.message.copy()
        message["direction"] = rec.direction
        message["ts"] = rec.ts
        message["frame"] = rec.frame
        message["stream_offset"] = rec.stream_offset
        message["topic"] = rec.topic
        message["topic_from_alias"] = rec.topic_from_alias
        message["qos"] = qos
        message["retain"] = rec.retain
        message["dup"] = rec.dup
        message["packet_id"] = rec.packet_id
        message["payload_length"] = rec.payload_length
        message["payload"] = rec.payload
        if qos:
            message["status"] = "incomplete"
        if not qos:
            self.messages.append(message)
        else:
            replaced = conn.pending.pop(key, None)
            if replaced is not None:
                self._supersede(conn, key, replaced, rec.frame)
            conn.pending[key] = message
            if key in conn.held:
                self._retry(conn, key)
        if rec.direction == "c2s" and rec.retain and rec.topic is not None:
            self._retain(rec)

    def _supersede(self, conn: _Conn, key: Key, message: Row, frame: int | None) -> None:
        """A new PUBLISH (frame ``frame``) takes the packet id of ``message``, pending: the
        capture missed the end of that exchange (or the sender broke [MQTT-2.2.1-3]),
        or, where the directions come out of step, its answers are still to come.  It
        stays open until the answering direction passes ``frame`` (_settle_older)."""
        first = message["frame"]
        if frame is None or first is None:  # no frames: the records' order is all we have
            self.messages.append(message)
            return
        conn.older.setdefault(key, []).append((first, message, frame))
        self._settle_older(conn, key)

    def _settle_older(self, conn: _Conn, key: Key) -> None:
        """Report the superseded exchanges of ``key`` that can get no more answers: the
        direction that answers a PUBLISH (MQTT 3.1.1 §4.3) has passed the PUBLISH that
        reused the packet id, which the sender may send only once the earlier exchange
        is over [MQTT-2.2.1-3]."""
        older = conn.older[key]
        answers = conn.frame_s2c if key[0] == "c2s" else conn.frame_c2s
        if answers is None or older[0][2] > answers:
            return
        self.messages.extend(entry[1] for entry in older if entry[2] <= answers)
        older[:] = [entry for entry in older if entry[2] > answers]
        if not older:
            del conn.older[key]

    def _ack(self, conn: _Conn, rec: Record) -> None:
        """Advance a QoS 1 or 2 exchange (MQTT 3.1.1 §4.3, MQTT 5.0 §4.3).  PUBACK, PUBREC
        and PUBCOMP answer a PUBLISH of the other direction; PUBREL follows the PUBREC in
        the direction of the PUBLISH."""
        ptype = rec.packet_type
        direction: str = rec.direction  # type: ignore[assignment]  # set on packet records
        key: Key = (direction if ptype == "PUBREL" else _OTHER[direction], rec.packet_id)
        outcome = self._step(conn, key, rec)
        if outcome is not _APPLIED:
            self._hold(conn, key, rec, outcome)
            return
        if key in conn.held:
            self._retry(conn, key)
        if key in conn.older:
            self._settle_older(conn, key)

    def _step(self, conn: _Conn, key: Key, rec: Record) -> str:
        """Apply the step ``rec`` to the exchange it answers: the latest one of ``key``
        whose PUBLISH came before it (one of the step's own frame did: it was held
        behind a hole that the step's segment acknowledged, see _hold).  Returns
        _APPLIED; _NEVER where it answers no exchange; or the direction of the record
        it follows where that has not come yet (the PUBLISH; the PUBREC before a
        PUBREL; the PUBREL before a PUBCOMP)."""
        frame = rec.frame
        message = conn.pending.get(key)
        older = None
        if message is not None and frame is not None:
            first = message["frame"]
            if first is not None and first > frame:
                message = None  # a later exchange under the same packet id
        if message is None:
            for entry in reversed(conn.older.get(key, ())):
                if frame is not None and entry[0] is not None and entry[0] <= frame:
                    message, older = entry[1], entry
                    break
            else:
                return key[0]  # its PUBLISH is not in the capture, or not yet here
        ptype = rec.packet_type
        qos = message["qos"]
        ts = rec.ts
        code = rec.reason_code
        if ptype == "PUBACK":
            if qos != 1:
                return _NEVER
            message["puback_ts"] = ts
            self._done(conn, key, message, older, ts, code)
        elif ptype == "PUBREC":
            if qos != 2 or message["pubrec_ts"] is not None:
                return _NEVER
            message["pubrec_ts"] = ts
            message["ack_reason_code"] = code
            if code is not None and code >= REJECTED:
                self._done(conn, key, message, older, ts, code)
        elif ptype == "PUBREL":
            if qos != 2 or message["pubrel_ts"] is not None:
                return _NEVER
            if message["pubrec_ts"] is None:
                return _OTHER[key[0]]  # the PUBREC it follows
            message["pubrel_ts"] = ts
        else:  # PUBCOMP
            if qos != 2:
                return _NEVER
            if message["pubrel_ts"] is None:
                return key[0]  # the PUBREL it follows
            message["pubcomp_ts"] = ts
            self._done(conn, key, message, older, ts, code)
        return _APPLIED

    def _hold(self, conn: _Conn, key: Key, rec: Record, outcome: str) -> None:
        """A step that could not be applied: held while the record it follows may still
        come (its direction has not passed the step's frame), else unmatched.

        Reaching the frame is not passing it: bytes held behind a hole that the capture
        missed are delivered at the frame of the other direction's segment that
        acknowledges the hole (tcp.py), after a gap record of that frame, and a
        direction whose level is not known yet holds them in a window (direction.py),
        so a PUBLISH can come after a step of its own frame that answers it."""
        frame = rec.frame
        if outcome is not _NEVER and frame is not None:
            seen = conn.frame_c2s if outcome == "c2s" else conn.frame_s2c
            if seen is None or seen <= frame:
                conn.held.setdefault(key, []).append(rec)
                return
        self._unmatched(conn)

    def _unmatched(self, conn: _Conn) -> None:
        """A step that answers no PUBLISH of the capture: its PUBLISH came before the
        capture began (a connection joined mid-stream), or was lost, or the step repeats
        one already taken.  Not a message: counted in the connection's row
        (``unmatched_acks``)."""
        conn.unmatched += 1

    def _retry(self, conn: _Conn, key: Key) -> None:
        """Apply the steps held for ``key`` whose turn may have come, in capture order."""
        held = conn.held.pop(key)
        held.sort(key=_frame_of)
        for rec in held:
            outcome = self._step(conn, key, rec)
            if outcome is not _APPLIED:
                self._hold(conn, key, rec, outcome)

    def _done(self, conn: _Conn, key: Key, message: Row,
              older: tuple[int | None, Row, int | None] | None, ts: int | None,
              code: int | None) -> None:
        if older is None:
            del conn.pending[key]
        else:
            entries = conn.older[key]
            entries[:] = [entry for entry in entries if entry is not older]
            if not entries:
                del conn.older[key]
        message["ack_reason_code"] = code
        message["status"] = "failed" if code is not None and code >= REJECTED else "complete"
        message["completed_ts"] = ts
        if ts is not None and message["ts"] is not None:
            message["latency_ms"] = (ts - message["ts"]) / 1e6
        self.messages.append(message)

    # -- retained messages -----------------------------------------------------------------

    def _retain(self, rec: Record) -> None:
        """Apply a retained PUBLISH from a client to the server's store: it replaces the
        topic's retained message [MQTT-3.3.1-5]; one with an empty payload removes it and
        is not stored itself [MQTT-3.3.1-10, MQTT-3.3.1-11].

        "Latest" is by :data:`RetainOrder`, not by arrival, so that the result does not
        depend on how the capture was cut into tasks (:mod:`.split` decodes connections
        apart): the two orders differ only where the capture's end, or a connection
        whose level was inferred late, releases several connections' packets at once."""
        self._retains += 1
        order = (rec.frame or 0, self._connection_rank(rec.connection_id), self._retains)
        self._retained_event(order, rec.topic, {  # type: ignore[arg-type]
            "capture": self.capture, "topic": rec.topic, "connection_id": rec.connection_id,
            "client_id": rec.client_id, "protocol_version": rec.protocol_version,
            "ts": rec.ts, "qos": rec.qos, "payload_length": rec.payload_length,
            "payload": rec.payload, "stream_offset": rec.stream_offset,
        })

    def _connection_rank(self, connection_id: str | None) -> int:
        """The connection's number: n of "<capture>#<n>"."""
        return int(connection_id.rsplit("#", 1)[1]) if connection_id else 0

    def _retained_event(self, order: RetainOrder, topic: str, row: Row) -> None:
        held = self._retained.get(topic)
        if held is None or held[0] < order:
            self._retained[topic] = (order, row if row["payload_length"] else None)

def _frame_of(rec: Record) -> int:
    return rec.frame or 0


def derive(records: Iterable[Record],
           capture: str) -> tuple[list[Row], list[Row], list[Row]]:
    """All three derived tables of one capture at once: (connections, messages, retained).
    For tests and small captures; the pipeline streams through :class:`CaptureTables`."""
    tables = CaptureTables(capture)
    tables.add_many(list(records))
    retained = tables.finish()
    return tables.connections, tables.messages, retained
