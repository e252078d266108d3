"""Table-version upgrades (6 -> 8 -> 9), done as Apache Hudi's upgrade handlers do them.

`Table.upgrade(to=)` and `lakeward upgrade PATH --to 8|9` run `upgrade_table` under the table
lock. Apache Hudi (`UpgradeDowngrade`, `SixToEightUpgradeHandler` / `SevenToEightUpgradeHandler`,
`EightToNineUpgradeHandler`, `UpgradeDowngradeUtils`) does, in this order:

1. roll back failed writes and, on merge-on-read tables, compact every file slice that has log
   files (`rollbackFailedWritesAndCompact`: `UnBoundedCompactionStrategy`, one delta commit
   enough) — the caller (`Table.upgrade`) does this with lakeward's own services, before any
   of the steps below;
2. 6 -> 8: move every file of the active timeline from `.hoodie/` to `.hoodie/timeline/`, a
   completed one renamed `<t>_<c>.<action>` with its file's modification time as completion
   time `c`, commit / delta commit / replace commit metadata rewritten from JSON to Avro, a
   pending clustering's `replacecommit` files renamed `clustering` (`upgradeActiveTimelineInstant`);
   then the archived timeline (`.hoodie/archived/`) is written into the LSM history
   (`upgradeToLSMTimeline`);
3. the table properties: `hoodie.table.version`, `hoodie.timeline.layout.version=2`,
   `hoodie.timeline.path`, `hoodie.table.initial.version`, the record merge mode (and on 8 the
   merge strategy id) inferred from the payload class, `hoodie.table.keygenerator.type`; 8 -> 9
   drops the merge strategy id of built-in modes, moves the payload class to
   `hoodie.table.legacy.payload.class` and `hoodie.table.precombine.field` to
   `hoodie.table.ordering.fields` (`EightToNineUpgradeHandler`); then `hoodie.properties` is
   replaced through a backup copy (`HoodieTableConfig.update`), checksum included.

Crash safety (lakeward's order; Hudi renames the instant files in place before it switches the
properties, so a Hudi upgrade killed half-way leaves a timeline no reader can use):

- the layout-2 timeline and the LSM history are written as *copies*; the version 6 files stay
  where they are until `hoodie.properties` says the new version. Until then every reader reads
  the version 6 table; a crash leaves `.hoodie/timeline/` behind, which the next run deletes and
  writes again from the version 6 timeline as it is then (the completion times come from the
  version 6 files, which are still there, so the rerun writes the same names);
- `hoodie.properties` is replaced in one atomic step (a backup first): this is the switch;
- afterwards the version 6 instant files are deleted from `.hoodie/`; a crash in between
  leaves unused files that the next `upgrade` (a no-op otherwise) deletes. The one unsafe
  window: a reader that read `hoodie.properties` before the switch and lists `.hoodie/` after
  the deletion sees a cut timeline; open the table again (lakeward's writers and planned
  services re-check the version under the lock and refuse, `TableVersionChangedError`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lakeward.core.config.properties import parse_properties
from lakeward.core.config.table import (
    COMMIT_TIME_STRATEGY_ID,
    DEFAULT_PAYLOAD,
    EVENT_TIME_STRATEGY_ID,
    INITIAL_VERSION_KEY,
    MERGE_MODE_KEY,
    MERGE_STRATEGY_ID_KEY,
    PROPERTIES_PATH,
    KeyGeneratorType,
    TableConfig,
    table_checksum,
    update_table_properties,
)
from lakeward.core.exceptions import InstantExistsError, UpgradeError
from lakeward.core.file_group.metadata_listing import metadata_partitions, metadata_storage, read_table_properties
from lakeward.core.index.secondary.definitions import load_definitions
from lakeward.core.metadata_table.compaction import (
    execute_metadata_compaction,
    pending_metadata_compactions,
    schedule_metadata_compaction,
    schedule_rebasing_metadata_compaction,
)
from lakeward.core.storage import Storage
from lakeward.core.table_services.compaction.schedule import schedule_compaction
from lakeward.core.table_services.namespace import TableServices
from lakeward.core.table_version import METAFOLDER, SUPPORTED_VERSIONS, TimelineLayout, table_version
from lakeward.core.timeline import Timeline, avro_plans
from lakeward.core.timeline.archived import read_archived_entries
from lakeward.core.timeline.clustering_plan import clustering_plan_of, pending_clustering_plans
from lakeward.core.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from lakeward.core.timeline.instant_time import format_instant_time, next_instant_time
from lakeward.core.timeline.lsm_history import load_archived_instants
from lakeward.core.timeline.lsm_writer import LSM_INSTANT_VERSION, append_history_file
from lakeward.core.timeline.metadata import CommitMetadata
from lakeward.core.timeline.transitions import instant_path
from lakeward.core.write.client import WriteClient

log = logging.getLogger(__name__)

#: Versions `Table.upgrade(to=)` takes.
UPGRADE_TARGETS = (8, 9)
LEGACY_PAYLOAD_KEY = "hoodie.table.legacy.payload.class"
PAYLOAD_KEY = "hoodie.compaction.payload.class"
#: The metadata table's payload class and key generator (kept by Hudi's upgrade handlers: merge mode CUSTOM).
METADATA_PAYLOAD = "org.apache.hudi.metadata.HoodieMetadataPayload"
METADATA_KEYGEN_CLASS = "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator"
#: Hudi's `PAYLOAD_BASED_MERGE_STRATEGY_UUID`.
PAYLOAD_STRATEGY_ID = "00000000-0000-0000-0000-000000000000"

#: Apache Hudi's downgrade handlers, one step each (`UpgradeDowngrade.downgrade` chains them: 9 -> 8 -> 7 -> 6).
HUDI_DOWNGRADE_STEPS = {
    (9, 8): "NineToEightDowngradeHandler",
    (8, 7): "EightToSevenDowngradeHandler",
    (7, 6): "SevenToSixDowngradeHandler",
}
#: The downgrades lakeward runs (`Table.downgrade`); the others are refused, naming Hudi's handlers.
DOWNGRADES = frozenset({(9, 8)})


@dataclass(frozen=True)
class UpgradeResult:
    """What one `Table.upgrade` (or `Table.downgrade`) did."""

    from_version: int
    to_version: int
    #: Failed writes rolled back first (instant times).
    rolled_back: tuple[str, ...] = ()
    #: Pending plans (compaction, clustering) run to completion first.
    finished_plans: tuple[str, ...] = ()
    #: The compaction of every log file (merge-on-read), as Hudi's upgrade runs it; None when none was needed.
    compaction: str | None = None
    #: Active timeline files moved to `.hoodie/timeline/` (6 -> 8+).
    timeline_files: int = 0
    #: Archived instants written into the LSM history (6 -> 8+).
    archived_instants: int = 0
    #: Version 6 timeline files a crashed run left behind, deleted now.
    leftovers_removed: int = 0

    @property
    def changed(self) -> bool:
        return self.from_version != self.to_version or self.leftovers_removed > 0


def check_target(current: int, target: int) -> None:
    """Refuse (UpgradeError) what `upgrade(to=target)` cannot do from `current`, before anything is written."""
    if target == 7:
        raise UpgradeError(
            "table version 7 is the Hudi 0.16 bridge version, which lakeward neither reads nor writes; "
            f"upgrade to {' or '.join(map(str, UPGRADE_TARGETS))} instead"
        )
    if target not in SUPPORTED_VERSIONS:
        raise UpgradeError(f"cannot upgrade to table version {target}: lakeward upgrades to {list(UPGRADE_TARGETS)}")
    if target < current:
        check_downgrade(current, target)
        raise UpgradeError(
            f"cannot upgrade table version {current} to {target}: that is a downgrade; run "
            f"Table.downgrade(to={target}) (CLI `lakeward downgrade PATH --to {target}`)"
        )


def check_downgrade(current: int, target: int) -> None:
    """Refuse (UpgradeError) a downgrade lakeward does not run, naming the Hudi handlers that would."""
    if target > current:
        raise UpgradeError(
            f"cannot downgrade table version {current} to {target}: that is an upgrade; run Table.upgrade(to={target})"
        )
    if target == current or (current, target) in DOWNGRADES:
        return
    steps = [HUDI_DOWNGRADE_STEPS[(v, v - 1)] for v in range(current, target, -1) if (v, v - 1) in HUDI_DOWNGRADE_STEPS]
    hudi = (
        f"Apache Hudi runs it ({' then '.join(steps)}: hoodie.write.table.version={target} on a Hudi writer, or "
        "hudi-cli `downgrade table --toVersion`)"
        if len(steps) == current - target
        else f"Apache Hudi does not downgrade {current} -> {target} either"
    )
    raise UpgradeError(
        f"cannot downgrade table version {current} to {target}: lakeward downgrades "
        f"{', '.join(f'{a} -> {b}' for a, b in sorted(DOWNGRADES))} only (back to version 6 the timeline would "
        f"have to return to layout 1 and the LSM history to the version 6 archive). {hudi}. Nothing was changed"
    )


# -- table properties -------------------------------------------------------------------------
def upgraded_properties(props: Mapping[str, str], target: int) -> dict[str, str]:
    """`hoodie.properties` after the upgrade handlers from the table's version up to `target`.

    Keys are only added and removed, as Hudi does (everything else, its order included, stays).
    """
    out = dict(props)
    current = table_version(out.get("hoodie.table.version", "6")).number
    if current < 8 <= target:
        _six_to_eight(out)
    if current < 9 <= target:
        _eight_to_nine(out)
    out["hoodie.table.version"] = str(target)
    out["hoodie.table.checksum"] = str(table_checksum(out.get("hoodie.database.name", ""), out["hoodie.table.name"]))
    return out


def downgraded_properties(props: Mapping[str, str]) -> dict[str, str]:
    """`hoodie.properties` after Hudi's `NineToEightDowngradeHandler` (9 -> 8): the payload class back from
    `hoodie.table.legacy.payload.class`, `hoodie.table.ordering.fields` back to
    `hoodie.table.precombine.field`, `hoodie.table.partial.update.mode` dropped."""
    out = dict(props)
    out.pop("hoodie.table.partial.update.mode", None)
    legacy = out.pop(LEGACY_PAYLOAD_KEY, None)
    if legacy:
        out[PAYLOAD_KEY] = legacy  # lakeward's payloads (event or commit time) keep their built-in merge mode
    ordering = out.pop("hoodie.table.ordering.fields", None)
    if ordering:
        out["hoodie.table.precombine.field"] = ordering
    out["hoodie.table.version"] = "8"
    return out


def _six_to_eight(props: dict[str, str]) -> None:
    props["hoodie.timeline.layout.version"] = str(int(TimelineLayout.V2))
    props["hoodie.timeline.path"] = "timeline"
    props.setdefault(INITIAL_VERSION_KEY, "6")
    # `upgradeMergeMode`: the merge mode whose semantics the payload class has; a payload class of its own
    # (the metadata table's `HoodieMetadataPayload`) keeps it, merge mode CUSTOM, payload-based strategy.
    payload = props.get(PAYLOAD_KEY)
    if payload == METADATA_PAYLOAD:
        props[MERGE_MODE_KEY] = "CUSTOM"
        props[MERGE_STRATEGY_ID_KEY] = PAYLOAD_STRATEGY_ID
    else:
        event_time = payload == DEFAULT_PAYLOAD
        props[MERGE_MODE_KEY] = "EVENT_TIME_ORDERING" if event_time else "COMMIT_TIME_ORDERING"
        props[MERGE_STRATEGY_ID_KEY] = EVENT_TIME_STRATEGY_ID if event_time else COMMIT_TIME_STRATEGY_ID
    keygen = props.get("hoodie.table.keygenerator.class")
    if keygen == METADATA_KEYGEN_CLASS:
        props["hoodie.table.keygenerator.type"] = "HOODIE_TABLE_METADATA"
    elif keygen:
        props["hoodie.table.keygenerator.type"] = KeyGeneratorType.parse(keygen).name


def _eight_to_nine(props: dict[str, str]) -> None:
    if props.get(MERGE_MODE_KEY) != "CUSTOM":
        props.pop(MERGE_STRATEGY_ID_KEY, None)
    if props.get(PAYLOAD_KEY) != METADATA_PAYLOAD:  # Hudi moves its own payloads only (`PAYLOAD_CLASSES_TO_HANDLE`)
        payload = props.pop(PAYLOAD_KEY, None)
        if payload:
            props[LEGACY_PAYLOAD_KEY] = payload
    ordering = props.pop("hoodie.table.precombine.field", None)
    if ordering:
        props["hoodie.table.ordering.fields"] = ordering


# -- active timeline (layout 1 -> 2) ------------------------------------------------------------
def _layout2_file(storage: Storage, instant: Instant, completion: str | None) -> tuple[Instant, bytes]:
    """The layout-2 instant and content of one version 6 timeline file (`completion`: of a completed one)."""
    data = storage.read_bytes(instant_path(instant))
    if instant.is_completed:
        target = Instant(instant.time, instant.action, State.COMPLETED, completion)
        if instant.action in WRITE_ACTIONS:
            metadata = CommitMetadata.from_bytes(data, instant.file_name)
            if instant.action is Action.REPLACE_COMMIT and metadata.partitionToReplaceFileIds is None:
                metadata.partitionToReplaceFileIds = {}
            data = metadata.to_avro()
        return Instant(target.time, target.action, target.state, target.completion_time, TimelineLayout.V2), data
    action = instant.action
    if action is Action.REPLACE_COMMIT and clustering_plan_of(storage, instant.time) is not None:
        action = Action.CLUSTERING
    return Instant(instant.time, action, instant.state, layout=TimelineLayout.V2), data


def layout1_files(storage: Storage) -> list[Instant]:
    """Every version 6 timeline file in `.hoodie/` (all states), oldest first."""
    names = [e.name for e in storage.list_dir(METAFOLDER) if not e.is_dir]
    files = [i for i in (Instant.parse(n) for n in names) if i is not None]
    return sorted(files, key=Instant.sort_key)


def completion_times(storage: Storage, files: list[Instant], timezone: str) -> dict[tuple[str, Action], str]:
    """Completion time of each completed version 6 instant (by instant time and action): its file's
    modification time, as Hudi takes it, in the timeline time zone, made strictly increasing in
    instant order and never before the instant time (a copied or unzipped table gives all its files
    one clock). A savepoint is outside that order: it takes the instant time of an older write when it
    is made, and keeps its own time (else it gave its write a later completion and pushed every later
    write's past it, which moved them across incremental ranges)."""
    out: dict[tuple[str, Action], str] = {}
    previous = ""
    for instant in files:
        if not instant.is_completed:
            continue
        moment = storage.modified_time(instant_path(instant))
        local = moment.astimezone(dt.UTC) if timezone.upper() == "UTC" else moment.astimezone().replace(tzinfo=None)
        chosen = max(format_instant_time(local), instant.time)
        if instant.action is Action.SAVEPOINT:
            out[(instant.time, instant.action)] = chosen
            continue
        if chosen <= previous:
            chosen = next_instant_time(previous)
        out[(instant.time, instant.action)] = previous = chosen
    return out


def copy_active_timeline(storage: Storage, timezone: str) -> int:
    """Write every `.hoodie/` timeline file into `.hoodie/timeline/` in layout 2; the count."""
    files = layout1_files(storage)
    completions = completion_times(storage, files, timezone)
    for instant in files:
        target, data = _layout2_file(storage, instant, completions.get((instant.time, instant.action)))
        storage.write_bytes(instant_path(target), data)
    return len(files)


def remove_layout1_files(storage: Storage) -> int:
    """Delete the version 6 timeline files left in `.hoodie/` (after the switch); the count."""
    files = layout1_files(storage)
    for instant in files:
        storage.delete_file(instant_path(instant))
    return len(files)


def _remove_leftovers(storage: Storage) -> int:
    """`remove_layout1_files` of the data table and of its metadata table (after the switch); the count."""
    found = metadata_table_at(storage)
    return remove_layout1_files(storage) + (remove_layout1_files(found[0]) if found is not None else 0)


# -- archived timeline -> LSM history -------------------------------------------------------------
_METADATA_SCHEMAS = {
    "hoodieCleanMetadata": avro_plans.CLEAN_METADATA,
    "hoodieRollbackMetadata": avro_plans.ROLLBACK_METADATA,
    "hoodieSavePointMetadata": avro_plans.SAVEPOINT_METADATA,
}
_PLAN_SCHEMAS = {
    "hoodieCleanerPlan": avro_plans.CLEANER_PLAN,
    "hoodieCompactionPlan": avro_plans.COMPACTION_PLAN,
    "hoodieRequestedReplaceMetadata": avro_plans.REQUESTED_REPLACE_METADATA,
}


def _encode(schema: dict[str, Any], record: Any, what: str) -> bytes | None:
    if not isinstance(record, dict):
        return None
    try:
        return avro_plans.serialize(schema, record)
    except (ValueError, TypeError, KeyError) as exc:  # a field the 1.x schema lacks: keep the instant, not its bytes
        log.warning("archived %s not converted to the LSM history's Avro: %s", what, exc)
        return None


def _history_rows(entries: list[dict[str, Any]]) -> list[dict[str, object]]:
    """One LSM history row per completed archived instant, from version 6 `HoodieArchivedMetaEntry` records
    (as Hudi's `LegacyArchivedMetaEntryReader`: completion time `stateTransitionTime`, else the instant time)."""
    plans: dict[str, bytes | None] = {}
    for e in entries:
        for name, schema in _PLAN_SCHEMAS.items():
            if e.get(name) is not None and e.get("actionState") != State.COMPLETED.name:
                plans[str(e["commitTime"])] = _encode(schema, e[name], name)
    rows = []
    for e in entries:
        if e.get("actionState") != State.COMPLETED.name:
            continue
        time, action = str(e["commitTime"]), str(e["actionType"])
        metadata = None
        if e.get("hoodieReplaceCommitMetadata") is not None:
            metadata = CommitMetadata.from_avro_record(e["hoodieReplaceCommitMetadata"]).to_avro()
        elif e.get("hoodieCommitMetadata") is not None:
            metadata = CommitMetadata.from_avro_record(e["hoodieCommitMetadata"]).to_avro()
        else:
            for name, schema in _METADATA_SCHEMAS.items():
                if e.get(name) is not None:
                    metadata = _encode(schema, e[name], name)
        rows.append(
            {
                "instantTime": time,
                "completionTime": str(e.get("stateTransitionTime") or time),
                "action": action,
                "metadata": metadata,
                "plan": plans.get(time),
                "version": LSM_INSTANT_VERSION,
            }
        )
    return sorted(rows, key=lambda r: (str(r["instantTime"]), str(r["action"])))


def copy_archived_timeline(storage: Storage, archive_folder: str, history_folder: str) -> int:
    """Write the version 6 archived instants into the LSM history (once: a rerun finds them there); the count."""
    rows = _history_rows(read_archived_entries(storage, archive_folder))
    done = {(i.time, i.action.value) for i in load_archived_instants(storage, history_folder)}
    new = [r for r in rows if (r["instantTime"], r["action"]) not in done]
    if new:
        append_history_file(storage, history_folder, new)
    return len(rows)


def convert_timeline(storage: Storage, config: TableConfig, target: int) -> tuple[int, int]:
    """6 -> 8+: the layout-2 copy of the active and archived timelines (before the switch); the counts."""
    if config.version.timeline_layout is not TimelineLayout.V1:
        return 0, 0
    return _copy_timeline(storage, config.timeline_timezone, config.archive_folder, target)


def _copy_timeline(storage: Storage, timezone: str, archive_folder: str, target: int) -> tuple[int, int]:
    """`convert_timeline` of the version 6 table at `storage` (a data table or its metadata table)."""
    rules = table_version(target)
    history = rules.history_folder
    assert history is not None
    # Whatever is in `.hoodie/timeline/` of a version 6 table is a copy an interrupted upgrade left: the
    # table may have changed since (a restore, a rollback), so the copy is made anew, never completed.
    storage.delete_dir(rules.timeline_folder)
    if storage.is_local:
        storage.make_dirs(history)
    files = copy_active_timeline(storage, timezone)
    archived = copy_archived_timeline(storage, archive_folder, history)
    return files, archived


def switch_version(storage: Storage, target: int) -> TableConfig:
    """The switch: `hoodie.properties` of `target` (`HoodieTableConfig.update`), from the properties on storage now."""
    return _rewrite_properties(storage, lambda props: upgraded_properties(props, target))


def _rewrite_properties(storage: Storage, change: Callable[[dict[str, str]], dict[str, str]]) -> TableConfig:
    """Replace `hoodie.properties` by `change(current properties)`, checked first: the new ones must open."""
    props = parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
    new = change(props)
    TableConfig.from_properties(new)
    return TableConfig.from_properties(update_table_properties(storage, new, remove=[k for k in props if k not in new]))


# -- the metadata table ---------------------------------------------------------------------------
def metadata_table_at(storage: Storage) -> tuple[Storage, int] | None:
    """The metadata table of the table at `storage` and its own table version (None: the data table's
    `hoodie.properties` list no metadata partition, or it has no properties of its own)."""
    if not metadata_partitions(parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))):
        return None
    mdt = metadata_storage(storage)
    props = read_table_properties(mdt)
    return (mdt, table_version(props.get("hoodie.table.version", "6")).number) if props else None


def compact_metadata_table(
    storage: Storage, data_timeline: Timeline, timezone: str, *, from_version_6: bool = False
) -> str | None:
    """What Hudi's `UpgradeDowngrade` runs on the metadata table before its handlers
    (`rollbackFailedWritesAndCompact`, merge-on-read): pending metadata compactions run, then one
    compaction of every file group with log files; its instant time, or None when none had any. The
    metadata table's failed delta commits were rolled back with the data table's (`prepare`).

    `from_version_6` (an upgrade to 8/9): that compaction takes a new instant time and rewrites every
    file group, so that no latest base file keeps a version 6 name (`schedule_rebasing_metadata_compaction`)."""
    for pending in pending_metadata_compactions(storage):
        execute_metadata_compaction(storage, pending, timezone)
    instant = (
        schedule_rebasing_metadata_compaction(storage, data_timeline, timezone)
        if from_version_6
        else schedule_metadata_compaction(storage, data_timeline, timezone=timezone, force=True)
    )
    if instant is not None:
        execute_metadata_compaction(storage, instant, timezone)
    return instant


def _rewrite_metadata_properties(mdt: Storage, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
    """Replace the metadata table's `hoodie.properties` by `change(current)` (backup first, one atomic step)."""
    props = read_table_properties(mdt)
    new = change(props)
    update_table_properties(mdt, new, remove=[k for k in props if k not in new])


def prepare_metadata_table(storage: Storage, data_timeline: Timeline, timezone: str, target: int) -> Storage | None:
    """The metadata table's part of an upgrade or downgrade before any switch, as Hudi's `UpgradeDowngrade`
    runs the same handlers on it first: its log files compacted, and from version 6 the layout-2 copy
    of its timeline (`convert_timeline`). Returns its storage when its version changes with the data table's."""
    found = metadata_table_at(storage)
    if found is None or found[1] == target:
        return None
    mdt, version = found
    compact_metadata_table(storage, data_timeline, timezone, from_version_6=version == 6 and target >= 8)
    if version == 6 and target >= 8:
        _copy_timeline(mdt, timezone, read_table_properties(mdt).get("hoodie.archivelog.folder", "archived"), target)
    return mdt


# -- what Hudi requires first -------------------------------------------------------------------
def check_upgradable(storage: Storage, config: TableConfig) -> None:
    """Refuse (UpgradeError) tables with change data capture enabled or lakeward secondary indexes: the
    upgrade does not carry either over to the new version, although lakeward writes both on tables
    created at 8 or 9 (`TableVersion.services`: `change_tracking`, `index_build`)."""
    if config.cdc_enabled:
        raise UpgradeError(
            "cannot upgrade: change data capture is enabled (hoodie.table.cdc.enabled=true), and lakeward's "
            "upgrade does not carry change data over to a new table version (lakeward writes it on tables "
            "created at version 8 or 9); nothing was changed"
        )
    if load_definitions(storage):
        raise UpgradeError(
            "cannot upgrade: the table has lakeward secondary indexes, which lakeward's upgrade does not carry "
            "over to a new table version (lakeward keeps them on tables created at version 8 or 9); drop them "
            "first (Table.drop_index); nothing was changed"
        )


def prepare(
    client: WriteClient, services: TableServices, change: str = "upgrade"
) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
    """What Hudi's upgrade requires first (`rollbackFailedWritesAndCompact`), under the table lock: failed
    writes rolled back, pending compaction, clustering and clean plans run (they were planned under the old
    version's rules), and on merge-on-read tables every file slice with log files compacted.

    Returns (instants rolled back, plans finished, the compaction instant or None). Raises UpgradeError,
    before anything of the upgrade itself is written, when a write is still in flight or another action
    is pending; `change` ("upgrade", "downgrade") names it in the messages.
    """
    ctx = client.table_context

    def in_flight(timeline: Timeline) -> set[str]:
        """Pending writes, but clustering plans (replacecommits on version 6), which run below."""
        return {i.time for i in timeline.pending_writes()} - set(pending_clustering_plans(ctx.storage, timeline))

    before = in_flight(ctx.timeline())
    timeline = client.roll_back_failed_writes()
    if in_flight(timeline):
        raise UpgradeError(
            f"cannot {change}: write(s) {sorted(in_flight(timeline))} are in flight; run the "
            f"{change} when they completed (or their writers are gone); nothing was changed"
        )
    rolled_back = tuple(sorted(before - in_flight(timeline)))
    finished: list[str] = []
    for namespace in (services.compaction, services.clustering, services.clean):
        for instant in namespace.pending():
            try:
                namespace.execute(instant)
            except InstantExistsError:  # a runner that held no table lock while it worked (the daemon's) won
                log.info("%s %s was completed by another runner during the %s", namespace.action, instant, change)
            finished.append(f"{instant}.{namespace.action}")
    others = ctx.timeline().pending()
    if others:
        raise UpgradeError(
            f"cannot {change}: pending {[str(i) for i in others]} must complete or be rolled back first; "
            "nothing was changed"
        )
    compaction = None
    if ctx.merge_on_read:
        unbounded = replace(
            ctx, write_config=ctx.write_config.model_copy(update={"compaction_strategy": "UnBoundedCompactionStrategy"})
        )
        compaction = schedule_compaction(unbounded, force=True)
        if compaction is not None:
            services.compaction.execute(compaction)
    return rolled_back, tuple(finished), compaction


def downgrade_locked(client: WriteClient, services: TableServices, config: TableConfig, target: int) -> UpgradeResult:
    """9 -> 8 as Hudi runs it (`UpgradeDowngrade`: failed writes rolled back and log files compacted first,
    then `NineToEightDowngradeHandler`'s properties, one atomic switch); call under the table lock."""
    check_downgrade(config.table_version, target)
    if config.table_version == target:
        return UpgradeResult(target, target)
    storage = client.table_context.storage
    rolled_back, finished, compaction = prepare(client, services, "downgrade")
    mdt = prepare_metadata_table(storage, client.table_context.timeline(), config.timeline_timezone, target)
    if mdt is not None:  # the metadata table first, as Hudi's `UpgradeDowngrade` downgrades it first
        _rewrite_metadata_properties(mdt, downgraded_properties)
    _rewrite_properties(storage, downgraded_properties)
    log.info("downgraded table %s from table version %d to %d", storage.uri, config.table_version, target)
    return UpgradeResult(config.table_version, target, rolled_back, finished, compaction)


def upgrade_locked(client: WriteClient, services: TableServices, config: TableConfig, target: int) -> UpgradeResult:
    """The upgrade of a table at `config`'s version (read under the lock) to `target`; call under the table lock.

    Steps in crash-safe order (module docstring): what Hudi requires first, the layout-2 copy of the
    timeline, the switch of `hoodie.properties`, then the removal of the version 6 timeline files.
    """
    storage = client.table_context.storage
    check_target(config.table_version, target)
    if config.table_version == target:  # done, perhaps by a run that crashed before removing the version 6 files
        removed = _remove_leftovers(storage) if config.version.lsm_history else 0
        return UpgradeResult(target, target, leftovers_removed=removed)
    check_upgradable(storage, config)
    rolled_back, finished, compaction = prepare(client, services)
    mdt = prepare_metadata_table(storage, client.table_context.timeline(), config.timeline_timezone, target)
    files, archived = convert_timeline(storage, config, target)
    if mdt is not None:  # the metadata table's switch first, as Hudi's `UpgradeDowngrade` upgrades it first
        _rewrite_metadata_properties(mdt, lambda props: upgraded_properties(props, target))
    switch_version(storage, target)
    log.info("upgraded table %s from table version %d to %d", storage.uri, config.table_version, target)
    removed = _remove_leftovers(storage) if not config.version.lsm_history else 0
    return UpgradeResult(config.table_version, target, rolled_back, finished, compaction, files, archived, removed)


__all__ = [
    "DOWNGRADES",
    "HUDI_DOWNGRADE_STEPS",
    "UPGRADE_TARGETS",
    "UpgradeResult",
    "check_downgrade",
    "check_target",
    "convert_timeline",
    "copy_active_timeline",
    "copy_archived_timeline",
    "downgrade_locked",
    "downgraded_properties",
    "layout1_files",
    "check_upgradable",
    "compact_metadata_table",
    "metadata_table_at",
    "prepare",
    "prepare_metadata_table",
    "remove_layout1_files",
    "switch_version",
    "upgrade_locked",
    "upgraded_properties",
]
