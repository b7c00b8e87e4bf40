# The Cython extension has exactly the API of the pure-Python twin (tests/test_parity.py
# proves names, signatures, fields and reprs equal), so its stub is the twin's types.
from ._pure import Auth as Auth
from ._pure import ConnAck as ConnAck
from ._pure import Connect as Connect
from ._pure import Disconnect as Disconnect
from ._pure import PingReq as PingReq
from ._pure import PingResp as PingResp
from ._pure import PreparedPublish as PreparedPublish
from ._pure import PubAck as PubAck
from ._pure import PubComp as PubComp
from ._pure import Publish as Publish
from ._pure import PubRec as PubRec
from ._pure import PubRel as PubRel
from ._pure import StreamDecoder as StreamDecoder
from ._pure import SubAck as SubAck
from ._pure import Subscribe as Subscribe
from ._pure import Subscription as Subscription
from ._pure import UnsubAck as UnsubAck
from ._pure import Unsubscribe as Unsubscribe
from ._pure import Will as Will
from ._pure import decode as decode
from ._pure import decode_from as decode_from
from ._pure import encode as encode
from ._topics import Matches as Matches
from ._topics import TopicTree as TopicTree
from ._topics import parse_shared as parse_shared
from ._topics import topic_matches as topic_matches
from ._topics import validate_topic_filter as validate_topic_filter
from ._topics import validate_topic_name as validate_topic_name

__all__ = [
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "PingReq",
    "PingResp",
    "PreparedPublish",
    "PubAck",
    "PubComp",
    "Publish",
    "PubRec",
    "PubRel",
    "StreamDecoder",
    "SubAck",
    "Subscribe",
    "Subscription",
    "UnsubAck",
    "Unsubscribe",
    "Will",
    "decode",
    "decode_from",
    "encode",
    "Matches",
    "TopicTree",
    "parse_shared",
    "topic_matches",
    "validate_topic_filter",
    "validate_topic_name",
]
