"""TopicTree, the subscription store for brokers, against both implementations."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqttwire._errors import MalformedPacket, ProtocolError


@dataclass(frozen=True)
class Sub:
    """A value with a qos attribute, like mqttwire.Subscription."""

    qos: int
    tag: str = ""


def test_insert_replace_len_iter(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    assert len(tree) == 0 and list(tree) == []
    assert tree.insert("a/+", "c1", 1) is True
    assert tree.insert("a/#", "c1", 0) is True
    assert tree.insert("a/+", "c2", 2) is True
    # the same subscriber and filter again replaces [MQTT-3.8.4-3]
    assert tree.insert("a/+", "c1", 2) is False
    assert tree.insert("$share/g/a/+", "c1", 0) is True
    assert len(tree) == 4
    assert sorted(tree) == [
        ("$share/g/a/+", "c1", 0), ("a/#", "c1", 0), ("a/+", "c1", 2), ("a/+", "c2", 2)
    ]


def test_iteration_is_a_snapshot(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    for filter in ["a", "a/b", "$share/g/a", "+"]:
        tree.insert(filter, "k", 0)
    for filter, key, _ in tree:  # removing while iterating is allowed
        assert tree.remove(filter, key)
    assert len(tree) == 0 and tree._node_count() == 1


def test_constructor_takes_no_arguments(codec: ModuleType) -> None:
    with pytest.raises(TypeError):
        codec.TopicTree({"a": 0})


def test_match_max_qos(codec: ModuleType) -> None:
    # Overlapping subscriptions: delivered once at the maximum QoS (MQTT 3.1.1
    # [MQTT-3.3.5-1], MQTT 5.0 [MQTT-3.3.4-2]), with that subscription's value.
    tree = codec.TopicTree()
    tree.insert("sport/#", "c1", Sub(0, "all sport"))
    tree.insert("sport/tennis/+", "c1", Sub(2, "tennis"))
    tree.insert("+/tennis/player1", "c1", Sub(1, "player1"))
    tree.insert("sport/tennis/player1", "c2", Sub(1, "exact"))
    tree.insert("#", "c3", Sub(0, "everything"))
    matches = tree.match("sport/tennis/player1")
    assert matches.subscribers == {
        "c1": Sub(2, "tennis"), "c2": Sub(1, "exact"), "c3": Sub(0, "everything")
    }
    assert matches.shared == {}
    assert tree.match("sport").subscribers == {
        "c1": Sub(0, "all sport"), "c3": Sub(0, "everything")
    }
    assert tree.match("weather").subscribers == {"c3": Sub(0, "everything")}


def test_match_dollar_topics(codec: ModuleType) -> None:
    # [MQTT-4.7.2-1]: '#' and '+' at the first level do not match '$' topics.
    tree = codec.TopicTree()
    tree.insert("#", "all", 0)
    tree.insert("+/monitor/Clients", "plus", 0)
    tree.insert("$SYS/#", "sys", 1)
    tree.insert("$SYS/monitor/+", "sys-plus", 2)
    tree.insert("$share/g/#", "shared-all", 0)
    tree.insert("$share/g/$SYS/#", "shared-sys", 0)
    matches = tree.match("$SYS/monitor/Clients")
    assert matches.subscribers == {"sys": 1, "sys-plus": 2}
    assert matches.shared == {("g", "$SYS/#"): {"shared-sys": 0}}
    matches = tree.match("x/monitor/Clients")
    assert matches.subscribers == {"all": 0, "plus": 0}
    assert matches.shared == {("g", "#"): {"shared-all": 0}}


def test_match_shared_groups(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    tree.insert("$share/consumer1/sport/tennis/+", "c1", 1)
    tree.insert("$share/consumer1/sport/tennis/+", "c2", 2)
    tree.insert("$share/consumer2/sport/tennis/+", "c3", 0)
    # the same ShareName with another filter is another group (MQTT 5.0 §4.8.2)
    tree.insert("$share/consumer1/sport/#", "c4", 0)
    # an ordinary subscription of a group member is delivered on its own
    tree.insert("sport/tennis/player1", "c1", 0)
    tree.insert("$share/consumer1/weather", "c5", 0)
    matches = tree.match("sport/tennis/player1")
    assert matches.subscribers == {"c1": 0}
    assert matches.shared == {
        ("consumer1", "sport/tennis/+"): {"c1": 1, "c2": 2},
        ("consumer2", "sport/tennis/+"): {"c3": 0},
        ("consumer1", "sport/#"): {"c4": 0},
    }
    # the Matches tuple unpacks
    subscribers, shared = tree.match("weather")
    assert (subscribers, shared) == ({}, {("consumer1", "weather"): {"c5": 0}})


def test_match_empty_levels(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    for filter in ["/", "/+", "+/+", "+", "a//b", "a/+/b", "a/#", "/#"]:
        tree.insert(filter, filter, 0)
    assert set(tree.match("/").subscribers) == {"/", "/+", "+/+", "/#"}
    assert set(tree.match("a//b").subscribers) == {"a//b", "a/+/b", "a/#"}
    assert set(tree.match("a").subscribers) == {"+", "a/#"}
    assert set(tree.match("/finance").subscribers) == {"/+", "+/+", "/#"}


def test_match_all(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    tree.insert("a/+", "c1", Sub(1))
    tree.insert("a/#", "c1", Sub(0))
    tree.insert("$share/g/a/b", "c2", Sub(2))
    tree.insert("b", "c3", Sub(0))
    assert sorted(tree.match_all("a/b"), key=repr) == sorted(
        [("a/+", "c1", Sub(1)), ("a/#", "c1", Sub(0)), ("$share/g/a/b", "c2", Sub(2))], key=repr
    )
    # a name holding wildcard characters still reports each subscription once
    assert sorted(tree.match_all("a/+")) == [("a/#", "c1", Sub(0)), ("a/+", "c1", Sub(1))]


@pytest.mark.parametrize("value", [0, 1, 2, Sub(0), Sub(2), True])
def test_values_with_qos(codec: ModuleType, value: Any) -> None:
    tree = codec.TopicTree()
    tree.insert("a", "c", value)
    assert tree.match("a").subscribers == {"c": value}


@pytest.mark.c_extension
def test_subscription_values(codec: ModuleType, both_codecs: tuple[ModuleType, ...]) -> None:
    # mqttwire.Subscription objects, of either implementation, are values as they are.
    for packets in both_codecs:
        tree = codec.TopicTree()
        low, high = packets.Subscription("a/#", qos=1), packets.Subscription("a/+", qos=2)
        tree.insert(low.topic_filter, "c1", low)
        tree.insert(high.topic_filter, "c1", high)
        assert tree.match("a/b").subscribers == {"c1": high}
        assert tree.match("a").subscribers == {"c1": low}


@pytest.mark.parametrize(
    ("value", "error"),
    [(3, ValueError), (-1, ValueError), (Sub(3), ValueError), ("1", TypeError),
     (None, TypeError), (object(), TypeError), (Sub(1.0), TypeError)],  # type: ignore[arg-type]
)
def test_values_without_qos(codec: ModuleType, value: Any, error: type) -> None:
    tree = codec.TopicTree()
    with pytest.raises(error):
        tree.insert("a/b", "c", value)
    assert len(tree) == 0 and tree._node_count() == 1


def test_unhashable_key(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    with pytest.raises(TypeError):
        tree.insert("a/b", ["not", "hashable"], 0)
    assert len(tree) == 0 and tree._node_count() == 1


@pytest.mark.parametrize(
    ("filter", "error"),
    [("a/#/b", MalformedPacket), ("a+", MalformedPacket), ("", MalformedPacket),
     ("$share//a", ProtocolError), ("$share/g", ProtocolError), (b"a", TypeError)],
)
def test_insert_validates(codec: ModuleType, filter: Any, error: type) -> None:
    tree = codec.TopicTree()
    with pytest.raises(error):
        tree.insert(filter, "c", 0)
    assert len(tree) == 0 and tree._node_count() == 1


class Level(str):
    """A str subclass: accepted like a str."""


def test_str_subclasses(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    assert tree.insert(Level("a/+"), "c", 1) is True
    assert tree.insert("a/+", "c", 2) is False  # the same filter
    assert tree.match(Level("a/b")).subscribers == {"c": 2}
    assert tree.remove(Level("a/+"), "c") is True
    assert tree._node_count() == 1


@pytest.mark.parametrize("name", [b"a/b", None, 1])
def test_match_takes_str(codec: ModuleType, name: Any) -> None:
    tree = codec.TopicTree()
    tree.insert("#", "c", 0)
    with pytest.raises(TypeError, match="must be str"):
        tree.match(name)
    with pytest.raises(TypeError, match="must be str"):
        tree.match_all(name)


def test_remove_prunes(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    tree.insert("a/b/c", "c1", 0)
    tree.insert("a/b", "c2", 0)
    tree.insert("$share/g/a/b/c/d", "c3", 0)
    # root, a, b, c, d
    assert tree._node_count() == 5
    assert tree.remove("a/b/c", "c2") is False  # c2 has no such subscription
    assert tree.remove("x", "c1") is False
    assert tree.remove("a/b/c/d", "c3") is False  # c3's is the shared one
    assert tree.remove("$share/h/a/b/c/d", "c3") is False  # another group
    assert tree.remove("$share/g/a/b/c/d", "c3") is True
    assert tree._node_count() == 4  # d went
    assert tree.remove("a/b/c", "c1") is True
    assert tree._node_count() == 3  # c went, b holds c2's
    assert tree.remove("a/b/c", "c1") is False
    assert tree.match("a/b").subscribers == {"c2": 0}
    assert tree.remove("a/b", "c2") is True
    assert tree._node_count() == 1 and len(tree) == 0 and list(tree) == []


def test_remove_keeps_shared_siblings(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    tree.insert("$share/g/a", "c1", 0)
    tree.insert("$share/g/a", "c2", 1)
    tree.insert("$share/h/a", "c1", 0)
    tree.insert("a", "c1", 2)
    assert tree.remove("$share/g/a", "c1") is True
    assert tree.match("a") == ({"c1": 2}, {("g", "a"): {"c2": 1}, ("h", "a"): {"c1": 0}})
    assert tree.remove("a", "c1") is True
    assert tree.match("a") == ({}, {("g", "a"): {"c2": 1}, ("h", "a"): {"c1": 0}})


def test_remove_key(codec: ModuleType) -> None:
    tree = codec.TopicTree()
    for filter in ["a", "a/+", "#", "$share/g/a"]:
        tree.insert(filter, "gone", 0)
    tree.insert("a", "stays", 1)
    assert tree.remove_key("gone") == 4
    assert tree.remove_key("gone") == 0
    assert tree.remove_key("never") == 0
    assert list(tree) == [("a", "stays", 1)]
    assert tree._node_count() == 2


def test_many_filters_insert_and_remove(codec: ModuleType) -> None:
    # 100,000 subscriptions in, matched, and out again leaves only the root.
    tree = codec.TopicTree()
    filters = [f"site/{i % 97}/dev/{i}/+" if i % 3 else f"site/{i % 97}/#" for i in range(100_000)]
    for i, filter in enumerate(filters):
        tree.insert(filter, i % 1000, i % 3)
    assert len(tree) == len(set(zip(filters, (i % 1000 for i in range(100_000)))))
    # "site/5/dev/5/x" matches the "+" filter of i == 5 only, and the "#" filter of every
    # i divisible by 3 with i % 97 == 5; subscriber keys are i % 1000.
    expected = {
        i % 1000
        for i in range(100_000)
        if (i % 3 and i == 5) or (not i % 3 and i % 97 == 5)
    }
    assert set(tree.match("site/5/dev/5/x").subscribers) == expected
    for i, filter in enumerate(filters):
        tree.remove(filter, i % 1000)
    assert len(tree) == 0 and tree._node_count() == 1


# ---------------------------------------------------------------------------------------
# Properties: the tree agrees with a linear scan over topic_matches

LEVEL = st.sampled_from(["a", "b", "", "$SYS", "é"])
# Names are not validated by match(): ones holding wildcard characters must still get what
# topic_matches says, and each subscription once.
NAME = st.lists(
    st.one_of(LEVEL, st.sampled_from(["+", "#", "a+"])), min_size=1, max_size=4
).map("/".join).filter(bool)


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.one_of(LEVEL, st.just("+")), min_size=1, max_size=4))
    if draw(st.booleans()):
        levels[-1] = "#"
    filter = "/".join(levels) or "+"
    if draw(st.integers(0, 3)) == 0:
        filter = f"$share/{draw(st.sampled_from(['g', 'h']))}/{filter}"
    return filter


SUBSCRIPTION = st.tuples(filters(), st.sampled_from(["c1", "c2", "c3"]), st.integers(0, 2))


def linear_match(
    codec: ModuleType, subs: dict[tuple[str, str], Sub], name: str
) -> tuple[dict[str, list[Sub]], dict[tuple[str, str], dict[str, Sub]]]:
    """The matching values of each subscriber, and the shared groups, by brute force."""
    ordinary: dict[str, list[Sub]] = {}
    shared: dict[tuple[str, str], dict[str, Sub]] = {}
    for (filter, key), value in subs.items():
        if not codec.topic_matches(filter, name):
            continue
        split = codec.parse_shared(filter)
        if split is None:
            ordinary.setdefault(key, []).append(value)
        else:
            shared.setdefault(split, {})[key] = value
    return ordinary, shared


@settings(max_examples=200)
@given(subscriptions=st.lists(SUBSCRIPTION, max_size=30), names=st.lists(NAME, max_size=5))
def test_match_agrees_with_linear_scan(
    codec: ModuleType, subscriptions: list[tuple[str, str, int]], names: list[str]
) -> None:
    tree = codec.TopicTree()
    model: dict[tuple[str, str], Sub] = {}
    for n, (filter, key, qos) in enumerate(subscriptions):
        value = Sub(qos, str(n))
        tree.insert(filter, key, value)
        model[(filter, key)] = value  # a later insert replaces
    for name in names:
        ordinary, shared = linear_match(codec, model, name)
        matches = tree.match(name)
        assert set(matches.subscribers) == set(ordinary)
        for key, value in matches.subscribers.items():
            assert value in ordinary[key]
            assert value.qos == max(v.qos for v in ordinary[key])
        assert matches.shared == shared
        everything = sorted(
            (f, k, v) for (f, k), v in model.items() if codec.topic_matches(f, name)
        )
        assert sorted(tree.match_all(name)) == everything


OPERATION = st.one_of(
    st.tuples(st.just("insert"), SUBSCRIPTION),
    st.tuples(st.just("remove"), SUBSCRIPTION),
    st.tuples(st.just("remove_key"), st.sampled_from(["c1", "c2", "c3"])),
)


@settings(max_examples=200)
@given(operations=st.lists(OPERATION, max_size=40))
def test_insert_remove_invariants(codec: ModuleType, operations: list[tuple[str, Any]]) -> None:
    tree = codec.TopicTree()
    model: dict[tuple[str, str], int] = {}
    for op, arg in operations:
        if op == "insert":
            filter, key, qos = arg
            assert tree.insert(filter, key, qos) is ((filter, key) not in model)
            model[(filter, key)] = qos
        elif op == "remove":
            filter, key, _ = arg
            assert tree.remove(filter, key) is ((filter, key) in model)
            model.pop((filter, key), None)
        else:
            gone = [fk for fk in model if fk[1] == arg]
            assert tree.remove_key(arg) == len(gone)
            for fk in gone:
                del model[fk]
        assert len(tree) == len(model)
        assert sorted(tree) == sorted((f, k, q) for (f, k), q in model.items())
    for filter, key in list(model):
        assert tree.remove(filter, key)
    # nothing left behind: only the root
    assert len(tree) == 0 and tree._node_count() == 1
