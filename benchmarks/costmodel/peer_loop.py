"""Run one operation of the peer benchmarks N times, through its adapter: the workload for
counting instructions per operation with callgrind (peers.md, "What the misses are made of").

    cd benchmarks/costmodel
    valgrind --tool=callgrind python peer_loop.py cython decode "puback v5" 20000
    valgrind --tool=callgrind python peer_loop.py cython decode "puback v5" 0

(total with N - total with 0) / N is the cost of one loop step: the adapter's call, the
operation, and freeing the previous result.  Codecs: ``cython`` (mqttwire._speedups),
``python`` (mqttwire._pure), ``mqtt5``, the other peers by their adapter's class
name in lower case (``zmqtt``, ``gmqtt``...), and ``floor``: the adapter shape calling ``len()``,
the least a loop step can cost (the operation and direction are then ignored).
Directions: ``decode``, ``read`` (decode, then read every field the correctness check
compares, as bench_peers' "decode and read" rows do) and ``encode``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for peers.py

import peers

CODECS = {
    "cython": peers.MqttWire("mqttwire._speedups", "cython", False),
    "python": peers.MqttWire("mqttwire._pure", "python", True),
    "mqtt5": peers.Mqtt5(),
    # any other peer by its class name in lower case: zmqtt, paho, gmqtt, amqtt
    **{type(p).__name__.lower(): p for p in peers.PEERS if type(p).__name__ != "MqttWire"},
}


def main(codec: str, direction: str, op_id: str, n: int) -> None:
    if codec == "floor":
        fn, arg = (lambda x: len(x)), b"abc"
    else:
        op = {o.id: o for o in peers.OPS}[op_id]
        peer = CODECS[codec]
        if direction == "decode":
            fn, arg = peer.decoder(op), op.wire()
        elif direction == "read":
            fn, arg = peer.reader(op), op.wire()
        else:
            fn, arg = peer.encoder(op)  # type: ignore[misc]
    for _ in range(n):
        fn(arg)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
