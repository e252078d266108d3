"""The `lakeward` command line.

- Table commands (`timeline`, `show`, `compact`, `clean`, ...) work on a table path directly.
- Daemon commands (`serve`, `tables`, `plans NAME`, `runs`, `trigger`, `pause`, `resume`,
  `cancel`, `quarantine`, `release`) run or talk to a daemon's HTTP API: `--url` / `$LAKEWARD_URL`
  (default http://127.0.0.1:8080) and `--token` / `$LAKEWARD_API_TOKEN` for mutating calls.
"""

from __future__ import annotations

# Lazy imports, on purpose (the one exception to module-level imports): every command, `--help`
# included, starts by importing this module, and lakeward.core (pyarrow, polars, numpy), the HTTP
# client (httpx), the settings (pydantic-settings) and the daemon (FastAPI, Spark glue) together took
# ~1.8 s on an idle machine. Each command imports what it uses; only typer and the names of
# `services/names.py` load at start (benchmarks/cli_startup.py measures it).
import json
import logging
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

import lakeward
from lakeward.core.exceptions import LakewardError
from lakeward.services.names import CONFIG_ENV_VAR, DEFAULT_URL, TOKEN_ENV_VAR, URL_ENV_VAR

if TYPE_CHECKING:
    import pyarrow as pa

    from lakeward.core.table import Table
    from lakeward.core.timeline import Timeline
    from lakeward.services.api.server import ApiServer
    from lakeward.services.client import DaemonClient

T = TypeVar("T")
app = typer.Typer(add_completion=False, help="lakeward: table services for Hudi-format lakehouse tables.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"lakeward {lakeward.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """lakeward: table services for Hudi-format lakehouse tables."""


OPTION_HELP = "a hoodie.* option as KEY=VALUE (repeatable), e.g. -o hoodie.cleaner.commits.retained=5"


def _options(pairs: list[str] | None) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            typer.echo(f"error: option {pair!r} is not KEY=VALUE", err=True)
            raise typer.Exit(2)
        options[key.strip()] = value.strip()
    return options


def _open(path: str, options: list[str] | None = None) -> Table:
    from lakeward.core.table import Table  # lazy: Table loads pyarrow, polars, numpy (start-up, issue 23)

    try:
        return Table.open(path, options=_options(options))
    except LakewardError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _timeline(path: str) -> Timeline:
    """The timeline of the table at `path`, without opening a Table: read-only listings (`timeline`,
    `plans PATH`, `savepoints`) then load storage and timeline only, not the whole library."""
    # lazy: storage and timeline load pyarrow (start-up, issue 23)
    from lakeward.core.storage import Storage
    from lakeward.core.timeline import METAFOLDER, Timeline

    try:
        storage = Storage.for_uri(path)
        if not storage.exists(f"{METAFOLDER}/hoodie.properties"):
            typer.echo(
                f"error: {storage.uri} is not a Hudi table: {METAFOLDER}/hoodie.properties does not exist", err=True
            )
            raise typer.Exit(2)
        return Timeline.load(storage)
    except LakewardError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _service(fn: Callable[[], T]) -> T:
    """Run a table-service call; a lakeward error becomes `error: ...` on stderr and exit code 2."""
    try:
        return fn()
    except LakewardError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _format(rows: pa.Table) -> str:
    """A plain text grid of a small Arrow table."""
    cells = [rows.column_names] + [[str(v) for v in row.values()] for row in rows.to_pylist()]
    widths = [max(len(r[i]) for r in cells) for i in range(len(rows.column_names))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells)


@app.command()
def timeline(path: str = typer.Argument(..., help="table base path or URI")) -> None:
    """Print the table's instants: time, action and state; on table versions 8+ also when each
    completed, and which were read from the archived (LSM) timeline."""
    table = _open(path)
    with_completion = table.version.timeline_layout.completion_time_in_name
    extra = f"{'state':<11}completion time" if with_completion else "state"
    typer.echo(f"{'instant time':<20}{'action':<16}{extra}")
    for instant in table.timeline():
        line = f"{instant.time:<20}{instant.action.value:<16}{instant.state.value}"
        if with_completion:
            archived = "  archived" if instant.is_archived else ""
            line = f"{line:<47}{instant.completion_time or '-'}{archived}"
        typer.echo(line)


@app.command()
def show(
    path: str = typer.Argument(..., help="table base path or URI"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    check: bool = typer.Option(
        False, "--check", help="read every data file and report damaged or missing ones (exit code 1 if any)"
    ),
) -> None:
    """Print the table's properties and its live file groups (with --check: its damaged files)."""
    table = _open(path)
    if check:
        report = _service(table.check)
        if as_json:
            problems = [
                {"kind": p.kind, "path": p.path, "instant": p.instant, "detail": p.detail} for p in report.problems
            ]
            typer.echo(json.dumps({"files_checked": report.files_checked, "problems": problems}, indent=2))
        else:
            typer.echo(str(report))
        raise typer.Exit(0 if report.ok else 1)
    slices = table.file_slices()
    read_only = table.read_only_reason()
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "properties": table.config.to_properties(),
                    "read_only": read_only.removeprefix("read-only: ") if read_only else None,
                    "file_groups": [
                        {
                            "partition": s.partition_path,
                            "file_id": s.file_id,
                            "base_instant": s.base_instant_time,
                            "base_file": s.base_file.path if s.base_file else None,
                            "size": s.size,
                        }
                        for s in slices
                    ],
                },
                indent=2,
            )
        )
        return
    typer.echo(f"table {table.name} at {table.path}")
    if read_only is not None:
        typer.echo(f"  {read_only}")
    for key, value in table.config.to_properties().items():
        if key != "hoodie.table.create.schema":
            typer.echo(f"  {key} = {value}")
    typer.echo(f"{len(slices)} file group(s):")
    for s in slices:
        typer.echo(f"  {s.partition_path or '(root)'}  {s.file_id}  @{s.base_instant_time}  {s.size} bytes")


def _is_path(target: str) -> bool:
    """Table names never hold '/': anything with one (or a URI) is a table path."""
    return "/" in target or "://" in target


URL_OPTION = typer.Option(DEFAULT_URL, "--url", envvar=URL_ENV_VAR, help="the daemon's API")
TOKEN_OPTION = typer.Option(None, "--token", envvar=TOKEN_ENV_VAR, help="API bearer token (mutating calls)")
JSON_OPTION = typer.Option(False, "--json", help="print JSON")


def _api(url: str, token: str | None, call: Callable[[DaemonClient], T]) -> T:
    """One API call; a daemon error becomes `error: ...` on stderr and exit code 2."""
    from lakeward.services.client import DaemonAPIError, DaemonClient  # lazy: httpx (start-up, issue 23)

    with DaemonClient(url, token) as client:
        try:
            return call(client)
        except DaemonAPIError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None


def _grid(rows: list[dict[str, object]], columns: list[str], empty: str) -> str:
    """Rows as aligned columns; `empty` (e.g. "no pending plans") when there are none -- every listing
    prints its empty result this way."""
    if not rows:
        return empty
    cells = [columns] + [["" if r.get(c) is None else str(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


@app.command()
def plans(
    table: str = typer.Argument(..., help="a table name known to the daemon, or a table path (read directly)"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print a table's pending plans: from the daemon by name, or from the table's timeline by path."""
    if not _is_path(table):
        found = _api(url, token, lambda c: c.plans(table))
        typer.echo(
            json.dumps(found, indent=2)
            if as_json
            else _grid(found, ["instant", "action", "state", "quarantined"], "no pending plans")
        )
        return
    pending: list[dict[str, object]] = [
        {"instant": i.time, "action": i.action.value, "state": i.state.value} for i in _timeline(table).pending()
    ]
    typer.echo(
        json.dumps(pending, indent=2) if as_json else _grid(pending, ["instant", "action", "state"], "no pending plans")
    )


def _pause_cell(table: dict[str, Any]) -> str:
    """`no`; `by policy`; or `by on-call: REASON (via REPLICA since TIME)`."""
    if not table.get("paused"):
        return "no"
    if table.get("paused_by") == "policy":
        return "by policy (settings)"
    reason = table.get("pause_reason") or "no reason given"
    via = table.get("paused_via")
    since = table.get("paused_since")
    where = ", ".join(filter(None, [f"via {via}" if via else None, f"since {since}" if since else None]))
    return f"by on-call: {reason}" + (f" ({where})" if where else "")


@app.command()
def tables(url: str = URL_OPTION, token: str | None = TOKEN_OPTION, as_json: bool = JSON_OPTION) -> None:
    """The daemon's tables: type, pending plans, health, pause."""
    found = _api(url, token, lambda c: c.tables())
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    rows = [
        {
            **t,
            "pending": len(t["pending_plans"]),
            "paused": _pause_cell(t),
            "health": "ok" if t["healthy"] else f"FAILING: {t['problem']}",
            "served": t.get("read_only") or "yes",
        }
        for t in found
    ]
    columns = ["name", "table_type", "pending", "paused", "last_completed_instant", "served", "health", "path"]
    typer.echo(_grid(rows, columns, "no tables"))


@app.command()
def runs(
    state: str = typer.Option("all", help="running, finished or all"),
    table: str | None = typer.Option(None, help="only this table"),
    limit: int = typer.Option(50, help="at most this many"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Runs of the daemon replica: running first, then recent ones."""
    found = _api(url, token, lambda c: c.runs(state, table, limit))
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    typer.echo(
        _grid(
            found,
            ["run_id", "table", "action", "instant", "state", "outcome", "duration_s", "progress", "error"],
            "no runs",
        )
    )


@app.command()
def trigger(
    action: str = typer.Argument(..., help="compaction, clean, clustering, archival, rollback or index_build"),
    table: str = typer.Argument(..., help="table name (see `lakeward tables`)"),
    mode: str = typer.Option("schedule_and_run", help="schedule_and_run, schedule, or run (a pending plan)"),
    instant: str | None = typer.Option(None, help="the pending plan to run (mode run)"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Schedule and/or run an action on a table now, through the daemon."""
    run = _api(url, token, lambda c: c.trigger(table, action, mode, instant))
    typer.echo(f"started run {run['run_id']}: {run['key']} ({run['mode']}); follow it with `lakeward runs`")


@app.command()
def pause(
    table: str = typer.Argument(..., help="table name"),
    reason: str = typer.Option("", help="why (shown in the API)"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Pause a table on every replica: nothing new is scheduled or started on it."""
    _api(url, token, lambda c: c.pause(table, reason))
    typer.echo(f"{table} paused")


@app.command()
def resume(
    table: str = typer.Argument(..., help="table name"), url: str = URL_OPTION, token: str | None = TOKEN_OPTION
) -> None:
    """Resume a paused table."""
    _api(url, token, lambda c: c.resume(table))
    typer.echo(f"{table} resumed")


@app.command()
def cancel(
    run_id: str = typer.Argument(..., help="run id (see `lakeward runs`)"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Cancel a running run; its plan stays pending and is quarantined until `lakeward release`."""
    _api(url, token, lambda c: c.cancel(run_id))
    typer.echo(f"cancelling run {run_id}")


@app.command()
def quarantine(url: str = URL_OPTION, token: str | None = TOKEN_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Work items held back after repeated failures or a cancel."""
    found = _api(url, token, lambda c: c.quarantine())
    typer.echo(
        json.dumps(found, indent=2)
        if as_json
        else _grid(found, ["key", "failures", "replica", "reason"], "no quarantined plans")
    )


@app.command()
def release(
    key: str = typer.Argument(..., help="table/action/instant (see `lakeward quarantine`)"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Release a quarantined work item: it runs again at the next cycle."""
    _api(url, token, lambda c: c.release(key))
    typer.echo(f"released {key}")


@app.command()
def serve(
    config: str | None = typer.Option(None, "--config", "-c", envvar=CONFIG_ENV_VAR, help="the daemon's YAML settings"),
    demo_dir: str | None = typer.Option(
        None, "--demo", help="run the demo in this folder: two tables, a writer, its own config"
    ),
) -> None:
    """Run the table-services daemon (one replica) until SIGTERM or Ctrl-C, then drain and exit 0."""
    # lazy: the daemon loads fastapi, pydantic-settings, kazoo and core (start-up, issue 23)
    from lakeward.services.api.server import serve as run_daemon
    from lakeward.services.settings import ConfigurationError, load_settings

    writer = None
    if demo_dir is not None:
        if config is not None:
            typer.echo("error: --demo writes its own config; do not pass --config with it", err=True)
            raise typer.Exit(2)
        from pathlib import Path

        from lakeward.services import demo  # lazy: demo tables load core (start-up, issue 23)

        folder = Path(demo_dir).resolve()
        tables = demo.create_demo_tables(folder)
        config = str(demo.write_config(folder))
        writer = demo.DemoWriter(tables)
    try:
        settings = load_settings(config)
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None

    def started(daemon: object, api: ApiServer) -> None:
        if writer is not None:
            writer.start()
            base = f"http://{settings.http.host}:{api.port}"
            typer.echo(
                f"\nlakeward demo: tables under {demo_dir}, config {config}\n"
                f"  metrics:  curl {base}/metrics\n"
                f"  tables:   lakeward tables --url {base}\n"
                f"  runs:     lakeward runs --url {base}\n"
                f"  trigger:  lakeward trigger compaction orders --url {base} --token demo-token\n",
                err=True,
            )

    try:
        code = run_daemon(settings, on_started=started)
    finally:
        if writer is not None:
            writer.stop()
    raise typer.Exit(code)


@app.command()
def compact(
    path: str = typer.Argument(..., help="table base path or URI (a MERGE_ON_READ table)"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
    instant: str | None = typer.Option(None, "--instant", help="run this pending plan instead of scheduling one"),
    schedule_only: bool = typer.Option(False, "--schedule-only", help="write the plan, do not run it"),
    force: bool = typer.Option(False, "--force", help="plan even if fewer delta commits than the trigger"),
) -> None:
    """Schedule a compaction (when due, or --force) and run it; or run a pending plan (--instant)."""
    table = _open(path, option)
    if instant is None:
        instant = _service(lambda: table.schedule_compaction(force=force))
        if instant is None:
            typer.echo("no compaction scheduled: none is due or no file slice has log files")
            return
        typer.echo(f"scheduled compaction {instant}")
        if schedule_only:
            return
    planned = instant
    result = _service(lambda: table.run_compaction(planned))
    typer.echo(f"completed compaction {result.instant_time}: {result.file_slices} file slice(s)")


@app.command()
def cluster(
    path: str = typer.Argument(..., help="table base path or URI"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
    instant: str | None = typer.Option(None, "--instant", help="run this pending plan instead of scheduling one"),
    schedule_only: bool = typer.Option(False, "--schedule-only", help="write the plan, do not run it"),
) -> None:
    """Schedule a clustering of small file slices and run it; or run a pending plan (--instant)."""
    table = _open(path, option)
    if instant is None:
        instant = _service(table.schedule_clustering)
        if instant is None:
            typer.echo("no clustering scheduled: no partition has small file slices to group")
            return
        typer.echo(f"scheduled clustering {instant}")
        if schedule_only:
            return
    planned = instant
    result = _service(lambda: table.run_clustering(planned))
    typer.echo(
        f"completed clustering {result.instant_time}: {result.file_groups_replaced} file group(s) "
        f"rewritten into {len(result.files_written)} file(s)"
    )


@app.command()
def clean(
    path: str = typer.Argument(..., help="table base path or URI"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
) -> None:
    """Finish pending cleans, then plan and run a clean under hoodie.cleaner.policy."""
    table = _open(path, option)
    result = _service(table.clean)
    if result is None:
        typer.echo("nothing to clean")
        return
    typer.echo(
        f"completed clean {result.instant_time}: {result.files_deleted} file(s) deleted, "
        f"earliest retained instant {result.earliest_commit_to_retain}"
    )


@app.command()
def savepoint(
    path: str = typer.Argument(..., help="table base path or URI"),
    instant: str = typer.Argument(..., help="a completed write instant to keep"),
) -> None:
    """Savepoint a completed instant: cleaning keeps its files and `restore` can return to it."""
    table = _open(path)
    _service(lambda: table.savepoint(instant))
    typer.echo(f"savepoint {instant}")


@app.command()
def savepoints(path: str = typer.Argument(..., help="table base path or URI"), as_json: bool = JSON_OPTION) -> None:
    """List the table's savepoints, oldest first."""
    from lakeward.core.timeline import Action  # lazy: the timeline loads pyarrow (start-up, issue 23)

    found: list[dict[str, object]] = [{"instant": i.time} for i in _timeline(path).completed(Action.SAVEPOINT)]
    typer.echo(json.dumps(found, indent=2) if as_json else _grid(found, ["instant"], "no savepoints"))


@app.command("delete-savepoint")
def delete_savepoint(
    path: str = typer.Argument(..., help="table base path or URI"),
    instant: str = typer.Argument(..., help="the savepoint to delete"),
) -> None:
    """Delete a savepoint (its files become cleanable)."""
    table = _open(path)
    _service(lambda: table.delete_savepoint(instant))
    typer.echo(f"deleted savepoint {instant}")


@app.command()
def restore(
    path: str = typer.Argument(..., help="table base path or URI"),
    instant: str = typer.Argument(..., help="the savepoint to restore the table to"),
) -> None:
    """Roll the table back to a savepoint: every later write and service is undone."""
    table = _open(path)
    result = _service(lambda: table.restore(instant))
    typer.echo(
        f"restored to {result.savepoint_instant_time} with {result.restore_instant_time}: "
        f"{len(result.rolled_back)} instant(s) rolled back"
    )


@app.command()
def archive(
    path: str = typer.Argument(..., help="table base path or URI"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
) -> None:
    """Move old completed instants to .hoodie/archived/ (hoodie.keep.min.commits / hoodie.keep.max.commits)."""
    table = _open(path, option)
    result = _service(table.archive)
    if not result.archived:
        typer.echo("nothing to archive")
        return
    typer.echo(f"archived {len(result.archived)} instant(s) into {result.archive_file}")


@app.command()
def rollback(
    path: str = typer.Argument(..., help="table base path or URI"),
    instant: str = typer.Argument(..., help="a pending write, or the latest completed instant"),
) -> None:
    """Undo a pending write or the latest completed write or service commit (a rollback instant)."""
    table = _open(path)
    result = _service(lambda: table.rollback(instant))
    typer.echo(
        f"rolled back {result.rolled_back_instant_time} with {result.rollback_instant_time}: "
        f"{len(result.deleted_files)} file(s) deleted"
    )


@app.command()
def demo(path: str | None = typer.Argument(None, help="where to create the demo table (default: a temp dir)")) -> None:
    """Create a small table, upsert into it, and print snapshot, time-travel and incremental reads."""
    import pyarrow as pa  # lazy: heavy (start-up, issue 23)

    from lakeward.core.table import Table  # lazy: pyarrow, polars, numpy (start-up, issue 23)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = path or tempfile.mkdtemp(prefix="lakeward-demo-")
    table = Table.create(
        f"{path}/trips", record_key="trip_id", partition_by="city", ordering_field="ts", hive_style_partitioning=True
    )
    first = table.upsert(
        pa.table(
            {
                "trip_id": ["t1", "t2", "t3", "t4"],
                "city": ["sf", "sf", "nyc", "chennai"],
                "fare": [19.1, 27.7, 33.9, 17.8],
                "ts": [1, 1, 1, 1],
            }
        )
    )
    second = table.upsert(
        pa.table(
            {
                "trip_id": ["t2", "t5"],
                "city": ["sf", "nyc"],
                "fare": [30.0, 12.5],
                "ts": [2, 2],
            }
        )
    )
    data = ["trip_id", "city", "fare", "ts", "_hoodie_commit_time"]
    typer.echo(f"table at {table.path}; instants {first.instant_time}, {second.instant_time}")
    typer.echo("\nsnapshot:")
    typer.echo(_format(table.read(columns=data).sort_by("trip_id")))
    typer.echo(f"\ntime travel as of {first.instant_time}:")
    typer.echo(_format(table.read(as_of=first.instant_time, columns=data).sort_by("trip_id")))
    typer.echo(f"\nincremental after {first.instant_time}:")
    typer.echo(_format(table.read_incremental(first.instant_time, columns=data).sort_by("trip_id")))
    typer.echo(f"\ntry: lakeward timeline {table.path}")


# -- secondary indexes (on a table path directly) -------------------------------------------------
index_app = typer.Typer(add_completion=False, help="Secondary indexes of a table: create, drop, show, build.")
app.add_typer(index_app, name="index")


@index_app.command("create")
def index_create(
    path: str = typer.Argument(..., help="table base path or URI"),
    name: str = typer.Argument(..., help="index name (letters, digits, '_' or '-')"),
    columns: list[str] = typer.Argument(..., help="column(s) to index"),
    index_type: str = typer.Option("bitmap", "--type", help="bitmap (exact values) or text (full-text words)"),
    option: list[str] = typer.Option(
        [], "--option", "-o", help="index option KEY=VALUE: auto_build, max_selectivity, max_in_values"
    ),
) -> None:
    """Define a secondary index; build its files with `lakeward index build`."""
    table = _open(path)
    definition = _service(lambda: table.create_index(name, columns, index_type, _options(option)))
    typer.echo(f"created {definition.index_type.value} index {definition.name} on {', '.join(definition.columns)}")


@index_app.command("drop")
def index_drop(
    path: str = typer.Argument(..., help="table base path or URI"),
    name: str = typer.Argument(..., help="the index to drop"),
) -> None:
    """Remove a secondary index and its files."""
    table = _open(path)
    removed = _service(lambda: table.drop_index(name))
    typer.echo(f"dropped index {name} ({len(removed)} file(s) removed)")


@index_app.command("show")
def index_show(
    path: str = typer.Argument(..., help="table base path or URI"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    files: bool = typer.Option(False, "--files", help="list every base file and the indexes covering it"),
) -> None:
    """The table's indexes and their status: which base files are indexed, which not yet."""
    table = _open(path)
    status = _service(table.index_status)
    if as_json:
        doc = {
            "indexes": status.summary(),
            "pending_builds": list(status.pending_builds),
            "base_files": [
                {"partition": b.partition_path, "base_file": b.base_file, "indexed_by": b.indexed_by}
                for b in status.base_files
            ],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    if not status.indexes:
        typer.echo("no secondary index")
        return
    rows = status.summary()
    for row in rows:
        typer.echo(
            f"{row['name']:<20}{row['index_type']:<8}{','.join(row['columns']):<24}"
            f"indexed {row['indexed_base_files']}/{row['base_files']} base file(s), {row['index_bytes']} bytes"
            + ("  auto_build" if row["auto_build"] else "")
        )
    if status.pending_builds:
        typer.echo(f"pending index builds: {', '.join(status.pending_builds)}")
    if files:
        for b in status.base_files:
            covered = ", ".join(f"{n}@{t}" if t else f"{n}: not indexed" for n, t in b.indexed_by.items())
            typer.echo(f"  {b.base_file}  {covered}")


@index_app.command("build")
def index_build(
    path: str = typer.Argument(..., help="table base path or URI"),
    strategy: str = typer.Option("INCREMENTAL", help="INCREMENTAL (base files without an index) or ALL (rebuild)"),
    index: list[str] = typer.Option([], "--index", help="only these indexes (repeatable; default: all)"),
    instant: str | None = typer.Option(None, "--instant", help="run this pending plan instead of scheduling one"),
    schedule_only: bool = typer.Option(False, "--schedule-only", help="write the plan, do not run it"),
) -> None:
    """Schedule an index build and run it; or run a pending plan (--instant)."""
    table = _open(path)
    if instant is None:
        instant = _service(lambda: table.schedule_index_build(strategy, index or None))
        if instant is None:
            typer.echo("no index build scheduled: every base file is indexed")
            return
        typer.echo(f"scheduled index build {instant}")
        if schedule_only:
            return
    planned = instant
    result = _service(lambda: table.run_index_build(planned))
    typer.echo(
        f"completed index build {result.instant_time}: {len(result.files_written)} index file(s) for "
        f"{result.base_files} base file(s), {result.bytes_written} bytes in {result.seconds:.2f}s"
    )


def _flags_as_flags() -> None:
    """Help shows `--json`, not `--json <bool>`: typer 0.2x labels every option with its Python type, flags
    (which take no value) included. Only the help text changes; parsing is click's, untouched."""
    option = typer.core.TyperOption
    labelled = option.display_type_rich
    if getattr(labelled, "_lakeward_flags", False):
        return

    def display_type_rich(self: typer.core.TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else labelled(self, ctx)

    display_type_rich._lakeward_flags = True  # type: ignore[attr-defined]
    option.display_type_rich = display_type_rich  # type: ignore[method-assign,assignment]


def main() -> None:
    _flags_as_flags()
    app()


if __name__ == "__main__":
    main()
