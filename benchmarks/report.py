"""Print a pytest-benchmark JSON file as a markdown table: median per operation for each
implementation and the ratio python / cython, one row per benchmark group.  A benchmark
whose extra_info has "ops" timed that many operations per call; its median is divided.

    python benchmarks/report.py bench-codec.json
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict


def _impl(test_name: str) -> str:
    match = re.search(r"\[(cython|python)[-\]]", test_name)
    return match.group(1) if match else "?"


def _fmt(seconds: float) -> str:
    ns = seconds * 1e9
    if ns >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:,.1f} us"
    return f"{ns:,.0f} ns"


def main(path: str) -> None:
    with open(path) as f:
        data = json.load(f)
    rows: dict[str, dict[str, float]] = defaultdict(dict)
    functions: dict[str, set[str]] = defaultdict(set)
    for bench in data["benchmarks"]:
        functions[bench["group"] or ""].add(bench["name"].split("[")[0])
    for bench in data["benchmarks"]:
        ops = bench.get("extra_info", {}).get("ops", 1)
        row = bench["group"] or bench["name"]
        if len(functions[bench["group"] or ""]) > 1:  # several methods compared in a group
            row += f" ({bench['name'].split('[')[0].removeprefix('test_')})"
        rows[row][_impl(bench["name"])] = bench["stats"]["median"] / ops
    info = data.get("machine_info", {})
    print(f"Python {info.get('python_version', '?')}, {info.get('cpu', {}).get('brand_raw', '?')}")
    print()
    print("| operation | cython (median) | python (median) | python / cython |")
    print("|---|---:|---:|---:|")
    for group, by_impl in rows.items():
        cy, py = by_impl.get("cython"), by_impl.get("python")
        ratio = f"{py / cy:.1f}x" if cy and py else "n/a"
        print(f"| {group} | {_fmt(cy) if cy else 'n/a'} | {_fmt(py) if py else 'n/a'} | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1])
