"""Rows, documents and how they are drawn: tables, machine formats, safe text."""
