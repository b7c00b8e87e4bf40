"""Errors, and the table of specification rules they cite.

Shared by both implementations: error paths are cold, so the Cython module raises these
same classes with the same messages, and the two can never word an error differently.

A message reads ``PACKET: what was wrong at offset N [RULE]``, for example
``PUBLISH: both QoS bits set (first byte 0x36) at offset 0 [MQTT-3.3.1-4]``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MQTTWireError",
    "MalformedPacket",
    "ProtocolError",
    "PacketTooLarge",
    "IncompletePacket",
    "rule",
]


class MQTTWireError(ValueError):
    """Base class of every error mqttwire raises for bad bytes or unencodable packets.

    Attributes:
        packet_type: name of the packet concerned ("PUBLISH", ...), or "packet" when the
            type is not known yet.
        what: what was wrong, in words.
        offset: where in the decoder's input the problem was found (for StreamDecoder: the
            offset in the whole stream); None when encoding.
        rule: the conformance statement or section that forbids it, or None.
        reason_code: the MQTT 5.0 reason code a server would send in its DISCONNECT or
            CONNACK for this error.
        packets: for an error raised by ``StreamDecoder.feed``, the packets that the same
            call completed before the bad bytes; empty otherwise.
    """

    default_reason_code = 0x80  # Unspecified error

    def __init__(
        self,
        packet_type: str,
        what: str,
        *,
        offset: int | None = None,
        rule: str | None = None,
        reason_code: int | None = None,
    ) -> None:
        self.packet_type = packet_type
        self.what = what
        self.offset = offset
        self.rule = rule
        self.reason_code = self.default_reason_code if reason_code is None else reason_code
        self.packets: list[Any] = []
        super().__init__(packet_type, what)

    def __str__(self) -> str:
        # Built on demand, so that shifting .offset (StreamDecoder reports stream offsets)
        # keeps the message right.
        text = f"{self.packet_type}: {self.what}"
        if self.offset is not None:
            text += f" at offset {self.offset}"
        if self.rule:
            text += f" [{self.rule}]"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> Any:
        kwargs = {"offset": self.offset, "rule": self.rule, "reason_code": self.reason_code}
        return (_rebuild, (type(self), self.packet_type, self.what, kwargs))


def _rebuild(cls: type[MQTTWireError], packet_type: str, what: str, kwargs: dict[str, Any]) -> Any:
    return cls(packet_type, what, **kwargs)


class MalformedPacket(MQTTWireError):
    """The bytes do not follow the packet layout the specification defines (0x81)."""

    default_reason_code = 0x81


class ProtocolError(MQTTWireError):
    """The packet parses, but holds something the specification forbids (0x82)."""

    default_reason_code = 0x82


class PacketTooLarge(MQTTWireError):
    """The packet exceeds the maximum packet size in force (0x95)."""

    default_reason_code = 0x95


class IncompletePacket(MQTTWireError):
    """``decode()`` was given fewer bytes than the packet needs.

    A connection that closes in the middle of a packet has sent a malformed packet, so
    the reason code is 0x81.
    """

    default_reason_code = 0x81


# The conformance statements mqttwire enforces, by the number each specification gives
# them: (MQTT 3.1.1, MQTT 5.0).  MQTT 3.1 has no numbered statements; its rules are the
# same as 3.1.1's for everything checked here, so level 3 cites the 3.1.1 numbers.
# None means that version has no numbered statement, and the section is cited instead.
_RULES: dict[str, tuple[str, str]] = {
    "fixed_header_flags": ("MQTT-2.2.2-1", "MQTT-2.1.3-1"),
    "remaining_length": ("§2.2.3", "§1.5.5"),
    "varint_minimal": ("MQTT-1.5.5-1", "MQTT-1.5.5-1"),
    "utf8_well_formed": ("MQTT-1.5.3-1", "MQTT-1.5.4-1"),
    "utf8_null": ("MQTT-1.5.3-2", "MQTT-1.5.4-2"),
    "packet_id_nonzero": ("MQTT-2.3.1-1", "MQTT-2.2.1-3"),
    "topic_length": ("MQTT-4.7.3-1", "MQTT-4.7.3-1"),
    "qos_bits": ("MQTT-3.3.1-4", "MQTT-3.3.1-4"),
    "dup_qos0": ("MQTT-3.3.1-2", "MQTT-3.3.1-2"),
    "topic_name_wildcard": ("MQTT-3.3.2-2", "MQTT-3.3.2-2"),
    "topic_alias_zero": ("MQTT-3.3.2-8", "MQTT-3.3.2-8"),
    "response_topic_wildcard": ("MQTT-3.3.2-14", "MQTT-3.3.2-14"),
    "topic_alias_missing": ("§3.3.2.1", "§3.3.2.1"),
    "protocol_name": ("MQTT-3.1.2-1", "MQTT-3.1.2-1"),
    "protocol_level": ("MQTT-3.1.2-2", "MQTT-3.1.2-2"),
    "connect_reserved": ("MQTT-3.1.2-3", "MQTT-3.1.2-3"),
    "will_qos_without_will": ("MQTT-3.1.2-13", "MQTT-3.1.2-11"),
    "will_qos_3": ("MQTT-3.1.2-14", "MQTT-3.1.2-12"),
    "will_retain_without_will": ("MQTT-3.1.2-15", "MQTT-3.1.2-13"),
    "password_without_username": ("MQTT-3.1.2-22", "§3.1.2.9"),
    "first_packet_connect": ("MQTT-3.1.0-1", "MQTT-3.1.0-1"),
    "second_connect": ("MQTT-3.1.0-2", "MQTT-3.1.0-2"),
    "connack_reserved": ("§3.2.2.1", "MQTT-3.2.2-1"),
    "connack_session_present": ("MQTT-3.2.2-4", "MQTT-3.2.2-6"),
    "connack_return_code": ("§3.2.2.3", "§3.2.2.2"),
    "subscribe_no_filter": ("MQTT-3.8.3-3", "MQTT-3.8.3-2"),
    # 3.1.1 prints this statement's number as "MQTT-3-8.3-4"; it is quoted as printed.
    "subscribe_reserved_bits": ("MQTT-3-8.3-4", "MQTT-3.8.3-5"),
    "subscribe_qos": ("MQTT-3-8.3-4", "§3.8.3.1"),
    "subscribe_retain_handling": ("§3.8.3.1", "§3.8.3.1"),
    "no_local_shared": ("§3.8.3.1", "MQTT-3.8.3-4"),
    "unsubscribe_no_filter": ("MQTT-3.10.3-2", "MQTT-3.10.3-2"),
    "suback_return_code": ("§3.9.3", "§3.9.3"),
    # A SUBACK's codes answer the SUBSCRIBE's topic filters one for one, so there is at
    # least one: "The order of return codes [Reason Codes] in the SUBACK packet MUST match
    # the order of Topic Filters in the SUBSCRIBE packet", in both versions.
    "suback_code_per_filter": ("MQTT-3.9.3-1", "MQTT-3.9.3-1"),
    # The same for UNSUBACK in 5.0; a 3.1.1 UNSUBACK has no payload (§3.11.3), so its
    # column is never cited.
    "unsuback_code_per_filter": ("§3.11.3", "MQTT-3.11.3-1"),
    "reason_code": ("§2.4", "§2.4"),
    # Properties exist only in MQTT 5.0: both columns hold its section.
    "property_length": ("§2.2.2.1", "§2.2.2.1"),
    "property_identifier": ("§2.2.2.2", "§2.2.2.2"),
    "property_duplicate": ("§2.2.2.2", "§2.2.2.2"),
    "property_value": ("§2.2.2.2", "§2.2.2.2"),
    "auth_data_without_method": ("§3.1.2.11.10", "§3.1.2.11.10"),
    "auth_method_missing": ("§3.15.2.2.2", "§3.15.2.2.2"),
    "packet_type_reserved": ("§2.2.1", "§2.1.2"),
    "auth_v5_only": ("§2.2.1", "§2.1.2"),
    # Topic names and filters (MQTT 3.1.1 §4.7, MQTT 5.0 §4.7 and §4.8.2).
    "topic_too_long": ("MQTT-4.7.3-3", "MQTT-4.7.3-3"),
    "topic_filter_multi_level": ("MQTT-4.7.1-2", "MQTT-4.7.1-1"),
    "topic_filter_single_level": ("MQTT-4.7.1-3", "MQTT-4.7.1-2"),
    # Shared subscriptions exist only in MQTT 5.0; 3.1.1 has no statement to cite, so both
    # columns hold the 5.0 number.
    "shared_share_name": ("MQTT-4.8.2-1", "MQTT-4.8.2-1"),
    "shared_share_name_chars": ("MQTT-4.8.2-2", "MQTT-4.8.2-2"),
}


def rule(key: str, version: int) -> str:
    """The rule that ``key`` names, as the given protocol level numbers it."""
    v311, v5 = _RULES[key]
    return v5 if version == 5 else v311
