"""mqttwire: the MQTT 3.1, 3.1.1 and 5.0 wire codec.

``import mqttwire`` uses the Cython extension ``mqttwire._speedups`` when it is installed,
and the pure-Python twin ``mqttwire._pure`` otherwise, or when the environment variable
``MQTTWIRE_PURE_PYTHON`` is non-empty; ``IMPLEMENTATION`` says which ("cython" or
"python").  The two behave identically.
"""

from __future__ import annotations

import sys as _sys

from ._codec import properties as _properties
from ._codec.properties import Properties
from ._constants import (
    MQTT5,
    MQTT31,
    MQTT311,
    PacketType,
    ProtocolVersion,
    ReasonCode,
)
from ._errors import (
    IncompletePacket,
    MalformedPacket,
    MQTTWireError,
    PacketTooLarge,
    ProtocolError,
)
from ._implementation import IMPLEMENTATION, impl

# Pickles of Properties made before it moved into _codec/ name this package's module
# "_properties": they still load.  (Pickles made now name mqttwire.Properties: see its
# __module__.)
_sys.modules.setdefault(__name__ + "._properties", _properties)

Auth = impl.Auth
ConnAck = impl.ConnAck
Connect = impl.Connect
Disconnect = impl.Disconnect
PingReq = impl.PingReq
PingResp = impl.PingResp
PubAck = impl.PubAck
PubComp = impl.PubComp
Publish = impl.Publish
PubRec = impl.PubRec
PubRel = impl.PubRel
SubAck = impl.SubAck
Subscribe = impl.Subscribe
Subscription = impl.Subscription
UnsubAck = impl.UnsubAck
Unsubscribe = impl.Unsubscribe
Will = impl.Will
StreamDecoder = impl.StreamDecoder
PreparedPublish = impl.PreparedPublish
validate_topic_name = impl.validate_topic_name
validate_topic_filter = impl.validate_topic_filter
topic_matches = impl.topic_matches
parse_shared = impl.parse_shared
TopicTree = impl.TopicTree
Matches = impl.Matches
decode = impl.decode
decode_from = impl.decode_from
encode = impl.encode

__version__ = "0.1.0"

__all__ = [
    "IMPLEMENTATION",
    "MQTT31",
    "MQTT311",
    "MQTT5",
    "PacketType",
    "ProtocolVersion",
    "ReasonCode",
    "MQTTWireError",
    "MalformedPacket",
    "ProtocolError",
    "PacketTooLarge",
    "IncompletePacket",
    "Properties",
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "PingReq",
    "PingResp",
    "PubAck",
    "PubComp",
    "Publish",
    "PubRec",
    "PubRel",
    "SubAck",
    "Subscribe",
    "Subscription",
    "UnsubAck",
    "Unsubscribe",
    "Will",
    "StreamDecoder",
    "PreparedPublish",
    "decode",
    "decode_from",
    "encode",
    "validate_topic_name",
    "validate_topic_filter",
    "topic_matches",
    "parse_shared",
    "TopicTree",
    "Matches",
]
