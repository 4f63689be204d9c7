"""JSON Schemas of caffemem's documents (package data), one file per command's document:

- ``analyze.schema.json``: ``analyze --json``, a net's document or a solver's
  (``{"solver", "nets", "process"}``);
- ``optimize.schema.json``: ``optimize --json`` and ``--plan-json`` (the plan ``verify`` reads);
- ``check.schema.json``: ``check --format json`` (and ``--report json:FILE``);
- ``fit.schema.json``: ``fit --json``.

Every document carries ``schema_version``, an integer read here from its schema file (the
one place it is written).  It goes up when a field the schema requires is removed, renamed
or changes its type; a new field does not change it, and the schemas allow fields they do
not name, so a program written against version N keeps working while N stays.  They are
strict about the fields the user guide documents and their types, and the tests validate real
outputs against them (``tests/report/test_json_schemas.py``).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

DOCUMENTS = ("analyze", "optimize", "check", "fit")


@functools.cache
def schema(document: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one of :data:`DOCUMENTS`."""
    if document not in DOCUMENTS:
        raise KeyError(f"no schema for {document!r} (known: {', '.join(DOCUMENTS)})")
    return json.loads(resources.files(__name__).joinpath(f"{document}.schema.json").read_text(encoding="utf-8"))


def schema_version(document: str) -> int:
    """The ``schema_version`` a document of this kind carries."""
    return schema(document)["properties"]["schema_version"]["const"]
