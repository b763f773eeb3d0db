"""The ``replica`` field of a document read on a standby (docs/replicas.md): the server and
its lag, added to the JSON payload — an object's key, or each row's, rows that stream as they
come. Tables and CSV keep their columns. Pure (layer 0): it takes the field's value."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from jobctl.render.output import Document


def mark(doc: Document, replica: Mapping[str, Any]) -> Document:
    """``doc`` with ``replica`` (the standby's server and lag, its JSON field) in its payload;
    any other payload as it is."""
    payload = doc.payload
    if isinstance(payload, Mapping):
        marked: Any = {**payload, "replica": replica}
    elif isinstance(payload, list):
        marked = [{**row, "replica": replica} for row in payload]
    elif isinstance(payload, Iterable):
        marked = ({**row, "replica": replica} for row in payload)
    else:
        return doc
    return dataclasses.replace(doc, payload=marked)
