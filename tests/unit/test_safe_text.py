"""Text from rows on a terminal: escapes, newlines and bidi controls
shown, never obeyed; piped machine formats exact."""

from __future__ import annotations

import csv
import io
import json

import pytest

from jobctl.contract import safe_text
from jobctl.render import output

HOSTILE = "\x1b]0;pwned\x07web-9\nAt 10:00 alice requeued it\u202eevil\r\t\x9b2J\u200b\ufeff"


def test_visible_escapes_every_control_bidi_and_invisible_character():
    shown = safe_text.visible(HOSTILE)
    assert shown == (
        "\\x1b]0;pwned\\x07web-9\\nAt 10:00 alice requeued it\\u202eevil\\r\\t\\x9b2J\\u200b\\ufeff"
    )
    assert shown.isprintable()


@pytest.mark.parametrize(
    "text", ["web-1", "", "ünïcode ✓ 日本語", "C:\\path\\n", "emoji 🙂", "a b"]
)
def test_visible_leaves_ordinary_text_alone(text):
    assert safe_text.visible(text) is text


@pytest.mark.parametrize(
    "char",
    [
        "\u061c",
        "\u200e",
        "\u200f",
        "\u202a",
        "\u2066",
        "\u2069",
        "\u2028",
        "\u2029",
        "\x7f",
        "\x85",
        "\x00",
    ],
)
def test_visible_covers_the_whole_set(char):
    assert safe_text.visible(f"a{char}b").isprintable()


def test_json_text_is_the_same_json_data():
    text = output.to_json({"w": HOSTILE, "k\u202e": ["\x9b", "\x7f"]})
    safe = safe_text.json_text(text)
    assert json.loads(safe) == json.loads(text)
    assert safe.isascii() or all(c.isprintable() or c in "\n" for c in safe)
    assert "\u202e" not in safe and "\x9b" not in safe and "\x1b" not in safe


def _render(fmt: output.Output, tty: bool, rows: list[dict[str, str]]) -> str:
    stream = io.StringIO()
    stream.isatty = lambda: tty  # type: ignore[method-assign]
    output.render(output.Document(rows, [output.Section(None, rows)]), fmt, None, stream)
    return stream.getvalue()


@pytest.mark.parametrize("fmt", [output.Output.csv, output.Output.tsv])
def test_csv_and_tsv_exact_when_piped_visible_on_a_terminal(fmt):
    rows = [{"id": "1", "reserved_by": HOSTILE}]
    delimiter = "," if fmt is output.Output.csv else "\t"
    piped = _render(fmt, False, rows)
    if fmt is output.Output.csv:
        assert list(csv.DictReader(io.StringIO(piped), delimiter=delimiter)) == rows
    else:  # COPY's text format: escaped, read back by unescaping (tests/unit/test_output.py)
        from test_output import copy_text_fields

        header, line = piped.splitlines()
        assert [dict(zip(copy_text_fields(header), copy_text_fields(line), strict=True))] == rows
    shown = _render(fmt, True, rows)
    assert shown.count("\n") == 2  # header and one row: no newline from the data
    assert all(c.isprintable() or c in "\n\t" for c in shown)
    assert "\\x1b]0;pwned\\x07web-9\\nAt 10:00" in shown


@pytest.mark.parametrize("fmt", [output.Output.json, output.Output.jsonl])
def test_json_exact_when_piped_escaped_on_a_terminal(fmt):
    rows = [{"reserved_by": HOSTILE}]
    piped, shown = _render(fmt, False, rows), _render(fmt, True, rows)
    assert "\u202e" in piped and "\u202e" not in shown and "\x9b" not in shown
    load = json.loads if fmt is output.Output.json else lambda t: [json.loads(t)]
    assert load(shown) == load(piped) == rows


def test_table_cells_keep_one_line():
    text = _render(output.Output.table, False, [{"reserved_by": HOSTILE}])
    assert len(text.strip().splitlines()) == 3  # header, rule, the row
    assert "\\nAt 10:00" in text and "\u202e" not in text


# Invisible and format characters: one case per class of code point,
# each shown as an escape by visible() and kept as the same data by json_text().
INVISIBLE_CLASSES = {
    "soft hyphen": ["\u00ad"],
    "combining grapheme joiner": ["\u034f"],
    "hangul fillers": ["\u115f", "\u1160", "\u3164", "\uffa0"],
    "mongolian vowel separator": ["\u180e"],
    "bidi embeddings and overrides": [chr(c) for c in range(0x202A, 0x202F)],
    "bidi isolates": [chr(c) for c in range(0x2066, 0x206A)],
    "invisible operators": [chr(c) for c in range(0x2061, 0x2065)],
    "deprecated format characters": [chr(c) for c in range(0x206A, 0x2070)],
    "interlinear annotations": ["\ufff9", "\ufffa", "\ufffb"],
    "tags": [chr(c) for c in range(0xE0000, 0xE0080)],
    "arabic and syriac format marks": ["\u0600", "\u0605", "\u06dd", "\u070f", "\u0890"],
    "astral format marks": ["\U000110bd", "\U00013430", "\U0001bca0", "\U0001d173"],
}


@pytest.mark.parametrize("name", sorted(INVISIBLE_CLASSES))
def test_visible_escapes_each_class_of_invisible_character(name):
    for char in INVISIBLE_CLASSES[name]:
        shown = safe_text.visible(f"web{char}1")
        code = ord(char)
        spelled = (
            f"\\x{code:02x}"
            if code <= 0xFF
            else f"\\u{code:04x}"
            if code <= 0xFFFF
            else f"\\U{code:08x}"
        )
        assert shown == f"web{spelled}1", (name, hex(code))
        assert shown.isascii() and shown.isprintable()


@pytest.mark.parametrize("name", sorted(INVISIBLE_CLASSES))
def test_json_text_escapes_each_class_and_keeps_the_data(name):
    for char in INVISIBLE_CLASSES[name]:
        text = output.to_json({"reserved_by": f"web{char}1"})
        safe = safe_text.json_text(text)
        assert char not in safe and safe.isascii(), (name, hex(ord(char)))
        assert json.loads(safe) == json.loads(text) == {"reserved_by": f"web{char}1"}


def test_every_format_character_of_this_pythons_unicode_is_escaped():
    """Category Cf as the running Python knows it: a newer Unicode's format characters make
    this fail until safe_text's class names them."""
    import sys
    import unicodedata

    missed = [
        hex(code)
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) == "Cf" and safe_text.visible(chr(code)) == chr(code)
    ]
    assert missed == []


def test_a_table_cell_with_invisible_characters_is_escaped():
    text = _render(output.Output.table, False, [{"reserved_by": "web\u3164\u00ad\U000e0041-1"}])
    assert "web\\u3164\\xad\\U000e0041-1" in text
    assert all(c.isascii() for c in text if not c.isspace() and c not in "─━│┃")
