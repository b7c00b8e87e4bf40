"""Every Python example of README.md and of the pages under docs/ runs, with both codec
implementations, and the examples whose output the text states print it.

A block that cannot run here (it needs Spark and a broker, or it is a sketch of the glue
around the session layer) is preceded by ``<!-- not run: why; the test that runs what
it calls -->``: the reason must name a test module that exists.  The links between the
pages are checked too: a moved section must not leave a link to a file that is gone."""

from __future__ import annotations

import ast
import pathlib
import re
from types import ModuleType
from typing import NamedTuple

import pytest

import mqttwire
import mqttwire.session._codec_choice

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# A fenced python block, and the comment line right before it, if any.
BLOCK = re.compile(r"(?:<!-- not run: (?P<why>.*?) -->\n)?```python\n(?P<code>.*?)```", re.S)


class Example(NamedTuple):
    page: pathlib.Path
    line: int
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code")) + 1
            found.append(Example(page, line, match["code"], match["why"]))
    return found


EXAMPLES = examples()
RUN = [e for e in EXAMPLES if e.not_run is None]


def run_example(example: Example, codec: ModuleType, monkeypatch: pytest.MonkeyPatch
                ) -> dict[str, object]:
    """Execute the block as a reader would, from the repository's root (the examples
    name files such as examples/sample.pcapng), with `codec` as mqttwire's codec."""
    for name in codec.__all__:
        monkeypatch.setattr(mqttwire, name, getattr(codec, name))
    # codec=None in the session layer picks mqttwire's implementation: the one under test.
    monkeypatch.setattr(mqttwire.session._codec_choice, "impl", codec)
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__example__"}
    # Compiled with its page and line, so that a failure points at the text to fix.
    source = "\n" * (example.line - 1) + example.code
    exec(compile(source, str(example.page), "exec"), namespace)
    return namespace


def the_example(page: pathlib.Path, marker: str) -> Example:
    [example] = [e for e in EXAMPLES if e.page == page and marker in e.code]
    return example


def test_the_pages_have_examples() -> None:
    """The pages are where this test looks for them, and the parts that the README
    shows by example still have theirs (a renamed page would otherwise go unrun)."""
    pages = {e.page.name for e in RUN}
    for page in ("README.md", "codec.md", "topics.md", "capture.md"):
        assert page in pages, f"no runnable python example in {page}"
    assert len(RUN) >= 6, [e.name for e in RUN]


@pytest.mark.parametrize("example", RUN, ids=[e.name for e in RUN])
def test_example_runs(example: Example, codec: ModuleType, monkeypatch: pytest.MonkeyPatch
                      ) -> None:
    run_example(example, codec, monkeypatch)


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.not_run is not None],
                         ids=[e.name for e in EXAMPLES if e.not_run is not None])
def test_an_example_not_run_names_the_test_that_runs_it(example: Example) -> None:
    named = re.findall(r"tests/[\w/]+\.py", example.not_run or "")
    assert named, f"{example.name}: say which test runs what the example calls"
    for path in named:
        assert (ROOT / path).is_file(), f"{example.name}: {path} does not exist"


def test_codec_example_shows_what_it_says(codec: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    namespace = run_example(the_example(DOCS / "codec.md", "for_v5_sub"), codec, monkeypatch)
    out = capsys.readouterr().out
    assert "PUBLISH: both QoS bits set (first byte 0x36) at offset 0 [MQTT-3.3.1-4]" in out
    assert "Connect(client_id='c1', protocol_version=4)" in out
    assert namespace["data"] == b"2\x14\x00\x0csensors/temp\x00\n22.5"
    assert namespace["v5"].properties.message_expiry_interval == 300  # type: ignore[attr-defined]
    for_v5_sub = namespace["for_v5_sub"]
    assert codec.decode(for_v5_sub).properties.subscription_identifiers == [3]


def test_readme_codec_example_shows_what_it_says(codec: ModuleType,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    namespace = run_example(the_example(README, "mw.StreamDecoder"), codec, monkeypatch)
    assert capsys.readouterr().out == (
        "PUBLISH: both QoS bits set (first byte 0x36) at offset 0 [MQTT-3.3.1-4]\n")
    assert namespace["data"] == b"2\x14\x00\x0csensors/temp\x00\n22.5"


def test_topics_example_shows_what_it_says(codec: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    namespace = run_example(the_example(DOCS / "topics.md", "match("), codec, monkeypatch)
    rule, subscribers, shared = capsys.readouterr().out.splitlines()
    assert rule == "MQTT-4.7.1-1"
    assert ast.literal_eval(subscribers) == {"c1": 1, "c2": 0}  # a dict: any order
    assert ast.literal_eval(shared) == {("ingest", "sensors/#"): {"c3": 1}}
    assert namespace["found"].subscribers == {"c1": 1, "c2": 0}  # type: ignore[attr-defined]
    to_c1 = codec.decode(namespace["to_c1"])
    assert (to_c1.topic, to_c1.payload, to_c1.qos, to_c1.packet_id) == (
        "sensors/kitchen/temp", b"21.5", 1, 7)
    assert to_c1.properties.subscription_identifiers == [3]


def test_capture_example_prints_the_sample_publishes(codec: ModuleType,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run_example(the_example(DOCS / "capture.md", "read_capture("), codec, monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    # examples/make_sample_capture.py's first publisher: client pub31, QoS 0, frame 44.
    assert lines[0] == "44 pub31 sample/kitchen/temp 0", lines[:3]
    assert all(len(line.split()) == 4 for line in lines)


# Relative links of the pages that a reader follows: README.md, CONTRIBUTING.md, docs/,
# benchmarks/.
# They lead into the whole checkout (benchmarks/, SECURITY.md), which the wheel tests'
# copies of the sources do not hold: marked packaging, it runs where the checkout is.
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.packaging
@pytest.mark.parametrize("page", [*PAGES, ROOT / "CONTRIBUTING.md", ROOT / "SECURITY.md",
                                  *sorted(ROOT.glob("benchmarks/**/*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_links_lead_to_files(page: pathlib.Path) -> None:
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{page.name} links to {target}, which does not exist"


def test_docs_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not list {page.name}"
