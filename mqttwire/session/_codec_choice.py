"""The codec the session layer encodes and decodes with, chosen per object.

Every session object takes ``codec``: ``mqttwire._speedups``, ``mqttwire._pure`` or None
for the one ``import mqttwire`` picked.  The two behave identically (the test suite runs
the session tests on both), so the session layer only needs their shared names; this
wrapper gives those names their static types (the extension's stub is the twin's types).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from .. import _pure
from .._implementation import impl

__all__ = ["Codec"]


class Codec:
    """The packet classes, StreamDecoder, PreparedPublish and topic helpers of one codec
    module, typed."""

    __slots__ = (
        "module", "Connect", "ConnAck", "Publish", "PubAck", "PubRec", "PubRel", "PubComp",
        "Subscribe", "SubAck", "Subscription", "Unsubscribe", "UnsubAck", "PingReq",
        "PingResp", "Disconnect", "Auth", "Will", "StreamDecoder", "PreparedPublish",
        "TopicTree", "validate_topic_filter", "validate_topic_name", "topic_matches",
    )

    def __init__(self, module: ModuleType | None = None) -> None:
        m: ModuleType = impl if module is None else module
        for name in self.__slots__[1:]:
            if not hasattr(m, name):
                raise TypeError(f"{m.__name__} is not an mqttwire codec module: no {name}")
        self.module = m
        self.Connect: type[_pure.Connect] = m.Connect
        self.ConnAck: type[_pure.ConnAck] = m.ConnAck
        self.Publish: type[_pure.Publish] = m.Publish
        self.PubAck: type[_pure.PubAck] = m.PubAck
        self.PubRec: type[_pure.PubRec] = m.PubRec
        self.PubRel: type[_pure.PubRel] = m.PubRel
        self.PubComp: type[_pure.PubComp] = m.PubComp
        self.Subscribe: type[_pure.Subscribe] = m.Subscribe
        self.SubAck: type[_pure.SubAck] = m.SubAck
        self.Subscription: type[_pure.Subscription] = m.Subscription
        self.Unsubscribe: type[_pure.Unsubscribe] = m.Unsubscribe
        self.UnsubAck: type[_pure.UnsubAck] = m.UnsubAck
        self.PingReq: type[_pure.PingReq] = m.PingReq
        self.PingResp: type[_pure.PingResp] = m.PingResp
        self.Disconnect: type[_pure.Disconnect] = m.Disconnect
        self.Auth: type[_pure.Auth] = m.Auth
        self.Will: type[_pure.Will] = m.Will
        self.StreamDecoder: type[_pure.StreamDecoder] = m.StreamDecoder
        self.PreparedPublish: type[_pure.PreparedPublish] = m.PreparedPublish
        self.TopicTree: type[_pure.TopicTree] = m.TopicTree
        # (filter or name, *, version) -> None, raising MQTTWireError when invalid.
        self.validate_topic_filter: Callable[..., None] = m.validate_topic_filter
        self.validate_topic_name: Callable[..., None] = m.validate_topic_name
        self.topic_matches: Callable[[str, str], bool] = m.topic_matches

    def __repr__(self) -> str:
        return f"Codec({self.module.__name__})"

