"""The two implementations expose the same API: names, signatures, fields, reprs.

Packets are cdef classes in the extension (C-level slots, freelists) and plain classes in
the fallback, so nothing but this test keeps their surfaces equal.
"""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest

import mqttwire
from mqttwire import _pure

PACKET_CLASSES = [
    "Auth", "ConnAck", "Connect", "Disconnect", "PingReq", "PingResp", "PubAck", "PubComp",
    "Publish", "PubRec", "PubRel", "SubAck", "Subscribe", "UnsubAck", "Unsubscribe",
]
PARTS = ["Will", "Subscription"]


def _public(obj: object) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def test_same_public_names(both_codecs: tuple[ModuleType, ModuleType]) -> None:
    cy, py = both_codecs
    assert sorted(cy.__all__) == sorted(py.__all__)
    for name in py.__all__:
        assert hasattr(cy, name), name


def _plain(sig: inspect.Signature) -> list[tuple[str, object, object]]:
    """A signature without annotations (the extension has none): name, kind, default."""
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize(
    "name", PACKET_CLASSES + PARTS + ["StreamDecoder", "PreparedPublish", "TopicTree"]
)
def test_same_members(name: str, both_codecs: tuple[ModuleType, ModuleType]) -> None:
    cy, py = both_codecs
    cy_cls, py_cls = getattr(cy, name), getattr(py, name)
    assert _public(cy_cls) == _public(py_cls)
    for member in _public(py_cls):
        py_attr = getattr(py_cls, member)
        if callable(py_attr) and not isinstance(py_attr, type):
            assert _plain(inspect.signature(getattr(cy_cls, member))) == _plain(
                inspect.signature(py_attr)
            ), member
    assert inspect.getdoc(cy_cls) == inspect.getdoc(py_cls)


@pytest.mark.parametrize("name", PACKET_CLASSES + PARTS)
def test_same_constructor(name: str, both_codecs: tuple[ModuleType, ModuleType]) -> None:
    """inspect cannot read a cdef class's constructor, so the fallback's signature is
    checked on the extension by calling it: same parameters, kinds and defaults."""
    cy, py = both_codecs
    cy_cls, py_cls = getattr(cy, name), getattr(py, name)
    params = list(inspect.signature(py_cls).parameters.values())
    positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = [p for p in params if p.kind is p.KEYWORD_ONLY]
    assert len(positional) + len(keyword) == len(params)
    required = [p for p in positional if p.default is p.empty]
    # Defaults: only the required arguments given.
    args = [[] if p.name in LIST_FIELDS else object() for p in required]
    a, b = cy_cls(*args), py_cls(*args)
    for p in params:
        expected = list(p.default) if isinstance(p.default, tuple) else p.default
        if p.default is not p.empty:
            assert getattr(a, p.name) == getattr(b, p.name) == expected, p.name
    # Every parameter by its kind, each with a distinct value that lands in its field.
    values = {p.name: [p.name] if p.name in LIST_FIELDS else f"<{p.name}>" for p in params}
    args = [values[p.name] for p in positional]
    kwargs = {p.name: values[p.name] for p in keyword}
    a, b = cy_cls(*args, **kwargs), py_cls(*args, **kwargs)
    for p in params:
        assert getattr(a, p.name) == getattr(b, p.name) == values[p.name], p.name
    # Keyword-only parameters are refused positionally by both.
    if keyword:
        for cls in (cy_cls, py_cls):
            with pytest.raises(TypeError):
                cls(*args, values[keyword[0].name])


LIST_FIELDS = {"subscriptions", "topic_filters", "reason_codes"}


def test_same_stream_decoder_constructor(both_codecs: tuple[ModuleType, ModuleType]) -> None:
    for m in both_codecs:
        dec = m.StreamDecoder()
        assert (dec.version, dec.max_packet_size) == (None, None)
        dec = m.StreamDecoder(4, max_packet_size=100)
        assert (dec.version, dec.max_packet_size) == (4, 100)
        with pytest.raises(TypeError):
            m.StreamDecoder(4, 100)


@pytest.mark.parametrize("name", ["decode", "decode_from", "encode"])
def test_same_function_signatures(name: str, both_codecs: tuple[ModuleType, ModuleType]) -> None:
    cy, py = both_codecs
    assert _plain(inspect.signature(getattr(cy, name))) == _plain(
        inspect.signature(getattr(py, name))
    )
    assert inspect.getdoc(getattr(cy, name)) == inspect.getdoc(getattr(py, name))


def test_decode_answers_every_call_alike(both_codecs: tuple[ModuleType, ModuleType]) -> None:
    """The extension's decode takes decode(data) and decode(data, version=...) in C and
    hands every other call to the function that parses its arguments: each call gives the
    same packet, or the same kind of error (the same message but for TypeError, whose
    wording is CPython's per kind of function), in both implementations."""
    cy, py = both_codecs
    wire = py.PubAck(7, reason_code=0x10).encode(5)
    name = "".join(["ver", "sion"])  # equal to the keyword, but not the interned str
    assert name == "version" and name is not sys.intern("version")
    calls = [
        lambda m: m.decode(wire),
        lambda m: m.decode(wire, version=5),
        lambda m: m.decode(wire, version=4),  # a reason code at 3.1.1: an error
        lambda m: m.decode(wire, **{name: 5}),
        lambda m: m.decode(wire, **{name: 4}),
        lambda m: m.decode(bytearray(wire), version=5),
        lambda m: m.decode(memoryview(wire)),
        lambda m: m.decode(data=wire),
        lambda m: m.decode(wire, 5),
        lambda m: m.decode(wire, version=5, extra=1),
        lambda m: m.decode(wire, versio=5),
        lambda m: m.decode(),
        lambda m: m.decode(wire, version=6),
        lambda m: m.decode(wire, version="5"),
        lambda m: m.decode(wire[:2], version=5),
    ]
    for i, call in enumerate(calls):
        got = []
        for m in (cy, py):
            try:
                got.append(("returned", repr(call(m))))
            except Exception as exc:
                got.append(("raised", type(exc).__name__,
                            "" if type(exc) is TypeError else str(exc)))
        assert got[0] == got[1], f"call {i}: {got}"
    assert [repr(c(cy)) for c in calls[:2]] == [repr(py.PubAck(7, reason_code=0x10))] * 2


def _sample(m: ModuleType) -> list[object]:
    props = mqttwire.Properties(user_properties=[("k", "v")], reason_string="why")
    return [
        m.Connect("c", protocol_version=4, will=m.Will("w", b"x", qos=1), username="u"),
        m.ConnAck(session_present=True),
        m.Publish("a/b", b"p" * 100, qos=2, packet_id=9, retain=True),
        m.PubAck(1, reason_code=0x10, properties=props),
        m.PubRec(2),
        m.PubRel(3),
        m.PubComp(4),
        m.Subscribe(5, [m.Subscription("a/+", qos=1, no_local=True, retain_handling=2)]),
        m.SubAck(5, [0, 0x80]),
        m.Unsubscribe(6, ["a/#"]),
        m.UnsubAck(6, [0x11]),
        m.PingReq(),
        m.PingResp(),
        m.Disconnect(reason_code=4),
        m.Auth(),
    ]


def test_equal_packets_have_equal_reprs_and_compare_equal(
    both_codecs: tuple[ModuleType, ModuleType],
) -> None:
    cy, py = both_codecs
    for a, b in zip(_sample(cy), _sample(py)):
        assert repr(a) == repr(b)
        assert a == b and b == a
        assert type(a).__module__ == "mqttwire._speedups"
        with pytest.raises(TypeError):  # mutable, so unhashable, in both
            hash(a)
        with pytest.raises(TypeError):
            hash(b)


def test_packet_type_attributes(both_codecs: tuple[ModuleType, ModuleType]) -> None:
    for m in both_codecs:
        for name in PACKET_CLASSES:
            cls = getattr(m, name)
            assert cls.packet_type == mqttwire.PacketType[name.upper()]


def test_stub_names_match_the_extension(both_codecs: tuple[ModuleType, ModuleType]) -> None:
    """_speedups.pyi re-exports _pure's types; it must name exactly the extension's API."""
    stub = pathlib.Path(mqttwire.__file__).with_name("_speedups.pyi")
    tree = ast.parse(stub.read_text())
    names = {
        alias.asname
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert names == set(both_codecs[0].__all__) == set(_pure.__all__)


def test_package_reexports_the_chosen_implementation() -> None:
    impl = mqttwire._implementation.impl
    for name in impl.__all__:
        assert getattr(mqttwire, name) is getattr(impl, name), name


def _outcome(make) -> str:
    try:
        return make().hex()
    except Exception as exc:  # the class and message are what is compared
        return f"{type(exc).__name__}: {exc}"


HUGE = 2**70  # no C integer holds it: the extension must not raise OverflowError

BAD_FIELDS = [
    # The extension encodes well-typed, valid packets in C and hands everything else to the
    # shared reference encoder: these reach that hand-over, and must end alike.
    ("Publish", ("t",), {"properties": {"a": 1}}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(topic_alias=0)}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(message_expiry_interval=2**40)}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(user_properties=[("a", "\x00")])}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(response_topic="a/#")}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(correlation_data="text")}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(subscription_identifiers=[0])}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(session_expiry_interval=1)}),
    ("Publish", ("t\ud800",), {}),
    ("Publish", ("t",), {"qos": 1}),
    ("Publish", ("t",), {"qos": True}),
    ("Publish", ("t",), {"qos": HUGE}),
    ("Publish", ("t",), {"qos": 1, "packet_id": HUGE}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(message_expiry_interval=HUGE)}),
    ("Publish", ("t",), {"properties": mqttwire.Properties(subscription_identifiers=[HUGE])}),
    ("Connect", ("c",), {"properties": {"a": 1}}),
    ("Connect", ("c",), {"keep_alive": 70_000}),
    ("Connect", ("c",), {"keep_alive": HUGE}),
    ("Connect", ("c",), {"protocol_version": HUGE}),
    ("Connect", ("c",), {"protocol_version": 4, "password": b"x"}),
    ("Connect", ("c",), {"protocol_version": 4,
                         "properties": mqttwire.Properties(session_expiry_interval=1)}),
    ("Connect", ("c",), {"properties": mqttwire.Properties(topic_alias=3)}),
    ("Connect", ("c\x00",), {}),
    ("PubAck", (0,), {}),
    ("PubAck", (HUGE,), {}),
    ("PubAck", (1,), {"reason_code": HUGE}),
    ("PubAck", (1,), {"reason_code": 0x99, "properties": mqttwire.Properties(reason_string="r")}),
    ("Subscribe", (0, [("a", {})]), {}),
    ("Subscribe", (1, []), {}),
    ("Subscribe", (1, [("", {})]), {}),
    ("Subscribe", (1, [("a\x00", {})]), {}),
    ("Subscribe", (1, [("a", {"qos": 3})]), {}),
    ("Subscribe", (1, [("a", {"retain_handling": 3})]), {}),
    ("Subscribe", (HUGE, [("a", {})]), {}),
    ("Subscribe", (1, [("a", {"qos": HUGE})]), {}),
    ("Subscribe", (1, [("a", {"retain_handling": HUGE})]), {}),
    ("Subscribe", (1, [("a", {"no_local": 1})]), {}),  # truthy, not a bool
    ("Subscribe", (1, [("a", {"retain_as_published": True})]), {}),
    ("Subscribe", (1, [("$share/g/a", {"no_local": True})]), {}),
    ("Subscribe", (1, [(b"a", {})]), {}),
    ("Subscribe", (1, [("a", {})]), {"properties": mqttwire.Properties(topic_alias=1)}),
    ("Subscribe", (1, [("a", {})]),
     {"properties": mqttwire.Properties(subscription_identifiers=[1, 2])}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), BAD_FIELDS)
@pytest.mark.parametrize("version", [4, 5])
def test_encoder_hand_over_gives_the_same_outcome(
    both_codecs: tuple[ModuleType, ModuleType], name: str, args: tuple, kwargs: dict, version: int
) -> None:
    cy, py = both_codecs
    outcomes = [_outcome(lambda m=m: _build(m, name, args, kwargs).encode(version))
                for m in (cy, py)]
    assert outcomes[0] == outcomes[1]


def _build(m: ModuleType, name: str, args: tuple, kwargs: dict) -> Any:
    if name == "Subscribe":  # (packet id, [(topic filter, Subscription options)])
        args = (args[0], [m.Subscription(f, **options) for f, options in args[1]])
    return getattr(m, name)(*args, **kwargs)


def test_encoder_hand_over_for_will_fields(both_codecs: tuple[ModuleType, ModuleType]) -> None:
    cy, py = both_codecs
    for will_kwargs in ({"qos": 3}, {"qos": HUGE}, {"topic": "a/+"}, {"topic": ""},
                        {"payload": "text"},
                        {"properties": mqttwire.Properties(will_delay_interval=5)},
                        {"properties": mqttwire.Properties(topic_alias=5)}):
        fields = {"topic": "w", **will_kwargs}
        topic = fields.pop("topic")
        outcomes = [
            _outcome(lambda m=m, t=topic, f=fields: m.Connect("c", will=m.Will(t, **f)).encode())
            for m in (cy, py)
        ]
        assert outcomes[0] == outcomes[1], will_kwargs


@pytest.mark.parametrize("version", [HUGE, 6, 2, True, "5"])
def test_bad_protocol_version_argument_gives_the_same_outcome(
    both_codecs: tuple[ModuleType, ModuleType], version: object
) -> None:
    for make in (lambda m: m.PubAck(1).encode(version),
                 lambda m: m.Subscribe(1, [m.Subscription("a")]).encode(version),
                 lambda m: m.decode(b"\xe0\x00", version=version)):
        outcomes = [_outcome(lambda m=m, make=make: make(m)) for m in both_codecs]
        assert outcomes[0] == outcomes[1]
        assert outcomes[0].startswith("ValueError: "), outcomes
        assert "protocol version must be 3, 4 or 5" in outcomes[0], outcomes


@pytest.mark.parametrize("version", [HUGE, 6, 2, 0, True, "5", None, 4.5])
def test_one_message_for_a_bad_protocol_version(
    both_codecs: tuple[ModuleType, ModuleType], version: object
) -> None:
    # One check (_codec.datatypes.check_version) words the error wherever a level is given: both
    # codecs, every packet type, the decoders, PreparedPublish, and both topic twins.
    import mqttwire._topics as topics
    import mqttwire._topics_c as ctopics

    expected = f"ValueError: protocol version must be 3, 4 or 5, not {version!r}"
    makes = [
        lambda m: m.ConnAck().encode(version),
        lambda m: m.PingReq().encode(version),
        lambda m: m.Publish("t").encode(version),
        lambda m: m.PubRec(1).encode(version),
        lambda m: m.Disconnect().encode(version),
        lambda m: m.Unsubscribe(1, ["a"]).encode(version),
        lambda m: m.Connect("c", protocol_version=version).encode(),
        lambda m: m.PreparedPublish(m.Publish("t")).encode(version),
        lambda m: m.decode(b"\xc0\x00", version=version),
        lambda m: m.decode_from(b"\xc0\x00", version=version),
    ]
    if version is not None:  # None makes a server-side StreamDecoder
        makes.append(lambda m: m.StreamDecoder(version))
    for make in makes:
        for m in both_codecs:
            assert _outcome(lambda m=m, make=make: make(m)) == expected
    for t in (ctopics, topics):
        for func in (t.validate_topic_name, t.validate_topic_filter):
            assert _outcome(lambda func=func: func("a", version=version)) == expected


@pytest.mark.parametrize(("topic", "payload", "properties"), [
    ("a/#", b"", None),
    ("", b"", mqttwire.Properties(topic_alias=1)),
    ("t", "text", None),
    ("t", bytearray(b"x"), None),
    ("t\x00", b"", None),
    ("t", b"", {"a": 1}),
    ("t", b"", mqttwire.Properties(response_topic="r/+")),
    ("t", b"", mqttwire.Properties(session_expiry_interval=5)),
    ("t", b"", mqttwire.Properties(topic_alias=0, content_type="c")),
    ("t", b"", mqttwire.Properties(message_expiry_interval=9, user_properties=[("k", "v")])),
])
def test_prepared_publish_hand_over_gives_the_same_outcome(
    both_codecs: tuple[ModuleType, ModuleType], topic: str, payload: object, properties: object
) -> None:
    """PreparedPublish prepares well-typed, valid messages in C and hands the rest to the
    shared reference: both must end alike, bytes or error."""
    outcomes = [
        _outcome(lambda m=m: m.PreparedPublish(
            m.Publish(topic, payload, properties=properties)).encode(5, qos=1, packet_id=2))
        for m in both_codecs
    ]
    assert outcomes[0] == outcomes[1]


@pytest.mark.c_extension
@pytest.mark.parametrize(("twin", "other"), [
    ("mqttwire._speedups", "mqttwire._pure"),
    ("mqttwire._topics_c", "mqttwire._topics"),
])
def test_the_cython_twin_does_not_import_the_python_one(twin: str, other: str) -> None:
    # The contract between the twins is the shared modules' public names, not each
    # other's privates: importing the extension alone must not load its Python twin.
    code = f"import sys, {twin}; print({other!r} in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "MQTTWIRE_PURE_PYTHON"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("name", PACKET_CLASSES + PARTS)
def test_field_list_names_every_field(name: str) -> None:
    # __eq__ and __repr__ of both implementations come from the class's field list
    # (mqttwire._codec.fields): a field missing from it would be neither compared nor shown.
    cls = getattr(_pure, name)
    slots = {s for klass in cls.__mro__ for s in getattr(klass, "__slots__", ())}
    assert {field for field, _ in cls._fields} == slots


def test_fields_are_set_read_and_deleted_alike(
        both_codecs: tuple[ModuleType, ModuleType]) -> None:
    """Every field of every packet and part: what is set is read back, in both twins;
    an unknown attribute cannot be set.  A deleted field reads as None in the extension
    (as Cython's own setter made it: its C code never meets an empty slot; the
    extension serves reads through member descriptors and writes through its own
    setter), where ``_pure``'s slot is then unset; encoding after it does not crash."""
    cy, py = both_codecs
    for a, b in zip(_sample(cy) + [cy.Will("t"), cy.Subscription("f")],
                    _sample(py) + [py.Will("t"), py.Subscription("f")]):
        for field, _ in type(b)._fields:
            for obj in (a, b):
                marker = object()
                setattr(obj, field, marker)
                assert getattr(obj, field) is marker, (type(obj), field)
            for obj in (a, b):
                with pytest.raises(AttributeError):
                    obj.not_a_field = 1
            delattr(a, field)
            assert getattr(a, field) is None, (type(a), field)
            delattr(b, field)
            with pytest.raises(AttributeError):
                getattr(b, field)
        if hasattr(a, "encode"):
            try:  # every field None: an error or bytes, never a crash (the C encoders)
                a.encode(5)
            except (TypeError, ValueError, AttributeError, mqttwire.MQTTWireError):
                pass
    # Through the descriptor itself, the extension's fields are read-only: nothing can
    # leave a slot empty.
    pub = cy.Publish("a/b")
    with pytest.raises(AttributeError):
        type(pub).__dict__["topic"].__delete__(pub)
    with pytest.raises(AttributeError):
        type(pub).__dict__["topic"].__set__(pub, "x")
    assert pub.topic == "a/b"
