"""Text from rows on a terminal: escapes, newlines and bidi controls
shown, never obeyed; piped machine formats exact."""

from __future__ import annotations

import csv
import inspect
import io
import itertools
import json
import shutil
import subprocess
import sys
import unicodedata
from collections.abc import Callable

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
    "variation selectors": ["\ufe00", "\ufe0e", "\ufe0f", "\U000e0100", "\U000e01ef"],
    "mongolian free variation selectors": ["\u180b", "\u180c", "\u180d", "\u180f"],
    "khmer inherent vowels": ["\u17b4", "\u17b5"],
    "blanks that are not whitespace": ["\u2800", "\U00016fe4", "\U0001d159"],
    "reserved default ignorables": ["\u2065", "\ufff0", "\ufff8", "\U000e0fff"],
}


def _spelled(code: int) -> str:
    """How visible() spells one escaped code point."""
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@pytest.mark.parametrize("name", sorted(INVISIBLE_CLASSES))
def test_visible_escapes_each_class_of_invisible_character(name):
    for char in INVISIBLE_CLASSES[name]:
        shown = safe_text.visible(f"web{char}1")
        assert shown == f"web{_spelled(ord(char))}1", (name, hex(ord(char)))
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


# Default ignorable and blank code points: a rule by property (DerivedCoreProperties.txt's
# Default_Ignorable_Code_Point, and the blanks that are not whitespace), checked whole.
DI_TOTAL = 4174  # "# Total code points: 4174" under Default_Ignorable_Code_Point (14.0-16.0)


def _code_points(table: tuple[tuple[int, int], ...]) -> list[int]:
    return [code for first, last in table for code in range(first, last + 1)]


def _human_facing() -> dict[str, Callable[[str], str]]:
    """safe_text's functions that make text for people, each as a check sees it: text in,
    what a terminal is sent out (json_text takes JSON, so the text goes in as a JSON string
    and comes out read back by the check)."""
    return {"visible": safe_text.visible, "json_text": safe_text.json_text}


def test_the_checks_cover_every_public_function_of_safe_text():
    public = {
        name
        for name, member in inspect.getmembers(safe_text, inspect.isfunction)
        if not name.startswith("_") and member.__module__ == safe_text.__name__
    }
    assert public == set(_human_facing())  # a new function: add it to _human_facing


@pytest.mark.parametrize("name", ["DEFAULT_IGNORABLE", "BLANK"])
def test_the_tables_are_sorted_ranges_of_assignable_code_points(name):
    table = getattr(safe_text, name)
    assert all(0 <= first <= last <= sys.maxunicode for first, last in table)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(table)), "sorted, disjoint"
    blank = _code_points(safe_text.BLANK)
    assert not any(chr(code).isspace() for code in blank)  # whitespace is shown as it is


def test_default_ignorable_is_the_whole_property():
    codes = _code_points(safe_text.DEFAULT_IGNORABLE)
    assert len(codes) == len(set(codes)) == DI_TOTAL
    for code in (0x00AD, 0x034F, 0x061C, 0x17B4, 0x180F, 0x200B, 0x2065, 0x3164, 0xFE0F):
        assert code in codes, hex(code)
    for first, last in [(0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF)]:
        assert set(range(first, last + 1)) <= set(codes), hex(first)


def _unicode_default_ignorable() -> tuple[str, set[int]]:
    """Default_Ignorable_Code_Point from the Unicode database on this machine: Perl's
    Unicode::UCD (generated from DerivedCoreProperties.txt; no copy of the .txt itself is
    shipped by Python or its packages), or a skip where there is none."""
    perl = shutil.which("perl")
    if perl is None:
        pytest.skip("no perl: no Unicode database with Default_Ignorable_Code_Point here")
    script = (
        "use Unicode::UCD qw(prop_invlist); "
        'print Unicode::UCD::UnicodeVersion(), "\\n", '
        'join(" ", prop_invlist("Default_Ignorable_Code_Point")), "\\n";'
    )
    done = subprocess.run(
        [perl, "-e", script], capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"perl has no Unicode::UCD: {done.stderr.strip()}")
    version, listed = done.stdout.splitlines()
    if int(version.split(".")[0]) < 14:  # U+180F was unassigned, not ignorable, before 14.0
        pytest.skip(f"Unicode {version} predates the table's 14.0")
    bounds = [int(n) for n in listed.split()]  # an inversion list: starts, then ends (open)
    if len(bounds) % 2:
        bounds.append(sys.maxunicode + 1)
    return version, {c for a, b in zip(bounds[::2], bounds[1::2], strict=True) for c in range(a, b)}


def test_default_ignorable_matches_the_unicode_database_on_this_machine():
    version, reference = _unicode_default_ignorable()
    ours = set(_code_points(safe_text.DEFAULT_IGNORABLE))
    assert sorted(map(hex, ours - reference)) == [], version
    assert sorted(map(hex, reference - ours)) == [], version


def test_every_code_point_of_the_tables_is_escaped_by_every_function():
    codes = sorted(
        set(_code_points(safe_text.DEFAULT_IGNORABLE)) | set(_code_points(safe_text.BLANK))
    )
    missed: list[tuple[str, str]] = []
    for code in codes:
        char = chr(code)
        if safe_text.visible(f"w{char}1") != f"w{_spelled(code)}1":
            missed.append(("visible", hex(code)))
        text = output.to_json({"w": f"w{char}1"})
        safe = safe_text.json_text(text)
        if not safe.isascii() or json.loads(safe) != {"w": f"w{char}1"}:
            missed.append(("json_text", hex(code)))
    assert missed == []
    assert set(_human_facing()) == {"visible", "json_text"}  # each checked above
    every = "".join(map(chr, codes))
    assert safe_text.visible(every) == "".join(map(_spelled, codes))


def test_the_issues_examples_are_shown():
    assert safe_text.visible("w1\ufe0f") == "w1\\ufe0f"
    assert safe_text.visible("w\u2800\u180b1\u17b4") == "w\\u2800\\u180b1\\u17b4"
    assert safe_text.visible("\u2764\ufe0f") == "\u2764\\ufe0f"  # the heart stays a heart


def _assigned(first: int, last: int) -> str:
    return "".join(chr(c) for c in range(first, last + 1) if unicodedata.category(chr(c)) != "Cn")


ORDINARY = {
    "ascii": "".join(map(chr, range(0x20, 0x7F))),
    "cjk": _assigned(0x4E00, 0x9FFF) + _assigned(0x3041, 0x30FF) + _assigned(0xAC00, 0xD7A3),
    "emoji": _assigned(0x1F300, 0x1F5FF) + _assigned(0x1F600, 0x1F64F) + "👍🏽 🇫🇷 🦀",
    "accented": "".join(chr(c) for c in range(0xC0, 0x250) if c != 0xAD)
    + " e\u0301 Tiếng Việt Ελληνικά кириллица",
    "other scripts": "مرحبا שלום नमस्ते ສະບາຍດີ ᠮᠣᠩᠭᠣᠯ ខ្មែរ",
}


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_ordinary_text_is_unchanged_by_every_function(name):
    text = ORDINARY[name]
    assert safe_text.visible(text) is text
    as_json = output.to_json({"w": text})
    assert safe_text.json_text(as_json) is as_json
