"""The `lakeward` command line.

- Table commands (`timeline`, `show`, `compact`, `clean`, ...) work on a table path directly.
- Daemon commands (`serve`, `tables`, `plans NAME`, `runs`, `trigger`, `pause`, `resume`,
  `cancel`, `quarantine`, `release`, `audit`) run or talk to a daemon's HTTP API: `--url` / `$LAKEWARD_URL`
  (default http://127.0.0.1:8080) and `--token` / `$LAKEWARD_API_TOKEN` for mutating calls.
"""

from __future__ import annotations

# Lazy imports, on purpose (the one exception to module-level imports): every command, `--help`
# included, starts by importing this module, and lakeward.core (pyarrow, polars, numpy), the HTTP
# client (httpx), the settings (pydantic-settings) and the daemon (FastAPI, Spark glue) together took
# ~1.8 s on an idle machine. Each command imports what it uses; only typer and the names of
# `services/names.py` load at start (benchmarks/cli_startup.py measures it).
import datetime as dt
import functools
import json
import logging
import os
import sys
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


OPTION_HELP = "a hoodie.* (or lakeward.*) option as KEY=VALUE (repeatable), e.g. -o hoodie.cleaner.commits.retained=5"


def _options(pairs: list[str] | None, *, table: bool = True) -> dict[str, str]:
    """`-o KEY=VALUE` pairs; `table`: they are table options (hoodie.*, lakeward.*), else an index's own."""
    options: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            typer.echo(f"error: option {pair!r} is not KEY=VALUE", err=True)
            raise typer.Exit(2)
        if table and not key.strip().startswith(("hoodie.", "lakeward.")):
            # the library ignores other keys (a data source passes its own); here one can only be a typo
            typer.echo(f"error: option {key.strip()!r} is not a hoodie.* or lakeward.* option", err=True)
            raise typer.Exit(2)
        options[key.strip()] = value.strip()
    return options


TABLE_CONFIG_OPTION = typer.Option(
    None,
    "--config",
    "-c",
    envvar=CONFIG_ENV_VAR,
    help="the daemon's YAML settings: open the table with the daemon's lock settings (refused if it has none)",
)


def _daemon_options(path: str, config: str | None) -> dict[str, str]:
    """With the daemon's settings (`--config`): the options it opens the table at `path` with."""
    if config is None:
        return {}
    # lazy: the settings and the daemon's lock options load pydantic-settings and kazoo (start-up, issue 23)
    from lakeward.services.coordinated import UncoordinatedTableError, coordinated_options
    from lakeward.services.settings import ConfigurationError, load_settings

    try:
        served = coordinated_options(load_settings(config), path)
    except (ConfigurationError, UncoordinatedTableError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if served is None:
        typer.echo(f"note: the daemon of {config} does not serve {path}: its lock settings do not apply", err=True)
        return {}
    return served.options


def _open(path: str, options: list[str] | None = None, config: str | None = None) -> Table:
    from lakeward.core.table import Table  # lazy: Table loads pyarrow, polars, numpy (start-up, issue 23)

    try:
        return Table.open(path, options={**_daemon_options(path, config), **_options(options)})
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
def timeline(
    path: str = typer.Argument(..., help="table base path or URI"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Print the table's instants: time, action and state; on table versions 8+ also when each
    completed, and which were read from the archived (LSM) timeline."""
    table = _open(path)
    instants = list(table.timeline())
    if as_json:
        listed = [
            {
                "instant": i.time,
                "action": i.action.value,
                "state": i.state.value,
                "completion_time": i.completion_time,
                "archived": i.is_archived,
            }
            for i in instants
        ]
        typer.echo(json.dumps(listed, indent=2))
        return
    if not instants:
        typer.echo("no instants")
        return
    with_completion = table.version.timeline_layout.completion_time_in_name
    extra = f"{'state':<11}completion time" if with_completion else "state"
    typer.echo(f"{'instant time':<20}{'action':<16}{extra}")
    for instant in instants:
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
    """Table names never hold '/': anything with one (or a URI) is a table path, and so is `.`, `..` or a
    local folder holding a table (`orders` when `orders/.hoodie` exists here)."""
    return "/" in target or "://" in target or target in (".", "..") or os.path.isdir(os.path.join(target, ".hoodie"))


URL_OPTION = typer.Option(DEFAULT_URL, "--url", envvar=URL_ENV_VAR, help="the daemon's API")
TOKEN_OPTION = typer.Option(None, "--token", envvar=TOKEN_ENV_VAR, help="API bearer token (mutating calls)")
JSON_OPTION = typer.Option(False, "--json", help="print JSON")


def _api(url: str, token: str | None, call: Callable[[DaemonClient], T]) -> T:
    """One API call; a daemon error becomes `error: ...` on stderr and exit code 2."""
    from lakeward.services.client import DaemonAPIError, DaemonClient  # lazy: httpx (start-up, issue 23)

    try:
        with DaemonClient(url, token) as client:
            return call(client)
    except DaemonAPIError as exc:
        typer.echo(f"error: {_printable(str(exc))}", err=True)
        raise typer.Exit(2) from None


def _printable(text: str) -> str:
    """`text` with its control characters escaped (`\\n`, `\\x1b`): names, reasons and errors come from
    the daemon, and raw they forge rows or drive the on-call terminal (clear the screen, set its title)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _grid(rows: list[dict[str, object]], columns: list[str], empty: str) -> str:
    """Rows as aligned columns; `empty` (e.g. "no pending plans") when there are none -- every listing
    prints its empty result this way."""
    if not rows:
        return empty
    cells = [columns] + [["" if r.get(c) is None else _printable(str(r.get(c))) for c in columns] for r in rows]
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
    found, unmatched = _api(url, token, lambda c: (c.tables(), c.last_headers.get("X-Lakeward-Unmatched-Overrides")))
    if unmatched:
        typer.echo(f"warning: policies.overrides name no table: {unmatched.replace(',', ', ')}", err=True)
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    rows = [
        {
            **t,
            "pending": len(t["pending_plans"]) if t["state_known"] else "?",
            "paused": _pause_cell(t),
            "health": "ok" if t["healthy"] else f"FAILING: {t['problem']}",
            "served": t.get("read_only") or "yes",
        }
        for t in found
    ]
    columns = ["name", "table_type", "pending", "paused", "last_completed_instant", "served", "health", "path"]
    typer.echo(_grid(rows, columns, "no tables"))


#: `runs --follow --poll`: polling faster than this would load the daemon for nothing.
MIN_POLL_S = 0.1
MAX_POLL_S = 3600.0


@app.command()
def runs(
    state: str = typer.Option("all", help="running, finished, lost (its replica died while running it) or all"),
    table: str | None = typer.Option(None, help="only this table"),
    limit: int = typer.Option(50, help="at most this many"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
    as_json: bool = JSON_OPTION,
    follow: bool = typer.Option(
        False, "--follow", "-f", help="keep printing runs as they start and change, until Ctrl-C"
    ),
    poll_s: float = typer.Option(
        2.0, "--poll", help=f"with --follow: seconds between polls ({MIN_POLL_S:g} to {MAX_POLL_S:g})"
    ),
) -> None:
    """Runs of the whole deployment (each with its replica): running first, then recent ones."""
    if follow:
        if not MIN_POLL_S <= poll_s <= MAX_POLL_S:  # also false for NaN
            raise _fail(f"--poll {poll_s:g} is out of range: seconds from {MIN_POLL_S:g} to {MAX_POLL_S:g}")
        from lakeward.services.follow import follow_runs

        def emit(run: dict[str, Any]) -> None:
            typer.echo(json.dumps(run) if as_json else _run_line(run))

        _api(url, token, lambda c: follow_runs(c, emit, poll_s=poll_s, limit=limit, table=table))
        return
    found = _api(url, token, lambda c: c.runs(state, table, limit))
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    typer.echo(
        _grid(
            found,
            ["run_id", "table", "action", "instant", "replica", "state", "outcome", "duration_s", "progress", "error"],
            "no runs",
        )
    )


def _run_line(run: dict[str, Any]) -> str:
    """One line about a run: what, where, how far."""
    outcome = f" {run['outcome']}" if run.get("outcome") else ""
    error = f": {run['error']}" if run.get("error") else ""
    return (
        f"{run['run_id']}  {run['key']}  on {run['replica']}  {run['state']}{outcome}  "
        f"{run.get('progress') or ''}  {run['duration_s']}s{error}"
    )


@app.command()
def trigger(
    action: str = typer.Argument(
        ...,
        help="compaction, clean, clustering, archival, rollback, change_tracking, index_build, orphan_clean "
        "or metadata_compaction",
    ),
    table: str = typer.Argument(..., help="table name (see `lakeward tables`)"),
    mode: str = typer.Option("schedule_and_run", help="schedule_and_run, schedule, or run (a pending plan)"),
    instant: str | None = typer.Option(None, help="the pending plan to run (mode run)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="change nothing: print what would be deleted or changed"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
    wait: bool = typer.Option(
        False,
        "--wait",
        help="follow the run, on whichever replica runs it, and exit with its outcome: 0 succeeded, "
        "1 any other outcome (failed, cancelled, timed_out, nothing_to_do, lost...), 2 the call failed",
    ),
    timeout_s: float | None = typer.Option(None, "--timeout", help="with --wait: give up after this many seconds"),
) -> None:
    """Schedule and/or run an action on a table now, through the daemon."""
    if dry_run or not wait:
        run = _api(url, token, lambda c: c.trigger(table, action, mode, instant, dry_run))
        if dry_run:
            _print_dry_run(run["detail"], run["files"])
            return
        typer.echo(f"started run {run['run_id']}: {run['key']} ({run['mode']}); follow it with `lakeward runs`")
        return
    from lakeward.services.client import DaemonAPIError
    from lakeward.services.follow import RunWaitTimeout, run_of_plan, wait_for_run

    def start_or_find(client: DaemonClient) -> dict[str, Any]:
        try:
            return client.trigger(table, action, mode, instant, dry_run)
        except DaemonAPIError as exc:
            # The plan is claimed: another run (maybe on another replica) runs it now; follow that one.
            running = None
            if exc.status == 409 and instant is not None:
                running = run_of_plan(client, f"{table}/{action}/{instant}", running_only=True)
            if running is None:
                raise
            typer.echo(f"{instant} is already running: following run {running['run_id']} on {running['replica']}")
            return running

    def follow(client: DaemonClient) -> dict[str, Any]:
        run = start_or_find(client)
        typer.echo(f"run {run['run_id']}: {run['key']} ({run['mode']}) on {run['replica']}")
        try:
            return wait_for_run(client, run["run_id"], timeout_s=timeout_s, emit=lambda r: typer.echo(_run_line(r)))
        except RunWaitTimeout as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None

    done = _api(url, token, follow)
    typer.echo(f"{done['key']}: {done.get('outcome') or done['state']} (run {done['run_id']} on {done['replica']})")
    raise typer.Exit(0 if done.get("outcome") == "succeeded" else 1)


@app.command()
def pause(
    table: str = typer.Argument(..., help="table name"),
    reason: str = typer.Option("", help="why (shown in the API)"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Pause a table on every replica: nothing new is scheduled or started on it."""
    answer = _api(url, token, lambda c: c.pause(table, reason))
    if answer.get("changed", True):
        typer.echo(f"{table} paused")
        return
    # the first pause stays, with its reason: say so rather than let the new reason look recorded
    current = _api(url, token, lambda c: c.table(table))
    typer.echo(
        f"{table} was already paused ({_printable(_pause_cell(current))}); that pause and its reason stay: "
        "resume it first to pause with another reason"
    )


@app.command()
def resume(
    table: str = typer.Argument(..., help="table name"), url: str = URL_OPTION, token: str | None = TOKEN_OPTION
) -> None:
    """Lift a table's on-call pause (a pause by policy, `policies.*.paused`, stays: only the settings lift it)."""
    answer = _api(url, token, lambda c: c.resume(table))
    if answer.get("paused_by") == "policy":
        lifted = "on-call pause lifted, but it " if answer.get("changed") else ""
        typer.echo(
            f"{table}: {lifted}stays paused by policy (policies.overrides.{table}.paused or "
            "policies.defaults.paused in the daemon's settings)"
        )
    elif answer.get("changed"):
        typer.echo(f"{table} resumed")
    else:
        typer.echo(f"{table} was not paused")


@app.command()
def cancel(
    run_id: str = typer.Argument(..., help="run id (see `lakeward runs`)"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Cancel a running run; its plan stays pending and is quarantined until `lakeward release`."""
    answer = _api(url, token, lambda c: c.cancel(run_id))
    typer.echo(f"cancelling run {run_id} on {answer.get('replica') or 'its replica'}")


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
def audit(
    limit: int = typer.Option(50, help="at most this many entries"),
    by: str | None = typer.Option(None, "--by", help="only calls made with this token name"),
    target: str | None = typer.Option(None, help="only calls about this table, run id or work item"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The audit log: mutating API calls of every replica, newest first, with the token's name."""
    import datetime as dt

    found = _api(url, token, lambda c: c.audit(limit, by, target))
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    rows = [{**e, "when": dt.datetime.fromtimestamp(e["time"], dt.UTC).isoformat(timespec="seconds")} for e in found]
    typer.echo(_grid(rows, ["when", "token", "method", "path", "status", "replica", "request"], "no audited calls"))


@app.command()
def serve(
    config: str | None = typer.Option(None, "--config", "-c", envvar=CONFIG_ENV_VAR, help="the daemon's YAML settings"),
    demo_dir: str | None = typer.Option(
        None, "--demo", help="run the demo in this folder: two tables, a writer, its own config"
    ),
) -> None:
    """Run the table-services daemon (one replica) until SIGTERM or Ctrl-C, then drain and exit 0."""
    # lazy: the daemon loads fastapi, pydantic-settings, kazoo and core (start-up, issue 23)
    from lakeward.services.api.server import StartupError
    from lakeward.services.api.server import serve as run_daemon
    from lakeward.services.claims import CoordinatorError
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

    served: list[Any] = []

    def started(daemon: object, api: ApiServer) -> None:
        served.append(daemon)
        if writer is not None:
            writer.start()
            base = f"http://{settings.http.host}:{api.port}"
            typer.echo(
                f"\nlakeward demo: tables under {demo_dir}, config {config}\n"
                f"  web UI:   {base}/ui  (API token: demo-token)\n"
                f"  metrics:  curl {base}/metrics\n"
                f"  tables:   lakeward tables --url {base}\n"
                f"  runs:     lakeward runs --url {base}\n"
                f"  trigger:  lakeward trigger compaction orders --url {base} --token demo-token\n",
                err=True,
            )

    try:
        code = run_daemon(settings, on_started=started)
    except (StartupError, CoordinatorError) as exc:
        # cannot listen on http.host:http.port; ZooKeeper unreachable within zookeeper.connection_timeout_s
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        if writer is not None:
            writer.stop()
    hung = served[0].hung_reads() if served else 0
    if hung:
        # Their threads cannot be stopped, and the interpreter's exit would wait for them for ever.
        logging.getLogger(__name__).warning("exiting without waiting for %d hung storage read(s)", hung)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise typer.Exit(code)


@app.command()
def compact(
    path: str = typer.Argument(..., help="table base path or URI (a MERGE_ON_READ table)"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
    instant: str | None = typer.Option(None, "--instant", help="run this pending plan instead of scheduling one"),
    schedule_only: bool = typer.Option(False, "--schedule-only", help="write the plan, do not run it"),
    force: bool = typer.Option(False, "--force", help="plan even if fewer delta commits than the trigger"),
    config: str | None = TABLE_CONFIG_OPTION,
) -> None:
    """Schedule a compaction (when due, or --force) and run it; or run a pending plan (--instant)."""
    table = _open(path, option, config)
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
    config: str | None = TABLE_CONFIG_OPTION,
) -> None:
    """Schedule a clustering of small file slices and run it; or run a pending plan (--instant)."""
    table = _open(path, option, config)
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


def _print_dry_run(detail: str, files: list[str] | tuple[str, ...]) -> None:
    """A dry run's answer: one line, then each file it would delete (or instant file it would move)."""
    typer.echo(detail)
    for f in files:
        typer.echo(f"  {f}")


DRY_RUN_OPTION = typer.Option(False, "--dry-run", help="change nothing: print what would be deleted")


@app.command()
def clean(
    path: str = typer.Argument(..., help="table base path or URI"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
    config: str | None = TABLE_CONFIG_OPTION,
    dry_run: bool = DRY_RUN_OPTION,
) -> None:
    """Finish pending cleans, then plan and run a clean under hoodie.cleaner.policy."""
    table = _open(path, option, config)
    if dry_run:
        from lakeward.core.table_services.clean.execute import preview_clean

        preview = _service(lambda: preview_clean(table.preview_context("clean")))
        _print_dry_run(f"dry run: {len(preview.files)} file(s) would be deleted under {preview.policy}", preview.files)
        return
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
    config: str | None = TABLE_CONFIG_OPTION,
) -> None:
    """Savepoint a completed instant: cleaning keeps its files and `restore` can return to it."""
    table = _open(path, config=config)
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
    config: str | None = TABLE_CONFIG_OPTION,
) -> None:
    """Delete a savepoint (its files become cleanable)."""
    table = _open(path, config=config)
    _service(lambda: table.delete_savepoint(instant))
    typer.echo(f"deleted savepoint {instant}")


@app.command()
def restore(
    path: str = typer.Argument(..., help="table base path or URI"),
    instant: str = typer.Argument(..., help="the savepoint to restore the table to"),
    config: str | None = TABLE_CONFIG_OPTION,
    dry_run: bool = DRY_RUN_OPTION,
) -> None:
    """Roll the table back to a savepoint: every later write and service is undone."""
    table = _open(path, config=config)
    if dry_run:
        from lakeward.core.table_services.savepoint import preview_restore

        planned = _service(lambda: preview_restore(table.preview_context("restore"), instant))
        undone = ", ".join(planned.rolled_back) or "none"
        _print_dry_run(
            f"dry run: {len(planned.rolled_back)} instant(s) would be rolled back ({undone}), "
            f"{len(planned.deleted_files)} file(s) deleted",
            planned.deleted_files,
        )
        return
    result = _service(lambda: table.restore(instant))
    typer.echo(
        f"restored to {result.savepoint_instant_time} with {result.restore_instant_time}: "
        f"{len(result.rolled_back)} instant(s) rolled back"
    )


@app.command()
def archive(
    path: str = typer.Argument(..., help="table base path or URI"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
    config: str | None = TABLE_CONFIG_OPTION,
    dry_run: bool = DRY_RUN_OPTION,
) -> None:
    """Move old completed instants to the archived timeline (.hoodie/archived/ on table version 6,
    .hoodie/timeline/history/ on 8 and 9) by hoodie.keep.min.commits / hoodie.keep.max.commits."""
    table = _open(path, option, config)
    if dry_run:
        from lakeward.core.table_services.archival import archive as archive_instants

        planned = _service(lambda: archive_instants(table.preview_context("archival"), dry_run=True))
        archived = ", ".join(planned.archived) or "none"
        _print_dry_run(
            f"dry run: {len(planned.archived)} instant(s) would be archived: {archived}", planned.instant_files
        )
        return
    result = _service(table.archive)
    if not result.archived:
        typer.echo("nothing to archive")
        return
    typer.echo(f"archived {len(result.archived)} instant(s) into {result.archive_file}")


@app.command()
def upgrade(
    path: str = typer.Argument(..., help="table base path or URI"),
    to: int = typer.Option(..., "--to", help="the table version to upgrade to: 8 (Hudi 1.0) or 9 (Hudi 1.1)"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
    config: str | None = TABLE_CONFIG_OPTION,
) -> None:
    """Upgrade the table to version 8 or 9 as Apache Hudi does (re-run it after a crash to finish it)."""
    table = _open(path, option, config)
    result = _service(lambda: table.upgrade(to=to))
    if not result.changed:
        typer.echo(f"table {path} is at table version {result.to_version} already")
        return
    done = [
        f"{len(result.rolled_back)} failed write(s) rolled back" if result.rolled_back else "",
        f"plans finished first: {', '.join(result.finished_plans)}" if result.finished_plans else "",
        f"log files compacted by {result.compaction}" if result.compaction else "",
        f"{result.timeline_files} timeline file(s) moved" if result.timeline_files else "",
        f"{result.archived_instants} archived instant(s) written to the LSM history"
        if result.archived_instants
        else "",
        f"{result.leftovers_removed} version 6 timeline file(s) removed" if result.leftovers_removed else "",
    ]
    detail = "; ".join(d for d in done if d)
    typer.echo(
        f"upgraded {path} from table version {result.from_version} to {result.to_version}"
        + (f" ({detail})" if detail else "")
    )


@app.command()
def downgrade(
    path: str = typer.Argument(..., help="table base path or URI"),
    to: int = typer.Option(..., "--to", help="the table version to downgrade to: 8 (from 9)"),
    option: list[str] = typer.Option([], "--option", "-o", help=OPTION_HELP),
    config: str | None = TABLE_CONFIG_OPTION,
) -> None:
    """Downgrade a version 9 table to 8 as Apache Hudi does (other downgrades are refused, naming Hudi's)."""
    table = _open(path, option, config)
    result = _service(lambda: table.downgrade(to=to))
    if not result.changed:
        typer.echo(f"table {path} is at table version {result.to_version} already")
        return
    compacted = f" (log files compacted by {result.compaction})" if result.compaction else ""
    typer.echo(f"downgraded {path} from table version {result.from_version} to {result.to_version}{compacted}")


@app.command()
def rollback(
    path: str = typer.Argument(..., help="table base path or URI"),
    instant: str = typer.Argument(..., help="a pending write, or the latest completed instant"),
    config: str | None = TABLE_CONFIG_OPTION,
    dry_run: bool = DRY_RUN_OPTION,
) -> None:
    """Undo a pending write or the latest completed write or service commit (a rollback instant)."""
    table = _open(path, config=config)
    if dry_run:
        planned = _service(lambda: table.preview_rollback(instant))
        _print_dry_run(
            f"dry run: instant {planned.rolled_back_instant_time} would be rolled back, "
            f"{len(planned.deleted_files)} file(s) deleted",
            planned.deleted_files,
        )
        return
    result = _service(lambda: table.rollback(instant))
    typer.echo(
        f"rolled back {result.rolled_back_instant_time} with {result.rollback_instant_time}: "
        f"{len(result.deleted_files)} file(s) deleted"
    )


def _worst(report: dict[str, Any]) -> str:
    """The first (worst) finding of a health report as one cell; `-` without findings."""
    if report.get("score") is None:
        return f"not scored: {report.get('error')}"
    findings = report.get("findings") or []
    return f"{findings[0]['severity']}: {findings[0]['message']}" if findings else "-"


def _print_health(report: dict[str, Any]) -> None:
    if report.get("score") is None:
        typer.echo(f"{report['table']}: not scored: {report.get('error')}")
        return
    typer.echo(f"{report['table']}: score {report['score']}/100 (as of {report.get('taken_at')})")
    penalties = ", ".join(f"{k} {v:g}" for k, v in report.get("factors", {}).items() if v)
    typer.echo(f"factor penalties: {penalties or 'none'}")
    for f in report.get("findings") or []:
        typer.echo(f"  [{f['severity']}] {f['code']}: {f['message']}\n      -> {f['action']}")
    if not report.get("findings"):
        typer.echo("  no findings")


@app.command()
def health(
    table: str | None = typer.Argument(None, help="a table name known to the daemon, or a table path (read directly)"),
    option: list[str] = typer.Option([], "--option", "-o", help="with a path: " + OPTION_HELP),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Table health: every table's score and worst finding, or one table's findings and suggested actions.

    By name the daemon's report (its policy, as of its last discovery cycle); by path the
    table is read directly with the default health policy.
    """
    if table is not None and _is_path(table):
        from lakeward.core.health import table_health
        from lakeward.services.discovery import TableHealth
        from lakeward.services.model import TableRef

        opened = _open(table, option)
        report = TableHealth(TableRef(opened.name, table), _service(lambda: table_health(opened))).to_dict()
    else:
        report = _api(url, token, lambda c: c.health(table))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    elif isinstance(report, list):
        rows = [{"name": r["table"], "score": r.get("score"), "worst finding": _worst(r)} for r in report]
        typer.echo(_grid(rows, ["name", "score", "worst finding"], "no tables"))
    else:
        _print_health(report)


@app.command()
def explain(
    table: str = typer.Argument(..., help="a table name known to the daemon"),
    action: str | None = typer.Argument(None, help="only this action (compaction, clean, ...)"),
    url: str = URL_OPTION,
    token: str | None = TOKEN_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Why each action runs, or does not run, on a table now: every reason, in order, with evidence."""
    found = _api(url, token, lambda c: c.explain(table, action))
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    for d in found["actions"]:
        # "nothing to do" only when that is the reason (not when disabled, paused or blocked)
        idle = all(r["code"] == "not_due" for r in d["reasons"])
        what = d["work"] or ("nothing to do" if idle else "")
        instant = f" {d['instant']}" if d["instant"] else ""
        verdict = "WOULD RUN" if d["would_run"] else "not now"
        detail = ": ".join(part for part in (what, d["why"]) if part)
        typer.echo(f"{d['action']}{instant}: {verdict}" + (f" ({detail})" if detail else ""))
        for r in d["reasons"]:
            typer.echo(f"  - {r['code']}: {r['message']}")
    if not found["actions"]:
        typer.echo("no such action on this table")


def _fail(message: str) -> typer.Exit:
    """`error: MESSAGE` on stderr; raise the returned Exit (code 2)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _duration(text: str, option: str = "--older-than") -> dt.timedelta:
    """`24h`, `30m`, `2d`, `90s` or plain seconds as a timedelta; else `error: ...` and exit 2."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    value = text.strip().lower()
    try:
        if value and value[-1] in units:
            seconds = float(value[:-1]) * units[value[-1]]
        else:
            seconds = float(value)
        if seconds != seconds:  # NaN
            raise ValueError(value)
    except ValueError:
        raise _fail(f"{option} {text!r} is not a duration such as 24h, 30m, 2d or 3600") from None
    if seconds < 0:
        raise _fail(f"{option} {text!r} must not be negative")
    try:
        return dt.timedelta(seconds=seconds)
    except OverflowError:
        raise _fail(f"{option} {text!r} is too long (at most {dt.timedelta.max.days} days)") from None


@app.command()
def orphans(
    path: str = typer.Argument(..., help="table base path or URI"),
    older_than: str = typer.Option("24h", "--older-than", help="only files and instants older than this (24h, 2d)"),
    dry_run: bool = typer.Option(True, "--dry-run/--delete", help="list only (default), or delete the orphans"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Files under the table that no completed or pending instant references: listed, or deleted with --delete.

    Never files under .hoodie/, of pending instants, of instants newer than --older-than, or
    kept by savepoints (docs/health.md, "Orphan files"). Every removal is printed.
    """
    from lakeward.core.orphans import remove_orphans

    table = _open(path)
    report = _service(lambda: remove_orphans(table, _duration(older_than), dry_run=dry_run))
    if as_json:
        typer.echo(json.dumps(report.to_json_dict(), indent=2))
        return
    done = {r.path: r for r in report.removals}
    rows: list[dict[str, object]] = [
        {
            "path": o.path,
            "size": o.size,
            "instant": o.instant_time,
            "reason": o.reason,
            "removed": "dry run" if dry_run else ("yes" if done[o.path].removed else f"no: {done[o.path].error}"),
        }
        for o in report.orphans
    ]
    typer.echo(_grid(rows, ["path", "size", "instant", "reason", "removed"], "no orphan files"))
    if rows:
        verb = "would be removed (dry run; --delete removes them)" if dry_run else "removed"
        count = len(rows) if dry_run else len(report.removed)
        typer.echo(f"{count} orphan file(s), {report.orphan_bytes} bytes, {verb}")


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
    definition = _service(lambda: table.create_index(name, columns, index_type, _options(option, table=False)))
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
    from lakeward.core.file_group.metadata_listing import metadata_partitions  # lazy: start-up (issue 23)
    from lakeward.core.table_version import dropped_by_default

    table = _open(path)
    status = _service(table.index_status)
    # Hudi 1.x's own secondary indexes (metadata-table partitions): shown, since lakeward's next write drops them
    hudi_indexes = [p for p in metadata_partitions(table.config.to_properties()) if dropped_by_default(p)]
    if as_json:
        doc = {
            "hudi_secondary_indexes": hudi_indexes,
            "indexes": status.summary(),
            "pending_builds": list(status.pending_builds),
            "base_files": [
                {"partition": b.partition_path, "base_file": b.base_file, "indexed_by": b.indexed_by}
                for b in status.base_files
            ],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    for partition in hudi_indexes:
        typer.echo(
            f"{partition}: a Hudi secondary index (metadata table); lakeward cannot keep it yet, so its next write "
            "or table service drops it (or, with hoodie.metadata.index.secondary.enable=true, is refused)"
        )
    if not status.indexes:
        typer.echo("no lakeward secondary index" if hudi_indexes else "no secondary index")
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
    """Finish pending index builds, then schedule an index build and run it; or run one pending plan (--instant)."""
    table = _open(path)
    if instant is None:
        if not schedule_only:  # a build that died keeps its base files out of new plans: finish it first
            for pending in _service(table.pending_index_builds):
                _echo_index_build(_service(functools.partial(table.run_index_build, pending)), "pending ")
        instant = _service(lambda: table.schedule_index_build(strategy, index or None))
        if instant is None:
            typer.echo("no index build scheduled: every base file is indexed")
            return
        typer.echo(f"scheduled index build {instant}")
        if schedule_only:
            return
    _echo_index_build(_service(functools.partial(table.run_index_build, instant)))


def _echo_index_build(result: Any, kind: str = "") -> None:
    typer.echo(
        f"completed {kind}index build {result.instant_time}: {len(result.files_written)} index file(s) for "
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
    try:
        app()
    except (LakewardError, OSError) as exc:
        # what a command did not turn into its own message (a damaged plan or timeline met on the way, a
        # storage failure): still one error line and exit code 2, not a traceback
        typer.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
