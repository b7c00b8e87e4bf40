"""The rules for topic names and topic filters (MQTT 3.1.1 §4.7, MQTT 5.0 §4.7, §4.8.2),
shared by the two topic twins: ``_topics`` (pure Python) and ``_topics_c`` (Cython).

Each twin has its own fast code for what is certainly valid; whatever that code does not
vouch for comes here, to the check functions, which accept it or raise.  So the twins
accept the same strings and raise the same errors, with the same messages and offsets, by
construction.  Also here: the Shared Subscription form, the check of a TopicTree value's
QoS, and the ``Matches`` result type, which both twins' trees return.  The names are
public because they are the contract between the twins; neither twin imports the other.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._codec.datatypes import null_error, topic_name_wildcard_error, utf8_error
from ._errors import MalformedPacket, ProtocolError, rule

__all__ = [
    "SHARE",
    "Matches",
    "check_topic_filter",
    "check_topic_name",
    "is_shared",
    "qos_of",
    "split_shared",
]

# A filter whose first level is "$share" is a Shared Subscription (MQTT 5.0 §4.8.2):
# "$share/{ShareName}/{filter}".
SHARE = "$share"
_SHARE_NAME_START = len(SHARE) + 1


def _byte_offset(text: str, index: int) -> int:
    """Where character ``index`` of ``text`` starts in its UTF-8 encoding.  A lone
    surrogate before it counts as the three bytes of its ED xx xx form (parse_shared
    does not reject them, and counts them as the UTF-8 check does)."""
    return len(text[:index].encode("utf-8", "surrogatepass"))


# ---------------------------------------------------------------------------------------
# Validation. The check_* forms take the packet type and the offset of the string's first
# byte, so a decoder can report offsets within its packet; validate_topic_* (in each twin)
# are the public forms.


def _check_string(text: str, field: str, ptype: str, start: int, version: int) -> None:
    """What every topic name and filter must be: well-formed UTF-8 without U+0000
    [MQTT-4.7.3-2] (cited, as the decoder does, by the UTF-8 string rules [MQTT-1.5.4-1]
    [MQTT-1.5.4-2]), at least one byte [MQTT-4.7.3-1] and at most 65,535 [MQTT-4.7.3-3].
    Checked in the order the decoder meets them (read_utf8 first)."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        # A str can hold lone surrogates, which UTF-8 cannot encode.  Report them as the
        # decoder reports the same code points arriving as bytes (ED A0..BF xx, the only way
        # to write a surrogate in a UTF-8-like form): Python's UTF-8 decoder stops at the ED
        # with "invalid continuation byte", so read_utf8 would say exactly this.
        raw = text.encode("utf-8", "surrogatepass")
        index = _byte_offset(text, exc.start)
        decode_error = UnicodeDecodeError(
            "utf-8", raw, index, index + 1, "invalid continuation byte"
        )
        raise utf8_error(ptype, field, decode_error, start, version) from None
    if "\x00" in text:
        raise null_error(ptype, field, text, start, version)
    if size == 0:
        raise MalformedPacket(
            ptype, f"{field} is empty", offset=start, rule=rule("topic_length", version)
        )
    if size > 0xFFFF:
        raise MalformedPacket(
            ptype, f"{field} is longer than 65,535 bytes ({size})", offset=start,
            rule=rule("topic_too_long", version),
        )


def check_topic_name(name: str, ptype: str, start: int, version: int) -> None:
    """Raise the error a decoder raises for ``name`` read at ``start`` in a ``ptype``
    packet, if it is not a valid topic name."""
    _check_string(name, "topic name", ptype, start, version)
    # [MQTT-3.3.2-2] (also MQTT 3.1.1 [MQTT-4.7.1-1], MQTT 5.0 [MQTT-4.7.0-1]).
    if "+" in name or "#" in name:
        raise topic_name_wildcard_error(ptype, name, start, version)


def check_topic_filter(filter: str, ptype: str, start: int, version: int) -> None:
    """Raise the error a decoder raises for ``filter`` read at ``start`` in a ``ptype``
    packet, if it is not a valid topic filter for protocol level ``version``."""
    _check_string(filter, "topic filter", ptype, start, version)
    # Shared Subscriptions are a 5.0 feature: at levels 3 and 4 "$share/..." is an
    # ordinary filter (whose wildcards are checked below like any other's).
    if version == 5 and is_shared(filter):
        split_shared(filter, ptype, start)
    if "+" in filter or "#" in filter:
        _check_wildcards(filter, ptype, start, version)


def _check_wildcards(filter: str, ptype: str, start: int, version: int) -> None:
    # '#' "MUST be specified either on its own or following a topic level separator. In
    # either case it MUST be the last character specified in the Topic Filter"; '+' "MUST
    # occupy an entire level of the filter".  3.1.1 numbers these [MQTT-4.7.1-2] and
    # [MQTT-4.7.1-3], 5.0 [MQTT-4.7.1-1] and [MQTT-4.7.1-2]: rule() picks.
    levels = filter.split("/")
    last = len(levels) - 1
    index = 0  # of the level's first character in ``filter``
    for n, level in enumerate(levels):
        if level == "#":
            if n != last:
                raise _wildcard_error(
                    filter, index, "is not the last level", ptype, start, version
                )
        elif level != "+":
            plus, hash_ = level.find("+"), level.find("#")
            if plus >= 0 or hash_ >= 0:
                first = min(i for i in (plus, hash_) if i >= 0)
                raise _wildcard_error(
                    filter, index + first, "is not alone in its level", ptype, start, version
                )
        index += len(level) + 1


def _wildcard_error(
    filter: str, index: int, problem: str, ptype: str, start: int, version: int
) -> MalformedPacket:
    if filter[index] == "#":
        what, key = "multi-level wildcard '#'", "topic_filter_multi_level"
    else:
        what, key = "single-level wildcard '+'", "topic_filter_single_level"
    return MalformedPacket(
        ptype, f"{what} {problem}", offset=start + _byte_offset(filter, index),
        rule=rule(key, version),
    )


def is_shared(filter: str) -> bool:
    """Whether the first level is "$share", which marks a Shared Subscription."""
    return filter.startswith("$share/") or filter == SHARE


def split_shared(filter: str, ptype: str, start: int) -> tuple[str, str]:
    """(ShareName, inner filter) of a filter for which is_shared() holds."""
    end = filter.find("/", _SHARE_NAME_START)
    share = filter[_SHARE_NAME_START:] if end < 0 else filter[_SHARE_NAME_START:end]
    if not share:
        # "MUST start with $share/ and MUST contain a ShareName that is at least one
        # character long" [MQTT-4.8.2-1]; "$share" alone has no ShareName at all.
        raise ProtocolError(
            ptype, "shared subscription has no ShareName",
            offset=start + min(len(filter), _SHARE_NAME_START),
            rule=rule("shared_share_name", 5),
        )
    # "The ShareName MUST NOT contain the characters '/', '+' or '#', but MUST be followed
    # by a '/' character. This '/' character MUST be followed by a Topic Filter"
    # [MQTT-4.8.2-2].  (A '/' cannot be inside it: the first '/' ends it.)
    plus, hash_ = share.find("+"), share.find("#")
    if plus >= 0 or hash_ >= 0:
        first = min(i for i in (plus, hash_) if i >= 0)
        raise ProtocolError(
            ptype, f"ShareName contains {share[first]!r}",
            offset=start + _byte_offset(filter, _SHARE_NAME_START + first),
            rule=rule("shared_share_name_chars", 5),
        )
    if end < 0 or end == len(filter) - 1:
        raise ProtocolError(
            ptype, "ShareName is not followed by '/' and a topic filter",
            offset=start + _byte_offset(filter, len(filter)),
            rule=rule("shared_share_name_chars", 5),
        )
    return share, filter[end + 1 :]


class Matches(NamedTuple):
    """What :meth:`TopicTree.match` found for one topic name.

    Attributes:
        subscribers: ``{key: value}`` for the ordinary subscriptions: each subscriber once,
            with the value of its highest-QoS matching subscription.
        shared: ``{(share_name, inner_filter): {key: value}}``, one entry per matching
            Shared Subscription group, with all its members; the broker delivers to one
            member of each group (MQTT 5.0 §4.8.2).
    """

    subscribers: dict[Any, Any]
    shared: dict[tuple[str, str], dict[Any, Any]]


def qos_of(value: Any) -> int:
    """The QoS of a TopicTree value: an int QoS, or the int attribute ``qos`` of the
    value (a Subscription, say), from 0 to 2."""
    qos = value if isinstance(value, int) else getattr(value, "qos", None)
    if not isinstance(qos, int):
        raise TypeError(
            "a TopicTree value must be an int QoS or have an int attribute qos, not "
            f"{type(value).__name__}"
        )
    if not 0 <= qos <= 2:
        raise ValueError(f"QoS must be 0, 1 or 2, not {qos}")
    return qos
