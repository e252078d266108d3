"""Shared by the compaction tests: a merge-on-read scenario with expected rows, disk inspection, gates.

Expected rows come from the input batches (`Model` of the MOR interop tests), never from
a reader. Files on disk are inspected directly (os.walk and Hudi's naming rules), so a
check of the plan or of the compacted files does not rely on lakeward's file-system view.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import selectors
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro
import pytest

from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.table import Table
from tests.interop.compare import comparable_rows, same_rows
from tests.interop.test_hudi_rs_mor_writes import CITIES, Model, as_tuples, hudi_read, records, to_batch

#: Small data, one file group per partition per insert (no small-file packing).
BASE_OPTIONS: dict[str, Any] = {"hoodie.parquet.small.file.limit": 0}


# -- a scenario: table + expected rows --------------------------------------------------------
@dataclass
class Scenario:
    """A merge-on-read table partitioned by city (hive style) and the rows its writes imply."""

    path: str
    table: Table
    model: Model = field(default_factory=Model)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    #: instant -> expected snapshot rows as of it (writes only)
    states: dict[str, list[tuple]] = field(default_factory=dict)

    @classmethod
    def create(
        cls, path: str | Path, options: dict[str, Any] | None = None, seed: str = "compaction", table_version: int = 6
    ) -> Scenario:
        table = Table.create(
            str(path),
            record_key="id",
            partition_by="city",
            hive_style_partitioning=True,
            ordering_field="ts",
            table_type="MERGE_ON_READ",
            options={**BASE_OPTIONS, **(options or {})},
            table_version=table_version,
        )
        return cls(str(path), table, Model(), random.Random(seed))

    def _done(self, instant: str) -> str:
        self.states[instant] = self.model.snapshot()
        return instant

    def insert(self, ids: Sequence[int], ts: int, tag: str, table: Table | None = None) -> str:
        rows = records(ids, ts, tag, self.rng)
        instant = (table or self.table).insert(to_batch(rows)).instant_time
        self.model.insert(instant, rows)
        return self._done(instant)

    def upsert(
        self, ids: Sequence[int], ts: int, tag: str, deleted: Sequence[int] = (), table: Table | None = None
    ) -> str:
        rows = records(ids, ts, tag, self.rng, deleted=deleted)
        instant = (table or self.table).upsert(to_batch(rows)).instant_time
        self.model.upsert(instant, rows)
        return self._done(instant)

    def delete_keys(self, ids: Sequence[int], table: Table | None = None) -> str:
        instant = (table or self.table).delete(keys=[f"k{i:04d}" for i in ids]).instant_time
        self.model.delete([(CITIES[i % len(CITIES)], f"k{i:04d}") for i in ids])
        return self._done(instant)

    def expected(self, as_of: str | None = None) -> list[tuple]:
        return self.model.snapshot() if as_of is None else self.states[as_of]

    def assert_lakeward(self, label: str = "") -> None:
        assert as_tuples(Table.open(self.path).read()) == self.model.snapshot(), f"lakeward {label}"

    def assert_both_readers(self, label: str = "", time_travel: bool = True) -> None:
        """lakeward and hudi-rs == the expected rows: latest, and as of every write instant."""
        for as_of in [None, *(self.states if time_travel else ())]:
            want = self.expected(as_of)
            assert as_tuples(Table.open(self.path).read(as_of=as_of)) == want, f"lakeward as of {as_of} {label}"
            assert as_tuples(hudi_read(self.path, as_of)) == want, f"hudi-rs as of {as_of} {label}"


def read_optimized_mismatches(path: str, instants: Sequence[str]) -> list[str]:
    """Read-optimized reads (latest and as of each instant) where lakeward and hudi-rs disagree.

    Snapshot reads are checked against the expected rows by `Scenario.assert_both_readers`.
    """
    table = Table.open(path)
    out = []
    for as_of in [None, *instants]:
        mine = comparable_rows(table.read(as_of=as_of, read_optimized=True))
        theirs = comparable_rows(hudi_read(path, as_of, read_optimized=True))
        if not same_rows(mine, theirs):
            out.append(f"read-optimized as of {as_of or 'latest'}: {len(mine)} vs {len(theirs)} rows")
    return out


def loaded(path: str | Path, options: dict[str, Any] | None = None, table_version: int = 6) -> Scenario:
    """Two inserts (two file groups per partition), then updates and deletes into every group: six slices with logs."""
    s = Scenario.create(path, options, table_version=table_version)
    s.insert(range(0, 60), 1, "load")
    s.insert(range(60, 90), 1, "load2")
    s.upsert([*range(0, 90, 4), 90, 91, 92], 2, "upd", deleted=[8, 20, 64])
    s.delete_keys([1, 62])
    return s


# -- files on disk ----------------------------------------------------------------------------
def _walk_data(path: str | Path) -> list[tuple[str, str]]:
    """(partition, file name) of every file outside .hoodie/."""
    out = []
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        partition = os.path.relpath(root, path)
        for name in files:
            out.append(("" if partition == "." else partition, name))
    return out


def base_files(path: str | Path) -> dict[str, tuple[str, str]]:
    """Relative path -> (file id, instant time) of every base file."""
    out = {}
    for partition, name in _walk_data(path):
        parsed = parse_base_file_name(name)
        if parsed is not None:
            out[os.path.join(partition, name)] = (parsed.file_id, parsed.instant_time)
    return out


def log_files(path: str | Path) -> dict[str, tuple[str, str, int]]:
    """Relative path -> (file id, base instant time, version) of every log file."""
    out = {}
    for partition, name in _walk_data(path):
        parsed = parse_log_file_name(name)
        if parsed is not None:
            out[os.path.join(partition, name)] = (parsed.file_id, parsed.base_instant_time, parsed.version)
    return out


def base_files_of(path: str | Path, instant: str) -> dict[str, str]:
    """Relative path -> file id of the base files named with `instant`."""
    return {p: fid for p, (fid, t) in base_files(path).items() if t == instant}


def expected_operations(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """From the files on disk: per (partition, file id) with log files, what a plan must name.

    Only valid while every file group has one slice (no compaction has completed yet).
    """
    bases: dict[tuple[str, str], tuple[str, str]] = {}
    logs: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for partition, name in _walk_data(path):
        if (b := parse_base_file_name(name)) is not None:
            assert (partition, b.file_id) not in bases, "one slice per file group expected"
            bases[(partition, b.file_id)] = (name, b.instant_time)
        elif (lg := parse_log_file_name(name)) is not None:
            logs.setdefault((partition, lg.file_id), []).append((lg.version, name))
    return {
        key: {
            "partitionPath": key[0],
            "fileId": key[1],
            "baseInstantTime": bases[key][1],
            "dataFilePath": bases[key][0],
            "deltaFilePaths": [name for _, name in sorted(found)],
        }
        for key, found in logs.items()
    }


def tree_digest(path: str | Path) -> dict[str, str]:
    """Every file under the table (including .hoodie/) -> sha256 of its bytes: to show nothing changed."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


def timeline_files(path: str | Path) -> set[str]:
    return {p.name for p in (Path(path) / ".hoodie").iterdir() if p.is_file()}


def markers_of(path: str | Path, instant: str) -> list[str]:
    folder = Path(path) / ".hoodie" / ".temp" / instant
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def read_plan(path: str | Path, instant: str) -> tuple[dict[str, Any], Any, str]:
    """(record, writer schema, codec) of `<instant>.compaction.requested`, decoded by fastavro."""
    data = (Path(path) / ".hoodie" / f"{instant}.compaction.requested").read_bytes()
    reader = fastavro.reader(io.BytesIO(data))
    found = list(reader)
    assert len(found) == 1 and isinstance(found[0], dict), found
    return found[0], reader.writer_schema, reader.codec


def planned_groups(path: str | Path, instant: str) -> set[tuple[str, str]]:
    record, _, _ = read_plan(path, instant)
    return {(op["partitionPath"], op["fileId"]) for op in record["operations"]}


def commit_json(path: str | Path, instant: str) -> dict[str, Any]:
    loaded_json: dict[str, Any] = json.loads((Path(path) / ".hoodie" / f"{instant}.commit").read_text())
    return loaded_json


# -- holding a thread at a point --------------------------------------------------------------
class Gate:
    """Wraps a module attribute: the first call stops there (before or after the real call) until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str, *, after: bool = False):
        self.reached = threading.Event()
        self._release = threading.Event()
        self._taken = False
        self._lock = threading.Lock()
        original = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                first, self._taken = not self._taken, True
            if first and not after:
                self._hold()
            result = original(*args, **kwargs)
            if first and after:
                self._hold()
            return result

        monkeypatch.setattr(module, name, wrapper)

    def _hold(self) -> None:
        self.reached.set()
        if not self._release.wait(60):
            raise TimeoutError("the gate was never released")

    def wait(self, timeout: float = 60) -> None:
        assert self.reached.wait(timeout), "the thread never reached the gate"

    def release(self) -> None:
        self._release.set()


class Background:
    """Run `fn` in a thread; `result()` joins it and re-raises what it raised."""

    def __init__(self, fn: Callable[[], Any]):
        self._value: Any = None
        self._error: BaseException | None = None

        def target() -> None:
            try:
                self._value = fn()
            except BaseException as exc:  # handed to the test thread
                self._error = exc

        self._thread = threading.Thread(target=target, daemon=True)
        self._thread.start()

    def result(self, timeout: float = 60) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the background call did not finish"
        if self._error is not None:
            raise self._error
        return self._value


# -- a writer in another process ---------------------------------------------------------------
SCRIPTS = Path(__file__).parents[1] / "scripts"


class HeldWriter:
    """`scripts/held_writer.py`: an upsert in another process, held after writing its files until released."""

    def __init__(self, path: str, batch_file: Path, timeout: float = 60.0):
        self._proc = subprocess.Popen(
            [sys.executable, str(SCRIPTS / "held_writer.py"), path, str(batch_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._timeout = timeout
        line = self._line()
        if not line.startswith("HELD "):
            self.close()
            pytest.fail(f"held writer did not hold (stdout {line!r})")
        #: the instant of the held write
        self.instant = line.split()[1]

    def _line(self) -> str:
        assert self._proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            ready = sel.select(self._timeout)
        return self._proc.stdout.readline().strip() if ready else ""

    def release(self) -> str:
        """Let the write go on; its last line: `DONE <instant>` or `ERROR <class>: <message>`."""
        assert self._proc.stdin is not None
        self._proc.stdin.write("go\n")
        self._proc.stdin.flush()
        line = self._line()
        self._proc.wait(self._timeout)
        return line

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> HeldWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
