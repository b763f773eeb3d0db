"""Strict JSON: numbers JSON has no word for become strings, and a
json/jsonb value nested deeper than loaders.JSON_DEPTH is loaded as its text, with no recursion."""

from __future__ import annotations

import decimal
import io
import json

import pytest

from jobctl.db import loaders
from jobctl.render import output


def strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"bare {constant}")

    return json.loads(text, parse_constant=refuse)


ROW = {
    "id": 1,
    "score": float("nan"),
    "high": float("inf"),
    "low": float("-inf"),
    "scores": [float("nan"), 1.5],
    "amount": decimal.Decimal("Infinity"),
    "minus": decimal.Decimal("-Infinity"),
    "nan": decimal.Decimal("NaN"),
    "huge": decimal.Decimal("1e400"),
    "price": decimal.Decimal("2.50"),
}
SPELLED = {
    "id": 1, "score": "NaN", "high": "Infinity", "low": "-Infinity", "scores": ["NaN", 1.5],
    "amount": "Infinity", "minus": "-Infinity", "nan": "NaN", "huge": "1E+400", "price": 2.5,
}  # fmt: skip


@pytest.mark.parametrize("fmt", [output.Output.json, output.Output.jsonl])
@pytest.mark.parametrize("streamed", [False, True])
def test_non_finite_numbers_are_strings(fmt, streamed):
    stream = io.StringIO()
    rows = [ROW, {"id": 2, "score": 0.5}]
    payload = iter(rows) if streamed else rows
    output.render(output.Document(payload, []), fmt, None, stream)
    text = stream.getvalue()
    if fmt is output.Output.json:
        parsed = strict(text)
    else:
        parsed = [strict(line) for line in text.split("\n") if line]
    assert parsed == [SPELLED, {"id": 2, "score": 0.5}]


def test_to_json_indented_and_not_are_strict():
    assert strict(output.to_json(ROW)) == SPELLED
    assert strict(output.to_json(ROW, indent=2)) == SPELLED
    assert output.to_json({"a": 1.5}) == '{"a": 1.5}'  # finite numbers untouched


def test_a_value_within_the_depth_is_loaded_as_json():
    text = "[" * loaders.JSON_DEPTH + "1" + "]" * loaders.JSON_DEPTH
    assert loaders.load_json(text.encode()) == json.loads(text)
    assert not isinstance(loaders.load_json(text.encode()), str)


def test_a_value_deeper_than_the_depth_is_its_text():
    for depth in (loaders.JSON_DEPTH + 1, 3000, 100_000):
        text = "[" * depth + '{"x": "]]"}' + "]" * depth
        loaded = loaders.load_json(memoryview(text.encode()))
        assert isinstance(loaded, loaders.JsonText) and loaded == text
        assert strict(output.to_json({"payload": loaded})) == {"payload": text}


def test_brackets_inside_strings_do_not_count():
    many = json.dumps({"note": "[" * 5000, "esc": '\\"[[[' * 100, "list": [[1]]})
    assert not loaders.json_depth_exceeds(many.encode())
    assert loaders.load_json(many.encode()) == json.loads(many)
