"""Topic matching for brokers: TopicTree.match against a linear scan with topic_matches,
at 10, 1,000 and 100,000 subscriptions, for the extension and the fallback.

Run:  python -m pytest benchmarks/bench_topics.py --benchmark-only --benchmark-group-by=group

Each round matches the same batch of NAMES topic names; divide by len(NAMES) for the time
per PUBLISH.  The linear scan does what match() does (each subscriber once, at its highest
QoS) by calling topic_matches on every filter.  At 100,000 filters the scan is timed over a
single round, so that the suite stays short.
"""

from __future__ import annotations

import random
from types import ModuleType
from typing import Any

import pytest

SIZES = [10, 1_000, 100_000]
BATCH = 10  # topic names per round




def subscriptions(count: int, seed: int = 1) -> list[tuple[str, str, int]]:
    """(filter, client, qos): a vehicle fleet's subscribers.  About 70% exact filters,
    20% with '+', 10% with '#', and a client for every five subscriptions."""
    rnd = random.Random(seed)
    regions = max(1, count // 1000)
    out = []
    for i in range(count):
        region = f"r{rnd.randrange(regions)}"
        vehicle = f"v{rnd.randrange(1000)}"
        metric = rnd.choice(["speed", "fuel", "temp", "gps", "door"])
        kind = rnd.random()
        if kind < 0.7:
            filter = f"fleet/{region}/{vehicle}/telemetry/{metric}"
        elif kind < 0.8:
            filter = f"fleet/{region}/+/telemetry/{metric}"
        elif kind < 0.9:
            filter = f"fleet/+/{vehicle}/+/{metric}"
        elif kind < 0.97:
            filter = f"fleet/{region}/{vehicle}/#"
        else:
            filter = f"fleet/{region}/#"
        out.append((filter, f"client{i // 5}", i % 3))
    return out


def names(count: int, seed: int = 2) -> list[str]:
    """BATCH topic names drawn from the same fleet."""
    rnd = random.Random(seed)
    regions = max(1, count // 1000)
    return [
        f"fleet/r{rnd.randrange(regions)}/v{rnd.randrange(1000)}/telemetry/"
        f"{rnd.choice(['speed', 'fuel', 'temp', 'gps', 'door'])}"
        for _ in range(BATCH)
    ]


_TREES: dict[tuple[str, int], Any] = {}


def tree_for(codec: ModuleType, count: int) -> Any:
    """One tree per implementation and size, built once (100,000 inserts take seconds)."""
    key = (codec.__name__, count)
    if key not in _TREES:
        tree = codec.TopicTree()
        for filter, client, qos in subscriptions(count):
            tree.insert(filter, client, qos)
        _TREES[key] = tree
    return _TREES[key]


def linear_match(codec: ModuleType, subs: list[tuple[str, str, int]], name: str) -> dict[str, int]:
    topic_matches = codec.topic_matches
    best: dict[str, int] = {}
    for filter, client, qos in subs:
        if topic_matches(filter, name) and qos >= best.get(client, -1):
            best[client] = qos
    return best


@pytest.mark.parametrize("count", SIZES)
def test_tree_match(benchmark: Any, codec: ModuleType, count: int) -> None:
    tree = tree_for(codec, count)
    batch = names(count)
    benchmark.group = f"match {count:,} filters"

    def run() -> int:
        return sum(len(tree.match(name).subscribers) for name in batch)

    found = benchmark(run)
    subs = subscriptions(count)
    if count <= 1_000:  # the same answer as the scan
        assert found == sum(len(linear_match(codec, subs, name)) for name in batch)


@pytest.mark.parametrize("count", SIZES)
def test_linear_scan(benchmark: Any, codec: ModuleType, count: int) -> None:
    subs = subscriptions(count)
    batch = names(count)
    benchmark.group = f"match {count:,} filters"

    def run() -> int:
        return sum(len(linear_match(codec, subs, name)) for name in batch)

    if count >= 100_000:
        benchmark.pedantic(run, rounds=1, iterations=1)
    else:
        benchmark(run)
