"""Decode the small QoS 0 PUBLISH (MQTT 3.1.1) N times: the workload for callgrind.

    valgrind --tool=callgrind python benchmarks/costmodel/decode_loop.py cython 200000
    valgrind --tool=callgrind python benchmarks/costmodel/decode_loop.py cython 0

The difference of the two instruction totals divided by N is the cost of one loop step
(the interpreter's loop and call, plus the decode and freeing its result); callgrind's
inclusive counts split it by function.  "empty" runs the same loop calling a C function
with the same call shape that does nothing useful (``dict.get(data, version=4)`` cannot
take keywords, so ``bytes.count`` with one argument stands in), for the call overhead.
"""

import sys

from mqttwire import _pure, _speedups

DATA = bytes.fromhex("3012000c73656e736f72732f74656d7032322e35")  # sensors/temp, b"22.5"


def main(impl: str, n: int) -> None:
    if impl == "empty":
        count = DATA.count
        for _ in range(n):
            count(b"z")
        return
    decode = (_speedups if impl == "cython" else _pure).decode
    for _ in range(n):
        decode(DATA, version=4)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
