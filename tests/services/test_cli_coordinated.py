"""On-call commands next to a daemon: table commands under the daemon's lock (or refused),
`trigger --wait` exit codes, and `runs --follow`."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.api.server import ApiServer
from lakeward.services.cli import app
from lakeward.services.client import DaemonClient
from lakeward.services.coordinated import served_name
from lakeward.services.daemon import Daemon, table_options_for
from lakeward.services.follow import follow_runs
from lakeward.services.settings import load_settings
from tests.services.test_api import TOKEN, make_tables, settings_for, wait_for
from tests.services.test_runner import mor_table

runner = CliRunner()


def write_config(root: Path, extra: str = "") -> Path:
    config = root / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  roots: [{{path: {root / "lake"}, max_depth: 2}}]
spark: {{engine: local}}
log: {{format: text}}
{extra}
"""
    )
    return config


def test_table_commands_refuse_a_table_the_daemon_serves_without_a_shared_lock(tmp_path):
    table = mor_table(tmp_path / "lake" / "orders")
    config = write_config(tmp_path)
    for args, env in (
        (["compact", table.path, "--force", "--config", str(config)], {}),
        (["clean", table.path], {"LAKEWARD_CONFIG": str(config)}),
        (["cluster", table.path, "-c", str(config)], {}),
        (["rollback", table.path, "20200101000000000", "--config", str(config)], {}),
        (["savepoint", table.path, "20200101000000000", "--config", str(config)], {}),
        (["delete-savepoint", table.path, "20200101000000000", "-c", str(config)], {}),
        (["restore", table.path, "20200101000000000", "--config", str(config)], {}),
        (["archive", table.path, "--config", str(config)], {}),
        (["upgrade", table.path, "--to", "9", "--config", str(config)], {}),
        (["downgrade", table.path, "--to", "8"], {"LAKEWARD_CONFIG": str(config)}),
    ):
        result = runner.invoke(app, args, env=env)
        assert result.exit_code == 2, result.output
        assert "serves" in result.output and "as table 'lake.orders'" in result.output
        assert "zookeeper.hosts" in result.output and "hoodie.write.lock.provider" in result.output
    assert Table.open(table.path).pending_compactions() == []  # nothing was written


def test_a_table_the_daemon_does_not_serve_runs_as_before_with_a_note(tmp_path):
    other = mor_table(tmp_path / "elsewhere")
    config = write_config(tmp_path)
    result = runner.invoke(app, ["compact", other.path, "--force", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "does not serve" in result.output and "completed compaction" in result.output


def test_discovered_names_are_root_folder_then_table_folders(tmp_path):
    settings = load_settings(write_config(tmp_path), env={})
    assert served_name(settings, str(tmp_path / "lake" / "eu" / "orders")) == "lake.eu.orders"
    assert served_name(settings, str(tmp_path / "lake" / "a" / "b" / "c")) is None  # deeper than max_depth
    assert served_name(settings, str(tmp_path / "lakehouse" / "orders")) is None


@pytest.mark.zookeeper
def test_table_commands_with_the_daemons_config_take_its_zookeeper_lock(tmp_path, zookeeper_server):
    table = mor_table(tmp_path / "lake" / "orders")
    chroot = f"/lakeward-cli-{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path, f"zookeeper: {{hosts: '{zookeeper_server.hosts}', chroot: {chroot}}}\n")
    settings = load_settings(config, env={})
    # Someone else (the daemon, a writer) holds the table lock the daemon's settings name.
    held = Table.open(table.path, options=table_options_for(settings, "lake.orders")).service_context().lock
    held.acquire()
    quick = ["-o", "hoodie.write.lock.wait_time_ms=300", "-o", "hoodie.write.lock.num_retries=0"]
    try:
        blocked = runner.invoke(app, ["compact", table.path, "--force", "--config", str(config), *quick])
        assert blocked.exit_code == 2 and "lock" in blocked.output.lower(), blocked.output
    finally:
        held.release()
        held.close()  # its share of the process's ZooKeeper client
    done = runner.invoke(app, ["compact", table.path, "--force", "--config", str(config), *quick])
    assert done.exit_code == 0 and "completed compaction" in done.output, done.output


@pytest.fixture
def served(tmp_path: Path) -> Any:
    make_tables(tmp_path)
    daemon = Daemon(settings_for(tmp_path))
    daemon.start()
    wait_for(lambda: daemon.ready)
    server = ApiServer(daemon, port=0)
    server.start()
    yield daemon, f"http://127.0.0.1:{server.port}"
    server.stop()
    daemon.drain(5)


def test_trigger_wait_exits_0_on_success_and_1_on_any_other_outcome(served):
    _, url = served
    auth = ["--url", url, "--token", TOKEN]
    ok = runner.invoke(app, ["trigger", "compaction", "orders", "--wait", *auth])
    assert ok.exit_code == 0, ok.output
    assert "orders/compaction/" in ok.output and ": succeeded (run " in ok.output
    again = runner.invoke(app, ["trigger", "compaction", "orders", "--wait", *auth])  # no log files left
    assert again.exit_code == 1, again.output
    assert "nothing_to_do" in again.output
    refused = runner.invoke(app, ["trigger", "compaction", "nope", "--wait", *auth])
    assert refused.exit_code == 2


def test_follow_runs_streams_new_and_changed_runs(served):
    daemon, url = served
    seen: list[dict[str, Any]] = []
    stop = threading.Event()

    def emit(run: dict[str, Any]) -> None:
        seen.append(run)
        if run["state"] == "finished":
            stop.set()

    with DaemonClient(url) as client:
        follower = threading.Thread(target=lambda: follow_runs(client, emit, poll_s=0.05, stop=stop.is_set))
        follower.start()
        with DaemonClient(url, TOKEN) as actor:
            run = actor.trigger("orders", "compaction")
        follower.join(60)
    assert not follower.is_alive()
    mine = [(r["state"], r.get("phase"), r["outcome"]) for r in seen if r["run_id"] == run["run_id"]]
    # each change (state, phase or outcome) once
    assert mine[-1][0::2] == ("finished", "succeeded") and len(mine) == len(set(mine))
    assert all(r["replica"] == daemon.replica_id for r in seen)


def test_runs_follow_prints_each_run_as_it_starts_and_ends(served):
    _, url = served
    follower = subprocess.Popen(
        [sys.executable, "-m", "lakeward.services.cli", "runs", "--follow", "--poll", "0.1", "--url", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with DaemonClient(url, TOKEN) as actor:
            wait_for(lambda: actor.ready().get("ready"))
            time.sleep(2)  # the follower is up and polling (its first poll shows no runs)
            run = actor.trigger("orders", "compaction")
        lines: list[str] = []
        assert follower.stdout is not None
        for line in follower.stdout:
            lines.append(line)
            if run["run_id"] in line and "finished succeeded" in line:
                break
    finally:
        follower.terminate()
        follower.communicate(timeout=30)
    mine = [line for line in lines if line.startswith(run["run_id"])]
    assert mine and f"{run['key'].rsplit('/', 1)[0]}/" in mine[0] and "finished succeeded" in mine[-1], lines


@pytest.mark.parametrize("config_uri, cli_uri", [(False, True), (True, False), (True, True)])
def test_a_file_uri_spelling_of_a_served_table_is_the_same_table(tmp_path, config_uri, cli_uri):
    # The guard compares table locations, not strings: /x/t, file:///x/t, /x/t/ and /x/y/../t are one table.
    table = mor_table(tmp_path / "t")
    config = tmp_path / "lakeward.yaml"
    configured = f"file://{tmp_path / 't'}" if config_uri else str(tmp_path / "t")
    config.write_text(f'tables: {{static: [{{path: "{configured}"}}]}}\nspark: {{engine: local}}\n')
    given = f"file://{tmp_path / 't'}/" if cli_uri else f"{tmp_path / 'x'}/../t/"
    result = runner.invoke(app, ["compact", given, "--force", "--config", str(config)])
    assert result.exit_code == 2, result.output
    assert "as table 't'" in result.output
    assert Table.open(table.path).pending_compactions() == []  # nothing was written


def test_a_file_uri_under_a_discovery_root_is_served(tmp_path):
    settings = load_settings(write_config(tmp_path), env={})
    assert served_name(settings, f"file://{tmp_path / 'lake' / 'eu' / 'orders'}") == "lake.eu.orders"


@pytest.mark.parametrize("poll", ["-1", "0", "0.01", "nan", "inf"])
def test_runs_follow_refuses_a_poll_interval_out_of_range(poll):
    # Checked before any call: no daemon is needed (nothing listens on the URL).
    result = runner.invoke(app, ["runs", "--follow", "--poll", poll, "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "error: --poll" in result.output and "seconds from 0.1 to 3600" in result.output, result.output


def _runbook(alert: str) -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    return text.split(f"### {alert}\n", 1)[1].split("\n### ", 1)[0]


@pytest.mark.zookeeper
def test_the_quarantined_plan_runbook_rolls_back_a_clustering_plan_with_its_commands(tmp_path, zookeeper_server):
    # The runbook said `lakeward trigger rollback TABLE --mode schedule_and_run --instant INSTANT`, which the API
    # refuses (rollback has no plan). Its commands must work as written.
    section = " ".join(_runbook("LakewardPlanQuarantined").split())
    assert not re.search(r"trigger rollback[^`]*--instant", section)
    [command] = re.findall(r"`(lakeward rollback [^`]*)`", section)
    clu = Table.create(str(tmp_path / "lake" / "clu"), record_key="id", partition_by="p")
    for i in range(3):
        clu.bulk_insert(pa.table({"id": [i], "p": ["a"], "v": [i]}))
    plan = clu.schedule_clustering()
    assert plan is not None
    chroot = f"/lakeward-runbook-{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path, f"zookeeper: {{hosts: '{zookeeper_server.hosts}', chroot: {chroot}}}\n")
    words = command.replace("PATH", clu.path).replace("INSTANT", plan).replace("lakeward.yaml", str(config)).split()
    result = runner.invoke(app, words[1:])
    assert result.exit_code == 0, result.output
    assert f"rolled back {plan}" in result.output
    assert plan not in [i.time for i in Table.open(clu.path).timeline().pending()]


def test_explain_names_the_writer_that_holds_the_table_lock_writers_take(tmp_path, zookeeper_server):
    """A table found under a root is `lake.orders` to the daemon and `orders` (hoodie.table.name) to
    its writers, whose ZooKeeper lock key is the latter: explain probed a key no writer takes, so a
    writer holding the table lock never showed."""
    table = mor_table(tmp_path / "lake" / "orders")
    plan = table.schedule_compaction(force=True)
    assert plan is not None
    chroot = f"/lakeward-explain-{uuid.uuid4().hex[:8]}"
    config = write_config(
        tmp_path,
        f"zookeeper: {{hosts: '{zookeeper_server.hosts}', chroot: {chroot}}}\n",
    )
    settings = load_settings(config, env={})
    held, release = threading.Event(), threading.Event()

    def writer() -> None:  # an ingestion writer, in a thread of its own
        lock = Table.open(table.path, options=table_options_for(settings, "lake.orders")).service_context().lock
        lock.acquire()
        held.set()
        release.wait(60)
        lock.release()
        lock.close()

    holder = threading.Thread(target=writer)
    holder.start()
    daemon = Daemon(settings)
    try:
        assert held.wait(20)
        daemon.start()
        wait_for(lambda: daemon.ready)
        pending = [d for d in daemon.explain("lake.orders") if d.item is not None and d.item.instant == plan]
        assert pending and "locked" in [r.code.value for r in pending[0].reasons], pending  # its run waits for it
        locked = next(r for r in pending[0].reasons if r.code.value == "locked")
        assert "held by another writer" in locked.message, locked
        assert "/locks/orders " in locked.message, locked  # the key its writers take
    finally:
        release.set()
        holder.join()
        daemon.drain(5)
