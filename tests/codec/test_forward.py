"""PreparedPublish: one incoming PUBLISH forwarded to many subscribers.

The oracle is the ordinary encoder: for every subscriber, the prepared bytes must equal
``Publish(...).encode()`` of the packet the specification says that subscriber gets.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqttwire import MalformedPacket, Properties, ProtocolError


def _expected(codec: ModuleType, pub, version, qos, packet_id, retain, dup, sub_ids, expiry):
    """The PUBLISH a subscriber should receive, built field by field."""
    props = None
    if version == 5:
        src = pub.properties or Properties()
        kept = {
            k: v for k, v in src.items() if k not in ("topic_alias", "subscription_identifiers")
        }
        if expiry is not None:
            kept["message_expiry_interval"] = expiry
        if sub_ids:
            kept["subscription_identifiers"] = list(sub_ids)
        props = Properties(**kept)
    return codec.Publish(
        pub.topic,
        pub.payload,
        qos=qos,
        packet_id=packet_id,
        retain=retain,
        dup=dup,
        properties=props,
    )


topics = st.text(
    st.characters(blacklist_characters="+#\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
props = st.one_of(
    st.none(),
    st.builds(
        Properties,
        message_expiry_interval=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
        content_type=st.one_of(
            st.none(),
            st.text(
                st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=5
            ),
        ),
        correlation_data=st.one_of(st.none(), st.binary(max_size=5)),
        topic_alias=st.one_of(st.none(), st.integers(1, 65535)),
        user_properties=st.lists(
            st.tuples(st.just("k"), st.text(max_size=3, alphabet="abc")), max_size=2
        ),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    topic=topics,
    payload=st.binary(max_size=50),
    in_qos=st.integers(0, 2),
    properties=props,
    version=st.sampled_from([3, 4, 5]),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    dup=st.booleans(),
    sub_ids=st.lists(st.integers(1, 268_435_455), max_size=3),
    expiry=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
)
def test_matches_a_fresh_encode(
    codec: ModuleType,
    topic,
    payload,
    in_qos,
    properties,
    version,
    qos,
    retain,
    dup,
    sub_ids,
    expiry,
) -> None:
    pub = codec.Publish(
        topic, payload, qos=in_qos, packet_id=1 if in_qos else None, properties=properties
    )
    prepared = codec.PreparedPublish(pub)
    packet_id = 77 if qos else None
    dup = dup and qos > 0
    got = prepared.encode(
        version,
        qos=qos,
        packet_id=packet_id,
        retain=retain,
        dup=dup,
        subscription_identifiers=sub_ids,
        message_expiry_interval=expiry,
    )
    want = _expected(
        codec, pub, version, qos, packet_id, retain, dup, sub_ids if version == 5 else [], expiry
    )
    assert codec.decode(got, version=version) == want
    if not (version == 5 and want.properties):
        # Without properties the encoding is unique, so the bytes must be identical.
        assert got == want.encode(version)


def test_v5_to_v3_drops_properties_and_v3_to_v5_gets_an_empty_block(codec: ModuleType) -> None:
    pub = codec.Publish("a/b", b"x", properties=Properties(content_type="text/plain"))
    # 30 | RL 6 | 00 03 'a/b' | 'x'   (3.1.1: no property block at all)
    assert codec.PreparedPublish(pub).encode(4) == bytes.fromhex("3006 0003612f62 78")
    plain = codec.Publish("a/b", b"x")
    # 30 | RL 7 | 00 03 'a/b' | 00 (empty property block) | 'x'
    assert codec.PreparedPublish(plain).encode(5) == bytes.fromhex("3007 0003612f62 00 78")
    # Subscription identifier 5 for this subscriber: 0B 05 in a 2-byte block.
    assert codec.PreparedPublish(plain).encode(5, subscription_identifiers=[5]) == bytes.fromhex(
        "3009 0003612f62 02 0b05 78"
    )


def test_topic_alias_is_not_forwarded(codec: ModuleType) -> None:
    pub = codec.Publish("a", b"", properties=Properties(topic_alias=4))
    assert codec.PreparedPublish(pub).encode(5) == bytes.fromhex("3004 000161 00")


def test_refuses_what_the_encoder_refuses(codec: ModuleType) -> None:
    with pytest.raises(MalformedPacket, match=r"MQTT-3\.3\.2-2"):
        codec.PreparedPublish(codec.Publish("a/#"))
    with pytest.raises(MalformedPacket, match="resolve the topic alias"):
        codec.PreparedPublish(codec.Publish("", properties=Properties(topic_alias=1)))
    prepared = codec.PreparedPublish(codec.Publish("a"))
    with pytest.raises(MalformedPacket, match=r"MQTT-3\.3\.1-4"):
        prepared.encode(5, qos=3)
    with pytest.raises(MalformedPacket, match=r"MQTT-3\.3\.1-2"):
        prepared.encode(5, qos=0, dup=True)
    with pytest.raises(ProtocolError, match=r"MQTT-2\.2\.1-3"):
        prepared.encode(5, qos=1, packet_id=0)
    with pytest.raises(ProtocolError, match="packet identifier missing"):
        prepared.encode(5, qos=1)
    with pytest.raises(ProtocolError):
        prepared.encode(5, subscription_identifiers=[0])
    with pytest.raises(ProtocolError):
        prepared.encode(5, message_expiry_interval=-1)


def test_same_bytes_in_both_implementations(both_codecs) -> None:
    cy, py = both_codecs
    props = Properties(message_expiry_interval=10, user_properties=[("a", "b")])
    out = []
    for m in (cy, py):
        prepared = m.PreparedPublish(
            m.Publish("t/1", b"payload", qos=2, packet_id=3, properties=props)
        )
        out.append(
            [
                prepared.encode(
                    v, qos=q, packet_id=q and 9 or None, retain=r, subscription_identifiers=[1, 2]
                )
                for v in (3, 4, 5)
                for q in (0, 1, 2)
                for r in (False, True)
            ]
        )
    assert out[0] == out[1]


# --- A decoded PUBLISH: the property block is copied, not re-encoded (issue 16) ----------


@settings(max_examples=150, deadline=None)
@given(
    topic=topics,
    payload=st.binary(max_size=50),
    in_qos=st.integers(0, 2),
    properties=props,
    version=st.sampled_from([3, 4, 5]),
    qos=st.integers(0, 2),
    sub_ids=st.lists(st.integers(1, 268_435_455), max_size=3),
    expiry=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    read_first=st.booleans(),
)
def test_a_decoded_publish_matches_a_fresh_encode(
    codec: ModuleType, topic, payload, in_qos, properties, version, qos, sub_ids, expiry,
    read_first,
) -> None:
    """PreparedPublish of a decoded v5 PUBLISH (its block copied without the Topic Alias
    and the Subscription Identifiers, each subscriber's own and the remaining Message
    Expiry Interval put in) gives the packet the ordinary encoder gives, whether the
    properties were read before or not."""
    wire = codec.Publish(
        topic, payload, qos=in_qos, packet_id=1 if in_qos else None, properties=properties
    ).encode(5)
    pub = codec.decode(wire, version=5)
    if read_first:
        assert (pub.properties or None) == (properties or None)
    packet_id = 77 if qos else None
    got = codec.PreparedPublish(pub).encode(
        version, qos=qos, packet_id=packet_id, subscription_identifiers=sub_ids,
        message_expiry_interval=expiry,
    )
    want = _expected(
        codec, pub, version, qos, packet_id, False, False, sub_ids if version == 5 else [],
        expiry,
    )
    assert codec.decode(got, version=version) == want
    oracle = want.encode(version)
    assert len(got) == len(oracle)
    if not (version == 5 and want.properties and sub_ids):
        # Subscription Identifiers go after the copied properties, where the encoder puts
        # them in identifier order (before a User Property): otherwise the same bytes.
        assert got == oracle


# 30 1a | 0003 "a/b" | 13 | 26 0001 6b 0001 76 (User Property k=v) | 02 0000012c (Message
# Expiry 300) | 23 0002 (Topic Alias 2) | 03 0001 74 (Content Type "t") | "x": the
# properties in an order the encoder never writes.
SHUFFLED = bytes.fromhex("301a 0003612f62 13 2600016b000176 020000012c 230002 03000174 78")


def test_a_decoded_block_is_copied_property_by_property(codec: ModuleType) -> None:
    pub = codec.decode(SHUFFLED, version=5)
    prepared = codec.PreparedPublish(pub)
    # 30 19 | 0003 "a/b" | 12 | 02 0000012b (the remaining expiry, 299) | 26 ... (the User
    # Property) | 03 ... (Content Type) | 0b 05 (this subscriber's identifier) | "x".  No
    # Topic Alias (MQTT 5.0 §3.3.2.3.4).
    assert prepared.encode(5, subscription_identifiers=[5], message_expiry_interval=299) == (
        bytes.fromhex("3019 0003612f62 12 020000012b 2600016b000176 03000174 0b05 78")
    )
    # Without an override the message's own expiry, 300.
    assert prepared.encode(5) == bytes.fromhex(
        "3017 0003612f62 10 020000012c 2600016b000176 03000174 78"
    )
    assert prepared.encode(4) == bytes.fromhex("3006 0003612f62 78")
    # The source packet still reads the same, Topic Alias included.
    assert pub.properties == Properties(
        user_properties=[("k", "v")], message_expiry_interval=300, topic_alias=2,
        content_type="t",
    )


def test_a_changed_decoded_block_is_not_copied(codec: ModuleType) -> None:
    pub = codec.decode(SHUFFLED, version=5)
    pub.properties.user_properties.append(("k2", "v2"))
    got = codec.decode(codec.PreparedPublish(pub).encode(5), version=5)
    assert got.properties.user_properties == [("k", "v"), ("k2", "v2")]
    assert got.properties.topic_alias is None
