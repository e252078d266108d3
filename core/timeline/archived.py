"""Archived timelines, read side: the one module other code asks for archived instants.

Archival takes old completed instants off the active timeline. Where they go depends on
the table version:

- version 6 (timeline layout 1): `HoodieArchivedMetaEntry` records in Avro data blocks of
  log files `.hoodie/<hoodie.archivelog.folder>/.commits_.archive.<N>_<token>` (format
  reference §1.5, §6); `read_archived_entries` reads them back as dicts. They are written by
  `lakeward.core.table_services.archival`.
- versions 8+ (layout 2): the LSM history in `.hoodie/timeline/history/`
  (`lakeward.core.timeline.lsm_history`): `load_archived_instants` lists its instants (what
  `Timeline.with_history` merges in), `read_archived_content` reads one instant's bytes.
"""

from __future__ import annotations

import io
import json
import logging
import posixpath
import re
import struct
from typing import Any

import fastavro

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.log_file import BlockType, HeaderKey, RawBlock, scan_blocks
from lakeward.core.storage import Storage
from lakeward.core.table_version import METAFOLDER
from lakeward.core.timeline.lsm_history import load_archived_instants, read_archived_content

log = logging.getLogger(__name__)

_ARCHIVE_NAME_RE = re.compile(r"^\.commits_\.archive\.(\d+)_(.+)$")


def archive_folder(folder: str = "archived") -> str:
    """The archived timeline's folder (`hoodie.archivelog.folder`, relative to `.hoodie/`)."""
    return posixpath.join(METAFOLDER, folder)


def parse_archive_version(name: str) -> int | None:
    """N of an archive file `.commits_.archive.<N>_<token>`; None for any other name."""
    m = _ARCHIVE_NAME_RE.match(name)
    return int(m.group(1)) if m else None


def latest_archive_version(storage: Storage, folder: str = "archived") -> int:
    """The largest archive file version in the archived folder; 0 when nothing was archived."""
    entries = storage.list_dir(archive_folder(folder))
    return max((v for e in entries if (v := parse_archive_version(e.name)) is not None), default=0)


def has_archived_timeline(storage: Storage, folder: str = "archived") -> bool:
    """Whether instants were ever archived (the active timeline no longer starts at the table's start)."""
    return any(parse_archive_version(e.name) is not None for e in storage.list_dir(archive_folder(folder)))


def decode_archive_block(raw: RawBlock) -> list[dict[str, Any]]:
    """The `HoodieArchivedMetaEntry` records of one Avro data block (content version 3)."""
    schema_json = raw.header.get(HeaderKey.SCHEMA)
    if schema_json is None:
        raise CorruptTableError("archived timeline block without a SCHEMA header")
    parsed = fastavro.parse_schema(json.loads(schema_json))
    version, count = struct.unpack_from(">ii", raw.content, 0)
    if version != 3:
        raise CorruptTableError(f"archived timeline block of content version {version}; only 3 is read")
    pos, records = 8, []
    for _ in range(count):
        (length,) = struct.unpack_from(">i", raw.content, pos)
        pos += 4
        record = fastavro.schemaless_reader(io.BytesIO(raw.content[pos : pos + length]), parsed, parsed)
        if not isinstance(record, dict):
            raise CorruptTableError("an archived timeline record is not a HoodieArchivedMetaEntry")
        records.append(record)
        pos += length
    return records


def read_archived_entries(storage: Storage, folder: str = "archived") -> list[dict[str, Any]]:
    """Every archived entry (records as dicts), in archive file and block order, duplicates dropped."""
    base = archive_folder(folder)
    files = sorted(
        ((v, e.path) for e in storage.list_dir(base) if (v := parse_archive_version(e.name)) is not None),
    )
    seen: set[tuple[str, str, str]] = set()
    out = []
    for _, path in files:
        for block in scan_blocks(storage.read_bytes(path)):
            if not isinstance(block, RawBlock):
                log.warning("skipping a corrupt block in %s: %s", path, block.reason)
                continue
            if block.block_type is not BlockType.AVRO_DATA:
                continue
            for record in decode_archive_block(block):
                key = (record.get("commitTime"), record.get("actionType"), record.get("actionState"))
                if key in seen:
                    continue
                seen.add(key)  # type: ignore[arg-type]
                out.append(record)
    return out


__all__ = [
    "archive_folder",
    "decode_archive_block",
    "has_archived_timeline",
    "latest_archive_version",
    "load_archived_instants",
    "parse_archive_version",
    "read_archived_content",
    "read_archived_entries",
]
