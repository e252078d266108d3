"""Archive instants of a real Hudi 1.x table into an LSM history, as Hudi's archiver lays it out.

No fixture table has archived instants (their `.hoodie/timeline/history/` folders are
empty), so tests make some: `archive_instants` moves the oldest completed instants of a
fixture's active timeline into `.hoodie/timeline/history/`. The layout is taken from the
format reference (§2.6) and Apache Hudi's sources, read for facts only:

- `HoodieLSMTimelineInstant.avsc`: one row per instant, fields `instantTime`,
  `completionTime`, `action` (string?), `metadata`, `plan` (bytes?), `version` (int, 1);
  written by Hudi's parquet writer with Avro write support, hence optional
  binary/UTF8 columns, a required int32 `version` and the Avro schema in the footer under
  `parquet.avro.schema` (parquet-avro's key);
- `MetadataConversionUtils.createLSMTimelineInstant`: `action` is the completed
  instant's action (`commit` for a compaction), `metadata` the completed file's bytes
  (null when empty), `plan` the requested file of a clean / compaction (and for a
  replacecommit or clustering the requested metadata, replaced by the inflight one when
  that is not empty);
- `LSMTimelineWriter`: files `<first instant>_<last instant>_<layer>.parquet`, layer 0 per
  archived batch; after each file a new `manifest_<N+1>` = previous list + the file
  (`{"files":[{"fileName","fileLen"}]}`) and `_version_` = N+1; an LSM compaction writes
  `<min>_<max>_<layer+1>.parquet` from consecutive files and a manifest without them
  (the replaced files stay on disk until the cleaner removes them);
- `HoodieTimelineArchiver`: the instant's requested, inflight and completed files are
  deleted from the active timeline once the history holds it.

Unverified against Java (no Java in the test environment): parquet writer settings
(compression, row groups, bloom filters in the footer) — readers do not depend on them.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.timeline.lsm_writer import LSM_INSTANT_SCHEMA

_COMPLETED = re.compile(r"^(\d{17})_(\d{17})\.([a-z]+)$")
_PENDING = re.compile(r"^(\d{17})\.(?:([a-z]+)\.)?(requested|inflight)$")


def _history(base: Path) -> Path:
    folder = base / ".hoodie" / "timeline" / "history"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _manifest_version(history: Path) -> int:
    version = history / "_version_"
    return int(version.read_text()) if version.exists() else 0


def _write_manifest(history: Path, files: list[str]) -> int:
    """manifest_<N+1> with `files`, then `_version_` = N+1 (deleted and recreated)."""
    new = _manifest_version(history) + 1
    entries = [{"fileName": f, "fileLen": (history / f).stat().st_size} for f in files]
    (history / f"manifest_{new}").write_text(json.dumps({"files": entries}, indent=2))
    (history / "_version_").unlink(missing_ok=True)
    (history / "_version_").write_text(str(new))
    return new


def manifest_file_names(base: Path) -> list[str]:
    history = _history(base)
    version = _manifest_version(history)
    if version == 0:
        return []
    return [e["fileName"] for e in json.loads((history / f"manifest_{version}").read_text())["files"]]


def _rows_of(timeline: Path, times: list[str]) -> list[dict[str, object]]:
    names = [p.name for p in timeline.iterdir() if p.is_file()]
    rows = []
    for time in times:
        completed = [m for n in names if (m := _COMPLETED.match(n)) and m.group(1) == time]
        assert len(completed) == 1, (time, completed)
        _, completion, action = completed[0].groups()
        pending = {m.group(2) or "commit": n for n in names if (m := _PENDING.match(n)) and m.group(1) == time}
        pending_action = next((a for a in pending if a != "commit"), "commit")
        metadata = (timeline / completed[0].group(0)).read_bytes() or None
        plan = None
        requested = timeline / f"{time}.{pending_action}.requested"
        if pending_action in ("clean", "compaction", "logcompaction", "replacecommit", "clustering"):
            plan = (requested.read_bytes() or None) if requested.exists() else None
        if pending_action in ("replacecommit", "clustering"):
            inflight = timeline / f"{time}.{pending_action}.inflight"
            if inflight.exists() and inflight.stat().st_size:
                plan = inflight.read_bytes()
        rows.append(
            {
                "instantTime": time,
                "completionTime": completion,
                "action": action,
                "metadata": metadata,
                "plan": plan,
                "version": 1,
            }
        )
    return rows


def _write_file(history: Path, rows: list[dict[str, object]], layer: int) -> str:
    name = f"{rows[0]['instantTime']}_{rows[-1]['instantTime']}_{layer}.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=LSM_INSTANT_SCHEMA), history / name)
    return name


def completed_times(base: Path) -> list[str]:
    """Times of the completed instants of the active timeline, oldest first."""
    timeline = base / ".hoodie" / "timeline"
    return sorted(m.group(1) for p in timeline.iterdir() if (m := _COMPLETED.match(p.name)))


def archive_instants(base: Path, times: list[str], batch: int = 3) -> list[str]:
    """Move the completed instants `times` (oldest first) into the LSM history, `batch` per
    layer-0 file, one manifest per file; returns the data files written."""
    timeline = base / ".hoodie" / "timeline"
    history = _history(base)
    written = []
    for start in range(0, len(times), batch):
        chunk = times[start : start + batch]
        name = _write_file(history, _rows_of(timeline, chunk), 0)
        _write_manifest(history, [*manifest_file_names(base), name])
        written.append(name)
        for time in chunk:
            for path in timeline.iterdir():
                if path.is_file() and path.name.startswith(time):
                    path.unlink()
    return written


def compact_layer(base: Path, files: list[str]) -> str:
    """An LSM compaction: `files` (consecutive, same layer) merged into one file in the next
    layer and a new manifest without them. The merged files stay on disk (not cleaned)."""
    history = _history(base)
    layer = int(files[0].rsplit("_", 1)[1].split(".")[0]) + 1
    rows = [r for f in sorted(files) for r in pq.read_table(history / f).to_pylist()]
    name = _write_file(history, rows, layer)
    kept = [f for f in manifest_file_names(base) if f not in files]
    _write_manifest(history, sorted([*kept, name]))
    return name


def group_by_file(base: Path) -> dict[str, list[str]]:
    """Instant times per data file of the latest manifest."""
    history = _history(base)
    out: dict[str, list[str]] = defaultdict(list)
    for f in manifest_file_names(base):
        out[f] = pq.read_table(history / f, columns=["instantTime"]).column(0).to_pylist()
    return dict(out)
