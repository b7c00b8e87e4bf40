"""Quick check of the extension against mqtt5 (Rust) on the v5 operations of bench_peers:
best of 5 timeit repeats of 20,000 calls each, ns per call.  Run from the repository root
with PYTHONPATH=. (extension built in place, mqtt5 installed)."""
import sys, time, os
import mqttwire._speedups as cy
import mqttwire._pure as py
from mqttwire.capture import read_capture
def run(path, codec):
    t = time.process_time(); w = time.perf_counter()
    n = 0
    for _r in read_capture(path, codec=codec): n += 1
    return n, time.process_time() - t, time.perf_counter() - w
path = sys.argv[1]
for codec in ([cy, py] if len(sys.argv) > 2 else [cy]):
    n, c, w = run(path, codec)
    mb = os.path.getsize(path) / 1e6
    print(f"{codec.__name__} records {n} cpu {c:.2f}s wall {w:.2f}s  {mb/c:.1f} MB/s cpu  {n/c:,.0f} pkt/s cpu  {c/n*1e9:.0f} ns/pkt load {os.getloadavg()}")
