"""Topic names and topic filters: validation, matching, shared subscriptions, and a
subscription tree for brokers (MQTT 3.1.1 §4.7, MQTT 5.0 §4.7 and §4.8.2).

This is the pure-Python twin; ``_topics_c.pyx`` is the C twin, with the same behaviour.
Neither imports the other: the rules both follow (the check functions that word every
error, the Shared Subscription form, the check of a TopicTree value) are in
``_topic_rules``, so both raise the same errors with the same messages.

Levels are what lies between ``/`` separators, empty ones included: ``"/a"`` has the
levels ``""`` and ``"a"``, ``"a//b"`` has three (MQTT 5.0 §4.7.3: "a leading or trailing '/'
creates a distinct Topic Name or Topic Filter").  Nothing is normalised, case or otherwise
[MQTT-4.7.3-4].
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from ._codec.datatypes import check_version
from ._codec.docstrings import TOPIC_TREE
from ._errors import ProtocolError
from ._topic_rules import (
    SHARE,
    Matches,
    check_topic_filter,
    check_topic_name,
    is_shared,
    qos_of,
    split_shared,
)

__all__ = [
    "Matches",
    "TopicTree",
    "parse_shared",
    "topic_matches",
    "validate_topic_filter",
    "validate_topic_name",
]


# ---------------------------------------------------------------------------------------
# Validation: the public forms, over _topic_rules' check functions, which word every error
# (the C twin scans in C first and calls them only for what it cannot vouch for).


def _require_str(value: object, field: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{field} must be str, not {type(value).__name__}")


def validate_topic_name(name: str, *, version: int = 5) -> None:
    """Check that ``name`` is a valid Topic Name, as the PUBLISH decoder would.

    A Topic Name is 1 to 65,535 bytes of well-formed UTF-8 [MQTT-4.7.3-1] [MQTT-4.7.3-3]
    without U+0000 [MQTT-4.7.3-2] and without the wildcards ``+`` and ``#``
    [MQTT-3.3.2-2].  (An MQTT 5.0 PUBLISH may carry an empty Topic Name with a Topic
    Alias; that is the packet's business: resolve the alias, then validate the name.)

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: ``version`` is not 3, 4 or 5.
        MalformedPacket: with packet type "PUBLISH", the rule the given protocol level
            numbers, and ``offset`` the byte offset of the problem within the UTF-8 of
            ``name``.
    """
    _require_str(name, "topic name")
    check_version(version)
    check_topic_name(name, "PUBLISH", 0, version)


def validate_topic_filter(filter: str, *, version: int = 5) -> None:
    """Check that ``filter`` is a valid Topic Filter, as the SUBSCRIBE decoder would.

    The string rules of topic names apply (1 to 65,535 bytes of UTF-8, no U+0000);
    ``+`` must be a whole level and ``#`` the whole last level (MQTT 3.1.1
    [MQTT-4.7.1-2] [MQTT-4.7.1-3], MQTT 5.0 [MQTT-4.7.1-1] [MQTT-4.7.1-2]).  With
    ``version=5`` a filter whose first level is ``$share`` must also be a well-formed
    Shared Subscription (see :func:`parse_shared`); at levels 3 and 4 it is an ordinary
    filter.

    Raises:
        TypeError: ``filter`` is not a str.
        ValueError: ``version`` is not 3, 4 or 5.
        MalformedPacket: with packet type "SUBSCRIBE" and ``offset`` the byte offset of the
            problem within the UTF-8 of ``filter``.
        ProtocolError: a malformed Shared Subscription (version 5 only), likewise.
    """
    _require_str(filter, "topic filter")
    check_version(version)
    check_topic_filter(filter, "SUBSCRIBE", 0, version)


# ---------------------------------------------------------------------------------------
# Shared Subscriptions (MQTT 5.0 §4.8.2)


def parse_shared(filter: str) -> tuple[str, str] | None:
    """Split a Shared Subscription's filter ``$share/{ShareName}/{filter}``.

    Returns ``(share_name, inner_filter)``, or None when the first level of ``filter`` is
    not ``$share`` (an ordinary filter).  Only the shared form is checked here; the inner
    filter's own rules are :func:`validate_topic_filter`'s.

    Raises:
        TypeError: ``filter`` is not a str.
        ProtocolError: the ShareName is missing or empty [MQTT-4.8.2-1], holds ``+`` or
            ``#``, or is not followed by ``/`` and a non-empty filter [MQTT-4.8.2-2];
            packet type "SUBSCRIBE", ``offset`` in bytes within ``filter``.
    """
    _require_str(filter, "topic filter")
    if not is_shared(filter):
        return None
    return split_shared(filter, "SUBSCRIBE", 0)


# ---------------------------------------------------------------------------------------
# Matching


def topic_matches(filter: str, name: str) -> bool:
    """Whether the Topic Filter ``filter`` matches the Topic Name ``name``.

    ``+`` matches exactly one level (an empty one too: ``a/+`` matches ``a/``), ``#``
    matches its parent level and any number of levels below (``a/#`` matches ``a``,
    ``a/b`` and ``a/b/c``).  A filter starting with ``+`` or ``#`` does not match a name
    starting with ``$`` [MQTT-4.7.2-1].  A Shared Subscription ``$share/{ShareName}/{f}``
    matches what its inner filter ``f`` matches; a malformed one (see
    :func:`parse_shared`) matches nothing.

    Neither argument is validated (call :func:`validate_topic_filter` and
    :func:`validate_topic_name` for that); for any strings the result is the level by
    level comparison above, where only whole ``+`` and ``#`` levels are wildcards and a
    ``#`` level matches everything from its position on.

    Raises:
        TypeError: an argument is not a str.
    """
    _require_str(filter, "topic filter")
    _require_str(name, "topic name")
    if is_shared(filter):
        try:
            filter = split_shared(filter, "SUBSCRIBE", 0)[1]
        except ProtocolError:
            return False
    if "+" not in filter and "#" not in filter:
        return filter == name
    if name.startswith("$") and filter.startswith(("+", "#")):
        return False  # [MQTT-4.7.2-1]
    levels = name.split("/")
    count = len(levels)
    filter_levels = filter.split("/")
    for i, level in enumerate(filter_levels):
        if level == "#":
            return True
        if i == count or (level != "+" and level != levels[i]):
            return False
    return len(filter_levels) == count


# ---------------------------------------------------------------------------------------
# The subscription tree (Matches, its result, and qos_of, its value check: _topic_rules)


class _Node:
    """One level of the tree: children by level text ("+" and "#" are ordinary keys)."""

    __slots__ = ("children", "filter", "qos", "shared", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        # The ordinary subscriptions whose filter ends here: key -> value and key -> QoS,
        # in two dicts so that match() can copy them whole.  None while there are none.
        self.values: dict[Any, Any] | None = None
        self.qos: dict[Any, int] | None = None
        # The Shared Subscriptions ending here: share name -> {key -> value}, or None.
        self.shared: dict[str, dict[Any, Any]] | None = None
        # The (inner) filter that ends here, set once a subscription does.
        self.filter: str | None = None


class TopicTree:
    # The docstring, shared with the Cython twin, is _codec.docstrings.TOPIC_TREE.
    __doc__ = TOPIC_TREE

    def __init__(self) -> None:
        self._root = _Node()
        self._count = 0
        # key -> the filters it subscribes to, for remove_key() and membership tests
        self._filters: dict[Any, set[str]] = {}

    def __len__(self) -> int:
        """The number of subscriptions (each (filter, key) once)."""
        return self._count

    def __iter__(self) -> Iterator[tuple[str, Any, Any]]:
        """Every subscription as ``(filter, key, value)``, in no particular order.  The
        iterator runs over a snapshot, so the tree may change meanwhile."""
        out: list[tuple[str, Any, Any]] = []
        stack = [self._root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            filter: str = node.filter  # type: ignore[assignment]
            if node.values:
                out.extend([(filter, key, value) for key, value in node.values.items()])
            if node.shared:
                for share, members in node.shared.items():
                    full = f"{SHARE}/{share}/{filter}"
                    out.extend([(full, key, value) for key, value in members.items()])
        return iter(out)

    def insert(self, filter: str, key: Hashable, value: Any) -> bool:
        """Subscribe ``key`` to ``filter`` with ``value``, replacing the value of an
        existing subscription of ``key`` to the same filter.

        Returns:
            True when the subscription is new, False when it replaced one (a broker needs
            this for Retain Handling 1, MQTT 5.0 §3.8.3.1).

        Raises:
            TypeError, MalformedPacket, ProtocolError: ``filter`` is not a valid MQTT 5.0
                topic filter (see :func:`validate_topic_filter`).
            TypeError, ValueError: no QoS 0..2 can be read from ``value``.
        """
        validate_topic_filter(filter, version=5)
        qos = qos_of(value)
        hash(key)  # an unhashable key fails here, before any node is made
        shared = split_shared(filter, "SUBSCRIBE", 0) if is_shared(filter) else None
        inner = filter if shared is None else shared[1]
        node = self._root
        for level in inner.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        node.filter = inner
        if shared is None:
            if node.values is None:
                node.values, node.qos = {}, {}
            table = node.values
            node.qos[key] = qos  # type: ignore[index]
        else:
            if node.shared is None:
                node.shared = {}
            table = node.shared.setdefault(shared[0], {})
        added = key not in table
        table[key] = value
        if added:
            self._filters.setdefault(key, set()).add(filter)
            self._count += 1
        return added

    def remove(self, filter: str, key: Hashable) -> bool:
        """Unsubscribe ``key`` from ``filter``.  Nodes left empty are removed.

        Returns:
            Whether there was such a subscription.
        """
        filters = self._filters.get(key)
        if filters is None or filter not in filters:
            return False
        # Only filters that insert() validated get here.
        shared = split_shared(filter, "SUBSCRIBE", 0) if is_shared(filter) else None
        levels = (filter if shared is None else shared[1]).split("/")
        path = [self._root]
        for level in levels:
            path.append(path[-1].children[level])
        node = path[-1]
        if shared is None:
            assert node.values is not None and node.qos is not None
            del node.values[key], node.qos[key]
            if not node.values:
                node.values = node.qos = None
        else:
            assert node.shared is not None
            members = node.shared[shared[0]]
            del members[key]
            if not members:
                del node.shared[shared[0]]
                if not node.shared:
                    node.shared = None
        # Prune the branch from the leaf up while it holds nothing.
        for depth in range(len(levels), 0, -1):
            node = path[depth]
            if node.children or node.values or node.shared:
                break
            del path[depth - 1].children[levels[depth - 1]]
        filters.discard(filter)
        if not filters:
            del self._filters[key]
        self._count -= 1
        return True

    def remove_key(self, key: Hashable) -> int:
        """Remove every subscription of ``key`` (a client whose session ended).

        Returns:
            How many were removed.
        """
        filters = list(self._filters.get(key, ()))
        for filter in filters:
            self.remove(filter, key)
        return len(filters)

    def _collect(self, name: str) -> list[_Node]:
        """The nodes whose filters match ``name`` (a node may come twice when ``name``
        itself holds wildcard characters)."""
        levels = name.split("/")
        count = len(levels)
        found: list[_Node] = []
        stack: list[tuple[_Node, int]] = []
        # The first level, where [MQTT-4.7.2-1] applies: a filter starting with a wildcard
        # does not match a topic name starting with '$'.
        children = self._root.children
        child = children.get(levels[0])
        if child is not None:
            stack.append((child, 1))
        if not name.startswith("$"):
            child = children.get("#")
            if child is not None:
                found.append(child)
            child = children.get("+")
            if child is not None:
                stack.append((child, 1))
        while stack:
            node, depth = stack.pop()
            children = node.children
            if children:
                # '#' matches its parent level too: "sport/#" matches "sport".
                child = children.get("#")
                if child is not None:
                    found.append(child)
            if depth == count:
                found.append(node)
                continue
            if children:
                child = children.get(levels[depth])
                if child is not None:
                    stack.append((child, depth + 1))
                child = children.get("+")
                if child is not None:
                    stack.append((child, depth + 1))
        return found

    def match(self, name: str) -> Matches:
        """The subscriptions matching the topic name ``name``.

        Each ordinary subscriber comes once, with the value of its matching subscription
        of highest QoS: a message matching overlapping subscriptions is delivered at their
        maximum QoS (MQTT 3.1.1 [MQTT-3.3.5-1], MQTT 5.0 [MQTT-3.3.4-2]).  Among equal
        QoS, which value is returned is unspecified.  Shared Subscription groups come
        separately, each with all its members (see :class:`Matches`); they are not merged
        with the ordinary subscriptions.  Use :meth:`match_all` to see every matching
        subscription (for instance to send all Subscription Identifiers, [MQTT-3.3.4-3]).

        ``name`` is not validated (see :func:`validate_topic_name`); the result is what
        :func:`topic_matches` says for each stored filter.
        """
        _require_str(name, "topic name")
        found = self._collect(name)
        groups: dict[tuple[str, str], dict[Any, Any]] = {}
        largest: _Node | None = None
        size = 0
        for node in found:
            if node.values and len(node.values) > size:
                largest, size = node, len(node.values)
            if node.shared:
                for share, members in node.shared.items():
                    groups[(share, node.filter)] = members.copy()  # type: ignore[index]
        if largest is None:
            return Matches({}, groups)
        # The largest node's subscribers are copied whole, the others merged into them:
        # the fewest dict operations.
        values: dict[Any, Any] = largest.values.copy()  # type: ignore[union-attr]
        best: dict[Any, int] = largest.qos.copy()  # type: ignore[union-attr]
        for node in found:
            if node.values and node is not largest:
                node_values = node.values
                for key, qos in node.qos.items():  # type: ignore[union-attr]
                    held = best.get(key)
                    if held is None or qos > held:
                        best[key] = qos
                        values[key] = node_values[key]
        return Matches(values, groups)

    def match_all(self, name: str) -> list[tuple[str, Any, Any]]:
        """Every subscription matching ``name``, as ``(filter, key, value)``, without
        merging a subscriber's overlapping subscriptions; shared ones appear with their
        full ``$share/...`` filter.  Each subscription comes once, in no particular order.
        """
        _require_str(name, "topic name")
        seen: set[int] = set()
        out: list[tuple[str, Any, Any]] = []
        for node in self._collect(name):
            if id(node) in seen:
                continue
            seen.add(id(node))
            filter: str = node.filter  # type: ignore[assignment]
            if node.values:
                out.extend([(filter, key, value) for key, value in node.values.items()])
            if node.shared:
                for share, members in node.shared.items():
                    full = f"{SHARE}/{share}/{filter}"
                    out.extend([(full, key, value) for key, value in members.items()])
        return out

    def _node_count(self) -> int:
        """How many nodes the tree holds, the root included (for leak tests)."""
        count, stack = 0, [self._root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
        return count
