"""Decoded properties keep their validated property block (issue 16).

A decoded MQTT 5.0 property block (MQTT 5.0 §2.2.2) is checked in full at decode time, in
both implementations, and kept as one copy of its bytes: the extension builds the values
on first access (``_speedups._DecodedProperties``, and for PUBLISH, CONNECT and its Will a
packet that makes its ``Properties`` on the first read of ``properties``), the fallback
when decoding.  Encoding and forwarding copy the block as long as nothing changed; a
``Properties`` built by the user keeps the block of its last encode the same way.  None of
this shows in the API: these tests feed bytes and compare what users see.
"""

from __future__ import annotations

import copy
import gc
import pickle
import sys
import weakref
from types import ModuleType

import pytest

from mqttwire import MalformedPacket, Properties, ProtocolError

# A v5 PUBLISH whose properties are NOT in identifier order (the encoder writes them in
# identifier order; the wire may hold any order):
#   30 1a                  PUBLISH, QoS 0; Remaining Length 26
#   0003 612f62            topic "a/b"
#   13                     property length 19
#   26 0001 6b 0001 76     User Property ("k", "v")              7 bytes
#   02 0000012c            Message Expiry Interval 300           5 bytes
#   23 0002                Topic Alias 2                         3 bytes
#   03 0001 74             Content Type "t"                      4 bytes
#   78                     payload "x"
SHUFFLED = bytes.fromhex("301a 0003612f62 13 2600016b000176 020000012c 230002 03000174 78")
SHUFFLED_BLOCK = SHUFFLED[8:27]
SHUFFLED_PROPS = Properties(
    user_properties=[("k", "v")], message_expiry_interval=300, topic_alias=2, content_type="t"
)


def _wire(props: Properties) -> bytes | None:
    """The block a Properties holds (its slot, read without building any value)."""
    try:
        wire = vars(Properties)["_wire"].__get__(props)
    except AttributeError:
        return None
    if wire is None or type(wire) is bytes:  # the extension's bare block
        return wire  # type: ignore[no-any-return]
    return wire[0]  # type: ignore[no-any-return]


def test_decoded_properties_read_like_built_ones(codec: ModuleType) -> None:
    props = codec.decode(SHUFFLED, version=5).properties
    assert isinstance(props, Properties)
    assert props == SHUFFLED_PROPS and SHUFFLED_PROPS == props
    assert props.message_expiry_interval == 300
    assert props.response_topic is None  # absent properties read as None
    assert props.user_properties == [("k", "v")]
    assert type(props) is Properties  # once read, a plain Properties
    assert repr(props) == (
        "Properties(message_expiry_interval=300, content_type='t', topic_alias=2, "
        "user_properties=[('k', 'v')])"
    )
    assert props.items() == SHUFFLED_PROPS.items()
    assert bool(props)


@pytest.mark.parametrize("first", ["repr", "eq", "items", "bool", "pickle", "copy", "vars",
                                   "setattr", "delattr", "weakref", "class"])
def test_any_first_access_sees_the_values(codec: ModuleType, first: str) -> None:
    """Whatever touches a decoded Properties first, it sees (or keeps) the decoded values."""
    props = codec.decode(SHUFFLED, version=5).properties
    if first == "repr":
        assert "content_type='t'" in repr(props)
    elif first == "eq":
        assert props == SHUFFLED_PROPS
    elif first == "items":
        assert dict(props.items())["topic_alias"] == 2
    elif first == "bool":
        assert props
    elif first == "pickle":
        assert pickle.loads(pickle.dumps(props)) == SHUFFLED_PROPS
    elif first == "copy":
        assert copy.copy(props) == SHUFFLED_PROPS
        assert copy.deepcopy(props) == SHUFFLED_PROPS
    elif first == "vars":
        assert vars(props)["content_type"] == "t"
    elif first == "setattr":
        props.content_type = "u"
        assert props == Properties(**{**dict(SHUFFLED_PROPS.items()), "content_type": "u"})
    elif first == "delattr":
        del props.topic_alias
        assert props.topic_alias is None and props.content_type == "t"
    elif first == "weakref":
        assert weakref.ref(props)() is props
    else:
        assert props.__class__ is Properties
    assert props.message_expiry_interval == 300
    assert props.user_properties == [("k", "v")]


def test_unpickled_properties_have_the_values_only(codec: ModuleType) -> None:
    props = codec.decode(SHUFFLED, version=5).properties
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(props, proto))
        assert type(again) is Properties and again == SHUFFLED_PROPS
        assert _wire(again) is None


def test_a_pickle_from_before_the_block_loads() -> None:
    """The pickle of a Properties as written before it had slots: copyreg.__newobj__ and
    the instance dict as the state (protocol 2)."""
    old = (b"\x80\x02cmqttwire._properties\nProperties\nq\x00)\x81q\x01}q\x02"
           b"X\x0c\x00\x00\x00content_typeq\x03X\x01\x00\x00\x00tq\x04sb.")
    assert pickle.loads(old) == Properties(content_type="t")


def test_a_protocol_0_pickle_without_reduce_loads() -> None:
    """A protocol 0 pickle of a Properties from before it had __reduce__:
    copyreg._reconstructor (object.__new__, no __new__ of the class) and the instance dict
    as the state.  The absent properties still read as None."""
    old = (b"ccopy_reg\n_reconstructor\np0\n(cmqttwire._properties\nProperties\np1\n"
           b"c__builtin__\nobject\np2\nNtp3\nRp4\n(dp5\nVcontent_type\np6\nVt\np7\nsb.")
    props = pickle.loads(old)
    assert props == Properties(content_type="t")
    assert props.topic_alias is None and props.user_properties is None


def test_a_pickle_names_the_public_class() -> None:
    """A pickle names mqttwire.Properties, not the file that defines it, so moving that
    file does not break pickles."""
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(Properties(content_type="t"), proto)
        assert b"mqttwire" in data and b"_codec" not in data and b"_properties" not in data


def test_the_block_is_one_copy_of_the_property_bytes(codec: ModuleType) -> None:
    props = codec.decode(SHUFFLED, version=5).properties
    block = _wire(props)
    assert type(block) is bytes and block == SHUFFLED_BLOCK


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "decode_from"])
def test_the_source_buffer_is_not_kept(codec: ModuleType, kind: str) -> None:
    """A decoded packet and its properties keep nothing of the input: the receive buffer
    is freed when the caller drops it, and a bytearray stays resizable (a kept memoryview
    would hold an export and make resizing raise BufferError)."""

    class Buffer(bytearray):  # a bytearray that can be weakly referenced
        pass

    buf = Buffer(SHUFFLED + b"\x00" * 4096 if kind == "decode_from" else SHUFFLED)
    ref = weakref.ref(buf)
    refs = __import__("sys").getrefcount(buf)
    if kind == "bytearray":
        pkt = codec.decode(buf, version=5)
    elif kind == "memoryview":
        with memoryview(buf) as view:
            pkt = codec.decode(view, version=5)
    else:
        pkt = codec.decode_from(buf, 0, version=5)[0]
    assert __import__("sys").getrefcount(buf) == refs
    buf.extend(b"more")  # no export held
    del buf[:]
    del buf
    gc.collect()
    assert ref() is None
    assert pkt.properties == SHUFFLED_PROPS
    assert pkt.encode(5) == SHUFFLED


def test_a_decoded_block_is_written_back_as_it_came(codec: ModuleType) -> None:
    """Re-encoding copies the block: the property order of the wire is kept (any order is
    valid, MQTT 5.0 §2.2.2), whether or not the values were read first."""
    assert codec.decode(SHUFFLED, version=5).encode(5) == SHUFFLED
    pkt = codec.decode(SHUFFLED, version=5)
    assert pkt.properties.content_type == "t"
    assert pkt.encode(5) == SHUFFLED
    # The same values built by the user: written in identifier order.
    assert codec.Publish("a/b", b"x", properties=SHUFFLED_PROPS).encode(5) == bytes.fromhex(
        "301a 0003612f62 13 020000012c 03000174 230002 2600016b000176 78"
    )


@pytest.mark.parametrize("change", ["setattr", "delattr", "append", "replace_pair", "extend"])
def test_a_changed_property_is_written_anew(codec: ModuleType, change: str) -> None:
    """After a change, the values are encoded (identifier order), not the old block."""
    pkt = codec.decode(SHUFFLED, version=5)
    props = pkt.properties
    want = dict(SHUFFLED_PROPS.items())
    if change == "setattr":
        props.message_expiry_interval = 5
        want["message_expiry_interval"] = 5
    elif change == "delattr":
        del props.user_properties
        del want["user_properties"]
    elif change == "append":
        props.user_properties.append(("k2", "v2"))
        want["user_properties"] = [("k", "v"), ("k2", "v2")]
    elif change == "replace_pair":
        props.user_properties[0] = ("k", "w")
        want["user_properties"] = [("k", "w")]
    else:
        props.user_properties.extend([])  # no change: the block may still be used
    data = pkt.encode(5)
    assert codec.decode(data, version=5).properties == Properties(**want)
    if change == "extend":
        assert data == SHUFFLED
    else:
        assert data != SHUFFLED


def test_a_user_built_properties_keeps_its_encoded_block(codec: ModuleType) -> None:
    props = Properties(session_expiry_interval=3600, receive_maximum=100,
                       user_properties=[("a", "b")])
    pkt = codec.Connect("c", properties=props)
    # 10 1d                              CONNECT, Remaining Length 29
    # 0004 "MQTT" 05 02 003c             level 5, clean start, keep alive 60
    # 0f 11 00000e10 21 0064 26 0001 61 0001 62   properties (15 bytes)
    # 0001 63                            client id "c"
    first = bytes.fromhex("101d 00044d5154540502003c 0f 1100000e10 210064 26000161000162"
                          " 000163")
    assert pkt.encode(5) == first
    assert pkt.encode(5) == first  # from the kept block
    props.user_properties.append(("c", "d"))  # changed in place: noticed
    assert codec.decode(pkt.encode(5)).properties.user_properties == [("a", "b"), ("c", "d")]
    props.receive_maximum = 5
    assert codec.decode(pkt.encode(5)).properties.receive_maximum == 5


def test_a_block_is_reused_only_for_its_packet_type(codec: ModuleType) -> None:
    """Properties decoded from a PUBLISH, given to a Will: the Topic Alias is not allowed
    in Will Properties (MQTT 5.0 §3.1.3.2), so encoding refuses them as the encoder does
    for user-built ones; without it they are accepted."""
    props = codec.decode(SHUFFLED, version=5).properties
    conn = codec.Connect("c", will=codec.Will("w", b"", properties=props))
    with pytest.raises(MalformedPacket, match=r"0x23 \(topic alias\) is not allowed in will"):
        conn.encode(5)
    props = codec.decode(SHUFFLED, version=5).properties
    del props.topic_alias
    conn = codec.Connect("c", will=codec.Will("w", b"", properties=props))
    assert codec.decode(conn.encode(5)).will.properties == props


def test_every_error_is_still_raised_at_decode_time(codec: ModuleType) -> None:
    """Nothing is left for the first access to find: a bad value inside a block is refused
    by decode itself, with its offset."""
    # The Content Type of SHUFFLED made "\xff": not UTF-8 [MQTT-1.5.4-1].
    bad = SHUFFLED[:26] + b"\xff" + SHUFFLED[27:]
    with pytest.raises(MalformedPacket, match=r"content type .*\[MQTT-1\.5\.4-1\]"):
        codec.decode(bad, version=5)
    # Topic Alias 0 [MQTT-3.3.2-8].
    bad = SHUFFLED[:21] + b"\x00\x00" + SHUFFLED[23:]
    with pytest.raises(ProtocolError, match=r"MQTT-3\.3\.2-8"):
        codec.decode(bad, version=5)
    # The Will Properties of a CONNECT: Will Delay Interval twice (§2.2.2.2).
    # 10 1e                              CONNECT, Remaining Length 30
    # 0004 "MQTT" 05 06 003c             level 5, clean start and will flag, keep alive 60
    # 00 | 0001 63                       no properties; client id "c"
    # 0a 18 00000001 18 00000001         Will Properties: Will Delay Interval twice
    # 0001 77 | 0000                     will topic "w", empty will payload
    conn = bytes.fromhex("101e 00044d5154540506003c 00 000163 0a 1800000001 1800000001"
                         " 000177 0000")
    with pytest.raises(ProtocolError, match="appears more than once"):
        codec.decode(conn, version=5)


def test_both_implementations_agree_on_decoded_properties(both_codecs) -> None:
    cy, py = both_codecs
    a, b = cy.decode(SHUFFLED, version=5), py.decode(SHUFFLED, version=5)
    assert a == b and repr(a) == repr(b)
    assert a.encode(5) == b.encode(5) == SHUFFLED
    assert _wire(a.properties) == _wire(b.properties) == SHUFFLED_BLOCK


@pytest.mark.parametrize("change", [False, True])
def test_properties_from_one_implementation_encode_in_the_other(both_codecs,
                                                                change: bool) -> None:
    """The block check is shared: properties decoded by either implementation, read and
    perhaps changed in place, encode alike in both (the extension keeps no copy of the
    lists it builds, so their check decodes the block's lists again)."""
    for source in both_codecs:
        props = source.decode(SHUFFLED, version=5).properties
        assert props.user_properties == [("k", "v")]
        if change:
            props.user_properties[0] = ("k", "changed")
        for m in both_codecs:
            data = m.Publish("a/b", b"x", properties=props).encode(5)
            if change:
                assert data != SHUFFLED
                assert m.decode(data, version=5).properties.user_properties == [
                    ("k", "changed")]
            else:
                assert data == SHUFFLED


def test_the_properties_attribute_behaves_as_before(codec: ModuleType) -> None:
    """Set and read ``properties`` on a decoded packet, as on any other: the new value
    replaces the kept block."""
    pkt = codec.decode(SHUFFLED, version=5)
    pkt.properties = Properties(content_type="u")
    assert pkt.properties == Properties(content_type="u")
    assert codec.decode(pkt.encode(5), version=5).properties == Properties(content_type="u")
    pkt = codec.decode(SHUFFLED, version=5)
    pkt.properties = None
    # 30 07 | 0003 "a/b" | 00 (no properties) | "x"
    assert pkt.encode(5) == bytes.fromhex("3007 0003612f62 00 78")


def test_deleting_properties_of_a_decoded_packet_leaves_none(both_codecs) -> None:
    """The extension's ``del packet.properties`` leaves None, as its public attribute did
    before issue 16 (the kept block goes too).  (``_pure``'s slot is then unset, as
    before: a difference between the twins that predates the kept blocks.)"""
    cy, _ = both_codecs
    pkt = cy.decode(SHUFFLED, version=5)
    del pkt.properties
    assert pkt.properties is None
    assert pkt.encode(5) == bytes.fromhex("3007 0003612f62 00 78")


# Bad values in a property block, for the inline reading of strings and integers: each
# raises what read_utf8 / read_u16 / read_u32 and the range checks raised before, in both
# implementations (values recorded from the code before the inline reading).
#   (property block, error class, what, offset, rule); the PUBLISH is "a/b", payload "x".
_BAD_VALUES = [
    ("03 0002 c328", MalformedPacket,
     "content type is not well-formed UTF-8 (invalid continuation byte)", 11, "MQTT-1.5.4-1"),
    ("03 0002 6100", MalformedPacket, "content type contains U+0000", 12, "MQTT-1.5.4-2"),
    ("03 0005 6162", MalformedPacket, "content type runs past the end of the packet "
     "(Remaining Length too small)", 9, None),
    ("03 00", MalformedPacket, "content type runs past the end of the packet "
     "(Remaining Length too small)", 9, None),
    ("26 0001 ff 0001 76", MalformedPacket,
     "user property name is not well-formed UTF-8 (invalid start byte)", 11, "MQTT-1.5.4-1"),
    ("26 0001 00 0001 76", MalformedPacket, "user property name contains U+0000", 11,
     "MQTT-1.5.4-2"),
    ("26 0009 6b", MalformedPacket, "user property name runs past the end of the packet "
     "(Remaining Length too small)", 9, None),
    ("26 0001 6b 0002 e282", MalformedPacket,
     "user property value is not well-formed UTF-8 (unexpected end of data)", 14,
     "MQTT-1.5.4-1"),
    ("26 0001 6b 0001 00", MalformedPacket, "user property value contains U+0000", 14,
     "MQTT-1.5.4-2"),
    ("26 0001 6b 0004 76", MalformedPacket, "user property value runs past the end of the "
     "packet (Remaining Length too small)", 12, None),
    ("26 0001 6b 00", MalformedPacket, "user property value runs past the end of the "
     "packet (Remaining Length too small)", 12, None),
    # These two would fit with the payload byte after the block: the Property Length is
    # too small, not the Remaining Length (changed on purpose; see test_strict's
    # property_length cases).
    ("02 0000 01", MalformedPacket, "message expiry interval runs past the end of the "
     "property block (Property Length too small)", 9, "§2.2.2.1"),
    ("23 00", MalformedPacket, "topic alias runs past the end of the property block "
     "(Property Length too small)", 9, "§2.2.2.1"),
    ("23 0000", ProtocolError, "topic alias is 0", 8, "MQTT-3.3.2-8"),
    ("01 02", ProtocolError, "payload format indicator is 2, not 0 or 1", 8, "§2.2.2.2"),
    ("08 0003 612f23", ProtocolError, "response topic contains a wildcard", 8,
     "MQTT-3.3.2-14"),
]


@pytest.mark.parametrize(("block", "cls", "what", "offset", "rule"), _BAD_VALUES)
def test_bad_property_values_raise_as_before(
    codec: ModuleType, block: str, cls: type, what: str, offset: int, rule: str | None
) -> None:
    raw = bytes.fromhex(block)
    body = bytes.fromhex("0003612f62") + bytes([len(raw)]) + raw + b"x"
    with pytest.raises(cls) as info:
        codec.decode(bytes([0x30, len(body)]) + body, version=5)
    assert type(info.value) is cls
    assert (info.value.what, info.value.offset, info.value.rule) == (what, offset, rule)


def test_every_publish_value_kind_reads_back(codec: ModuleType) -> None:
    """Each kind of value a PUBLISH can carry, read attribute by attribute straight after
    decoding (the extension builds them then, in one pass over the kept block): one- and
    many-character, ASCII and non-ASCII strings, empty ones, binary data, repeated
    Subscription Identifiers of one to four bytes, repeated User Properties."""
    props = Properties(
        payload_format_indicator=1,
        message_expiry_interval=0xFFFF_FFFF,
        content_type="é",
        response_topic="r",
        correlation_data=b"",
        subscription_identifiers=[1, 128, 16_384, 268_435_455],
        topic_alias=0xFFFF,
        user_properties=[("k", ""), ("ключ", "значение"), ("", "v"), ("k", "v")],
    )
    wire = codec.Publish("a/b", b"x", properties=props).encode(5)
    got = codec.decode(wire, version=5).properties
    for name, value in props.items():
        assert getattr(got, name) == value and type(getattr(got, name)) is type(value)
    assert got.user_properties is got.user_properties  # one list, built once
    assert all(type(pair) is tuple for pair in got.user_properties)
    assert got == props and repr(got) == repr(props)
    assert codec.decode(wire, version=5).properties == props  # compared before any read
    assert codec.Publish("a/b", b"x", properties=got).encode(5) == wire


class _Value:
    """A property value whose release a weak reference sees."""


def test_a_freed_properties_releases_every_value(codec: ModuleType) -> None:
    """A Properties, decoded (built on read or not) or made by the user, lets go of its
    values, its block and its weak references when freed, and keeps None's count even
    (the extension makes and frees a Properties in one piece: benchmarks/peers.md,
    "Properties made and freed in one piece")."""
    data = codec.Publish(
        "a/b", b"x", properties=Properties(message_expiry_interval=3, user_properties=[("k", "v")])
    ).encode(5)
    ack = codec.PubAck(3, properties=Properties(reason_string="r")).encode(5)
    reads = [
        lambda: codec.decode(data, version=5).properties,
        lambda: codec.decode(data, version=5).properties.user_properties,
        lambda: codec.decode(ack, version=5).properties,
        lambda: codec.decode(ack, version=5).properties.reason_string,
        lambda: Properties(content_type="t", correlation_data=b"c"),
    ]
    for read in reads:
        read()
        before = sys.getrefcount(None)
        for _ in range(200):
            read()
        assert sys.getrefcount(None) - before in (-1, 0, 1)

    value = _Value()
    seen = weakref.ref(value)
    props = codec.decode(data, version=5).properties
    vars(Properties)["content_type"].__set__(props, value)  # any object, in a slot
    alive = weakref.ref(props)
    del props, value
    assert seen() is None
    assert alive() is None


def test_a_subclass_of_properties_is_freed_with_its_finalizer(codec: ModuleType) -> None:
    finalized: list[object] = []

    class Kept(Properties):
        __slots__ = ()

        def __del__(self) -> None:
            finalized.append(self.content_type)

    kept = Kept(content_type="t")
    alive = weakref.ref(kept)
    del kept
    gc.collect()
    assert finalized == ["t"]
    assert alive() is None


def test_a_subclass_with_its_own_attributes_is_made_blank(codec: ModuleType) -> None:
    """A subclass with an instance dict, or slots of its own, has another layout than
    Properties: it is made with every property None all the same, and encodes alike."""

    class WithDict(Properties):
        pass

    class WithSlot(Properties):
        __slots__ = ("note",)

    for cls in (WithDict, WithSlot):
        props = cls(message_expiry_interval=5)
        assert type(props) is cls
        assert props.message_expiry_interval == 5 and props.content_type is None
        assert props == Properties(message_expiry_interval=5)
        publish = codec.Publish("t", b"", properties=props)
        assert codec.decode(publish.encode(5), version=5).properties == props


def test_a_read_block_serves_another_packet_type_that_allows_it(both_codecs) -> None:
    """Properties read from a PUBLISH whose properties a Will allows too: either
    implementation's encoder writes them for the Will, and they decode equal; with a
    Topic Alias (not allowed in a Will) both refuse, as for user-built ones."""
    wire = bytes.fromhex("3017 0003612f62 10 020000012c 03000174 2600016b000176 78")
    for source in both_codecs:
        for m in both_codecs:
            props = source.decode(wire, version=5).properties
            assert props.content_type == "t"
            conn = m.Connect("c", will=m.Will("w", b"", properties=props))
            assert m.decode(conn.encode(5)).will.properties == props
            props = source.decode(SHUFFLED, version=5).properties
            assert props.topic_alias == 2
            conn = m.Connect("c", will=m.Will("w", b"", properties=props))
            with pytest.raises(MalformedPacket, match=r"0x23 \(topic alias\) is not allowed"):
                conn.encode(5)


def test_a_read_block_invalid_for_another_packet_type_is_written_anew(both_codecs) -> None:
    """Two Subscription Identifiers, valid in a PUBLISH, given to a SUBSCRIBE (which may
    carry one): both implementations' encoders refuse them with the error they give for
    user-built Properties, whichever implementation read them."""
    props = Properties(subscription_identifiers=[1, 2])
    wire = bytes.fromhex("300b 0003612f62 04 0b010b02 78")
    expected = set()
    for m in both_codecs:
        sub = m.Subscribe(1, [m.Subscription("a")], properties=props)
        with pytest.raises(ProtocolError) as exc:
            sub.encode(5)
        expected.add(str(exc.value))
    assert len(expected) == 1
    for source in both_codecs:
        for m in both_codecs:
            read = source.decode(wire, version=5).properties
            assert read.subscription_identifiers == [1, 2]
            sub = m.Subscribe(1, [m.Subscription("a")], properties=read)
            with pytest.raises(ProtocolError) as exc:
                sub.encode(5)
            assert str(exc.value) in expected
