"""Topic names and filters: validation, matching and shared subscriptions (MQTT 3.1.1 §4.7,
MQTT 5.0 §4.7 and §4.8.2), against both implementations."""

from __future__ import annotations

import importlib
import inspect
import re
from types import ModuleType

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mqttwire._codec.datatypes import read_utf8
from mqttwire._errors import MalformedPacket, MQTTWireError, ProtocolError

# ---------------------------------------------------------------------------------------
# The OASIS examples (MQTT 3.1.1 and 5.0 §4.7.1, §4.7.2, §4.7.3)

MATCHING = [
    # §4.7.1.2 multi-level wildcard: the parent and any number of child levels
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("#", "sport/tennis", True),
    # §4.7.1.3 single-level wildcard: exactly one level
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("sport/+/player1", "sport/tennis/player1", True),
    ("+/tennis/#", "sport/tennis/player1/ranking", True),
    # §4.7.2 topics beginning with '$' [MQTT-4.7.2-1]
    ("#", "$SYS/broker/uptime", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    # §4.7.3: case sensitive, no normalisation; leading/trailing '/' and empty levels count
    ("ACCOUNTS", "Accounts", False),
    ("Accounts payable", "Accounts payable", True),
    ("/", "/", True),
    ("a/", "a", False),
    ("/a", "a", False),
    ("a//b", "a/b", False),
    ("a/+/b", "a//b", True),
    ("a/#", "a//", True),
    # a wildcard later in the filter does match '$' levels: only the first level is special
    ("$SYS/+", "$SYS/$x", True),
    ("a/+", "a/$b", True),
]


@pytest.mark.parametrize(("filter", "name", "expected"), MATCHING)
def test_topic_matches_oasis_examples(
    codec: ModuleType, filter: str, name: str, expected: bool
) -> None:
    assert codec.topic_matches(filter, name) is expected


@pytest.mark.parametrize(
    ("filter", "name", "expected"),
    [
        # A shared subscription matches on its inner filter (MQTT 5.0 §4.8.2)...
        ("$share/consumer1/sport/tennis/+", "sport/tennis/player1", True),
        ("$share/consumer1/sport/tennis/+", "sport/tennis", False),
        ("$share/g//finance", "/finance", True),
        ("$share/g/#", "anything/at/all", True),
        # ...so the '$' rule applies to the inner filter.
        ("$share/g/#", "$SYS/x", False),
        ("$share/g/$SYS/#", "$SYS/x", True),
        # The filter "$share/g/a" does not match the name "$share/g/a".
        ("$share/g/a", "$share/g/a", False),
        # A malformed shared filter matches nothing.
        ("$share", "$share", False),
        ("$share/g", "$share/g", False),
        ("$share//a", "a", False),
        ("$share/g+/a", "a", False),
        # "$shared" is not "$share": an ordinary filter.
        ("$shared/g/a", "$shared/g/a", True),
    ],
)
def test_topic_matches_shared(codec: ModuleType, filter: str, name: str, expected: bool) -> None:
    assert codec.topic_matches(filter, name) is expected


@pytest.mark.parametrize(
    "filter",
    ["#", "sport/tennis/#", "+", "+/tennis/#", "sport/+/player1", "/", "/+", "+/+", "a//b",
     " ", "$SYS/#", "$share/g/a/+", "é/+/#", "\U0001f600", "x" * 65535],
)
@pytest.mark.parametrize("version", [3, 4, 5])
def test_valid_filters(codec: ModuleType, filter: str, version: int) -> None:
    codec.validate_topic_filter(filter, version=version)


@pytest.mark.parametrize(
    "name", ["sport/tennis/player1", "/finance", "/", "$SYS/uptime", "a//b", " ", "é",
             "$share/g/a", "x" * 65535, "\u4e2d" * 21845]  # 21845 * 3 bytes == 65535
)
@pytest.mark.parametrize("version", [3, 4, 5])
def test_valid_names(codec: ModuleType, name: str, version: int) -> None:
    codec.validate_topic_name(name, version=version)


# ---------------------------------------------------------------------------------------
# Every validation rule: input, error class, rule per protocol level, byte offset, message

# (id, filter, class, rule at 3.1.1 (levels 3, 4), rule at 5.0, offset, what)
BAD_FILTERS = [
    # '#' must be alone in the last level: 3.1.1 [MQTT-4.7.1-2], 5.0 [MQTT-4.7.1-1]
    ("MQTT-4.7.1-1-not-alone", "sport/tennis#", MalformedPacket, "MQTT-4.7.1-2",
     "MQTT-4.7.1-1", 12, "multi-level wildcard '#' is not alone in its level"),
    ("MQTT-4.7.1-1-not-last", "sport/tennis/#/ranking", MalformedPacket, "MQTT-4.7.1-2",
     "MQTT-4.7.1-1", 13, "multi-level wildcard '#' is not the last level"),
    ("MQTT-4.7.1-1-first-not-last", "#/a", MalformedPacket, "MQTT-4.7.1-2",
     "MQTT-4.7.1-1", 0, "multi-level wildcard '#' is not the last level"),
    ("MQTT-4.7.1-1-before", "#a", MalformedPacket, "MQTT-4.7.1-2", "MQTT-4.7.1-1", 0,
     "multi-level wildcard '#' is not alone in its level"),
    ("MQTT-4.7.1-1-double", "a/##", MalformedPacket, "MQTT-4.7.1-2", "MQTT-4.7.1-1", 2,
     "multi-level wildcard '#' is not alone in its level"),
    # '+' must be a whole level: 3.1.1 [MQTT-4.7.1-3], 5.0 [MQTT-4.7.1-2]
    ("MQTT-4.7.1-2-after", "sport+", MalformedPacket, "MQTT-4.7.1-3", "MQTT-4.7.1-2", 5,
     "single-level wildcard '+' is not alone in its level"),
    ("MQTT-4.7.1-2-before", "+sport", MalformedPacket, "MQTT-4.7.1-3", "MQTT-4.7.1-2", 0,
     "single-level wildcard '+' is not alone in its level"),
    ("MQTT-4.7.1-2-double", "a/++", MalformedPacket, "MQTT-4.7.1-3", "MQTT-4.7.1-2", 2,
     "single-level wildcard '+' is not alone in its level"),
    # '+#' in one level: the first character found wrong is the '+'
    ("MQTT-4.7.1-2-plus-hash", "a/+#", MalformedPacket, "MQTT-4.7.1-3", "MQTT-4.7.1-2", 2,
     "single-level wildcard '+' is not alone in its level"),
    # offsets are in bytes: "é" is C3 A9, so the '+' of "é/a+" is byte 2 + 1 + 1 == 4
    ("MQTT-4.7.1-2-utf8-offset", "é/a+", MalformedPacket, "MQTT-4.7.1-3", "MQTT-4.7.1-2",
     4, "single-level wildcard '+' is not alone in its level"),
    # U+1F600 is 4 bytes (F0 9F 98 80): the '#' of "\U0001f600#" is byte 4
    ("MQTT-4.7.1-1-utf8-offset", "\U0001f600#", MalformedPacket, "MQTT-4.7.1-2",
     "MQTT-4.7.1-1", 4, "multi-level wildcard '#' is not alone in its level"),
    # at least one character [MQTT-4.7.3-1]
    ("MQTT-4.7.3-1", "", MalformedPacket, "MQTT-4.7.3-1", "MQTT-4.7.3-1", 0,
     "topic filter is empty"),
    # U+0000: the UTF-8 string rule the decoder cites (3.1.1 [MQTT-1.5.3-2], 5.0
    # [MQTT-1.5.4-2]); "a/" is 2 bytes, so the NUL is byte 2
    ("MQTT-1.5.4-2", "a/\x00", MalformedPacket, "MQTT-1.5.3-2", "MQTT-1.5.4-2", 2,
     "topic filter contains U+0000"),
    # a lone surrogate is not UTF-8 (3.1.1 [MQTT-1.5.3-1], 5.0 [MQTT-1.5.4-1]); "ab" is 2
    # bytes, so the surrogate starts at byte 2
    ("MQTT-1.5.4-1", "ab\udc80", MalformedPacket, "MQTT-1.5.3-1", "MQTT-1.5.4-1", 2,
     "topic filter is not well-formed UTF-8 (invalid continuation byte)"),
    # 65,536 bytes [MQTT-4.7.3-3]
    ("MQTT-4.7.3-3", "x" * 65536, MalformedPacket, "MQTT-4.7.3-3", "MQTT-4.7.3-3", 0,
     "topic filter is longer than 65,535 bytes (65536)"),
    # 21,846 three-byte characters: 65,538 bytes, though only 21,846 characters
    ("MQTT-4.7.3-3-utf8", "\u4e2d" * 21846, MalformedPacket, "MQTT-4.7.3-3",
     "MQTT-4.7.3-3", 0, "topic filter is longer than 65,535 bytes (65538)"),
]


@pytest.mark.parametrize(
    ("filter", "cls", "rule311", "rule5", "offset", "what"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_FILTERS],
)
@pytest.mark.parametrize("version", [3, 4, 5])
def test_bad_filters(
    codec: ModuleType, filter: str, cls: type, rule311: str, rule5: str, offset: int,
    what: str, version: int,
) -> None:
    with pytest.raises(cls) as info:
        codec.validate_topic_filter(filter, version=version)
    exc = info.value
    expected_rule = rule5 if version == 5 else rule311
    assert type(exc) is cls
    assert (exc.packet_type, exc.what, exc.offset, exc.rule) == (
        "SUBSCRIBE", what, offset, expected_rule
    )
    assert str(exc) == f"SUBSCRIBE: {what} at offset {offset} [{expected_rule}]"
    assert exc.reason_code == 0x81  # Malformed Packet


# (id, name, rule at 3.1.1, rule at 5.0, offset, what)
BAD_NAMES = [
    ("MQTT-3.3.2-2-plus", "sport/+", "MQTT-3.3.2-2", "MQTT-3.3.2-2", 6,
     "topic name contains wildcard '+'"),
    ("MQTT-3.3.2-2-hash", "sport/tennis/#", "MQTT-3.3.2-2", "MQTT-3.3.2-2", 13,
     "topic name contains wildcard '#'"),
    # whichever wildcard comes first: the '#' at byte 1
    ("MQTT-3.3.2-2-first", "a#+", "MQTT-3.3.2-2", "MQTT-3.3.2-2", 1,
     "topic name contains wildcard '#'"),
    # "éé" is 4 bytes: the '+' is byte 4
    ("MQTT-3.3.2-2-utf8-offset", "éé+", "MQTT-3.3.2-2", "MQTT-3.3.2-2", 4,
     "topic name contains wildcard '+'"),
    ("MQTT-4.7.3-1", "", "MQTT-4.7.3-1", "MQTT-4.7.3-1", 0, "topic name is empty"),
    ("MQTT-1.5.4-2", "\x00", "MQTT-1.5.3-2", "MQTT-1.5.4-2", 0,
     "topic name contains U+0000"),
    # "é" is 2 bytes, then a high surrogate
    ("MQTT-1.5.4-1", "é\ud800", "MQTT-1.5.3-1", "MQTT-1.5.4-1", 2,
     "topic name is not well-formed UTF-8 (invalid continuation byte)"),
    ("MQTT-4.7.3-3", "x" * 65536, "MQTT-4.7.3-3", "MQTT-4.7.3-3", 0,
     "topic name is longer than 65,535 bytes (65536)"),
]


@pytest.mark.parametrize(
    ("name", "rule311", "rule5", "offset", "what"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_NAMES],
)
@pytest.mark.parametrize("version", [3, 4, 5])
def test_bad_names(
    codec: ModuleType, name: str, rule311: str, rule5: str, offset: int, what: str,
    version: int,
) -> None:
    with pytest.raises(MalformedPacket) as info:
        codec.validate_topic_name(name, version=version)
    exc = info.value
    expected_rule = rule5 if version == 5 else rule311
    assert (exc.packet_type, exc.what, exc.offset, exc.rule) == (
        "PUBLISH", what, offset, expected_rule
    )


def test_errors_follow_the_codec_order(codec: ModuleType) -> None:
    # UTF-8 first, then U+0000, then emptiness/length, then wildcards, as read_utf8 and
    # then the topic checks meet them.
    with pytest.raises(MalformedPacket, match="UTF-8"):
        codec.validate_topic_filter("\x00+a\udc00")
    with pytest.raises(MalformedPacket, match="U\\+0000"):
        codec.validate_topic_filter("+a\x00")
    with pytest.raises(MalformedPacket, match="longer than"):
        codec.validate_topic_filter("+a" * 40000)


@pytest.mark.parametrize("text", ["a\ud800", "é/\udfff/x", "\udc00"])
def test_surrogate_error_is_the_decoders(codec: ModuleType, text: str) -> None:
    # A str holding a lone surrogate is reported as the decoder reports the same code
    # point arriving as bytes (its only UTF-8-like form, ED xx xx), offset and all.
    raw = text.encode("utf-8", "surrogatepass")
    data = len(raw).to_bytes(2, "big") + raw
    with pytest.raises(MalformedPacket) as decoded:
        read_utf8(data, 0, len(data), "PUBLISH", "topic name", 5)
    with pytest.raises(MalformedPacket) as validated:
        codec.validate_topic_name(text)
    # The decoder's offset counts the 2-byte length prefix.
    assert validated.value.offset == decoded.value.offset - 2
    assert validated.value.what == decoded.value.what


# (id, filter, rule, offset, what): MQTT 5.0 only, so ProtocolError with 5.0 numbers
BAD_SHARED = [
    ("MQTT-4.8.2-1-no-name", "$share", "MQTT-4.8.2-1", 6,
     "shared subscription has no ShareName"),
    ("MQTT-4.8.2-1-empty-end", "$share/", "MQTT-4.8.2-1", 7,
     "shared subscription has no ShareName"),
    ("MQTT-4.8.2-1-empty", "$share//sport", "MQTT-4.8.2-1", 7,
     "shared subscription has no ShareName"),
    ("MQTT-4.8.2-2-plus", "$share/a+b/sport", "MQTT-4.8.2-2", 8, "ShareName contains '+'"),
    ("MQTT-4.8.2-2-hash", "$share/#/sport", "MQTT-4.8.2-2", 7, "ShareName contains '#'"),
    # "$share/" is 7 bytes, "é" 2: the '+' is byte 9
    ("MQTT-4.8.2-2-utf8-offset", "$share/é+/a", "MQTT-4.8.2-2", 9, "ShareName contains '+'"),
    ("MQTT-4.8.2-2-no-slash", "$share/group", "MQTT-4.8.2-2", 12,
     "ShareName is not followed by '/' and a topic filter"),
    ("MQTT-4.8.2-2-no-filter", "$share/group/", "MQTT-4.8.2-2", 13,
     "ShareName is not followed by '/' and a topic filter"),
]


@pytest.mark.parametrize(
    ("filter", "rule", "offset", "what"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_SHARED],
)
def test_bad_shared(codec: ModuleType, filter: str, rule: str, offset: int, what: str) -> None:
    for call in (codec.parse_shared, lambda f: codec.validate_topic_filter(f, version=5)):
        with pytest.raises(ProtocolError) as info:
            call(filter)
        exc = info.value
        assert (exc.packet_type, exc.what, exc.offset, exc.rule) == (
            "SUBSCRIBE", what, offset, rule
        )
        assert exc.reason_code == 0x82  # Protocol Error


@pytest.mark.parametrize("filter", ["$share", "$share/", "$share//a", "$share/g", "$share/g/"])
@pytest.mark.parametrize("version", [3, 4])
def test_share_is_ordinary_before_mqtt5(codec: ModuleType, filter: str, version: int) -> None:
    # MQTT 3.1.1 has no shared subscriptions: these are ordinary (valid) filters.
    codec.validate_topic_filter(filter, version=version)


def test_shared_wildcards_are_checked_at_level_3(codec: ModuleType) -> None:
    # ...and an ordinary filter's '+' must still be a whole level: byte 8 of "$share/a+/b"
    with pytest.raises(MalformedPacket) as info:
        codec.validate_topic_filter("$share/a+/b", version=4)
    assert (info.value.offset, info.value.rule) == (8, "MQTT-4.7.1-3")


def test_shared_inner_filter_is_validated(codec: ModuleType) -> None:
    # "$share/g/" is 9 bytes: the '#' of "a#" is byte 10
    with pytest.raises(MalformedPacket) as info:
        codec.validate_topic_filter("$share/g/a#")
    assert (info.value.offset, info.value.rule) == (10, "MQTT-4.7.1-1")


@pytest.mark.parametrize(
    ("filter", "expected"),
    [
        ("$share/consumer1/sport/tennis/+", ("consumer1", "sport/tennis/+")),
        ("$share/g//finance", ("g", "/finance")),
        ("$share/g/$share/x", ("g", "$share/x")),
        ("$share/é/#", ("é", "#")),
        ("sport/tennis", None),
        ("$shared/g/a", None),
        ("$SHARE/g/a", None),  # topics are case sensitive
        ("a/$share/g/b", None),
        ("$share/g/a+", ("g", "a+")),  # the inner filter is validate_topic_filter's job
    ],
)
def test_parse_shared(codec: ModuleType, filter: str, expected: tuple[str, str] | None) -> None:
    assert codec.parse_shared(filter) == expected


@pytest.mark.parametrize("bad", [b"a/b", None, 1, bytearray(b"a")])
def test_only_str(codec: ModuleType, bad: object) -> None:
    with pytest.raises(TypeError, match="must be str"):
        codec.validate_topic_name(bad)
    with pytest.raises(TypeError, match="must be str"):
        codec.validate_topic_filter(bad)
    with pytest.raises(TypeError, match="must be str"):
        codec.parse_shared(bad)
    with pytest.raises(TypeError, match="must be str"):
        codec.topic_matches(bad, "a")
    with pytest.raises(TypeError, match="must be str"):
        codec.topic_matches("a", bad)


@pytest.mark.parametrize("version", [0, 2, 6, "5", None])
def test_unknown_version(codec: ModuleType, version: object) -> None:
    with pytest.raises(ValueError, match="protocol version must be 3, 4 or 5") as info:
        codec.validate_topic_name("a", version=version)
    assert not isinstance(info.value, MQTTWireError)
    with pytest.raises(ValueError, match="protocol version must be 3, 4 or 5"):
        codec.validate_topic_filter("a", version=version)


# ---------------------------------------------------------------------------------------
# Properties, against an independent oracle


def oracle_matches(filter: str, name: str) -> bool:
    """topic_matches for valid filters, written as a regular expression per filter."""
    if filter.split("/", 1)[0] == "$share":
        filter = filter.split("/", 2)[2]
    if name.startswith("$") and filter[0] in "+#":
        return False
    if filter == "#":
        pattern = ".*"
    else:
        tail = ""
        if filter.endswith("/#"):
            filter, tail = filter[:-2], "(/.*)?"
        levels = ["[^/]*" if lv == "+" else re.escape(lv) for lv in filter.split("/")]
        pattern = "/".join(levels) + tail
    return re.fullmatch(pattern, name, re.DOTALL) is not None


# Few distinct level texts, so that filters and names often meet.
LEVEL = st.sampled_from(["a", "b", "", "$", "$SYS", "é", "a b", "\U0001f600", "share"])


@st.composite
def topic_names(draw: st.DrawFn) -> str:
    name = "/".join(draw(st.lists(LEVEL, min_size=1, max_size=5)))
    assume(name)  # the one level "" makes the empty name
    return name


@st.composite
def topic_filters(draw: st.DrawFn, shared: bool = True) -> str:
    levels = draw(st.lists(st.one_of(LEVEL, st.just("+")), min_size=1, max_size=5))
    if draw(st.booleans()):
        levels[-1] = "#"  # replacing keeps "#" reachable as a whole filter
    filter = "/".join(levels)
    assume(filter)
    if shared and draw(st.integers(0, 4)) == 0:
        filter = f"$share/{draw(st.sampled_from(['g1', 'g2', 'é']))}/{filter}"
    return filter


def test_oracle_agrees_with_the_oasis_examples() -> None:
    for filter, name, expected in MATCHING:
        assert oracle_matches(filter, name) is expected, (filter, name)


@given(filter=topic_filters(), name=topic_names())
def test_topic_matches_agrees_with_oracle(codec: ModuleType, filter: str, name: str) -> None:
    codec.validate_topic_filter(filter)
    codec.validate_topic_name(name)
    assert codec.topic_matches(filter, name) is oracle_matches(filter, name)


@given(name=topic_names())
def test_a_name_matches_itself(codec: ModuleType, name: str) -> None:
    assert codec.topic_matches(name, name)


ANY_TEXT = st.text(alphabet=st.sampled_from("ab/+#$\x00é\ud800"), max_size=12)
# ...and as often behind "$share", so that the shared form is exercised.
ANY_FILTER = st.one_of(ANY_TEXT, ANY_TEXT.map(lambda text: "$share" + text))


@given(text=ANY_FILTER)
def test_validation_is_total(codec: ModuleType, text: str) -> None:
    # Any str is accepted or refused with an MQTTWireError, never anything else; a filter
    # without wildcards (and not shared) is valid exactly when it is a valid name.
    for version in (4, 5):
        outcomes = []
        for check in (codec.validate_topic_name, codec.validate_topic_filter):
            try:
                check(text, version=version)
                outcomes.append(True)
            except MQTTWireError:
                outcomes.append(False)
        if "+" not in text and "#" not in text and not text.startswith("$share"):
            assert outcomes[0] == outcomes[1]


@pytest.mark.c_extension
@settings(max_examples=500)
@given(filter=ANY_FILTER, name=ANY_TEXT)
def test_python_and_cython_agree_on_any_input(filter: str, name: str) -> None:
    # Both implementations are total on arbitrary strings and agree, errors included.
    cy = importlib.import_module("mqttwire._topics_c")
    py = importlib.import_module("mqttwire._topics")
    assert cy.topic_matches(filter, name) is py.topic_matches(filter, name)
    for func in ("validate_topic_name", "validate_topic_filter"):
        for version in (3, 5):
            outcome = []
            for module in (cy, py):
                try:
                    getattr(module, func)(filter, version=version)
                    outcome.append(None)
                except MQTTWireError as exc:
                    outcome.append((type(exc), str(exc)))
            assert outcome[0] == outcome[1]
    outcome = []
    for module in (cy, py):
        try:
            outcome.append(module.parse_shared(filter))
        except MQTTWireError as exc:
            outcome.append((type(exc), str(exc)))
    assert outcome[0] == outcome[1]


class Level(str):
    """A str subclass: accepted like a str."""


def test_str_subclasses(codec: ModuleType) -> None:
    codec.validate_topic_name(Level("a/b"))
    codec.validate_topic_filter(Level("a/+"))
    assert codec.parse_shared(Level("$share/g/a")) == ("g", "a")
    assert codec.topic_matches(Level("a/+"), Level("a/b"))
    with pytest.raises(MalformedPacket):
        codec.validate_topic_filter(Level("a+"))


PUBLIC = ["validate_topic_name", "validate_topic_filter", "topic_matches", "parse_shared"]
TREE_METHODS = ["insert", "remove", "remove_key", "match", "match_all"]


def _parameters(func: object) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(func).parameters.values()]


def _doc(obj: object) -> str:
    doc = obj.__doc__
    assert doc, obj
    return inspect.cleandoc(doc)


@pytest.mark.c_extension
def test_api_parity() -> None:
    # The twins expose the same names, parameters and docstrings.  Docstrings are compared
    # cleaned (inspect.cleandoc): from Python 3.13 the compiler strips their indentation,
    # which Cython's compiled docstrings keep.
    cy = importlib.import_module("mqttwire._topics_c")
    py = importlib.import_module("mqttwire._topics")
    assert set(cy.__all__) == set(PUBLIC) | {"TopicTree", "Matches"} <= set(py.__all__)
    assert cy.Matches is py.Matches
    for name in PUBLIC:
        assert _parameters(getattr(cy, name)) == _parameters(getattr(py, name)), name
        assert _doc(getattr(cy, name)) == _doc(getattr(py, name)), name
    assert _doc(cy.TopicTree) == _doc(py.TopicTree)
    for name in [*TREE_METHODS, "__len__", "__iter__"]:
        assert _doc(getattr(cy.TopicTree, name)) == _doc(getattr(py.TopicTree, name)), name
    for name in TREE_METHODS:
        cy_params = _parameters(getattr(cy.TopicTree, name))
        assert cy_params == _parameters(getattr(py.TopicTree, name)), name
