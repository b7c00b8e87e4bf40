"""MQTT 5.0 Topic Aliases (§3.3.2.3.4), one table per direction of one connection.

Mappings live only as long as their Network Connection [MQTT-3.3.2-7]: make new tables
for each connection.
"""

from __future__ import annotations

from collections import OrderedDict

from .._constants import ReasonCode
from .._errors import ProtocolError

__all__ = ["InboundAliases", "OutboundAliases"]


class InboundAliases:
    """The aliases the peer sets for PUBLISHes it sends us, up to the Topic Alias Maximum
    we announced (the Server's in CONNACK, the Client's in CONNECT)."""

    __slots__ = ("maximum", "_topics")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self._topics: dict[int, str] = {}

    def resolve(self, topic: str, alias: int | None) -> str:
        """The Topic Name of a received PUBLISH, learning or using its Topic Alias.

        Raises:
            ProtocolError: the alias is above our maximum (0x94 Topic Alias invalid;
                [MQTT-3.2.2-17]/[MQTT-3.2.2-18] for a Client, [MQTT-3.1.2-26]/
                [MQTT-3.1.2-27] for a Server), or an empty topic names an alias that has
                no mapping yet (0x82, §3.3.2.3.4).
        """
        if alias is None:
            return topic
        if alias > self.maximum:
            raise ProtocolError(
                "PUBLISH",
                f"Topic Alias {alias} is above the Topic Alias Maximum {self.maximum}"
                " this side announced (§3.3.2.3.4)",
                rule="§3.3.2.3.4",
                reason_code=ReasonCode.TOPIC_ALIAS_INVALID,
            )
        if topic:
            self._topics[alias] = topic
            return topic
        known = self._topics.get(alias)
        if known is None:
            raise ProtocolError(
                "PUBLISH", f"empty Topic Name with Topic Alias {alias}, which has no mapping",
                rule="§3.3.2.3.4",
            )
        return known

    def __repr__(self) -> str:
        return f"InboundAliases(maximum={self.maximum}, {len(self._topics)} set)"


class OutboundAliases:
    """The aliases we assign for PUBLISHes we send, within the peer's Topic Alias Maximum
    (a Client: the Server's CONNACK value, [MQTT-3.3.2-9]; a Server: the Client's CONNECT
    value, [MQTT-3.3.2-11]).  When all are taken the least recently used one is given to
    the new topic (a PUBLISH with a topic and an alias replaces the mapping, §3.3.2.3.4).

    ``plan(topic)`` says what to send without changing the table; ``commit`` records it
    once the packet really goes out (a packet dropped as too large must not teach the
    table a mapping the peer never saw).
    """

    __slots__ = ("maximum", "_aliases")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self._aliases: OrderedDict[str, int] = OrderedDict()

    def plan(self, topic: str) -> tuple[int | None, bool]:
        """(alias, whether the topic must be sent too); (None, True) when no alias is to
        be used."""
        if self.maximum <= 0:
            return None, True
        alias = self._aliases.get(topic)
        if alias is not None:
            return alias, False
        if len(self._aliases) < self.maximum:
            return len(self._aliases) + 1, True
        return next(iter(self._aliases.values())), True

    def commit(self, topic: str, alias: int) -> None:
        if self._aliases.get(topic) == alias:
            self._aliases.move_to_end(topic)
            return
        for old, value in list(self._aliases.items()):
            if value == alias:
                del self._aliases[old]
        self._aliases[topic] = alias

    def __repr__(self) -> str:
        return f"OutboundAliases(maximum={self.maximum}, {len(self._aliases)} set)"
