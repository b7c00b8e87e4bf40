"""The pure-Python implementation of the mqttwire codec.

It runs where no compiled wheel fits (PyPy, unusual platforms) and is the baseline the
benchmarks compare the Cython extension ``mqttwire._speedups`` against.  The two have the
same names, signatures and behaviour: the test suite runs every behavioural test on both.
This twin is the typed reference; its docstrings are the documentation of both.

This module is the twin's public face: it re-exports the code, which lives by concern in
``_codec/``: ``packets`` (the packet classes), ``encode`` (PreparedPublish, encode()),
``decode`` (the hot decoders, decode(), decode_from()) and ``stream`` (StreamDecoder),
each the twin of the Cython include file of the same name with ``_c.pxi`` (``decode`` and
``decode_c.pxi``).  The hot path (fixed header, Remaining Length, PUBLISH, the four
acknowledgements, the stream framing loop) lives there and, in C, in ``_speedups``.  The
other packet types are decoded and encoded by the shared ``_codec/reference.py``.  The
twins do not import each other: the code both run is in shared modules (``publish``: the
PUBLISH and acknowledgement encoders; ``forwarding``: PreparedPublish's; ``framing``: the
fixed header; ``fields``: equality and repr), which ``_speedups`` hands what its C code
does not vouch for, so that both raise the same errors.
"""

from __future__ import annotations

from ._codec.decode import decode, decode_from
from ._codec.encode import PreparedPublish, encode
from ._codec.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from ._codec.packets import (
    Packet as Packet,  # the union of the packet classes, for annotations; not in __all__
)

# Not in __all__, but reachable from both codec modules as before: code handed a codec
# module (tests/fuzz/fuzz_seeds.py, say) builds property blocks with codec.Properties.
from ._codec.properties import Properties as Properties
from ._codec.stream import StreamDecoder
from ._topics import (
    Matches,
    TopicTree,
    parse_shared,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)

__all__ = [
    "Auth", "ConnAck", "Connect", "Disconnect", "PingReq", "PingResp", "PubAck", "PubComp",
    "Publish", "PubRec", "PubRel", "SubAck", "Subscribe", "Subscription", "UnsubAck",
    "Unsubscribe", "Will", "StreamDecoder", "PreparedPublish", "decode", "decode_from",
    "encode", "Matches", "TopicTree", "parse_shared", "topic_matches", "validate_topic_filter",
    "validate_topic_name",
]

# The classes and functions defined in _codec's modules are this module's API, and say
# so: ``Publish.__module__`` stays "mqttwire._pure", as it was before the split, so reprs of
# the classes, pickling (which finds a class by module and name) and
# _codec.datatypes.same_kind (which recognises the twins' packets by module) see one module
# per twin.  The topic functions keep their own module, _topics, as before.
for _obj in (
    Auth, ConnAck, Connect, Disconnect, PingReq, PingResp, PubAck, PubComp, Publish, PubRec,
    PubRel, SubAck, Subscribe, Subscription, UnsubAck, Unsubscribe, Will, StreamDecoder,
    PreparedPublish, decode, decode_from, encode,
):
    _obj.__module__ = __name__
del _obj
