"""N repetitions of one codec operation of the extension: the workload for callgrind.

    valgrind --tool=callgrind python benchmarks/costmodel/ops_loop.py dec_small 50000
    valgrind --tool=callgrind python benchmarks/costmodel/ops_loop.py dec_small 0

The difference of the two instruction totals divided by N is the cost of one loop step;
interpreter start-up and imports cancel out.  Instruction counts do not depend on how busy
the machine is, so they compare two builds where wall-clock medians are too noisy
(benchmarks/README.md, "Refactor: the extension's files split for real").
"""

import sys
from collections.abc import Callable

from mqttwire import _speedups as m
from mqttwire._codec.properties import Properties

SMALL = bytes.fromhex("3012000c73656e736f72732f74656d7032322e35")  # sensors/temp, b"22.5"
PUB1K = m.Publish("a/b/c", b"x" * 1024, qos=1, packet_id=7).encode(4)
V5 = m.Publish("t/v5", b"hello", qos=1, packet_id=3, properties=Properties(
    content_type="text/plain", user_properties=[("a", "b")], message_expiry_interval=60,
)).encode(5)
PUBACK = m.PubAck(5).encode(5)
CONNECT = m.Connect("client-1", username="u", password=b"p",
                    properties=Properties(session_expiry_interval=30)).encode()
SUBSCRIBE = m.Subscribe(3, [m.Subscription("a/+", qos=1, retain_handling=1)],
                        properties=Properties(subscription_identifiers=[4])).encode(5)
DECODED_V5 = m.decode(V5, version=5)
SMALL_PUBLISH = m.decode(SMALL, version=4)
ACK = m.PubAck(5)
STREAM = SMALL * 1000

OPS: dict[str, Callable[[], object]] = {
    "dec_small": lambda: m.decode(SMALL, version=4),
    "dec_1k": lambda: m.decode(PUB1K, version=4),
    "dec_v5": lambda: m.decode(V5, version=5).properties,
    "dec_puback": lambda: m.decode(PUBACK, version=5),
    "dec_connect": lambda: m.decode(CONNECT),
    "dec_subscribe": lambda: m.decode(SUBSCRIBE, version=5),
    "enc_small": lambda: SMALL_PUBLISH.encode(4),
    "enc_v5_decoded": lambda: DECODED_V5.encode(5),
    "enc_puback": lambda: ACK.encode(5),
    "prepared": lambda: m.PreparedPublish(DECODED_V5).encode(qos=1, packet_id=9),
    # 1,000 small PUBLISHes a step: N counts packets, so N // 1000 steps.
    "stream": lambda: m.StreamDecoder(version=4).feed(STREAM),
}


def main(op: str, n: int) -> None:
    step = OPS[op]
    for _ in range(n // 1000 if op == "stream" else n):
        step()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
