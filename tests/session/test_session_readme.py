"""The README's session-layer example runs, on both codec implementations, and prints
what its comments say."""

from __future__ import annotations

import pathlib
import re
from types import ModuleType

import pytest

import mqttwire.session._codec_choice

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_session_example_runs(codec: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    section = README.read_text().split("\n## The session layer\n", 1)
    assert len(section) == 2, "README has no 'The session layer' section"
    blocks = re.findall(r"```python\n(.*?)```", section[1].split("\n## ", 1)[0], re.S)
    assert blocks, "README's session layer section has no python block"
    # codec=None picks mqttwire's implementation: make that the one under test.
    monkeypatch.setattr(mqttwire.session._codec_choice, "impl", codec)
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    assert out == ["ReceivedMessage('sensors/temp', b'22.5', qos=1, packet_id=1)",
                   "OrderedDict()"]
    broker = namespace["broker"]
    assert broker.codec.module is codec  # type: ignore[attr-defined]
