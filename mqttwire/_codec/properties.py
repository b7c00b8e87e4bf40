"""MQTT 5.0 properties (MQTT 5.0 §2.2.2): the ``Properties`` class and the property block
reader and writer, shared by both implementations.

``Properties`` keeps each property in a slot of its own, None when absent: every slot is
set when the object is made (``_blank``), so no class attribute stands in for an absent
one.  A class attribute of a property's name keeps CPython 3.12 and later from
specialising the read of an instance's value; a slot read is specialised on every
version, present or absent (benchmarks/peers.md, "Property reads: one slot each").

A ``Properties`` may also hold a property block (the bytes of MQTT 5.0 §2.2.2, without
the length prefix) that is known to be valid for one packet type and to hold exactly its
values: the block it was decoded from, or the one it was last encoded to.  Encoding and
forwarding copy that block instead of writing the values again (see ``wire_block``).
The extension decodes a property block into a ``Properties`` that holds only the block
and builds the values on first access (``_speedups._DecodedProperties``).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress
from operator import attrgetter, is_not
from struct import Struct
from typing import Any

from .._constants import PacketType as P
from .._errors import MalformedPacket, ProtocolError, rule
from .datatypes import (
    PAST_PACKET,
    Buffer,
    encode_binary,
    encode_utf8,
    encode_varint,
    overrun,
    read_binary,
    read_u16,
    read_u32,
    read_utf8,
    read_varint,
)

# The tables are public: _speedups builds its C arrays from them, so they are part of the
# contract between the twins.
__all__ = [
    "BOOLEAN_PROPERTIES", "NONZERO_PROPERTIES", "PROPERTY_NAMES", "PROPERTY_TABLE", "WILL",
    "Properties", "decode_properties", "encode_properties", "forwarded_block", "keep_block",
    "same_properties", "wire_block",
]

#: Pseudo packet type for the Will Properties of CONNECT (MQTT 5.0 §3.1.3.2).
WILL = 16

# Value types (MQTT 5.0 §2.2.2.2, Table 2-4).
BYTE, U16, U32, VARINT, UTF8, BINARY, PAIR = range(7)

_ALL = frozenset(
    (P.CONNECT, P.CONNACK, P.PUBLISH, WILL, P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP,
     P.SUBSCRIBE, P.SUBACK, P.UNSUBSCRIBE, P.UNSUBACK, P.DISCONNECT, P.AUTH)
)
_MESSAGE = frozenset((P.PUBLISH, WILL))

#: identifier -> (attribute name, value type, packet types that may carry it)
PROPERTY_TABLE: dict[int, tuple[str, int, frozenset[int]]] = {
    0x01: ("payload_format_indicator", BYTE, _MESSAGE),
    0x02: ("message_expiry_interval", U32, _MESSAGE),
    0x03: ("content_type", UTF8, _MESSAGE),
    0x08: ("response_topic", UTF8, _MESSAGE),
    0x09: ("correlation_data", BINARY, _MESSAGE),
    0x0B: ("subscription_identifiers", VARINT, frozenset((P.PUBLISH, P.SUBSCRIBE))),
    0x11: ("session_expiry_interval", U32, frozenset((P.CONNECT, P.CONNACK, P.DISCONNECT))),
    0x12: ("assigned_client_identifier", UTF8, frozenset((P.CONNACK,))),
    0x13: ("server_keep_alive", U16, frozenset((P.CONNACK,))),
    0x15: ("authentication_method", UTF8, frozenset((P.CONNECT, P.CONNACK, P.AUTH))),
    0x16: ("authentication_data", BINARY, frozenset((P.CONNECT, P.CONNACK, P.AUTH))),
    0x17: ("request_problem_information", BYTE, frozenset((P.CONNECT,))),
    0x18: ("will_delay_interval", U32, frozenset((WILL,))),
    0x19: ("request_response_information", BYTE, frozenset((P.CONNECT,))),
    0x1A: ("response_information", UTF8, frozenset((P.CONNACK,))),
    0x1C: ("server_reference", UTF8, frozenset((P.CONNACK, P.DISCONNECT))),
    0x1F: ("reason_string", UTF8, frozenset(
        (P.CONNACK, P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP, P.SUBACK, P.UNSUBACK,
         P.DISCONNECT, P.AUTH))),
    0x21: ("receive_maximum", U16, frozenset((P.CONNECT, P.CONNACK))),
    0x22: ("topic_alias_maximum", U16, frozenset((P.CONNECT, P.CONNACK))),
    0x23: ("topic_alias", U16, frozenset((P.PUBLISH,))),
    0x24: ("maximum_qos", BYTE, frozenset((P.CONNACK,))),
    0x25: ("retain_available", BYTE, frozenset((P.CONNACK,))),
    0x26: ("user_properties", PAIR, _ALL),
    0x27: ("maximum_packet_size", U32, frozenset((P.CONNECT, P.CONNACK))),
    0x28: ("wildcard_subscription_available", BYTE, frozenset((P.CONNACK,))),
    0x29: ("subscription_identifier_available", BYTE, frozenset((P.CONNACK,))),
    0x2A: ("shared_subscription_available", BYTE, frozenset((P.CONNACK,))),
}

#: attribute name -> identifier, in identifier order (the order encoding writes them in).
PROPERTY_NAMES: dict[str, int] = {name: pid for pid, (name, _, _) in PROPERTY_TABLE.items()}


# Byte properties whose only values are 0 and 1 (MQTT 5.0 §3.1.2.11.7, §3.1.2.11.6,
# §3.2.2.3.4, §3.2.2.3.5, §3.2.2.3.11-13; §3.3.2.3.2 for the Payload Format Indicator).
BOOLEAN_PROPERTIES = frozenset((0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A))
# "It is a Protocol Error to include the X with a value of 0": Receive Maximum (§3.1.2.11.3),
# Maximum Packet Size (§3.1.2.11.4), Topic Alias ([MQTT-3.3.2-8]), Subscription Identifier
# (§3.3.2.3.8).
NONZERO_PROPERTIES = frozenset((0x21, 0x27, 0x23, 0x0B))
_MAX = {BYTE: 0xFF, U16: 0xFFFF, U32: 0xFFFF_FFFF, VARINT: 268_435_455}


def _title(name: str) -> str:
    """How messages name a property: "subscription_identifiers" -> "subscription identifier"."""
    return (
        name.replace("_", " ").rstrip("s")
        if name.endswith("identifiers")
        else name.replace("_", " ")
    )


# identifier -> (name, value type, allowed packet types, title), for the decoder's loop.
_DECODE = {
    pid: (name, kind, allowed, _title(name))
    for pid, (name, kind, allowed) in PROPERTY_TABLE.items()
}
# Integer properties with a range narrower than their type: identifier -> (smallest,
# largest) value that needs no closer look (_value_problem words the error for the rest).
_CHECKED = {
    **{pid: (1, 0xFFFF_FFFF) for pid in NONZERO_PROPERTIES},
    **{pid: (0, 1) for pid in BOOLEAN_PROPERTIES},
}

# Identifier byte and big-endian value of the fixed-size integer types, in one call.
_PACK = {BYTE: Struct(">BB").pack, U16: Struct(">BH").pack, U32: Struct(">BI").pack}


def _bounds(pid: int, kind: int) -> tuple[int, int]:
    """The values an integer property may take: its type's range, narrowed for the
    properties of BOOLEAN_PROPERTIES (0 or 1) and NONZERO_PROPERTIES (not 0)."""
    if pid in BOOLEAN_PROPERTIES:
        return 0, 1
    return (1 if pid in NONZERO_PROPERTIES else 0), _MAX.get(kind, 0)


# identifier -> (value type, allowed packet types, title, smallest and largest valid
# value, writer of the identifier and value or None), for the encoder's loop.
_ENCODE = {
    pid: (kind, allowed, field, *_bounds(pid, kind), _PACK.get(kind))
    for pid, (_, kind, allowed, field) in _DECODE.items()
}


def _value_problem(pid: int, value: int) -> tuple[str, str] | None:
    """(what, rule key) when an integer property value is out of its range."""
    if pid in BOOLEAN_PROPERTIES and value > 1:
        return f"{_title(PROPERTY_TABLE[pid][0])} is {value}, not 0 or 1", "property_value"
    if value == 0 and pid in NONZERO_PROPERTIES:
        key = "topic_alias_zero" if pid == 0x23 else "property_value"
        return f"{_title(PROPERTY_TABLE[pid][0])} is 0", key
    return None


class Properties:
    """The MQTT 5.0 properties of a packet: every property is an attribute named in
    snake_case, None when absent.  ``user_properties`` is a list of (key, value) string
    pairs in wire order; ``subscription_identifiers`` a list of ints (PUBLISH may carry
    several, SUBSCRIBE one).

    >>> Properties(message_expiry_interval=300, response_topic="response")
    Properties(message_expiry_interval=300, response_topic='response')
    """

    # One slot per property, in identifier order, each always set (None when absent):
    # _blank() makes every instance that way, and _speedups does the same in C.  One more
    # slot, _wire, holds the property block that these values came from or were encoded
    # to, for reuse: unset or None when there is none, else a tuple
    #   (block, kind, name, copy, ...) or (block, kind, None):
    # the block (bytes, without its length prefix); the packet type it was validated for
    # (WILL for Will Properties), since each type allows other properties and a block is
    # only reused for its own; then the name and a copy of each list value
    # (user_properties, subscription_identifiers) when the block was taken, or None when
    # the lists were built from the block without a copy (the extension, when reading):
    # either way a list changed in place is noticed before the block is reused
    # (wire_block).  The extension also leaves the bare block (bytes, no tuple) in a
    # Properties whose values it built from a packet's block when ``properties`` was read:
    # its values came from the block, the lists without a copy, and the block is reused
    # for a packet type that allows every property in it (wire_block checks).  Setting or
    # deleting a property drops the block.
    __slots__ = (*PROPERTY_NAMES, "_wire", "__weakref__")
    _wire: tuple[Any, ...] | None

    # Pickled (and shown by type()) under its public name, so that a pickle does not
    # depend on which file defines the class.
    __module__ = "mqttwire"

    payload_format_indicator: int | None
    message_expiry_interval: int | None
    content_type: str | None
    response_topic: str | None
    correlation_data: bytes | None
    subscription_identifiers: list[int] | None
    session_expiry_interval: int | None
    assigned_client_identifier: str | None
    server_keep_alive: int | None
    authentication_method: str | None
    authentication_data: bytes | None
    request_problem_information: int | None
    will_delay_interval: int | None
    request_response_information: int | None
    response_information: str | None
    server_reference: str | None
    reason_string: str | None
    receive_maximum: int | None
    topic_alias_maximum: int | None
    topic_alias: int | None
    maximum_qos: int | None
    retain_available: int | None
    user_properties: list[tuple[str, str]] | None
    maximum_packet_size: int | None
    wildcard_subscription_available: int | None
    subscription_identifier_available: int | None
    shared_subscription_available: int | None

    def __new__(cls, **kwargs: Any) -> Properties:
        # Every slot None before __init__ sets the given ones (see _blank, which needs
        # Properties' own layout: a subclass with an instance dict or slots of its own
        # gets them one at a time).
        if cls.__basicsize__ == Properties.__basicsize__ and not cls.__dictoffset__:
            return _blank(cls)
        props = object.__new__(cls)
        for name in PROPERTY_NAMES:
            object.__setattr__(props, name, None)
        return props

    def __init__(self, **kwargs: Any) -> None:
        for name, value in kwargs.items():
            if name not in PROPERTY_NAMES:
                raise TypeError(f"Properties() got an unknown property {name!r}")
            if value is None:
                continue
            if name == "user_properties":
                value = [tuple(pair) for pair in value]
            elif name == "subscription_identifiers":
                value = list(value)
            _SET[name](self, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in PROPERTY_NAMES:
            raise AttributeError(f"Properties has no property {name!r}")
        if type(self) is not Properties:
            # A decoded Properties of the extension builds its values on any attribute
            # read, first, so that they do not overwrite the new value.
            self.__class__  # noqa: B018
        _SET[name](self, value)
        _DROP_BLOCK(self, None)

    def __delattr__(self, name: str) -> None:
        if name not in PROPERTY_NAMES or getattr(self, name) is None:
            raise AttributeError(name)
        _SET[name](self, None)
        _DROP_BLOCK(self, None)

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        """The properties that are set, by name (what ``vars()`` shows); a new dict, so
        changing it changes nothing."""
        return {name: value for name, value in zip(PROPERTY_NAMES, _VALUES(self))
                if value is not None}

    def __reduce__(self) -> tuple[Any, ...]:
        # The values, never the block: an unpickled (or copied) Properties is built from
        # its values, as one made by the user is.  Pickles made before the slots existed
        # (state: the instance dict) load the same way.
        return (Properties, (), dict(self.items()))

    def __setstate__(self, state: dict[str, Any]) -> None:
        try:
            _VALUES(self)
        except AttributeError:
            # Made by object.__new__, not by __new__ (copyreg._reconstructor, which loads
            # a protocol 0 or 1 pickle of a class without __reduce__): no slot set yet.
            for name in PROPERTY_NAMES:
                _SET[name](self, None)
        for name, value in state.items():
            if name in PROPERTY_NAMES:
                _SET[name](self, value)

    def items(self) -> list[tuple[str, Any]]:
        """The properties that are present, as (name, value), in identifier order."""
        return [(name, value) for _, name, value in _present(self)]

    def __bool__(self) -> bool:
        # Any value that is neither None nor an empty list, counted in C.
        values = _VALUES(self)
        return len(values) - values.count(None) > values.count([])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Properties):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={value!r}" for name, value in self.items())
        return f"Properties({inner})"


# Read and set a slot, bypassing Properties.__setattr__ (which accepts property names only
# and drops the block) and any __getattribute__ of a subclass: the member descriptors' own
# methods.
_SLOT = vars(Properties)
_SET = {name: _SLOT[name].__set__ for name in PROPERTY_NAMES}
_GET = {name: _SLOT[name].__get__ for name in PROPERTY_NAMES}
_DROP_BLOCK = _SET_WIRE = _SLOT["_wire"].__set__
_GET_WIRE = _SLOT["_wire"].__get__
# Every property's value, in identifier order, in one call.
_VALUES = attrgetter(*PROPERTY_NAMES)


class _Blank(Properties):
    """What _blank fills: Properties' layout (no slot of its own) with object's
    __setattr__ and __delattr__, so that the generated assignments below are plain slot
    stores.  (Both: they share one C slot, which stays the slow generic one while either
    is a Python function.)"""

    __slots__ = ()
    __setattr__ = object.__setattr__  # type: ignore[assignment]
    __delattr__ = object.__delattr__


# _blank(cls): a new cls (Properties, or a subclass that adds no slot) with every property
# None.  Written out as one assignment per slot, generated from the table: a slot store
# that the interpreter specialises, where a loop of descriptor calls would cost several
# times as much; then the class becomes the one asked for (the same layout).
_BLANK_SOURCE = (
    "def _blank(cls):\n    props = new(_Blank)\n"
    + "".join(f"    props.{name} = None\n" for name in PROPERTY_NAMES)
    + "    if cls is not _Blank:\n        props.__class__ = cls\n    return props\n"
)
_blank_ns: dict[str, Any] = {"new": object.__new__, "_Blank": _Blank}
exec(_BLANK_SOURCE, _blank_ns)  # the source is built from PROPERTY_NAMES
_blank: Callable[[type[Properties]], Properties] = _blank_ns["_blank"]


def wire_block(props: Properties, ptype: int) -> bytes | None:
    """The property block that ``props`` holds (without its length prefix) when it may be
    copied into a packet of type ``ptype`` as it is: it was validated for that packet type
    and no property has been set, deleted or (for the lists) changed in place since.
    None otherwise.

    Reads the slots through their descriptors, so it never makes a decoded Properties of
    the extension build its values."""
    try:
        wire = _GET_WIRE(props)
    except AttributeError:  # never set: no block
        return None
    if type(wire) is bytes:
        # The extension's bare block: valid for ptype if it decodes for it; its lists
        # were built from it without a copy, and are compared with its own below.
        data = encode_varint(len(wire)) + wire
        try:
            again = decode_properties(data, 0, len(data), ptype, "")[0]
        except (MalformedPacket, ProtocolError):  # not valid for ptype: written anew
            return None
        if (again is None
                or _GET["user_properties"](props) != again.user_properties
                or _GET["subscription_identifiers"](props) != again.subscription_identifiers):
            return None
        return wire
    if wire is None or wire[1] != ptype:
        return None
    if len(wire) == 2:
        return wire[0]  # type: ignore[no-any-return]
    # The slots read through their descriptors: a block with lists is held only by a
    # Properties whose values are built.
    if len(wire) > 3:
        for i in range(2, len(wire), 2):
            if _GET[wire[i]](props) != wire[i + 1]:
                return None
    else:
        # (block, kind, None): lists built from the block without a copy (as the
        # extension builds them): compared with the block's own, decoded again.
        data = encode_varint(len(wire[0])) + wire[0]
        again = decode_properties(data, 0, len(data), ptype, "")[0]
        if (again is None
                or _GET["user_properties"](props) != again.user_properties
                or _GET["subscription_identifiers"](props) != again.subscription_identifiers):
            return None
    return wire[0]  # type: ignore[no-any-return]


def _list_copies(props: Properties) -> tuple[Any, ...]:
    """(name, copy, ...) of the list values of a Properties."""
    lists: tuple[Any, ...] = ()
    for name in ("subscription_identifiers", "user_properties"):
        value = _GET[name](props)
        if value is not None:
            lists += (name, list(value))
    return lists


# The packet types (WILL included) as exact ints, for _kind: the extension compares it in
# C, and the decoders pass IntEnum members.
_KINDS = tuple(range(WILL + 1))


def keep_block(props: Properties, block: bytes, ptype: int) -> None:
    """Record ``block`` as the property block of ``props`` for packets of type ``ptype``
    (the values are in ``props``; see wire_block)."""
    _SET_WIRE(props, (block, _KINDS[ptype]) + _list_copies(props))


def forwarded_block(block: bytes) -> tuple[int | None, bytes]:
    """(Message Expiry Interval or None, the other properties) of a valid PUBLISH property
    block, without the Topic Alias (an alias belongs to one connection, MQTT 5.0
    §3.3.2.3.4) and the Subscription Identifiers (each subscriber gets its own,
    §3.3.2.3.8): the forwarded part of the block, copied property by property, with no
    property value built."""
    expiry = None
    out = bytearray()
    pos, end = 0, len(block)
    while pos < end:
        start = pos
        pid = block[pos]  # every defined identifier is one byte (below 0x80)
        kind = PROPERTY_TABLE[pid][1]
        pos += 1
        if kind == BYTE:
            pos += 1
        elif kind == U16:
            pos += 2
        elif kind == U32:
            pos += 4
        elif kind == VARINT:
            while block[pos] & 0x80:
                pos += 1
            pos += 1
        elif kind == PAIR:
            pos += 2 + int.from_bytes(block[pos : pos + 2], "big")
            pos += 2 + int.from_bytes(block[pos : pos + 2], "big")
        else:  # UTF8, BINARY
            pos += 2 + int.from_bytes(block[pos : pos + 2], "big")
        if pid == 0x02:
            expiry = int.from_bytes(block[start + 1 : pos], "big")
        elif pid != 0x0B and pid != 0x23:
            out += block[start:pos]
    return expiry, bytes(out)


def _present(props: Properties) -> list[tuple[int, str, Any]]:
    """(identifier, name, value) of each property present, in identifier order.

    All 27 values are read in one call, and compress() skips the absent ones (None) in
    C: the loop sees the few present, already in identifier order."""
    values = _VALUES(props)
    return [
        (pid, name, value)
        for pid, name, value in compress(
            zip(PROPERTY_TABLE, PROPERTY_NAMES, values), map(is_not, values, _NONES)
        )
        if value != []
    ]


_NONES = (None,) * len(PROPERTY_NAMES)


def same_properties(a: Properties | None, b: Properties | None) -> bool:
    """Packet equality treats an absent and an empty property set alike."""
    if a is None or b is None:
        return not a and not b
    return a == b


def decode_properties(
    data: Buffer,
    pos: int,
    end: int,
    ptype: int,
    pname: str,
    version: int = 5,
    packet_end: int | None = None,
) -> tuple[Properties | None, int]:
    """Read a property block (its Variable Byte Integer length, then the properties) that
    starts at ``pos`` and must end by ``end``: (Properties or None when empty, position
    after the block).  ``ptype`` is the packet type, or WILL for Will Properties.

    ``packet_end``: where the packet ends, when ``data`` stops before it (None: at
    ``end``).  ``_speedups`` passes a copy of just the block and up to three bytes after
    it, not the payload that may follow: that is all :func:`_blame_block` reads to tell
    whether a field that runs past the block would still fit in the packet."""
    length, pos = read_varint(data, pos, end, pname, "property length", version)
    if length == 0:
        return None, pos
    block_end = pos + length
    if block_end > end:
        raise overrun(pname, "property block", pos)
    d: dict[str, Any] = {}  # the values, put in the slots of a blank Properties at the end
    block_start = pos
    lists = False  # a User Property or Subscription Identifier seen
    # The fields are read up to block_end, so one that runs past it raises overrun(),
    # which blames the Remaining Length; _blame_block blames the Property Length instead
    # when the field would still fit in the packet.  (The try costs nothing until a raise.)
    try:
        while pos < block_end:
            start = pos
            pid = data[pos]
            if pid < 0x80:  # every defined identifier fits in one Variable Byte Integer byte
                pos += 1
            else:
                pid, pos = read_varint(data, pos, block_end, pname, "property identifier", version)
            entry = _DECODE.get(pid)
            if entry is None:
                raise MalformedPacket(
                    pname,
                    f"unknown property identifier 0x{pid:02X}",
                    offset=start,
                    rule=rule("property_identifier", version),
                )
            name, kind, allowed, field = entry
            if ptype not in allowed:
                where = "will properties" if ptype == WILL else pname
                raise MalformedPacket(
                    pname,
                    f"property 0x{pid:02X} ({field}) is not allowed in {where}",
                    offset=start,
                    rule=rule("property_identifier", version),
                )
            value: Any
            # Two- and four-byte integers are read inline in the valid case, a call less per
            # value; read_u16 / read_u32 word the error otherwise.
            if kind == UTF8:
                value, pos = read_utf8(data, pos, block_end, pname, field, version)
            elif kind == U32:
                if block_end - pos < 4:
                    read_u32(data, pos, block_end, pname, field)  # raises
                value = int.from_bytes(data[pos : pos + 4], "big")
                pos += 4
            elif kind == BYTE:
                if pos >= block_end:
                    raise overrun(pname, field, pos)
                value = data[pos]
                pos += 1
            elif kind == U16:
                if block_end - pos < 2:
                    read_u16(data, pos, block_end, pname, field)  # raises
                value = (data[pos] << 8) | data[pos + 1]
                pos += 2
            elif kind == VARINT:
                value, pos = read_varint(data, pos, block_end, pname, field, version)
            elif kind == BINARY:
                value, pos = read_binary(data, pos, block_end, pname, field)
            else:  # PAIR
                key, pos = read_utf8(data, pos, block_end, pname, "user property name", version)
                val, pos = read_utf8(data, pos, block_end, pname, "user property value", version)
                value = (key, val)
            if pid in _CHECKED:
                low, high = _CHECKED[pid]
                if not low <= value <= high:
                    problem = _value_problem(pid, value)
                    if problem is not None:
                        raise ProtocolError(
                            pname, problem[0], offset=start, rule=rule(problem[1], version)
                        )
            if pid == 0x26:
                d.setdefault("user_properties", []).append(value)
                lists = True
            elif pid == 0x0B:
                lists = True
                ids = d.setdefault("subscription_identifiers", [])
                # PUBLISH may carry one per matching subscription (§3.3.2.3.8); SUBSCRIBE
                # at most one (§3.8.2.1.2).
                if ids and ptype != P.PUBLISH:
                    raise _duplicate(pname, pid, start, version)
                ids.append(value)
            elif name in d:
                raise _duplicate(pname, pid, start, version)
            else:
                d[name] = value
                if pid == 0x08 and ("+" in value or "#" in value):
                    raise ProtocolError(
                        pname,
                        "response topic contains a wildcard",
                        offset=start,
                        rule=rule("response_topic_wildcard", version),
                    )
    except MalformedPacket as exc:
        if exc.what.endswith(PAST_PACKET) and exc.offset is not None:
            raise _blame_block(
                exc, data, block_end, end if packet_end is None else packet_end, version
            ) from None
        raise
    if "authentication_data" in d and "authentication_method" not in d:
        raise ProtocolError(
            pname,
            "authentication data without an authentication method",
            offset=block_end - length,
            rule=rule("auth_data_without_method", version),
        )
    props = _blank(Properties)
    for name, value in d.items():
        _SET[name](props, value)
    # One copy of the block (never a view of the caller's buffer, which may be a large
    # receive buffer): encoding and forwarding copy it instead of writing the values.
    # keep_block, written out: this runs on every decode of a block.
    block = data[block_start:block_end]
    if type(block) is not bytes:
        block = bytes(block)
    if not lists:  # most blocks: no list to copy, and no look-up for one
        _SET_WIRE(props, (block, _KINDS[ptype]))
        return props, pos
    pairs = d.get("user_properties")
    if pairs is None:
        ids = d.get("subscription_identifiers")
        if ids is None:
            _SET_WIRE(props, (block, _KINDS[ptype]))
        else:
            _SET_WIRE(props, (block, _KINDS[ptype], "subscription_identifiers", ids.copy()))
    elif "subscription_identifiers" in d:
        _SET_WIRE(props, (block, _KINDS[ptype]) + _list_copies(props))
    else:
        _SET_WIRE(props, (block, _KINDS[ptype], "user_properties", pairs.copy()))
    return props, pos


# How the readers name each field of a property block in their errors -> its value type,
# for _blame_block: the properties' titles, the identifier, and a User Property's strings.
_FIELD_KINDS = {
    **{field: kind for (_, kind, _, field) in _DECODE.values()},
    "property identifier": VARINT,
    "user property name": UTF8,
    "user property value": UTF8,
}
_SIZES = {BYTE: 1, U16: 2, U32: 4}


def _blame_block(
    exc: MalformedPacket, data: Buffer, block_end: int, packet_end: int, version: int
) -> MalformedPacket:
    """The error for a field that overran the property block (``exc``, from overrun()).

    overrun() blames the Remaining Length.  When the field would still fit in the packet,
    the Property Length is what is too small, and the error says so; otherwise ``exc``
    stands.  Only the field's length prefix is read past the block (at most three bytes:
    the rest of a Variable Byte Integer, or the second byte of a two-byte length), so a
    caller may pass a copy of the block and those bytes instead of the whole packet."""
    field = exc.what[: -len(PAST_PACKET)]
    kind = _FIELD_KINDS.get(field)
    at = exc.offset
    if kind is None or at is None or block_end >= packet_end:
        return exc
    avail = min(len(data), packet_end)
    if kind == VARINT:
        # read_varint raised at the byte it missed (block_end): the integer fits if one of
        # the next three bytes ends it (no Variable Byte Integer is longer than 4 bytes).
        fits = any(data[i] < 0x80 for i in range(at, min(avail, at + 3)))
    elif kind in _SIZES:
        fits = at + _SIZES[kind] <= packet_end
    else:  # UTF8 or BINARY: raised at the two-byte length that leads the field
        fits = at + 2 <= avail and at + 2 + ((data[at] << 8) | data[at + 1]) <= packet_end
    if not fits:
        return exc
    return MalformedPacket(
        exc.packet_type,
        f"{field} runs past the end of the property block (Property Length too small)",
        offset=at,
        rule=rule("property_length", version),
    )


def _duplicate(pname: str, pid: int, pos: int, version: int) -> ProtocolError:
    return ProtocolError(
        pname,
        f"property 0x{pid:02X} ({_title(PROPERTY_TABLE[pid][0])}) appears more than once",
        offset=pos,
        rule=rule("property_duplicate", version),
    )


def encode_properties(props: Properties | None, ptype: int, pname: str) -> bytes:
    """The property block for ``props`` (length prefix included), refusing what
    :func:`decode_properties` would refuse."""
    if props is None:
        return b"\x00"
    if not isinstance(props, Properties):
        raise TypeError(f"{pname}: properties must be Properties, not {type(props).__name__}")
    block = wire_block(props, ptype)
    if block is not None:  # validated for this packet type, and unchanged since
        return encode_varint(len(block)) + block
    out = bytearray()
    cacheable = True
    has_method = False
    has_data = False
    for pid, _, value in _present(props):
        kind, allowed, field, low, high, pack = _ENCODE[pid]
        if type(value) not in _IMMUTABLE:
            cacheable = False
        if ptype not in allowed:
            where = "will properties" if ptype == WILL else pname
            raise MalformedPacket(
                pname,
                f"property 0x{pid:02X} ({field}) is not allowed in {where}",
                rule=rule("property_identifier", 5),
            )
        if pack is not None:  # BYTE, U16, U32
            # A well-typed value in range is written at once; _check_int words the error
            # for anything else.
            if type(value) is not int or not low <= value <= high:
                _check_int(pname, pid, field, kind, value)
            out += pack(pid, value)
        elif kind == UTF8:
            if pid == 0x08 and isinstance(value, str) and ("+" in value or "#" in value):
                raise ProtocolError(
                    pname,
                    "response topic contains a wildcard",
                    rule=rule("response_topic_wildcard", 5),
                )
            out.append(pid)
            out += encode_utf8(value, pname, field, 5)
            if pid == 0x15:
                has_method = True
        elif kind == PAIR:
            for pair in value:
                if type(pair) is not tuple:
                    cacheable = False  # a list pair could change in place, unnoticed
                if len(pair) != 2:
                    raise TypeError(f"{pname}: user properties must be (name, value) pairs")
                out.append(pid)
                out += encode_utf8(pair[0], pname, "user property name", 5)
                out += encode_utf8(pair[1], pname, "user property value", 5)
        elif kind == BINARY:
            out.append(pid)
            out += encode_binary(value, pname, field)
            if pid == 0x16:
                has_data = True
        else:  # VARINT: Subscription Identifier
            if len(value) > 1 and ptype != P.PUBLISH:
                raise _duplicate(pname, pid, None, 5)  # type: ignore[arg-type]
            for ident in value:
                _check_int(pname, pid, field, VARINT, ident)
                out.append(pid)
                out += encode_varint(ident)
    if has_data and not has_method:
        raise ProtocolError(
            pname,
            "authentication data without an authentication method",
            rule=rule("auth_data_without_method", 5),
        )
    if out and cacheable and type(props) is Properties:
        # Kept for the next encode of the same Properties (wire_block checks it is
        # unchanged); only for values that cannot change in place but the lists, whose
        # copies wire_block compares.
        keep_block(props, bytes(out), ptype)
    return encode_varint(len(out)) + out


# Value types whose objects cannot change in place, and list (copied by keep_block).
_IMMUTABLE = frozenset((int, str, bytes, list))


def _check_int(pname: str, pid: int, field: str, kind: int, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{pname}: {field} must be an int, not {type(value).__name__}")
    if not 0 <= value <= _MAX[kind]:
        raise ProtocolError(
            pname,
            f"{field} {value} is out of range 0..{_MAX[kind]}",
            rule=rule("property_value", 5),
        )
    problem = _value_problem(pid, value)
    if problem is not None:
        raise ProtocolError(pname, problem[0], rule=rule(problem[1], 5))
