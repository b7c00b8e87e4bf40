"""Decoders and encoders for the packets off the hot path, shared by both implementations:
CONNECT, CONNACK, SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, DISCONNECT and AUTH.

A broker sees these once per connection or subscription, so one Python source serves
both twins and their behaviour cannot drift.  The decoders build packets with the
classes of the implementation that calls them (``ns``: the ``_pure`` or ``_speedups``
module); the encoders read the fields of either implementation's packet objects.

Decoders take ``(data, pos, end, b0, version, ns)``: ``pos`` is the first byte after the
fixed header, ``end`` the end of the packet, ``b0`` the (already checked) first byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._constants import REASON_CODES, V3_CONNACK_CODES, V3_SUBACK_CODES
from .._constants import PacketType as P
from .._errors import MalformedPacket, ProtocolError, rule
from .datatypes import (
    Buffer,
    check_packet_id,
    check_version,
    encode_binary,
    encode_utf8,
    length_mismatch,
    packet_id_zero_error,
    read_binary,
    read_byte,
    read_u16,
    read_utf8,
    reason_code_error,
    topic_name_wildcard_error,
)
from .framing import frame
from .properties import WILL, decode_properties, encode_properties

# Protocol name and level pairs (MQTT 3.1 §3.1, MQTT 3.1.1 §3.1.2.1-2, MQTT 5.0 §3.1.2.1-2).
PROTOCOL_NAMES = {3: "MQIsdp", 4: "MQTT", 5: "MQTT"}


def _end_check(name: str, pos: int, end: int) -> None:
    if pos != end:
        raise length_mismatch(name, pos, end)




def check_will_topic(topic: str, start: int | None, name: str, version: int) -> None:
    """A will topic is the topic name of the will message: non-empty, no wildcards."""
    if not topic:
        raise MalformedPacket(
            name, "will topic is empty", offset=start, rule=rule("topic_length", version)
        )
    if "+" in topic or "#" in topic:
        err = topic_name_wildcard_error(name, topic, start or 0, version)
        if start is None:
            err.offset = None
        raise err


def _no_properties(pkt: Any, name: str, version: int) -> None:
    if pkt.properties:
        raise ProtocolError(name, f"properties exist only in MQTT 5.0, not at level {version}")


def _packet_id(data: Buffer, pos: int, end: int, name: str, version: int) -> int:
    pid = read_u16(data, pos, end, name, "packet identifier")
    if pid == 0:
        raise packet_id_zero_error(name, pos, version)
    return pid


def _read_head(
    data: Buffer, pos: int, end: int, ptype: int, name: str, version: int
) -> tuple[int, Any, int]:
    """The variable header that SUBSCRIBE, SUBACK, UNSUBSCRIBE and v5 UNSUBACK share: a
    packet identifier, then (MQTT 5.0) properties: (packet id, properties, position)."""
    packet_id = _packet_id(data, pos, end, name, version)
    pos += 2
    properties = None
    if version == 5:
        properties, pos = decode_properties(data, pos, end, ptype, name)
    return packet_id, properties, pos


def _write_head(pkt: Any, ptype: int, name: str, version: int) -> bytearray:
    """The encoding side of :func:`_read_head`."""
    check_version(version)
    head = bytearray(check_packet_id(pkt.packet_id, name, version).to_bytes(2, "big"))
    if version == 5:
        head += encode_properties(pkt.properties, ptype, name)
    else:
        _no_properties(pkt, name, version)
    return head


# ---------------------------------------------------------------------------------------
# CONNECT (MQTT 3.1.1 §3.1, MQTT 5.0 §3.1)


def decode_connect(data: Buffer, pos: int, end: int, b0: int, version: int, ns: Any) -> Any:
    name = "CONNECT"
    name_pos = pos
    proto, pos = read_utf8(data, pos, end, name, "protocol name", version)
    if proto not in ("MQTT", "MQIsdp"):
        raise ProtocolError(
            name, f"unknown protocol name {proto!r}", offset=name_pos,
            rule=rule("protocol_name", version), reason_code=0x84,
        )
    level_pos = pos
    level = read_byte(data, pos, end, name, "protocol level")
    if PROTOCOL_NAMES.get(level) != proto:
        raise ProtocolError(
            name, f"protocol level {level} does not go with protocol name {proto!r}",
            offset=level_pos, rule=rule("protocol_level", version), reason_code=0x84,
        )
    version = level  # everything after the level follows the packet's own version
    flags_pos = pos + 1
    flags = read_byte(data, flags_pos, end, name, "connect flags")
    if flags & 0x01:
        raise MalformedPacket(
            name, "reserved connect flag (bit 0) is set", offset=flags_pos,
            rule=rule("connect_reserved", version),
        )
    will_flag = flags & 0x04
    will_qos = (flags >> 3) & 3
    will_retain = bool(flags & 0x20)
    if not will_flag:
        if will_qos:
            raise MalformedPacket(
                name, f"will QoS is {will_qos} without the will flag", offset=flags_pos,
                rule=rule("will_qos_without_will", version),
            )
        if will_retain:
            raise MalformedPacket(
                name, "will retain is set without the will flag", offset=flags_pos,
                rule=rule("will_retain_without_will", version),
            )
    elif will_qos == 3:
        raise MalformedPacket(
            name, "will QoS is 3", offset=flags_pos, rule=rule("will_qos_3", version)
        )
    has_password = flags & 0x40
    has_username = flags & 0x80
    if has_password and not has_username and version < 5:
        raise MalformedPacket(
            name, "password flag set without the user name flag", offset=flags_pos,
            rule=rule("password_without_username", version),
        )
    keep_alive = read_u16(data, flags_pos + 1, end, name, "keep alive")
    pos = flags_pos + 3
    properties = None
    if version == 5:
        properties, pos = decode_properties(data, pos, end, P.CONNECT, name)
    client_id, pos = read_utf8(data, pos, end, name, "client identifier", version)
    will = None
    if will_flag:
        will_props = None
        if version == 5:
            will_props, pos = decode_properties(data, pos, end, WILL, name)
        topic_pos = pos + 2
        will_topic, pos = read_utf8(data, pos, end, name, "will topic", version)
        check_will_topic(will_topic, topic_pos, name, version)
        will_payload, pos = read_binary(data, pos, end, name, "will payload")
        will = ns.Will(will_topic, will_payload, qos=will_qos, retain=will_retain,
                       properties=will_props)
    username = password = None
    if has_username:
        username, pos = read_utf8(data, pos, end, name, "user name", version)
    if has_password:
        password, pos = read_binary(data, pos, end, name, "password")
    _end_check(name, pos, end)
    return ns.Connect(
        client_id, protocol_version=version, clean_start=bool(flags & 0x02),
        keep_alive=keep_alive, username=username, password=password, will=will,
        properties=properties,
    )


def encode_connect(pkt: Any) -> bytes:
    name = "CONNECT"
    version = check_version(pkt.protocol_version)
    if not 0 <= pkt.keep_alive <= 0xFFFF:
        raise ValueError(f"{name}: keep_alive {pkt.keep_alive} is not in 0..65535")
    body = bytearray(encode_utf8(PROTOCOL_NAMES[version], name, "protocol name", version))
    flags = 0x02 if pkt.clean_start else 0
    will = pkt.will
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise MalformedPacket(
                name, f"will QoS is {will.qos!r}", rule=rule("will_qos_3", version)
            )
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if pkt.username is not None:
        flags |= 0x80
    if pkt.password is not None:
        if pkt.username is None and version < 5:
            raise MalformedPacket(
                name,
                "a password needs a user name before MQTT 5.0",
                rule=rule("password_without_username", version),
            )
        flags |= 0x40
    body.append(version)
    body.append(flags)
    body += pkt.keep_alive.to_bytes(2, "big")
    if version == 5:
        body += encode_properties(pkt.properties, P.CONNECT, name)
    else:
        _no_properties(pkt, name, version)
    body += encode_utf8(pkt.client_id, name, "client identifier", version)
    if will is not None:
        if version == 5:
            body += encode_properties(will.properties, WILL, name)
        elif will.properties:
            raise ProtocolError(
                name, f"will properties exist only in MQTT 5.0, not at level {version}"
            )
        check_will_topic(will.topic, None, name, version)
        body += encode_utf8(will.topic, name, "will topic", version)
        body += encode_binary(will.payload, name, "will payload")
    if pkt.username is not None:
        body += encode_utf8(pkt.username, name, "user name", version)
    if pkt.password is not None:
        body += encode_binary(pkt.password, name, "password")
    return frame(0x10, body, name)


# ---------------------------------------------------------------------------------------
# CONNACK (MQTT 3.1.1 §3.2, MQTT 5.0 §3.2)


def decode_connack(data: Buffer, pos: int, end: int, b0: int, version: int, ns: Any) -> Any:
    name = "CONNACK"
    flags = read_byte(data, pos, end, name, "acknowledge flags")
    if flags & 0xFE:
        raise MalformedPacket(
            name,
            f"reserved acknowledge flags set (0x{flags:02X})",
            offset=pos,
            rule=rule("connack_reserved", version),
        )
    code = read_byte(data, pos + 1, end, name, "reason code")
    if version == 5:
        if code not in REASON_CODES[P.CONNACK]:
            raise reason_code_error(name, code, pos + 1, version)
    elif code not in V3_CONNACK_CODES:
        raise MalformedPacket(
            name,
            f"return code {code} is not defined",
            offset=pos + 1,
            rule=rule("connack_return_code", version),
        )
    if flags and code:
        raise ProtocolError(
            name,
            f"session present with the non-zero code 0x{code:02X}",
            offset=pos,
            rule=rule("connack_session_present", version),
        )
    pos += 2
    properties = None
    if version == 5:
        properties, pos = decode_properties(data, pos, end, P.CONNACK, name)
    _end_check(name, pos, end)
    return ns.ConnAck(session_present=bool(flags), reason_code=code, properties=properties)


def encode_connack(pkt: Any, version: int) -> bytes:
    name = "CONNACK"
    check_version(version)
    code = pkt.reason_code
    allowed = REASON_CODES[P.CONNACK] if version == 5 else V3_CONNACK_CODES
    if code not in allowed:
        raise MalformedPacket(
            name,
            f"reason code {code!r} is not defined at level {version}",
            rule=rule("connack_return_code" if version < 5 else "reason_code", version),
        )
    if pkt.session_present and code:
        raise ProtocolError(
            name,
            f"session present with the non-zero code 0x{code:02X}",
            rule=rule("connack_session_present", version),
        )
    body = bytes((1 if pkt.session_present else 0, code))
    if version == 5:
        body += encode_properties(pkt.properties, P.CONNACK, name)
    else:
        _no_properties(pkt, name, version)
    return frame(0x20, body, name)


# ---------------------------------------------------------------------------------------
# SUBSCRIBE and UNSUBSCRIBE (MQTT 3.1.1 §3.8, §3.10; MQTT 5.0 §3.8, §3.10)


def _read_filter(data: Buffer, pos: int, end: int, name: str, version: int) -> tuple[str, int]:
    """A topic filter: a UTF-8 string of at least one character [MQTT-4.7.3-1].  Wildcard
    placement is the broker's check (validate_topic_filter): MQTT 5.0 answers an invalid
    filter with SUBACK 0x8F for that filter rather than a malformed packet."""
    start = pos
    text, pos = read_utf8(data, pos, end, name, "topic filter", version)
    if not text:
        raise MalformedPacket(
            name, "topic filter is empty", offset=start, rule=rule("topic_length", version)
        )
    return text, pos


def decode_subscribe(data: Buffer, pos: int, end: int, b0: int, version: int, ns: Any) -> Any:
    name = "SUBSCRIBE"
    packet_id, properties, pos = _read_head(data, pos, end, P.SUBSCRIBE, name, version)
    subscriptions = []
    while pos < end:
        topic_filter, pos = _read_filter(data, pos, end, name, version)
        opt_pos = pos
        options = read_byte(data, pos, end, name, "subscription options")
        pos += 1
        reserved = 0xC0 if version == 5 else 0xFC
        if options & reserved:
            raise MalformedPacket(
                name,
                f"reserved subscription option bits set (0x{options:02X})",
                offset=opt_pos,
                rule=rule("subscribe_reserved_bits", version),
            )
        qos = options & 3
        if qos == 3:
            raise MalformedPacket(
                name, "requested QoS is 3", offset=opt_pos, rule=rule("subscribe_qos", version)
            )
        retain_handling = (options >> 4) & 3
        if retain_handling == 3:
            raise ProtocolError(
                name,
                "retain handling is 3",
                offset=opt_pos,
                rule=rule("subscribe_retain_handling", version),
            )
        no_local = bool(options & 0x04)
        if no_local and topic_filter.startswith("$share/"):
            raise ProtocolError(
                name,
                "No Local set on a shared subscription",
                offset=opt_pos,
                rule=rule("no_local_shared", version),
            )
        subscriptions.append(
            ns.Subscription(
                topic_filter,
                qos=qos,
                no_local=no_local,
                retain_as_published=bool(options & 0x08),
                retain_handling=retain_handling,
            )
        )
    if not subscriptions:
        raise ProtocolError(
            name, "no topic filter", offset=pos, rule=rule("subscribe_no_filter", version)
        )
    return ns.Subscribe(packet_id, subscriptions, properties=properties)


def encode_subscribe(pkt: Any, version: int) -> bytes:
    name = "SUBSCRIBE"
    body = _write_head(pkt, P.SUBSCRIBE, name, version)
    if not pkt.subscriptions:
        raise ProtocolError(name, "no topic filter", rule=rule("subscribe_no_filter", version))
    for sub in pkt.subscriptions:
        topic_filter = sub.topic_filter
        qos = sub.qos
        if not topic_filter:  # [MQTT-4.7.3-1]
            raise MalformedPacket(name, "topic filter is empty", rule=rule("topic_length", version))
        if qos not in (0, 1, 2):  # MQTT 5.0 §3.8.3.1
            raise MalformedPacket(
                name, f"requested QoS is {qos!r}", rule=rule("subscribe_qos", version)
            )
        options = qos
        if version == 5:  # Subscription Options (MQTT 5.0 §3.8.3.1)
            retain_handling = sub.retain_handling
            no_local = sub.no_local
            if retain_handling not in (0, 1, 2):
                raise ProtocolError(
                    name,
                    f"retain handling is {retain_handling!r}",
                    rule=rule("subscribe_retain_handling", version),
                )
            if no_local and topic_filter.startswith("$share/"):
                raise ProtocolError(
                    name,
                    "No Local set on a shared subscription",
                    rule=rule("no_local_shared", version),
                )
            options |= retain_handling << 4
            if no_local:
                options |= 0x04
            if sub.retain_as_published:
                options |= 0x08
        elif sub.no_local or sub.retain_as_published or sub.retain_handling:
            raise ProtocolError(
                name,
                f"subscription options other than QoS exist only in MQTT 5.0, not at "
                f"level {version}",
            )
        body += encode_utf8(topic_filter, name, "topic filter", version)
        body.append(options)
    return frame(0x82, body, name)


def decode_unsubscribe(data: Buffer, pos: int, end: int, b0: int, version: int, ns: Any) -> Any:
    name = "UNSUBSCRIBE"
    packet_id, properties, pos = _read_head(data, pos, end, P.UNSUBSCRIBE, name, version)
    filters = []
    while pos < end:
        topic_filter, pos = _read_filter(data, pos, end, name, version)
        filters.append(topic_filter)
    if not filters:
        raise ProtocolError(
            name, "no topic filter", offset=pos, rule=rule("unsubscribe_no_filter", version)
        )
    return ns.Unsubscribe(packet_id, filters, properties=properties)


def encode_unsubscribe(pkt: Any, version: int) -> bytes:
    name = "UNSUBSCRIBE"
    body = _write_head(pkt, P.UNSUBSCRIBE, name, version)
    if not pkt.topic_filters:
        raise ProtocolError(name, "no topic filter", rule=rule("unsubscribe_no_filter", version))
    for topic_filter in pkt.topic_filters:
        if not topic_filter:
            raise MalformedPacket(name, "topic filter is empty", rule=rule("topic_length", version))
        body += encode_utf8(topic_filter, name, "topic filter", version)
    return frame(0xA2, body, name)


# ---------------------------------------------------------------------------------------
# SUBACK and UNSUBACK (MQTT 3.1.1 §3.9, §3.11; MQTT 5.0 §3.9, §3.11)


def _ack_codes(ptype: int, version: int) -> tuple[frozenset[int], str]:
    """The codes a SUBACK or UNSUBACK may carry at ``version``, and the rule to cite."""
    if version == 5:
        return REASON_CODES[ptype], "reason_code"
    return V3_SUBACK_CODES[3 if version == 3 else 4], "suback_return_code"


# The rule an acknowledgement without a code breaks: one code answers each topic filter.
# (The codes' own rule, _ack_codes' key, is about which values are defined.)
_CODE_PER_FILTER: dict[int, str] = {
    P.SUBACK: "suback_code_per_filter",
    P.UNSUBACK: "unsuback_code_per_filter",
}


def _read_codes(
    data: Buffer, pos: int, end: int, ptype: int, name: str, version: int
) -> list[int]:
    """The payload of a SUBACK or v5 UNSUBACK: one code per topic filter, so at least one."""
    allowed, key = _ack_codes(ptype, version)
    if pos >= end:
        raise MalformedPacket(
            name, "no reason code (one is due for each topic filter)", offset=pos,
            rule=rule(_CODE_PER_FILTER[ptype], version),
        )
    codes = []
    while pos < end:
        code = data[pos]
        if code not in allowed:
            raise MalformedPacket(
                name, f"reason code 0x{code:02X} is not defined for {name}", offset=pos,
                rule=rule(key, version),
            )
        codes.append(code)
        pos += 1
    return codes


def _write_codes(pkt: Any, ptype: int, name: str, version: int) -> bytes:
    """The encoding side of :func:`_read_codes`."""
    allowed, key = _ack_codes(ptype, version)
    if not pkt.reason_codes:
        raise MalformedPacket(
            name, "no reason code (one is due for each topic filter)",
            rule=rule(_CODE_PER_FILTER[ptype], version),
        )
    for code in pkt.reason_codes:
        if code not in allowed:
            raise MalformedPacket(
                name, f"reason code {code!r} is not defined for {name} at level {version}",
                rule=rule(key, version),
            )
    return bytes(pkt.reason_codes)


def decode_suback(data: Buffer, pos: int, end: int, b0: int, version: int, ns: Any) -> Any:
    name = "SUBACK"
    packet_id, properties, pos = _read_head(data, pos, end, P.SUBACK, name, version)
    codes = _read_codes(data, pos, end, P.SUBACK, name, version)
    return ns.SubAck(packet_id, codes, properties=properties)


def encode_suback(pkt: Any, version: int) -> bytes:
    name = "SUBACK"
    body = _write_head(pkt, P.SUBACK, name, version)
    return frame(0x90, bytes(body + _write_codes(pkt, P.SUBACK, name, version)), name)


def decode_unsuback(data: Buffer, pos: int, end: int, b0: int, version: int, ns: Any) -> Any:
    name = "UNSUBACK"
    if version < 5:  # MQTT 3.1.1 §3.11: the packet identifier and nothing else
        packet_id = _packet_id(data, pos, end, name, version)
        _end_check(name, pos + 2, end)
        return ns.UnsubAck(packet_id)
    packet_id, properties, pos = _read_head(data, pos, end, P.UNSUBACK, name, version)
    codes = _read_codes(data, pos, end, P.UNSUBACK, name, version)
    return ns.UnsubAck(packet_id, codes, properties=properties)


def encode_unsuback(pkt: Any, version: int) -> bytes:
    name = "UNSUBACK"
    body = _write_head(pkt, P.UNSUBACK, name, version)  # refuses properties before 5.0
    if version < 5:  # MQTT 3.1.1 §3.11: the packet identifier and nothing else
        if pkt.reason_codes:
            raise ProtocolError(
                name, f"reason codes exist only in MQTT 5.0, not at level {version}"
            )
        return frame(0xB0, bytes(body), name)
    return frame(0xB0, bytes(body + _write_codes(pkt, P.UNSUBACK, name, version)), name)


# ---------------------------------------------------------------------------------------
# DISCONNECT and AUTH (MQTT 5.0 §3.14, §3.15): a reason code and properties, both of which
# may be left out.


def _decode_reason_and_properties(
    data: Buffer, pos: int, end: int, ptype: int, name: str
) -> tuple[int, Any]:
    if pos == end:  # Remaining Length 0: reason 0x00, no properties
        return 0, None
    code = data[pos]
    if code not in REASON_CODES[ptype]:
        raise reason_code_error(name, code, pos, 5)
    pos += 1
    properties = None
    if pos < end:  # "If the Remaining Length is less than 2, a value of 0 is used"
        properties, pos = decode_properties(data, pos, end, ptype, name)
        _end_check(name, pos, end)
    return code, properties


def decode_disconnect(data: Buffer, pos: int, end: int, b0: int, version: int, ns: Any) -> Any:
    name = "DISCONNECT"
    if version < 5:  # MQTT 3.1.1 §3.14: no variable header, no payload
        _end_check(name, pos, end)
        return ns.Disconnect()
    code, properties = _decode_reason_and_properties(data, pos, end, P.DISCONNECT, name)
    return ns.Disconnect(reason_code=code, properties=properties)


def decode_auth(data: Buffer, pos: int, end: int, b0: int, version: int, ns: Any) -> Any:
    name = "AUTH"
    code, properties = _decode_reason_and_properties(data, pos, end, P.AUTH, name)
    # "It is a Protocol Error to omit the Authentication Method" (§3.15.2.2.2); only the
    # Remaining Length 0 form (Success, no properties) leaves it out.
    if pos != end and (properties is None or properties.authentication_method is None):
        raise ProtocolError(
            name, "no authentication method", offset=pos, rule=rule("auth_method_missing", 5)
        )
    return ns.Auth(reason_code=code, properties=properties)


def encode_disconnect(pkt: Any, version: int) -> bytes:
    name = "DISCONNECT"
    check_version(version)
    if version < 5:
        _no_properties(pkt, name, version)
        if pkt.reason_code:
            raise ProtocolError(
                name, f"reason codes exist only in MQTT 5.0, not at level {version}"
            )
        return b"\xe0\x00"
    code = pkt.reason_code
    if code not in REASON_CODES[P.DISCONNECT]:
        raise MalformedPacket(
            name, f"reason code {code!r} is not defined for {name}", rule=rule("reason_code", 5)
        )
    if pkt.properties:
        body = bytes((code,)) + encode_properties(pkt.properties, P.DISCONNECT, name)
    else:  # the shortest form: nothing for 0x00, the reason code alone otherwise
        body = bytes((code,)) if code else b""
    return frame(0xE0, body, name)


def encode_auth(pkt: Any, version: int) -> bytes:
    name = "AUTH"
    if version != 5:
        raise MalformedPacket(
            name,
            f"AUTH does not exist before MQTT 5.0 (level {version!r})",
            rule=rule("auth_v5_only", 4),
        )
    code = pkt.reason_code
    if code not in REASON_CODES[P.AUTH]:
        raise MalformedPacket(
            name, f"reason code {code!r} is not defined for {name}", rule=rule("reason_code", 5)
        )
    if code == 0 and not pkt.properties:
        return b"\xf0\x00"
    if pkt.properties is None or pkt.properties.authentication_method is None:
        raise ProtocolError(name, "no authentication method", rule=rule("auth_method_missing", 5))
    return frame(0xF0, bytes((code,)) + encode_properties(pkt.properties, P.AUTH, name), name)


#: packet type -> decoder, for the types this module handles.
DECODERS: dict[int, Callable[[Buffer, int, int, int, int, Any], Any]] = {
    P.CONNECT: decode_connect,
    P.CONNACK: decode_connack,
    P.SUBSCRIBE: decode_subscribe,
    P.SUBACK: decode_suback,
    P.UNSUBSCRIBE: decode_unsubscribe,
    P.UNSUBACK: decode_unsuback,
    P.DISCONNECT: decode_disconnect,
    P.AUTH: decode_auth,
}

__all__ = ["DECODERS", "frame", "check_will_topic"] + [
    n for n in dir() if n.startswith(("decode_", "encode_"))
]
