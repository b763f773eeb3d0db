"""What a Markdown document renders to, by two real parsers: markdown-it-py (CommonMark with
GFM tables, and its GitHub-like preset with autolinks) and cmarkgfm (GitHub's own cmark-gfm,
tables and autolinks, raw HTML let through so that none can hide). The tests of documents
that carry text from rows (report, --format github/pipe) assert on these, not on the text."""

from __future__ import annotations

import dataclasses
import html.parser

import cmarkgfm
from cmarkgfm.cmark import Options
from markdown_it import MarkdownIt


@dataclasses.dataclass
class Rendered:
    tags: list[str]  # every element's tag, in order (cmark-gfm's HTML)
    tables: list[list[int]]  # per table: the cell count of each row (header row first)
    cells: list[list[list[str]]]  # per table, per row: each cell's text
    code: list[str]  # the text of each code span
    text: str  # all the text, as a reader sees it
    tokens: list[str]  # markdown-it's token types (CommonMark + tables, and gfm-like)


class _Html(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.tables: list[list[int]] = []
        self.cells: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self.code: list[str] = []
        self.text: list[str] = []
        self._cells = 0
        self._in_code = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
            self.cells.append([])
        elif tag == "tr":
            self._cells = 0
            self.cells[-1].append([])
        elif tag in ("td", "th"):
            self._cells += 1
            self.cells[-1][-1].append("")
            self._cell = self.cells[-1][-1]
        elif tag == "code":
            self._in_code = True
            self.code.append("")

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self.tables[-1].append(self._cells)
        elif tag in ("td", "th"):
            self._cell = None
        elif tag == "code":
            self._in_code = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell[-1] += data
        if self._in_code:
            self.code[-1] += data


def render(markdown: str) -> Rendered:
    page = _Html()
    page.feed(cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE))
    tokens = []
    for parser in (MarkdownIt("commonmark").enable("table"), MarkdownIt("gfm-like")):
        for token in parser.parse(markdown):
            tokens.append(token.type)
            tokens += [child.type for child in token.children or []]
    return Rendered(page.tags, page.tables, page.cells, page.code, "".join(page.text), tokens)


# what row text must never become: a heading, a link, an image, emphasis, raw HTML
FORBIDDEN_TOKENS = {
    "heading_open",
    "link_open",
    "image",
    "html_inline",
    "html_block",
    "strong_open",
    "em_open",
    "s_open",
}
