"""Dry runs of destructive actions (clean, archival, orphan removal) on the CLI and the API: they
change nothing (file hashes) and list exactly what the real run then deletes."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.api import create_app
from lakeward.services.api.server import ApiServer
from lakeward.services.cli import app as cli_app
from lakeward.services.daemon import Daemon
from lakeward.services.settings import load_settings

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RETAIN = ["-o", "hoodie.cleaner.commits.retained=1"]
KEEP = [*RETAIN, "-o", "hoodie.keep.min.commits=2", "-o", "hoodie.keep.max.commits=3"]


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


#: Dry runs hold on every table version lakeward runs services on (on 8 and 9 they were refused).
VERSIONS = pytest.mark.parametrize("version", [6, 9])


def _table(path: Path, commits: int = 5, options: dict[str, object] | None = None, version: int = 6) -> Table:
    table = Table.create(str(path), record_key="id", ordering_field="ts", options=options, table_version=version)
    for ts in range(commits):  # each upsert rewrites the one file group: old file slices pile up
        table.upsert(pa.table({"id": [1, 2, 3], "ts": [ts] * 3, "v": [f"v{ts}"] * 3}))
    return table


def _listed(output: str) -> set[str]:
    return {line.strip() for line in output.splitlines() if line.startswith("  ")}


@VERSIONS
def test_cli_clean_dry_run_changes_nothing_and_lists_what_clean_deletes(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    _table(path, version=version)
    cli = CliRunner()
    before = _hashes(path)
    dry = cli.invoke(cli_app, ["clean", str(path), *RETAIN, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("dry run: 3 file(s) would be deleted under KEEP_LATEST_COMMITS")
    listed = _listed(dry.output)
    assert len(listed) == 3 and _hashes(path) == before
    real = cli.invoke(cli_app, ["clean", str(path), *RETAIN])
    assert real.exit_code == 0 and "3 file(s) deleted" in real.output
    gone = set(before) - set(_hashes(path))
    assert listed == gone


@VERSIONS
def test_cli_archive_dry_run_changes_nothing_and_lists_the_instant_files_archival_moves(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "t"
    # the metadata table compacted with every commit: archival stays behind its last compaction (Hudi's rule)
    _table(path, commits=6, options={"hoodie.metadata.compact.max.delta.commits": 1}, version=version)
    cli = CliRunner()
    before = _hashes(path)
    dry = cli.invoke(cli_app, ["archive", str(path), *KEEP, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("dry run: 4 instant(s) would be archived: ")
    listed = _listed(dry.output)
    assert listed and all(f.startswith(".hoodie/") for f in listed) and _hashes(path) == before
    real = cli.invoke(cli_app, ["archive", str(path), *KEEP])
    assert real.exit_code == 0 and "archived 4 instant(s)" in real.output, real.output
    gone = set(before) - set(_hashes(path))
    assert listed == gone


@VERSIONS
def test_archive_dry_run_counts_what_archival_moves_after_compacting_the_metadata_table(
    tmp_path: Path, version: int
) -> None:
    """With the metadata table's default compaction interval, only its last compaction holds instants
    back: a real archival compacts it first, and its dry run says what is archived after that."""
    path = tmp_path / "t"
    _table(path, commits=5, version=version)
    cli = CliRunner()
    before = _hashes(path)
    keep = ["-o", "hoodie.keep.min.commits=2", "-o", "hoodie.keep.max.commits=3"]
    dry = cli.invoke(cli_app, ["archive", str(path), *keep, "--dry-run"])
    assert dry.exit_code == 0 and _hashes(path) == before, dry.output
    real = cli.invoke(cli_app, ["archive", str(path), *keep])
    assert real.exit_code == 0, real.output
    archived = int(real.output.split("archived ")[1].split(" instant")[0])
    assert archived > 0 and dry.output.startswith(f"dry run: {archived} instant(s) would be archived: "), (
        dry.output,
        real.output,
    )


@VERSIONS
def test_api_trigger_dry_run_for_clean_archival_and_orphans_then_the_real_clean(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    _table(path, version=version)
    (path / "copy of data.parquet").write_bytes(b"stray")  # an orphan (not a Hudi file name) ...
    old = time.time() - 3 * 86400  # ... older than the orphan threshold
    os.utime(path / "copy of data.parquet", (old, old))
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        f"""
tables: {{static: [{{name: t, path: {path}}}], refresh_interval_s: 3600}}
policies:
  defaults:
    paused: true
    clean: {{commits_retained: 1}}
spark: {{engine: local}}
http: {{port: 0, api_tokens: [{TOKEN}]}}
log: {{format: text}}
"""
    )
    daemon = Daemon(load_settings(config, env={}))
    daemon.start()
    try:
        client = TestClient(create_app(daemon))
        before = _hashes(path)
        answers = {}
        for action in ("clean", "archival", "orphan_clean"):
            answer = client.post("/api/v1/tables/t/trigger", json={"action": action, "dry_run": True}, headers=AUTH)
            if action == "orphan_clean" and version != 6:  # a service lakeward runs on version 6 only
                assert answer.status_code == 409 and "cannot run orphan_clean" in answer.json()["detail"]
                continue
            assert answer.status_code == 202, answer.text
            answers[action] = answer.json()
        assert _hashes(path) == before  # no dry run changed anything
        clean = answers["clean"]
        assert clean["mode"] == "dry_run" and clean["state"] == "finished" and clean["outcome"] == "succeeded"
        assert clean["detail"].startswith("dry run: 3 file(s) would be deleted") and len(clean["files"]) == 3
        assert answers["archival"]["outcome"] == "nothing_to_do" and answers["archival"]["files"] == []
        if version == 6:
            assert answers["orphan_clean"]["files"] == ["copy of data.parquet"]
        refused = client.post("/api/v1/tables/t/trigger", json={"action": "rollback", "dry_run": True}, headers=AUTH)
        assert refused.status_code == 422 and "rollback has no dry run" in refused.json()["detail"]
        assert client.post("/api/v1/tables/t/trigger", json={"action": "clean", "dry_run": True}).status_code == 401
        server = ApiServer(daemon, port=0)
        server.start()
        try:
            url = f"http://127.0.0.1:{server.port}"
            out = CliRunner().invoke(cli_app, ["trigger", "clean", "t", "--dry-run", "--url", url, "--token", TOKEN])
            assert out.exit_code == 0, out.output
            assert out.output.startswith("dry run: 3 file(s) would be deleted") and _listed(out.output) == set(
                clean["files"]
            )
        finally:
            server.stop()
        assert _hashes(path) == before

        run = client.post("/api/v1/tables/t/trigger", json={"action": "clean"}, headers=AUTH).json()
        deadline = time.monotonic() + 60
        while daemon.runner is not None and daemon.runner.get(run["run_id"]).state != "finished":  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        gone = set(before) - set(_hashes(path))
        assert gone == set(clean["files"])
    finally:
        daemon.drain(5)


@VERSIONS
def test_cli_rollback_dry_run_lists_the_files_rollback_deletes(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table = _table(path, commits=2, version=version)
    table.insert(pa.table({"id": [7, 8], "ts": [9, 9], "v": ["a", "b"]}))  # a new file group: files to delete
    latest = table.timeline().completed()[-1].time
    cli = CliRunner()
    before = _hashes(path)
    dry = cli.invoke(cli_app, ["rollback", str(path), latest, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith(f"dry run: instant {latest} would be rolled back, ")
    listed = _listed(dry.output)
    assert listed and _hashes(path) == before
    refused = cli.invoke(cli_app, ["rollback", str(path), table.timeline().completed()[0].time, "--dry-run"])
    assert refused.exit_code != 0 and "came after it" in refused.output
    assert cli.invoke(cli_app, ["rollback", str(path), latest]).exit_code == 0
    gone = {f for f in set(before) - set(_hashes(path)) if not f.startswith(".hoodie/")}
    assert listed == gone


@VERSIONS
def test_cli_restore_dry_run_lists_the_instants_and_files_restore_undoes(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table = _table(path, commits=2, version=version)
    saved = table.timeline().completed()[-1].time
    table.savepoint(saved)
    for ts in (5, 6):
        table.insert(pa.table({"id": [10 + ts], "ts": [ts], "v": ["x"]}))
    undone = [i.time for i in table.timeline().completed() if i.time > saved]
    cli = CliRunner()
    before = _hashes(path)
    dry = cli.invoke(cli_app, ["restore", str(path), saved, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith(f"dry run: 2 instant(s) would be rolled back ({', '.join(reversed(undone))})")
    listed = _listed(dry.output)
    assert len(listed) == 2 and _hashes(path) == before
    assert cli.invoke(cli_app, ["restore", str(path), saved]).exit_code == 0
    gone = {f for f in set(before) - set(_hashes(path)) if not f.startswith(".hoodie/")}
    assert listed == gone


@pytest.mark.parametrize("command", ["clean", "archive", "rollback", "restore"])
def test_a_dry_run_builds_no_metadata_table(tmp_path: Path, command: str) -> None:
    """A table written without a metadata table: a dry run with the default options (which build one
    before a real run, as Hudi's writers do) leaves the table as it was."""
    path = tmp_path / "t"
    table = _table(path, commits=3, options={"hoodie.metadata.enable": False})
    *_, saved, latest = (i.time for i in table.timeline().completed())
    table.savepoint(saved)
    before = _hashes(path)
    assert not any(name.startswith(".hoodie/metadata/") for name in before)
    args = {"clean": [], "archive": [], "rollback": [latest], "restore": [saved]}[command]
    dry = CliRunner().invoke(cli_app, [command, str(path), *args, "--dry-run"])
    assert dry.output.startswith("dry run: "), dry.output
    assert _hashes(path) == before
