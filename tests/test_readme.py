"""The README's Python example runs, with both implementations, and says what it shows."""

from __future__ import annotations

import pathlib
import re
from types import ModuleType

import mqttwire

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs(codec: ModuleType, monkeypatch, capsys) -> None:
    # The codec's example, the first block under "## Example" (the Spark one, earlier,
    # needs Spark: tests/spark/test_pipeline.py tests what it calls).
    example = README.read_text().split("\n## Example\n", 1)
    assert len(example) == 2, "README has no Example section"
    blocks = re.findall(r"```python\n(.*?)```", example[1], re.S)
    assert blocks, "README's Example section has no python block"
    for name in codec.__all__:  # run the example against the implementation under test
        monkeypatch.setattr(mqttwire, name, getattr(codec, name))
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert "PUBLISH: both QoS bits set (first byte 0x36) at offset 0 [MQTT-3.3.1-4]" in out
    assert "Connect(client_id='c1', protocol_version=4)" in out
    assert namespace["data"] == b"2\x14\x00\x0csensors/temp\x00\n22.5"
    assert namespace["v5"].properties.message_expiry_interval == 300
    assert codec.decode(namespace["for_v5_sub"]).properties.subscription_identifiers == [3]
