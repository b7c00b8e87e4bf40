"""Small capture files packed into shared tasks, by size, as Spark's file sources pack them.

A decoding task has a fixed cost (a Python worker handing over, the decoder's setup, a
Parquet file per table opened and closed, the scheduling), which a small capture does
not pay back: 200 captures of 19 kB take about half the time packed into a few tasks
that they take in a task each (benchmarks/capture.md, "200 small captures").  Ring buffers of
small files are how long captures are kept, so the streaming reader packs the files that
a task reads whole into tasks of several files, with Spark's own rule and settings (its
``FilePartition.getFilePartitions``), so that a user who knows them knows this too:

* each file counts as its size plus ``spark.sql.files.openCostInBytes`` (default 4 MiB:
  what opening a file is taken to cost, in bytes read);
* a task takes files up to ``maxSplitBytes = min(spark.sql.files.maxPartitionBytes,
  max(openCostInBytes, total / minPartitionNum))``, the total being over every file
  counted so (``maxPartitionBytes`` defaults to 128 MiB; ``minPartitionNum`` is
  ``spark.sql.files.minPartitionNum``, else ``spark.sql.leafNodeDefaultParallelism``,
  else the default parallelism: the cores), so that a few files still spread over the
  cores;
* the files, largest first, fill one task after the other ("next fit decreasing"): a
  file that would take a task over ``maxSplitBytes`` starts the next one;
* with ``spark.sql.files.maxPartitionNum`` set and more tasks than that, the files are
  packed again with ``maxSplitBytes`` = total / maxPartitionNum.

A task then decodes its files one after the other, each its own capture, so the tables
are the same as with one task per file.  A tiny ``maxPartitionBytes`` (1 byte) gives
every file its own task again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["MAX_PARTITION_BYTES", "OPEN_COST_IN_BYTES", "Packing", "parse_bytes"]

#: Spark's defaults of spark.sql.files.maxPartitionBytes and openCostInBytes.
MAX_PARTITION_BYTES = 128 << 20
OPEN_COST_IN_BYTES = 4 << 20

# Spark's byte strings (JavaUtils.byteStringAs): a whole number, with an optional unit;
# without one, these settings are bytes.
_BYTES = re.compile(r"([0-9]+)\s*([a-z]*)")
_UNITS = {"": 0, "b": 0, "k": 10, "kb": 10, "m": 20, "mb": 20, "g": 30, "gb": 30,
          "t": 40, "tb": 40, "p": 50, "pb": 50}


def parse_bytes(text: str) -> int:
    """A Spark byte setting ("134217728", "128m", "128MB") in bytes."""
    match = _BYTES.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"not a size in bytes as Spark writes them: {text!r}")
    return int(match.group(1)) << _UNITS[match.group(2)]


@dataclass(frozen=True)
class Packing:
    """Spark's file packing settings (see the module docstring)."""

    max_partition_bytes: int = MAX_PARTITION_BYTES
    open_cost: int = OPEN_COST_IN_BYTES
    min_partitions: int = 1
    max_partitions: int | None = None

    @classmethod
    def from_conf(cls, get: Callable[[str], str | None], parallelism: int) -> Packing:
        """The settings from a Spark conf (``get`` gives a key's value, or None where it
        is not set), Spark's defaults elsewhere; ``parallelism``: the context's default
        parallelism."""
        def number(key: str) -> int | None:
            value = get(key)
            return None if value is None or not value.strip() else int(value)

        def size(key: str, default: int) -> int:
            value = get(key)
            return default if value is None or not value.strip() else parse_bytes(value)

        minimum = (number("spark.sql.files.minPartitionNum")
                   or number("spark.sql.leafNodeDefaultParallelism") or parallelism)
        return cls(size("spark.sql.files.maxPartitionBytes", MAX_PARTITION_BYTES),
                   size("spark.sql.files.openCostInBytes", OPEN_COST_IN_BYTES),
                   max(1, minimum), number("spark.sql.files.maxPartitionNum"))

    def split_bytes(self, sizes: Sequence[int]) -> int:
        """Spark's maxSplitBytes for files of ``sizes``: what one task takes at most."""
        total = sum(size + self.open_cost for size in sizes)
        return min(self.max_partition_bytes,
                   max(self.open_cost, total // self.min_partitions))

    def pack(self, sizes: Sequence[int]) -> list[list[int]]:
        """The files (of ``sizes`` bytes) packed into tasks: each task a list of indexes
        into ``sizes``, largest files first."""
        if not sizes:
            return []
        order = sorted(range(len(sizes)), key=lambda i: -sizes[i])  # stable, as Spark's
        tasks = self._next_fit(order, sizes, self.split_bytes(sizes))
        if self.max_partitions is not None and len(tasks) > self.max_partitions > 0:
            total = sum(size + self.open_cost for size in sizes)
            tasks = self._next_fit(order, sizes, math.ceil(total / self.max_partitions))
        return tasks

    def _next_fit(self, order: list[int], sizes: Sequence[int], limit: int
                  ) -> list[list[int]]:
        tasks: list[list[int]] = []
        current: list[int] = []
        used = 0
        for i in order:
            # As Spark: the file's own size decides whether it still fits; once in, it
            # counts with its open cost.
            if current and used + sizes[i] > limit:
                tasks.append(current)
                current, used = [], 0
            current.append(i)
            used += sizes[i] + self.open_cost
        if current:
            tasks.append(current)
        return tasks
