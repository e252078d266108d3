"""Hudi 1.x's index definitions file, `.hoodie/.index_defs/index.json` (table version 9).

One Jackson-pretty JSON object, `{"indexDefinitions": {<index name>: {"indexName", "indexType",
"indexFunction", "sourceFields", "indexOptions", "version"}}}`, keyed by the metadata-table
partition each index fills (`record_index`, `column_stats`, `secondary_index_<name>`, ...); the
table property `hoodie.table.index.defs.path` points at it. Hudi writes it whole on every change
(`HoodieTableMetaClient.buildIndexDefinition` / `deleteIndexDefinition`); a file whose last
definition was deleted stays, with an empty map, as Hudi leaves it. Changes are made under the
table lock, like every other change of the table's metadata.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Collection
from typing import Any

from lakeward.core.storage import Storage
from lakeward.core.table_version import METAFOLDER

#: Where Hudi 1.x keeps the file (the value of `hoodie.table.index.defs.path`, relative to the base path).
INDEX_DEFINITIONS_PATH = posixpath.join(METAFOLDER, ".index_defs", "index.json")


def load_index_definitions(storage: Storage) -> dict[str, Any]:
    """The table's index definitions by index name (empty without the file)."""
    if not storage.exists(INDEX_DEFINITIONS_PATH):
        return {}
    return dict(json.loads(storage.read_bytes(INDEX_DEFINITIONS_PATH)).get("indexDefinitions", {}))


def write_index_definitions(storage: Storage, definitions: dict[str, Any]) -> None:
    """Replace the file with `definitions`, in Jackson's pretty layout as Hudi writes it."""
    text = json.dumps({"indexDefinitions": definitions}, indent=2, separators=(",", " : "))
    storage.write_bytes(INDEX_DEFINITIONS_PATH, text.encode())


def remove_index_definitions(storage: Storage, names: Collection[str]) -> dict[str, Any]:
    """Delete the definitions of the indexes `names` (Hudi's `deleteIndexDefinition`); the ones deleted.
    The file is rewritten only when it defined one of them."""
    definitions = load_index_definitions(storage)
    removed = {name: definitions.pop(name) for name in names if name in definitions}
    if removed:
        write_index_definitions(storage, definitions)
    return removed
