"""Differential and property-based tests (hypothesis): the two implementations agree.

- Random valid packets of every type at every level round-trip (encode, then decode gives
  an equal packet) in each implementation, and the two write the same bytes and read
  them back alike.
- Random bytes, and mutated corpus vectors and random packets, give the same outcome in
  both (decode, decode_from, StreamDecoder, with and without max_packet_size): equal
  packets, or errors of the same class, reason code, offset, rule and message.
- Packets with a field replaced by a value that may be invalid are refused alike, or
  encoded to the same bytes, which then decode: encoding refuses what decoding refuses.
- A stream of packets split at random points gives the packets it gives whole.

Kept in its own module so that a test run without hypothesis can leave it out.  Example
counts are modest so the module runs in well under a minute with both implementations;
the environment variable MQTTWIRE_HYPOTHESIS_SCALE multiplies them for a longer search.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_vectors import V5_REASON_CODES  # transcribed from the specification once

from mqttwire import MQTTWireError, Properties

#: Multiplies every example count, for a longer search than the default run's, e.g.
#: ``MQTTWIRE_HYPOTHESIS_SCALE=20 pytest tests/codec/test_differential.py``.
SCALE = int(os.environ.get("MQTTWIRE_HYPOTHESIS_SCALE", "1"))


def examples(n: int) -> settings:
    return settings(max_examples=n * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


SETTINGS = examples(150)

CORPUS: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "valid.json").read_text()
)
CORPUS_ITEMS = sorted((bytes.fromhex(e["hex"]), e["version"]) for e in CORPUS.values())


# ---------------------------------------------------------------------------------------
# Packet specifications: built into either implementation's classes by make().


@dataclass(frozen=True)
class Spec:
    """A packet (or Will, Subscription) to build: class name, arguments, keywords."""

    cls: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def make(m: ModuleType, value: Any) -> Any:
    """Build ``value`` (a Spec, or a list of them) with the classes of module ``m``."""
    if isinstance(value, Spec):
        args = [make(m, a) for a in value.args]
        kwargs = {k: make(m, v) for k, v in value.kwargs.items()}
        return getattr(m, value.cls)(*args, **kwargs)
    if isinstance(value, list):
        return [make(m, v) for v in value]
    return value


# Strings: any characters but surrogates (not encodable) and U+0000 (forbidden).
_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
TEXT = st.text(_CHARS, max_size=12)
# Topic names: at least one character, no wildcards [MQTT-3.3.2-2], [MQTT-4.7.3-1].
TOPIC = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#"),
    min_size=1, max_size=16,
)
# Topic filters: wildcard placement is not the codec's business, so anything non-empty.
FILTER = st.one_of(
    st.text(_CHARS, min_size=1, max_size=16),
    st.sampled_from(["#", "+", "a/+/b", "a/#", "$SYS/#", "$share/g/a/b", "$share/g/#"]),
)
BINARY = st.binary(max_size=16)
PACKET_ID = st.integers(1, 65535)
U16 = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFF_FFFF)
FLAG = st.integers(0, 1)
VARINT_ID = st.integers(1, 268_435_455)

_PROPERTY_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "payload_format_indicator": FLAG,
    "message_expiry_interval": U32,
    "content_type": TEXT,
    "response_topic": TOPIC,
    "correlation_data": BINARY,
    "session_expiry_interval": U32,
    "assigned_client_identifier": TEXT,
    "server_keep_alive": U16,
    "authentication_method": TEXT,
    "authentication_data": BINARY,
    "request_problem_information": FLAG,
    "will_delay_interval": U32,
    "request_response_information": FLAG,
    "response_information": TEXT,
    "server_reference": TEXT,
    "reason_string": TEXT,
    "receive_maximum": st.integers(1, 0xFFFF),
    "topic_alias_maximum": U16,
    "topic_alias": st.integers(1, 0xFFFF),
    "maximum_qos": FLAG,
    "retain_available": FLAG,
    "user_properties": st.lists(st.tuples(TEXT, TEXT), max_size=3),
    "maximum_packet_size": st.integers(1, 0xFFFF_FFFF),
    "wildcard_subscription_available": FLAG,
    "subscription_identifier_available": FLAG,
    "shared_subscription_available": FLAG,
}

# Which properties each packet may carry (MQTT 5.0 §2.2.2.2, Table 2-4); "WILL" is the
# Will Properties of CONNECT (§3.1.3.2).
_ACK = ("reason_string", "user_properties")
ALLOWED: dict[str, tuple[str, ...]] = {
    "PUBLISH": ("payload_format_indicator", "message_expiry_interval", "content_type",
                "response_topic", "correlation_data", "topic_alias", "user_properties"),
    "WILL": ("payload_format_indicator", "message_expiry_interval", "content_type",
             "response_topic", "correlation_data", "will_delay_interval", "user_properties"),
    "CONNECT": ("session_expiry_interval", "authentication_method", "authentication_data",
                "request_problem_information", "request_response_information",
                "receive_maximum", "topic_alias_maximum", "user_properties",
                "maximum_packet_size"),
    "CONNACK": ("session_expiry_interval", "assigned_client_identifier", "server_keep_alive",
                "authentication_method", "authentication_data", "response_information",
                "server_reference", "reason_string", "receive_maximum",
                "topic_alias_maximum", "maximum_qos", "retain_available", "user_properties",
                "maximum_packet_size", "wildcard_subscription_available",
                "subscription_identifier_available", "shared_subscription_available"),
    "ACK": _ACK,
    "SUBSCRIBE": ("user_properties",),
    "UNSUBSCRIBE": ("user_properties",),
    "DISCONNECT": ("session_expiry_interval", "server_reference", "reason_string",
                   "user_properties"),
    "AUTH": ("authentication_method", "authentication_data", "reason_string",
             "user_properties"),
}


@st.composite
def properties(draw: st.DrawFn, kind: str) -> Properties | None:
    """Valid properties for ``kind``, or None."""
    values = draw(st.fixed_dictionaries(
        {}, optional={name: _PROPERTY_VALUES[name] for name in ALLOWED[kind]}
    ))
    if kind == "PUBLISH" and draw(st.booleans()):
        # a server sends one subscription identifier per matching subscription
        values["subscription_identifiers"] = draw(st.lists(VARINT_ID, min_size=1, max_size=3))
    if kind == "SUBSCRIBE" and draw(st.booleans()):
        values["subscription_identifiers"] = [draw(VARINT_ID)]
    if "authentication_data" in values or kind == "AUTH":
        # Authentication Data needs a method (§3.1.2.11.10); AUTH always carries one
        # (§3.15.2.2.2).
        values.setdefault("authentication_method", draw(TEXT))
    if not values and draw(st.booleans()):
        return None
    return Properties(**values)


def _props(draw: st.DrawFn, level: int, kind: str) -> dict[str, Any]:
    return {"properties": draw(properties(kind))} if level == 5 else {}




@st.composite
def connect(draw: st.DrawFn, level: int) -> Spec:
    username = draw(st.none() | TEXT)
    # A password needs a user name before 5.0 [MQTT-3.1.2-22].
    password = draw(st.none() | BINARY) if username is not None or level == 5 else None
    will = None
    if draw(st.booleans()):
        will = Spec("Will", (draw(TOPIC), draw(BINARY)),
                    {"qos": draw(st.integers(0, 2)), "retain": draw(st.booleans()),
                     **_props(draw, level, "WILL")})
    return Spec("Connect", (draw(TEXT),), {
        "protocol_version": level, "clean_start": draw(st.booleans()),
        "keep_alive": draw(U16), "username": username, "password": password, "will": will,
        **_props(draw, level, "CONNECT"),
    })


@st.composite
def connack(draw: st.DrawFn, level: int) -> Spec:
    codes = V5_REASON_CODES["CONNACK"] if level == 5 else list(range(6))
    code = draw(st.sampled_from(codes))
    # Session present only with success [MQTT-3.2.2-4] / [MQTT-3.2.2-6]; 3.1 has no flag.
    present = draw(st.booleans()) if code == 0 and level > 3 else False
    return Spec("ConnAck", (), {"session_present": present, "reason_code": code,
                                **_props(draw, level, "CONNACK")})


@st.composite
def publish(draw: st.DrawFn, level: int) -> Spec:
    qos = draw(st.integers(0, 2))
    kwargs: dict[str, Any] = {
        "qos": qos, "retain": draw(st.booleans()),
        "dup": draw(st.booleans()) if qos else False,  # [MQTT-3.3.1-2]
        "packet_id": draw(PACKET_ID) if qos else None,
    }
    topic = draw(TOPIC)
    if level == 5:
        props = draw(properties("PUBLISH"))
        if draw(st.integers(0, 9)) == 0:
            # an empty topic stands for the one its Topic Alias was set to (§3.3.2.1)
            topic = ""
            props = props if props is not None else Properties()
            props.topic_alias = props.topic_alias or draw(st.integers(1, 0xFFFF))
        kwargs["properties"] = props
    return Spec("Publish", (topic, draw(st.binary(max_size=40))), kwargs)


@st.composite
def ack(draw: st.DrawFn, level: int) -> Spec:
    cls = draw(st.sampled_from(["PubAck", "PubRec", "PubRel", "PubComp"]))
    kwargs: dict[str, Any] = {}
    if level == 5:
        kwargs = {"reason_code": draw(st.sampled_from(V5_REASON_CODES[cls.upper()])),
                  **_props(draw, level, "ACK")}
    return Spec(cls, (draw(PACKET_ID),), kwargs)


@st.composite
def subscription(draw: st.DrawFn, level: int) -> Spec:
    topic_filter = draw(FILTER)
    kwargs: dict[str, Any] = {"qos": draw(st.integers(0, 2))}
    if level == 5:
        kwargs.update(
            # No Local is not allowed on a shared subscription [MQTT-3.8.3-4]
            no_local=draw(st.booleans()) and not topic_filter.startswith("$share/"),
            retain_as_published=draw(st.booleans()),
            retain_handling=draw(st.integers(0, 2)),
        )
    return Spec("Subscription", (topic_filter,), kwargs)


@st.composite
def subscribe(draw: st.DrawFn, level: int) -> Spec:
    subs = draw(st.lists(subscription(level), min_size=1, max_size=3))
    return Spec("Subscribe", (draw(PACKET_ID), subs), _props(draw, level, "SUBSCRIBE"))


@st.composite
def suback(draw: st.DrawFn, level: int) -> Spec:
    codes = {3: [0, 1, 2], 4: [0, 1, 2, 0x80], 5: V5_REASON_CODES["SUBACK"]}[level]
    return Spec("SubAck", (draw(PACKET_ID), draw(st.lists(st.sampled_from(codes),
                                                            min_size=1, max_size=4))),
                _props(draw, level, "ACK"))


@st.composite
def unsubscribe(draw: st.DrawFn, level: int) -> Spec:
    return Spec("Unsubscribe", (draw(PACKET_ID), draw(st.lists(FILTER, min_size=1,
                                                                max_size=3))),
                _props(draw, level, "UNSUBSCRIBE"))


@st.composite
def unsuback(draw: st.DrawFn, level: int) -> Spec:
    if level < 5:
        return Spec("UnsubAck", (draw(PACKET_ID),))
    codes = draw(st.lists(st.sampled_from(V5_REASON_CODES["UNSUBACK"]), min_size=1,
                          max_size=4))
    return Spec("UnsubAck", (draw(PACKET_ID), codes), _props(draw, level, "ACK"))


@st.composite
def disconnect(draw: st.DrawFn, level: int) -> Spec:
    if level < 5:
        return Spec("Disconnect")
    return Spec("Disconnect", (), {
        "reason_code": draw(st.sampled_from(V5_REASON_CODES["DISCONNECT"])),
        **_props(draw, level, "DISCONNECT"),
    })


@st.composite
def auth(draw: st.DrawFn, level: int) -> Spec:
    if draw(st.booleans()):
        return Spec("Auth")  # RL 0: success, no properties
    return Spec("Auth", (), {"reason_code": draw(st.sampled_from(V5_REASON_CODES["AUTH"])),
                             "properties": draw(properties("AUTH"))})


def _simple(cls: str) -> Any:
    return lambda level: st.just(Spec(cls))


_BUILDERS = [connect, connack, publish, ack, subscribe, suback, unsubscribe, unsuback,
             _simple("PingReq"), _simple("PingResp"), disconnect]


@st.composite
def packet(draw: st.DrawFn, level: int | None = None) -> tuple[Spec, int]:
    """A valid packet and the level to encode it at."""
    level = level if level is not None else draw(st.sampled_from([3, 4, 5]))
    builders = _BUILDERS + [auth] if level == 5 else _BUILDERS
    return draw(draw(st.sampled_from(builders))(level)), level


# ---------------------------------------------------------------------------------------
# Comparing the implementations' results: field by field, types included.

FIELDS: dict[str, tuple[str, ...]] = {
    "Connect": ("client_id", "protocol_version", "protocol_name", "clean_start",
                "keep_alive", "username", "password", "will", "properties"),
    "Will": ("topic", "payload", "qos", "retain", "properties"),
    "ConnAck": ("session_present", "reason_code", "properties"),
    "Publish": ("topic", "payload", "qos", "retain", "dup", "packet_id", "properties"),
    "PubAck": ("packet_id", "reason_code", "properties"),
    "PubRec": ("packet_id", "reason_code", "properties"),
    "PubRel": ("packet_id", "reason_code", "properties"),
    "PubComp": ("packet_id", "reason_code", "properties"),
    "Subscribe": ("packet_id", "subscriptions", "properties"),
    "Subscription": ("topic_filter", "qos", "no_local", "retain_as_published",
                     "retain_handling"),
    "SubAck": ("packet_id", "reason_codes", "properties"),
    "Unsubscribe": ("packet_id", "topic_filters", "properties"),
    "UnsubAck": ("packet_id", "reason_codes", "properties"),
    "PingReq": (),
    "PingResp": (),
    "Disconnect": ("reason_code", "properties"),
    "Auth": ("reason_code", "properties"),
}


def canon(value: Any) -> Any:
    """A plain, implementation-independent form of a decoded value."""
    if isinstance(value, Properties):
        return tuple((n, canon(v)) for n, v in value.items()) or None
    name = type(value).__name__
    if name in FIELDS:
        return (name, tuple((f, canon(getattr(value, f))) for f in FIELDS[name]))
    if isinstance(value, list):
        return ("list", [canon(v) for v in value])
    if isinstance(value, tuple):
        return ("tuple", tuple(canon(v) for v in value))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):  # an IntEnum member counts as its value
        return ("int", int(value))
    return (type(value).__name__, value)


def _error(exc: MQTTWireError) -> tuple[Any, ...]:
    return ("error", type(exc).__name__, exc.reason_code, exc.offset, exc.rule,
            exc.packet_type, str(exc))


def outcome(m: ModuleType, data: bytes, version: int) -> tuple[Any, ...]:
    """What ``m.decode`` and ``m.decode_from`` (at an offset, with bytes after) make of
    ``data``: the packet, or the error's every detail.  Anything but an MQTTWireError (an
    IndexError, say) propagates and fails the test."""
    try:
        whole: tuple[Any, ...] = ("packet", canon(m.decode(data, version=version)))
    except MQTTWireError as exc:
        whole = _error(exc)
    try:
        found = m.decode_from(b"\xc0\x00" + data + b"\xd0\x00", 2, version=version)
        part: tuple[Any, ...] = ("none",) if found is None else ("packet", canon(found[0]),
                                                               found[1])
    except MQTTWireError as exc:
        part = _error(exc)
    return whole, part


def stream_outcome(m: ModuleType, data: bytes, version: int) -> tuple[Any, ...]:
    dec = m.StreamDecoder(version)
    try:
        return ("packets", canon(dec.feed(data)))
    except MQTTWireError as exc:
        return ("error", type(exc).__name__, exc.reason_code, exc.offset, exc.rule,
                str(exc), canon(exc.packets))


# ---------------------------------------------------------------------------------------
# Round trips, in each implementation


@SETTINGS
@given(packet())
def test_round_trip(codec: ModuleType, spec_level: tuple[Spec, int]) -> None:
    spec, level = spec_level
    pkt = make(codec, spec)
    data = codec.encode(pkt, version=level)
    assert pkt.encode(version=level) == data
    decoded = codec.decode(data, version=level)
    assert decoded == pkt
    assert canon(decoded) == canon(pkt)
    assert codec.encode(decoded, version=level) == data
    stream_level = None if spec.cls == "Connect" else level
    assert codec.StreamDecoder(stream_level).feed(data) == [pkt]


# ---------------------------------------------------------------------------------------
# The two implementations against each other


@SETTINGS
@given(packet())
def test_same_bytes_and_packets(both_codecs: tuple[ModuleType, ModuleType],
                                spec_level: tuple[Spec, int]) -> None:
    spec, level = spec_level
    cy, py = both_codecs
    data = cy.encode(make(cy, spec), version=level)
    assert py.encode(make(py, spec), version=level) == data
    assert canon(cy.decode(data, version=level)) == canon(py.decode(data, version=level))
    assert repr(cy.decode(data, version=level)) == repr(py.decode(data, version=level))


_FIRST_BYTES = st.sampled_from(
    [0x10, 0x20, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x38, 0x3B, 0x3D, 0x40, 0x50,
     0x62, 0x70, 0x82, 0x90, 0xA2, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0]
)


@st.composite
def plausible_bytes(draw: st.DrawFn) -> bytes:
    """A first byte of a real packet type, a Remaining Length that fits, random body."""
    body = draw(st.binary(max_size=40))
    return bytes((draw(_FIRST_BYTES), len(body))) + body


@SETTINGS
@given(st.one_of(st.binary(max_size=48), plausible_bytes()), st.sampled_from([3, 4, 5]))
def test_random_bytes_same_outcome(both_codecs: tuple[ModuleType, ModuleType], data: bytes,
                                   version: int) -> None:
    cy, py = both_codecs
    assert outcome(cy, data, version) == outcome(py, data, version)
    assert stream_outcome(cy, data, version) == stream_outcome(py, data, version)


def mutate(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with one to three bytes changed, flipped, inserted or deleted."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "xor", "insert", "delete"]))
        i = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "set" and buf:
            buf[i] = draw(st.integers(0, 255))
        elif op == "xor" and buf:
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            buf.insert(i, draw(st.integers(0, 255)))
        elif buf:
            del buf[i]
    return bytes(buf)


@st.composite
def mutation_of(draw: st.DrawFn, data: bytes) -> bytes:
    return mutate(draw, data)


@st.composite
def mutated_vector(draw: st.DrawFn) -> tuple[bytes, int]:
    """A corpus vector, mutated."""
    data, version = draw(st.sampled_from(CORPUS_ITEMS))
    return mutate(draw, data), version


@examples(400)
@given(mutated_vector())
def test_mutated_vectors_same_outcome(both_codecs: tuple[ModuleType, ModuleType],
                                      mutated: tuple[bytes, int]) -> None:
    data, version = mutated
    cy, py = both_codecs
    assert outcome(cy, data, version) == outcome(py, data, version)
    assert stream_outcome(cy, data, version) == stream_outcome(py, data, version)


# Every byte of every corpus vector set to values that hit the decoders' checks: the
# extension's C readers of CONNECT, SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK and property
# blocks hand whatever they do not vouch for to the shared reference decoder, so each of
# their checks must agree with it on every position, not just on the positions that the
# random tests above happen to draw.
_PROBES = (0x00, 0x01, 0x03, 0x7F, 0x80, 0xFF, 0x23, 0x2B, 0x16, 0x26)


def test_every_byte_probed_same_outcome(both_codecs: tuple[ModuleType, ModuleType]) -> None:
    cy, py = both_codecs
    checked = 0
    for data, version in CORPUS_ITEMS:
        for i in range(len(data)):
            for probe in (*_PROBES, data[i] ^ 0x01, data[i] ^ 0x80):
                mutated = data[:i] + bytes((probe,)) + data[i + 1 :]
                assert outcome(cy, mutated, version) == outcome(py, mutated, version), (
                    mutated.hex(), version)
                checked += 1
    assert checked > 10_000  # the corpus is not empty


@st.composite
def session(draw: st.DrawFn) -> tuple[int | None, list[Spec]]:
    """(decoder version, packets): packets of one level, either after a CONNECT of that
    level for a decoder that learns it (version None), or for a decoder told the level."""
    level = draw(st.sampled_from([3, 4, 5]))
    specs = [s for s, _ in draw(st.lists(packet(level), min_size=1, max_size=6))
             if s.cls != "Connect"]  # a CONNECT comes first or not at all
    if draw(st.booleans()):
        return None, [draw(connect(level)), *specs]
    return level, specs


@SETTINGS
@given(session(), st.data())
def test_random_splits(both_codecs: tuple[ModuleType, ModuleType],
                       version_specs: tuple[int | None, list[Spec]],
                       data: st.DataObject) -> None:
    """A stream fed in random pieces gives the packets it gives whole, in both."""
    version, specs = version_specs
    level = version or specs[0].kwargs["protocol_version"]
    cy, py = both_codecs
    stream = b"".join(py.encode(make(py, s), version=level) for s in specs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    for m in (cy, py):
        whole = m.StreamDecoder(version).feed(stream)
        assert whole == [make(m, s) for s in specs]
        dec = m.StreamDecoder(version)
        assert [p for piece in pieces for p in dec.feed(piece)] == whole
        assert dec.version == level
    assert canon(cy.StreamDecoder(version).feed(stream)) == canon(
        py.StreamDecoder(version).feed(stream)
    )


@SETTINGS
@given(packet(), st.data())
def test_mutated_packets_same_outcome(both_codecs: tuple[ModuleType, ModuleType],
                                      spec_level: tuple[Spec, int],
                                      data: st.DataObject) -> None:
    """Random valid packets, mutated: the same outcome in both."""
    spec, level = spec_level
    cy, py = both_codecs
    bad = data.draw(mutation_of(py.encode(make(py, spec), version=level)))
    assert outcome(cy, bad, level) == outcome(py, bad, level)
    assert stream_outcome(cy, bad, level) == stream_outcome(py, bad, level)


@SETTINGS
@given(st.one_of(st.binary(max_size=12), plausible_bytes()), st.integers(2, 64))
def test_max_packet_size_same_outcome(both_codecs: tuple[ModuleType, ModuleType],
                                      data: bytes, limit: int) -> None:
    cy, py = both_codecs
    results = []
    for m in (cy, py):
        dec = m.StreamDecoder(5, max_packet_size=limit)
        try:
            results.append(("packets", canon(dec.feed(data))))
        except MQTTWireError as exc:
            results.append(_error(exc) + (canon(exc.packets),))
    assert results[0] == results[1]


# ---------------------------------------------------------------------------------------
# Encoding what may not be encodable: both refuse alike, or write the same bytes.

_ANY_TEXT = st.one_of(
    st.text(max_size=8),  # surrogates, U+0000 and wildcards included
    st.sampled_from(["", "+", "#", "a/+", "a/#", "$share/g/t", "\x00", "\ud800"]),
)
_ANY_INT = st.one_of(st.sampled_from([-1, 0, 1, 2, 3, 4, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000,
                                      268_435_455, 268_435_456, 2**32 - 1, 2**32]),
                     st.integers(-1, 300))
_ANY_PROPERTY: dict[str, st.SearchStrategy[Any]] = {
    name: (
        st.lists(st.tuples(_ANY_TEXT, _ANY_TEXT), max_size=2) if name == "user_properties"
        else st.lists(_ANY_INT, max_size=3) if name == "subscription_identifiers"
        else BINARY if name in ("correlation_data", "authentication_data")
        else _ANY_TEXT if isinstance(example, str)
        else _ANY_INT
    )
    for name, example in (
        (n, "" if n in ("content_type", "response_topic", "assigned_client_identifier",
                        "authentication_method", "response_information",
                        "server_reference", "reason_string") else 0)
        for n in _PROPERTY_VALUES
    )
}
_ANY_PROPERTIES = st.fixed_dictionaries({}, optional=_ANY_PROPERTY).map(
    lambda d: Properties(**d)
)


def _replacement(value: Any) -> st.SearchStrategy[Any]:
    """Values of the same kind as ``value``, valid or not."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return _ANY_INT
    if isinstance(value, str):
        return _ANY_TEXT
    if isinstance(value, bytes):
        return BINARY
    if isinstance(value, Properties):
        return _ANY_PROPERTIES
    if isinstance(value, list) and value and isinstance(value[0], int):
        return st.lists(_ANY_INT, max_size=3)  # reason codes
    if isinstance(value, list) and value and isinstance(value[0], str):
        return st.lists(_ANY_TEXT, max_size=3)  # topic filters
    if isinstance(value, list):
        return st.just([])
    return st.just(value)


#: What an absent optional field may become.
_FOR_NONE: dict[str, st.SearchStrategy[Any]] = {
    "properties": _ANY_PROPERTIES,
    "will": st.builds(lambda t, q: Spec("Will", (t,), {"qos": q}), _ANY_TEXT, _ANY_INT),
    "username": _ANY_TEXT,
    "password": BINARY,
    "packet_id": _ANY_INT,
}


@st.composite
def perturbed(draw: st.DrawFn) -> tuple[Spec, int]:
    """A valid packet with one field (or a field of its Will or a Subscription) replaced
    by a value that may be invalid."""
    spec, level = draw(packet())
    level = draw(st.sampled_from([level, 3, 4, 5]))  # sometimes the wrong level

    def change(s: Spec) -> Spec:
        slots = [("arg", i) for i in range(len(s.args))] + [("kw", k) for k in s.kwargs]
        slots += [("kw", "properties")] if "properties" not in s.kwargs and s.cls not in (
            "Subscription", "PingReq", "PingResp") else []
        if not slots:
            return s
        where, key = draw(st.sampled_from(slots))
        old = s.args[key] if where == "arg" else s.kwargs.get(key)
        if isinstance(old, Spec):
            new: Any = change(old)
        elif isinstance(old, list) and old and isinstance(old[0], Spec):
            i = draw(st.integers(0, len(old) - 1))
            new = [*old[:i], change(old[i]), *old[i + 1:]]
        elif old is None and key in _FOR_NONE:
            new = draw(_FOR_NONE[key])
        else:
            new = draw(_replacement(old))
        if where == "arg":
            return Spec(s.cls, (*s.args[:key], new, *s.args[key + 1:]), s.kwargs)
        return Spec(s.cls, s.args, {**s.kwargs, key: new})

    return change(spec), level


def encode_outcome(m: ModuleType, spec: Spec, level: int) -> tuple[Any, ...]:
    try:
        return ("bytes", m.encode(make(m, spec), version=level))
    except MQTTWireError as exc:
        return _error(exc)
    except (TypeError, ValueError, OverflowError):
        # Argument checks that are not about MQTT may be worded by Cython itself.
        return ("not encodable",)


@examples(400)
@given(perturbed())
def test_encode_refuses_alike(both_codecs: tuple[ModuleType, ModuleType],
                              spec_level: tuple[Spec, int]) -> None:
    """Both refuse the same packets with the same error, or write the same bytes; what
    they write, they decode back."""
    spec, level = spec_level
    cy, py = both_codecs
    result = encode_outcome(cy, spec, level)
    assert result == encode_outcome(py, spec, level)
    if result[0] == "bytes":
        assert outcome(cy, result[1], level) == outcome(py, result[1], level)
        assert outcome(py, result[1], level)[0][0] == "packet"


# ---------------------------------------------------------------------------------------
# Decoded property blocks (issue 16): the extension keeps a decoded block and builds the
# values on first access, the fallback builds them when decoding; both keep one copy of
# the block, and encoding and forwarding copy it while nothing changed.  A block may list
# its properties in any order (MQTT 5.0 §2.2.2), which the encoder (identifier order)
# never writes: these blocks are made property by property and shuffled.

_PUBLISH_PREFIX = bytes.fromhex("0003612f62")  # topic "a/b", QoS 0


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, low = n >> 7, n & 0x7F
        out.append(low | 0x80 if n else low)
        if not n:
            return bytes(out)


def _block_of(props: Properties) -> bytes:
    """The PUBLISH property block of ``props``, without its length prefix."""
    from mqttwire._codec.properties import encode_properties

    encoded = encode_properties(props, 3, "PUBLISH")
    skip = 1
    while encoded[skip - 1] & 0x80:
        skip += 1
    return encoded[skip:]


@st.composite
def shuffled_publish(draw: st.DrawFn) -> tuple[bytes, Properties]:
    """A v5 PUBLISH ("a/b", payload "x") whose property block lists random valid
    properties in random order, and those properties."""
    props = draw(properties("PUBLISH")) or Properties(content_type="x")
    if props.topic_alias is None and draw(st.booleans()):
        props.topic_alias = draw(st.integers(1, 0xFFFF))
    pieces = []
    for name, value in props.items():
        if name in ("user_properties", "subscription_identifiers"):
            pieces += [Properties(**{name: [one]}) for one in value]
        else:
            pieces.append(Properties(**{name: value}))
    pieces = draw(st.permutations(pieces))
    block = b"".join(_block_of(p) for p in pieces)
    body = _PUBLISH_PREFIX + _varint(len(block)) + block + b"x"
    # What decoding gives: the lists in the order of the shuffled block.
    values: dict[str, Any] = {}
    for piece in pieces:
        for name, value in piece.items():
            if isinstance(value, list):
                values.setdefault(name, []).extend(value)
            else:
                values[name] = value
    return b"\x30" + _varint(len(body)) + body, Properties(**values)


@SETTINGS
@given(shuffled_publish(), st.sampled_from(["untouched", "read", "pickled"]))
def test_decoded_blocks_agree(both_codecs: tuple[ModuleType, ModuleType],
                              wire_props: tuple[bytes, Properties], first: str) -> None:
    """Both implementations: equal packets and properties, the block written back as it
    came, and the same forwarded copies, whether the properties were read before or not;
    and a copy, pickled, that is a plain Properties with the same values."""
    import pickle

    data, props = wire_props
    results = []
    for m in both_codecs:
        pkt = m.decode(data, version=5)
        if first == "read":
            assert pkt.properties == props
        elif first == "pickled":
            again = pickle.loads(pickle.dumps(pkt.properties))
            assert type(again) is Properties and again == props
        prepared = m.PreparedPublish(pkt)
        forwarded = [prepared.encode(v, qos=q, packet_id=q and 5 or None,
                                     subscription_identifiers=ids,
                                     message_expiry_interval=exp)
                     for v in (4, 5) for q in (0, 1) for ids in ((), (7, 300))
                     for exp in (None, 60)]
        assert pkt.encode(5) == data  # the block, as it came
        assert pkt.properties == props
        results.append((canon(pkt), forwarded))
    assert results[0] == results[1]
