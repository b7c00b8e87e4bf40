"""The capture pipeline on Apache Spark: captures in, Parquet tables and a summary out.

Run it as ``mqttwire pipeline INPUT... --out DIR`` (see :mod:`mqttwire.cli`) or from
Python with :func:`run_pipeline`; :func:`read_tables` gives the same five tables as
DataFrames, unwritten, for further work in Spark.  The modules, in the order data flows:

- :mod:`.inputs`: list the input files (any Hadoop URI) on the driver;
- :mod:`.plan`: the inputs turned into typed tasks (no Spark needed);
- :mod:`.tasks`: what runs on the executors: a task's decoding and what it returns;
- :mod:`.derive`: the connections, messages and retained tables of one capture (its
  records, with TCP stream ends, from :func:`mqttwire.capture.read_capture`), in pure
  Python (no Spark needed);
- :mod:`.decoding`: all of a capture's tables as Arrow record batches;
- :mod:`.split`: one large capture read in byte ranges by several tasks and decoded per
  TCP connection (after Spark's shuffle), for the same tables;
- :mod:`.parquet`: the tables' Parquet files written by the tasks themselves, and
  their commit on the driver;
- :mod:`.schema`: the declared table schemas;
- :mod:`.tables`: the five tables as DataFrames (:func:`read_tables`);
- :mod:`.write`: the tables written; :mod:`.run`: the command's run, from options to
  summary (:func:`run_pipeline`), with :mod:`.progress` its progress lines;
- :mod:`.startup`: starting Spark;
- :mod:`.report`: the summary and its chart.

Importing this package does not import pyspark; :func:`run_pipeline` does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .run import PipelineOptions, PipelineResult, run_pipeline
    from .startup import JavaMissing, find_java
    from .tables import TABLE_NAMES, Tables, read_tables
    from .tasks import Counters

#: Where each public name lives.  They are imported when first asked for (PEP 562), not
#: with the package: a Spark executor's Python worker imports this package to reach the
#: task code (.tasks, .decoding), and the driver's modules (.run, .tables, .plan, .write,
#: .progress, .startup) would only lengthen every worker's start (benchmarks/capture.md,
#: "The Spark session's start").
_HOMES = {
    "PipelineOptions": "run", "PipelineResult": "run", "run_pipeline": "run",
    "JavaMissing": "startup", "find_java": "startup",
    "TABLE_NAMES": "tables", "Tables": "tables", "read_tables": "tables",
    "Counters": "tasks",
}

__all__ = [
    "TABLE_NAMES",
    "Counters",
    "JavaMissing",
    "PipelineOptions",
    "PipelineResult",
    "Tables",
    "find_java",
    "read_tables",
    "run_pipeline",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
