"""``lit_fl.suite.document_schema.read_as``: a file validated against its pydantic model in one call, the first problem
one line naming the file, the key (list items counted from 1) and what is allowed."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import model_validator

from lit_fl.errors import ConfigError
from lit_fl.suite.document_schema import FileModel, Fraction, Seed, Text, read_as, refuse


class Item(FileModel):
    name: Text
    at: Literal["final", "best"] = "final"
    share: Fraction = 0.5
    tags: list[Text | list[Text]] = []


class Doc(FileModel):
    items: list[Item]
    total: int = 0

    @model_validator(mode="after")
    def _total(self) -> Doc:
        if self.total and self.total != len(self.items):
            raise refuse(["items", len(self.items) - 1], f"total says {self.total} items", ["one item per total"])
        return self


def refusal(raw: object, model: object = Doc, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as err:
        read_as(model, raw, "doc d.yaml", **kwargs)  # type: ignore[arg-type]
    text = str(err.value)
    assert "\n" not in text and text.startswith("doc d.yaml: ")
    return text.removeprefix("doc d.yaml: ")


@pytest.mark.parametrize(("raw", "message"), [
    ({"items": [{"name": "a"}, {"name": "b", "at": "last"}]},
     "items[2].at: unknown value 'last'; allowed: final, best"),
    ({"items": [{"name": "a", "nme": "b"}]}, "items[1]: unknown key 'nme'; allowed: at, name, share, tags"),
    ({"items": [{"nme": "a"}]}, "items[1]: unknown key 'nme'; allowed: at, name, share, tags"),  # not: needs name
    ({"items": [{"at": "best"}]}, "items[1]: needs key 'name'; required: name"),
    ({"items": [{"name": ""}]}, "items[1].name: expected non-empty text, got ''"),
    ({"items": [{"name": "a", "share": 1.5}]}, "items[1].share: must be a fraction in [0, 1] (73.66% is 0.7366), "
                                               "got 1.5"),
    ({"items": [{"name": "a", "share": True}]}, "items[1].share: expected a number, got True"),
    ({"items": [{"name": "a", "tags": [["x", 3]]}]}, "items[1].tags[1]: expected text, got ['x', 3]"),
    ({"items": {"name": "a"}}, "items: expected a list, got {'name': 'a'}"),
    ([1], "expected a mapping with keys items, total, got [1]"),
    ({"items": [{"name": "a"}], "total": 2}, "items[1]: total says 2 items; allowed: one item per total"),
])
def test_the_first_problem_is_one_line_naming_the_key_and_what_is_allowed(raw: object, message: str) -> None:
    assert refusal(raw) == message


def test_a_valid_file_is_its_model_and_json_and_plain_types_are_read_too() -> None:
    doc = read_as(Doc, {"items": [{"name": " a ", "tags": ["x", ["y"]]}]}, "doc d.yaml")
    assert doc.items[0].name == "a" and doc.items[0].tags == ["x", ["y"]]
    assert read_as(Seed, 3, "seed") == 3
    assert refusal(-1, Seed) == "expected a number >= 0, got -1"
    assert refusal(b'{"items": [', json=True).startswith("not JSON (")
    assert refusal({"items": "x"}, hint="write it again") == "items: expected a list, got 'x'; write it again"
