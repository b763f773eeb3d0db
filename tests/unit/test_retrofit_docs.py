"""What docs/your-table.md says where the mapping is chosen."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_your_table_warns_that_available_at_is_written_where_the_mapping_is_chosen():
    """Reclaim and requeue set the column mapped as available_at to now(): a business date
    mapped there would be rewritten. The page says so in the section that chooses the
    mapping, not only in docs/safety.md."""
    text = (ROOT / "docs" / "your-table.md").read_text()
    start = text.index("**The table's own names.**")
    section = text[start : text.index("\n## ", start)]
    assert "`available_at`" in section and "now()" in section
    assert "reclaim" in section.lower() and "`requeue`" in section
    assert "business date" in section
