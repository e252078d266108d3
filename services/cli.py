"""The `lakeward` command line: table inspection and, until the daemon lands, a demo."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
import typer

from lakeward.core import Table
from lakeward.core.exceptions import LakewardError

T = TypeVar("T")
app = typer.Typer(add_completion=False, help="lakeward: table services for Hudi-format lakehouse tables.")


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
    try:
        return Table.open(path, options=_options(options))
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
    """Print the table's instants: time, action and state."""
    table = _open(path)
    typer.echo(f"{'instant time':<20}{'action':<16}state")
    for instant in table.timeline():
        typer.echo(f"{instant.time:<20}{instant.action.value:<16}{instant.state.value}")


@app.command()
def show(
    path: str = typer.Argument(..., help="table base path or URI"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Print the table's properties and its live file groups."""
    table = _open(path)
    slices = table.file_slices()
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "properties": table.config.to_properties(),
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
    for key, value in table.config.to_properties().items():
        if key != "hoodie.table.create.schema":
            typer.echo(f"  {key} = {value}")
    typer.echo(f"{len(slices)} file group(s):")
    for s in slices:
        typer.echo(f"  {s.partition_path or '(root)'}  {s.file_id}  @{s.base_instant_time}  {s.size} bytes")


@app.command()
def plans(path: str = typer.Argument(..., help="table base path or URI")) -> None:
    """Print the pending table-service plans and writes: time, action, state."""
    table = _open(path)
    pending = [i for i in table.timeline().pending()]
    if not pending:
        typer.echo("no pending plans")
        return
    typer.echo(f"{'instant time':<20}{'action':<16}state")
    for instant in pending:
        typer.echo(f"{instant.time:<20}{instant.action.value:<16}{instant.state.value}")


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
def savepoints(path: str = typer.Argument(..., help="table base path or URI")) -> None:
    """List the table's savepoints, oldest first."""
    for instant in _open(path).savepoints():
        typer.echo(instant)


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
