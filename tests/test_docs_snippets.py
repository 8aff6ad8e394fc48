"""Every YAML a reader may copy from the README and the guides parses: fenced ``yaml`` blocks, and inline code
spans that are a ``key: value`` line of a config or sweep file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INLINE = re.compile(r"`((?:command|program|method|metric|parameters|data|algorithm|models|trainer|topology|faults)"
                    r": [^`]+)`")


def snippets(path: Path) -> list[str]:
    text = path.read_text()
    blocks = re.findall(r"```ya?ml\n(.*?)```", text, flags=re.S)
    return blocks + INLINE.findall(text)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_yaml_snippet_parses(path: Path) -> None:
    for snippet in snippets(path):
        try:
            yaml.safe_load(snippet)
        except yaml.YAMLError as err:
            pytest.fail(f"{path.name}: {snippet!r} does not parse: {str(err).splitlines()[0]}")


def test_the_sweep_command_of_the_readme_is_found_and_parses_to_the_agent_list() -> None:
    found = [s for s in snippets(ROOT / "README.md") if s.startswith("command:")]
    assert found and yaml.safe_load(found[0])["command"] == ["${env}", "lit-fl", "fit", "${args}"]
    with pytest.raises(yaml.YAMLError):  # the form the README used to show
        yaml.safe_load("command: [${env}, lit-fl, fit, ${args}]")
