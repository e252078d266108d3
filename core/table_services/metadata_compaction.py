"""`metadata_compaction`: the metadata table's own compaction (then its clean) as a planned table service.

The writer runs the metadata table's services inline after every commit, as Hudi's does
(`metadata_table.services`); this service lets the daemon plan and run them like any other
action, for tables whose writers do not (another engine's commits, a writer killed between
the plan and its run). Its plans live on the metadata table's timeline
(`.hoodie/metadata/.hoodie/timeline/<m>.compaction.requested`); `schedule` writes one when
`hoodie.metadata.compact.max.delta.commits` delta commits completed since the last one and no
pending data-table instant holds it back (`check()` says which, for `lakeward plans` and the
API); `execute` runs it (idempotent), then the metadata clean when due, then the metadata
table's archival (`metadata_table.archival`). Both under the table lock: no metadata delta
commit of a data-table commit races them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lakeward.core.config.table import TableConfig
from lakeward.core.context import TableContext
from lakeward.core.engine import Engine
from lakeward.core.exceptions import InstantExistsError, InstantNotFoundError
from lakeward.core.metadata_table.archival import archive_metadata_table
from lakeward.core.metadata_table.clean import MetadataCleanResult, execute_metadata_clean, schedule_metadata_clean
from lakeward.core.metadata_table.compaction import (
    MetadataCompactionCheck,
    MetadataCompactionResult,
    check_metadata_compaction,
    execute_metadata_compaction,
    mdt_timeline,
    pending_metadata_compactions,
    schedule_metadata_compaction,
)
from lakeward.core.metadata_table.writer import maintains_files_partition
from lakeward.core.storage import Storage
from lakeward.core.table_services.archival import ArchiveResult
from lakeward.core.table_services.service import ServiceReport
from lakeward.core.timeline import Action, State, Timeline


@dataclass(frozen=True)
class MetadataCompactionRun:
    """What one `metadata_compaction` execution did: the compaction, and the clean and archival that followed it."""

    compaction: MetadataCompactionResult
    clean: MetadataCleanResult | None = None
    archived: ArchiveResult | None = None


def metadata_compaction_unavailable(storage: Storage, config: TableConfig) -> str | None:
    """Why the metadata table of a table cannot be compacted by lakeward (None: it can; every table version)."""
    if not maintains_files_partition(storage):
        return "the table has no metadata table with a `files` partition (hoodie.table.metadata.partitions)"
    return None


class MetadataCompactionService:
    """The metadata table's compaction and clean, planned on its own timeline."""

    action: ClassVar[str] = "metadata_compaction"
    planned: ClassVar[bool] = True

    def __init__(self, ctx: TableContext) -> None:
        self.ctx = ctx

    @classmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        if not maintains_files_partition(storage):
            return []
        return pending_metadata_compactions(storage)

    @classmethod
    def unavailable_reason(cls, storage: Storage, config: TableConfig) -> str | None:
        return metadata_compaction_unavailable(storage, config)

    def check(self) -> MetadataCompactionCheck:
        """Whether a metadata compaction is due now, and if not, why (pending plans, too few delta
        commits, or the pending data-table instant that holds it back)."""
        ctx = self.ctx
        threshold = ctx.write_config.metadata_compact_max_delta_commits
        return check_metadata_compaction(ctx.storage, ctx.timeline(), threshold)

    def schedule(self, *, force: bool = False) -> str | None:
        """Plan a metadata compaction when due (`force`: whenever a log can be folded and nothing
        blocks); its instant time on the metadata timeline, or None."""
        ctx = self.ctx
        with ctx.lock:
            return schedule_metadata_compaction(
                ctx.storage,
                ctx.timeline(),
                ctx.write_config.metadata_compact_max_delta_commits,
                ctx.config.timeline_timezone,
                force=force,
            )

    def pending(self) -> list[str]:
        return self.pending_of(self.ctx.storage, self.ctx.timeline())

    def execute(self, instant_time: str | None = None, *, engine: Engine | None = None) -> MetadataCompactionRun:
        """Run the metadata compaction `instant_time` (again, if a run died), then the metadata clean when
        due and the metadata table's archival."""
        ctx = self.ctx
        ctx.check_version(f"run metadata compaction {instant_time}")
        if instant_time is None:
            raise InstantNotFoundError(f"name the metadata compaction plan to run; pending: {self.pending()}")
        tz = ctx.config.timeline_timezone
        with ctx.lock:
            if mdt_timeline(ctx.storage).state_of(instant_time, Action.COMPACTION) is State.COMPLETED:
                # a writer ran it after its commit meanwhile (as Hudi's writers do): not run twice
                raise InstantExistsError(f"metadata compaction {instant_time} is already completed")
            ctx.check_completion(instant_time)  # fencing: the daemon's claim must still hold
            # The completion scope wraps the instant's completion only: a stop while the new base
            # files are written still cancels the run (the plan is run again, idempotently).
            compaction = execute_metadata_compaction(
                ctx.storage,
                instant_time,
                tz,
                completing=lambda: ctx.completing(instant_time),
                deflate_level=ctx.write_config.metadata_compact_deflate_level,
            )
            retained = ctx.write_config.metadata_cleaner_commits_retained
            clean_time = schedule_metadata_clean(ctx.storage, retained, tz)
            clean = execute_metadata_clean(ctx.storage, clean_time, tz) if clean_time is not None else None
            archived = archive_metadata_table(ctx.storage, ctx.timeline(), ctx.write_config)
        return MetadataCompactionRun(compaction, clean, archived)

    def report(self, result: MetadataCompactionRun) -> ServiceReport:
        c = result.compaction
        cleaned = (
            f"; metadata clean {result.clean.instant_time} deleted {len(result.clean.files)} file(s)"
            if result.clean
            else ""
        )
        if result.archived and result.archived.archived:
            cleaned += f"; {len(result.archived.archived)} metadata instant(s) archived"
        return ServiceReport(
            c.instant_time,
            records=c.records,
            detail=f"metadata table compacted: {c.log_files} log file(s) into {', '.join(c.base_files)}{cleaned}",
            files=result.clean.files if result.clean else (),
        )


__all__ = ["MetadataCompactionRun", "MetadataCompactionService", "metadata_compaction_unavailable"]
