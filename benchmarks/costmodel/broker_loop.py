"""N QoS 1 PUBLISHes through the sans-I/O broker (mqttwire.session) from one client to
ten subscribers, each acknowledged: the workload for callgrind.

    valgrind --tool=callgrind python benchmarks/costmodel/broker_loop.py 2000
    valgrind --tool=callgrind python benchmarks/costmodel/broker_loop.py 0

The difference of the two instruction totals divided by N is the cost of one message
(routing, ten deliveries, twenty acknowledgements); connecting and imports cancel out.
"""

import sys

from mqttwire import _speedups as m
from mqttwire.session import Broker

SUBSCRIBERS = 10


def main(count: int) -> None:
    broker = Broker(codec=m)
    now = 0.0
    publisher = broker.new_connection(now)
    publisher.receive_data(m.Connect("pub").encode(), now)
    subscribers = []
    for i in range(SUBSCRIBERS):
        conn = broker.new_connection(now)
        conn.receive_data(m.Connect(f"sub{i}").encode(), now)
        conn.receive_data(m.Subscribe(1, [m.Subscription("t/#", qos=1)]).encode(5), now)
        subscribers.append(conn)
    broker.outgoing()
    decoders = [m.StreamDecoder(version=5) for _ in subscribers]
    for n in range(count):
        pid = n % 65535 + 1
        publisher.receive_data(m.Publish("t/a", b"payload", qos=1, packet_id=pid).encode(5),
                               now)
        for out in broker.outgoing():
            for conn, decoder in zip(subscribers, decoders):
                if out.connection is conn:
                    for packet in decoder.feed(out.data):
                        conn.receive_data(m.PubAck(packet.packet_id).encode(5), now)
        broker.outgoing()
    # Every delivery acknowledged, none dropped: the loop did what it says.
    assert all(not conn.session.inflight and not conn.session.stats.dropped_queue_full
               for conn in subscribers)


if __name__ == "__main__":
    main(int(sys.argv[1]))
