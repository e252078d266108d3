"""`Table`: create or open a Hudi (table version 6) table, write to it and read it."""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import cached_property
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakeward.core import file_group, index, metadata_table, read, table_services
from lakeward.core import write as write_path
from lakeward.core.config.cdc import SupplementalLoggingMode
from lakeward.core.config.lock import LOCK_OPTION_KEYS, parse_lock_config
from lakeward.core.config.table import (
    KeyGeneratorType,
    TableConfig,
    TableType,
    check_virtual_keys,
)
from lakeward.core.config.write import (
    WriteConfig,
    check_no_storage_options,
    check_table_options,
    parse_write_config,
    write_table_version,
)
from lakeward.core.context import TableContext, check_version_unchanged
from lakeward.core.engine import Engine, resolve_engine
from lakeward.core.exceptions import (
    ConfigError,
    CorruptTableError,
    InstantExistsError,
    InstantNotFoundError,
    InvalidRecordError,
    LakewardError,
    MetadataTableError,
    MissingFileError,
    SharedLockRequiredError,
    StorageError,
    TableClosedError,
    TableExistsError,
    TableNotFoundError,
)
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.metadata_listing import metadata_partitions, read_table_properties
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.storage import Storage
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.table_version import CURRENT, TableVersion
from lakeward.core.table_version import table_version as resolve_table_version
from lakeward.core.timeline import (
    METAFOLDER,
    Action,
    Instant,
    InstantTime,
    State,
    Timeline,
    instant_time_of,
    new_instant_time,
    normalize_instant_time,
)
from lakeward.core.timeline.clustering_plan import clustering_plan_of
from lakeward.core.timestamp_keygen import TimestampPartitioner
from lakeward.core.write.operation import WriteOperation

# Opening a table and listing its timeline and file slices (`lakeward show`, `timeline`) needs none of
# the write path, table services, indexes, CDC reads or the metadata-table bootstrap: those packages'
# modules load when a method first uses them (`package.module.name`, `lakeward.core.lazy`), and their
# names below are for type checkers only (start-up time, issue 23).
if TYPE_CHECKING:
    from lakeward.core.file_group.integrity import IntegrityReport
    from lakeward.core.index.secondary.api import IndexStatus
    from lakeward.core.index.secondary.definitions import IndexDefinition
    from lakeward.core.metadata_table.bootstrap import MetadataTableInit
    from lakeward.core.read.changes import Images
    from lakeward.core.read.filters import Filters
    from lakeward.core.read.incremental import IncrementalRange
    from lakeward.core.read.scan import QueryType, Scan, ScanExplain
    from lakeward.core.table_services.archival import ArchiveResult
    from lakeward.core.table_services.change_tracking import ChangeTrackingResult
    from lakeward.core.table_services.clean import CleanResult
    from lakeward.core.table_services.clustering import ClusteringResult
    from lakeward.core.table_services.compaction import CompactionResult
    from lakeward.core.table_services.index_build import IndexBuildResult
    from lakeward.core.table_services.namespace import TableServices
    from lakeward.core.table_services.rollback import RollbackResult
    from lakeward.core.table_services.savepoint import RestoreResult
    from lakeward.core.table_services.state import ServiceState
    from lakeward.core.table_services.upgrade import UpgradeResult
    from lakeward.core.write.client import WriteClient, WriteResult

log = logging.getLogger(__name__)

PROPERTIES_PATH = posixpath.join(METAFOLDER, "hoodie.properties")
_INIT_FOLDERS = (".temp", ".aux/.bootstrap/.partitions", ".aux/.bootstrap/.fileids", ".schema")


def _init_folders(version: TableVersion) -> list[str]:
    """Folders a new table starts with: v6 `.hoodie/archived/`, v8+ `.hoodie/timeline/history/`."""
    folders = [posixpath.join(METAFOLDER, f) for f in _INIT_FOLDERS]
    history = version.history_folder
    return [*folders, history if history is not None else posixpath.join(METAFOLDER, "archived")]


def _validate_options(options: Mapping[str, Any]) -> None:
    """Fail fast, naming the key, on any unknown or invalid `hoodie.*` option."""
    if not options:  # the defaults are valid: skip building the validators (~50 ms of CLI start-up)
        return
    parse_write_config(options, extra_known=LOCK_OPTION_KEYS)
    parse_lock_config(options)
    table_services.orphan_clean.orphan_clean_settings(options)  # lakeward's own service options


#: Services that take the table back in time: they build no missing metadata table first (`Table._writer`).
_GOING_BACK = frozenset({"rollback", "restore"})


#: The `hoodie.*` options each `Table.create` keyword stands for (the keyword wins over them).
_KEYWORD_OPTIONS: dict[str, tuple[str, ...]] = {
    "record_key": ("hoodie.datasource.write.recordkey.field",),
    "partition_by": ("hoodie.datasource.write.partitionpath.field",),
    "ordering_field": ("hoodie.datasource.write.precombine.field",),
    "table_name": ("hoodie.table.name", "hoodie.datasource.write.table.name"),
    "table_type": ("hoodie.datasource.write.table.type", "hoodie.table.type"),
    "key_generator": ("hoodie.datasource.write.keygenerator.class", "hoodie.datasource.write.keygenerator.type"),
    "hive_style_partitioning": ("hoodie.datasource.write.hive_style_partitioning",),
    "url_encode_partitions": ("hoodie.datasource.write.partitionpath.urlencode",),
    "table_version": ("hoodie.write.table.version",),
}


def _keys_given_as_keywords(keywords: Mapping[str, Any]) -> set[str]:
    return {key for name, value in keywords.items() if value is not None for key in _KEYWORD_OPTIONS[name]}


class Table:
    """A Hudi table at a path (local, s3://, gs://, hdfs://)."""

    def __init__(
        self,
        storage: Storage,
        config: TableConfig,
        options: Mapping[str, Any] | None = None,
        engine: Engine | str | None = None,
    ):
        self.storage = storage
        self.config = config
        self.options = dict(options or {})
        self.engine = engine
        _validate_options(self.options)
        check_table_options(config, self.options)
        self._client: WriteClient | None = None
        #: Called with the instant time right before a table service (compaction, clustering,
        #: clean) completes; an exception stops the completion and the instant stays inflight,
        #: to be run again later. The daemon sets it to check that its claim still holds.
        self.completion_check: Callable[[str], None] | None = None
        #: Entered with the instant time once a table service's completion is underway (past
        #: `completion_check`, holding the table lock) and left when it ended: the daemon defers
        #: a stop that comes inside until the completion is done (`TableContext.completion_scope`).
        self.completion_scope: Callable[[str], AbstractContextManager[None]] | None = None
        #: True while `upgrade` / `downgrade` run: the services they run first build no metadata table.
        self._changing_version = False
        #: The current write's gate built the metadata table of a table without completed instants.
        self._built_for_empty_table = False
        self._properties_before_build: bytes | None = None

    @cached_property
    def services(self) -> TableServices:
        """The table services as namespaces: `table.services.compaction.schedule()`, `.execute(t)`,
        `.pending()` (compaction, clustering, clean, change_tracking, index_build, archival,
        rollback). The flat methods (`schedule_compaction`, `run_compaction`, ...) are aliases.
        Built on first use: the services' modules load then, not when a table opens."""
        return table_services.namespace.TableServices(self)

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str,
        *,
        record_key: str | Sequence[str] | None = None,
        partition_by: str | Sequence[str] | None = None,
        ordering_field: str | None = None,
        table_name: str | None = None,
        table_type: str | None = None,
        key_generator: str | None = None,
        hive_style_partitioning: bool | None = None,
        url_encode_partitions: bool | None = None,
        schema: pa.Schema | None = None,
        options: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, str] | None = None,
        engine: Engine | str | None = None,
        table_version: int | None = None,
    ) -> Table:
        """Create a new, empty table. Keyword arguments win over the equivalent `hoodie.*` options.

        `table_version` (option `hoodie.write.table.version`, as Hudi 1.x's writer takes it): 6
        (the default: Hudi 0.14/0.15, every lakeward feature) or 8 / 9
        (Hudi 1.0.x / 1.1.x: timeline layout 2, Avro commit metadata, logs named by delta
        commit; lakeward writes data to them and runs the table services `TableVersion.services`
        lists on them, all but orphan-file removal; writes and services keep their metadata table
        through the same gate as on version 6, `_writer`).
        Anything else raises UnsupportedTableVersionError.

        `table_type`: "COPY_ON_WRITE" (the default) or "MERGE_ON_READ" (option
        `hoodie.datasource.write.table.type`). Change data capture: options
        `hoodie.table.cdc.enabled=true` and `hoodie.table.cdc.supplemental.logging.mode`
        (KEY_OP, DATA_BEFORE, DATA_BEFORE_AFTER). Raises TableExistsError if a table is
        already there.
        """
        check_no_storage_options(options)
        opts = dict(options or {})
        requested = table_version if table_version is not None else write_table_version(opts)
        version = resolve_table_version(CURRENT.number if requested is None else requested)
        version.check_writes("create a table")
        storage = Storage.for_uri(path, storage_options)
        config = TableConfig.from_options(
            opts,
            base_path=storage.uri,
            record_key=record_key,
            partition_by=partition_by,
            ordering_field=ordering_field,
            table_name=table_name,
            table_type=table_type,
            key_generator=key_generator,
            hive_style_partitioning=hive_style_partitioning,
            url_encode_partitions=url_encode_partitions,
            schema=schema,
            version=version,
        )
        _validate_options(opts)
        keywords = {
            "record_key": record_key,
            "partition_by": partition_by,
            "ordering_field": ordering_field,
            "table_name": table_name,
            "table_type": table_type,
            "key_generator": key_generator,
            "hive_style_partitioning": hive_style_partitioning,
            "url_encode_partitions": url_encode_partitions,
            "table_version": table_version,
        }
        # the keywords win over their options; two options that disagree are refused before anything is written
        opts = {k: v for k, v in opts.items() if k not in _keys_given_as_keywords(keywords)}
        check_table_options(config, opts)
        check_virtual_keys(config)
        if config.key_generator is KeyGeneratorType.TIMESTAMP:  # never store settings every write would refuse
            TimestampPartitioner.from_options(dict(config.keygen_options))
        if storage.exists(PROPERTIES_PATH):
            raise TableExistsError(f"a table already exists at {storage.uri}")
        if storage.is_local:
            try:
                for folder in _init_folders(version):
                    storage.make_dirs(folder)
            except (FileExistsError, NotADirectoryError, OSError) as exc:
                raise StorageError(f"cannot create a table at {storage.uri}: {exc}") from exc
        try:
            storage.create_if_absent(PROPERTIES_PATH, config.to_text().encode())
        except InstantExistsError:
            raise TableExistsError(f"a table already exists at {storage.uri}") from None
        return cls(storage, config, opts, engine)

    @classmethod
    def open(
        cls,
        path: str,
        *,
        options: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, str] | None = None,
        engine: Engine | str | None = None,
    ) -> Table:
        """Open an existing table; raises TableNotFoundError when the path holds none."""
        check_no_storage_options(options)
        storage = Storage.for_uri(path, storage_options)
        try:
            text = storage.read_bytes(PROPERTIES_PATH).decode("utf-8")
        except (FileNotFoundError, NotADirectoryError):  # a StorageError (denied, unreachable) is no answer
            bucket = storage.missing_bucket()
            if bucket is not None:
                raise TableNotFoundError(
                    f"{storage.uri} is not a Hudi table: its bucket {bucket!r} does not exist"
                ) from None
            raise TableNotFoundError(f"{storage.uri} is not a Hudi table: {PROPERTIES_PATH} does not exist") from None
        except UnicodeDecodeError as exc:
            raise CorruptTableError(f"{storage.uri_of(PROPERTIES_PATH)} is not UTF-8 text ({exc})") from None
        return cls(storage, TableConfig.from_text(text), options, engine)

    # -- inspection ----------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.storage.uri

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def version(self) -> TableVersion:
        """The table version's rules (`hoodie.table.version`: 6, 8 or 9)."""
        return self.config.version

    def read_only_reason(self) -> str | None:
        """Why lakeward runs no table service on this table (None: it runs them); `TableVersion.read_only_reason`."""
        return self.version.read_only_reason(metadata_partitions(self.config.to_properties()))

    def timeline(self) -> Timeline:
        """The table's timeline: the active one, plus on table versions 8+ the instants archived
        into the LSM history (`.hoodie/timeline/history/`), so that time travel and incremental
        reads reaching before the active timeline find them (`Instant.is_archived`)."""
        timeline = Timeline.load(self.storage, self.version.timeline_layout)
        if not timeline.instants and not self.version.lsm_history:
            # a version 6 handle of a table upgraded since finds no version 6 instant left: not "no rows"
            check_version_unchanged(self.storage, self.config.table_version, "read the table")
        folder = self.version.history_folder
        return timeline.with_history(self.storage, folder) if folder is not None else timeline

    def service_state(self) -> ServiceState:
        """Pending table-service plans and what accumulated since each service last ran (`ServiceState`).

        Read from the active timeline (what the daemon sees): e.g. `delta_commits_since_compaction`,
        `writes_since_clean`, `pending(Action.CLUSTERING)`.
        """
        timeline = Timeline.load(self.storage, self.version.timeline_layout)
        return table_services.state.service_state(
            timeline, self.version.number, lambda t: clustering_plan_of(self.storage, t, timeline.layout) is not None
        )

    def completed_instants(self) -> list[Instant]:
        """Completed instants of every action, oldest first."""
        return self.timeline().completed()

    def schema(self) -> pa.Schema | None:
        """The table's data schema (without meta columns); None before the first write."""
        return resolve_table_schema(self.storage, self.timeline(), self.config)

    def file_slices(self, as_of: InstantTime | None = None) -> list[FileSlice]:
        timeline = self.timeline()
        # the latest slices need no as-of checks, and so not the read modules (`lakeward show`'s start-up)
        instant = None if as_of is None else read.ranges.resolve_as_of(self.storage, self.config, timeline, as_of)
        view = FileSystemView.load(self.storage, timeline)
        asked = None if as_of is None else normalize_instant_time(as_of, self.config.timeline_timezone)
        return view.snapshot_file_slices(instant, query_time=asked)

    def check(self) -> IntegrityReport:
        """Every damaged or missing data file of the table, in one pass; changes nothing.

        Compares the listing with the commit metadata of completed instants (files missing
        or cut short), reads every base file through and scans and decodes every log file
        (blocks of completed instants that are torn or undecodable). Reads and writes stop
        at the first such problem with a CorruptFileError; this reports them all.
        """
        timeline = self.timeline()
        # a clean killed midway deleted some of its files, which the metadata table still lists
        cleaning = table_services.clean.plan.files_pending_cleans_delete(self.storage, timeline)
        return file_group.integrity.check_table(self.storage, timeline, cleaning)

    # -- writes ---------------------------------------------------------------------------
    def _writer(
        self,
        *,
        write: bool = False,
        service: str | None = None,
        version_change: bool = False,
        build: bool = True,
        gate: bool = True,
    ) -> WriteClient:
        """The write client: every write, table service, rollback and repair goes through it.

        `write`: the caller writes data (insert, upsert, ..., delete_partition), which every
        version lakeward writes allows; everything else (table services, explicit rollbacks,
        repairs, index and CDC changes) is refused (ReadOnlyTableVersionError) on a version where
        lakeward does not run that service yet (`TableVersion.runs_service`), so that no
        version-6-shaped instant is ever written into a Hudi 1.x table. A table with a metadata table
        (`metadata_table.gate`, every version): writes and services keep its `files` partition and the
        index partitions the version keeps (`MetadataTableRules.partitions`: on 6 `record_index`, on
        8/9 also `column_stats`, `partition_stats` and `bloom_filters`); a partition the options
        disable is dropped, and so are secondary indexes unless the options ask to keep them; the rest
        (expression indexes, secondary indexes the options keep, partitions still being built) is
        refused (MetadataTableError). A table written without meta fields (virtual keys) is written
        as Hudi writes it (`keygen.with_virtual_keys`); what Hudi refuses on one
        (`config.table.check_virtual_keys`) is refused (ConfigError), except for `version_change`.
        `build`: False keeps the metadata-table gate from building a missing metadata table.
        `gate`: False for what changes no data, so needs nothing of the metadata table (dry runs,
        savepoints): the metadata-table gate does not run (no metadata table built, partition
        dropped or metadata table deleted); still refused as the service.
        Callers check their request (instants, names) before this: the gate may change the
        table, and a request refused after it would leave the table changed.
        """
        self.check_open()
        if not version_change:  # an upgrade rewrites no records
            check_virtual_keys(self.config)
        # first: the fix a user needs on any version. A rollback or restore builds no metadata table: one built
        # now, as of the latest instant, would list the files they remove (the next write builds it)
        if gate and not write and service not in _GOING_BACK:
            # before a service plans on the table: on a half-restored one it would merge writes the restore
            # is undoing (a compaction, newer than the restore, kept their rows). Writes finish it as they
            # begin (`WriteClient.write`).
            self._finish_interrupted_restore()
        if gate:
            self._metadata_table_gate(build=build and service not in _GOING_BACK)
        if write:
            self.version.check_writes("write to this table")
        else:
            self.version.check_writable(f"run {service or 'this'} on the table", service)
        if self._client is None:
            self._client = write_path.client.WriteClient(self.storage, self.config, self.options, self.engine)
        self._client.completion_check = self.completion_check
        self._client.completion_scope = self.completion_scope
        return self._client

    def _finish_interrupted_restore(self) -> None:
        """Finish a restore that stopped midway (refused where lakeward does not run restores)."""
        if not table_services.savepoint.pending_restores(Timeline.load(self.storage, self.version.timeline_layout)):
            return
        self.version.check_writable("finish the interrupted restore of the table", "restore")
        self._client = self._client or write_path.client.WriteClient(
            self.storage, self.config, self.options, self.engine
        )
        if self._client.finish_interrupted_restores():
            self._reload()

    def _metadata_table_gate(self, *, build: bool = True) -> None:
        """The write path's one metadata-table check, before any write or table service.

        With `hoodie.metadata.enable=false` among the table's options the metadata table is deleted
        first, under the table lock, as Hudi's writer does (`lakeward.core.metadata_table.disable`).
        Otherwise (the default, as in Hudi since 0.11) a table without one gets it first
        (`_build_metadata_table`, unless `build` is False), and lakeward keeps it on every commit;
        partitions it cannot maintain yet are dropped when this writer disables them (secondary
        indexes unless it asks to keep them), else refused (`metadata_table.gate`). A metadata
        table of another table version than its data table's (an upgrade or downgrade that died
        between the two switches) is deleted first, as Hudi's upgrade deletes a metadata table it
        cannot use (`UpgradeDowngradeUtils.checkAndHandleMetadataTable`).
        """
        enabled = metadata_table.disable.metadata_table_enabled(self.options)
        build = build and not self._changing_version
        if not metadata_partitions(self.config.to_properties()) and enabled and build:
            self._build_metadata_table()
        if not metadata_partitions(self.config.to_properties()):
            return
        self._client = self._client or write_path.client.WriteClient(
            self.storage, self.config, self.options, self.engine
        )
        if not enabled or metadata_table.disable.version_mismatch(self.storage) is not None:
            with self._client.lock:
                mismatch = metadata_table.disable.version_mismatch(self.storage)  # again, under the lock
                if not enabled or mismatch is not None:
                    metadata_table.disable.delete_metadata_table(self.storage, reason=mismatch)
            self._reload()
            if enabled and build:
                self._metadata_table_gate()
            return
        self.config = self._client.table_context.config = metadata_table.gate.prepare_metadata_table(
            self.storage, self.config, self._client.write_config, self._client.lock
        )
        self._build_index_partitions_if_enabled()

    def _build_metadata_table(self) -> None:
        """`hoodie.metadata.enable=true` and no metadata table yet: build its `files` partition first, as a
        Hudi writer does (`metadata_table.bootstrap.initialize_for_writer`; every table version)."""
        client = self._client = self._client or write_path.client.WriteClient(
            self.storage, self.config, self.options, self.engine
        )
        with client.lock:
            built_by_another = bool(metadata_partitions(read_table_properties(self.storage)))
            if not built_by_another:
                timeline = client.roll_back_failed_writes()
                completed = timeline.completed()
                self._properties_before_build = None if completed else self.storage.read_bytes(PROPERTIES_PATH)
                try:
                    built = metadata_table.bootstrap.initialize_for_writer(self.storage, self.config, timeline)
                except (InstantExistsError, MetadataTableError):
                    if client.lock_spans_processes:
                        raise
                    # under the lock no metadata table was there: another process built one meanwhile
                    raise SharedLockRequiredError(
                        f"another process built the metadata table of {self.storage.uri} at the same moment: "
                        "several processes write the table under the in-process lock (the default "
                        f"hoodie.write.lock.provider). This write wrote no data. {write_path.client.SHARED_LOCK_ADVICE}"
                    ) from None
        if built_by_another:  # another writer built it meanwhile
            self._reload()
        elif built is not None:
            self._built_for_empty_table = not completed
            self._reload()

    def _build_index_partitions_if_enabled(self) -> None:
        """Build the metadata table's index partitions this writer enables and the table's metadata
        table (with `files`) lacks, as a Hudi writer does on its first commit, in this order:
        `record_index` (`hoodie.metadata.record.index.enable=true` or `hoodie.index.type=RECORD_INDEX`),
        `bloom_filters` (`hoodie.metadata.index.bloom.filter.enable=true`), `column_stats`
        (`hoodie.metadata.index.column.stats.enable=true`) and, on a partitioned table, `partition_stats`
        (with `column_stats` being built unless `hoodie.metadata.index.partition.stats.enable=false`,
        or beside kept ones when it is true); each where the table version's metadata table keeps it
        (`MetadataTableRules.partitions`: v6 only `record_index`). Not while data-table instants are
        pending: the write goes on without them (a warning; a RECORD_INDEX write tags as BLOOM meanwhile)."""
        client = self._client
        if client is None or not self._index_partitions_to_build(metadata_partitions(self.config.to_properties())):
            return
        with client.lock:
            timeline = client.roll_back_failed_writes()
            # Another writer may have built some since this table was opened: what storage says now
            wanted = self._index_partitions_to_build(metadata_partitions(read_table_properties(self.storage)))
            pending = timeline.pending()
            # Hudi's writer skips the builds then, writes, and tries again next time; a RECORD_INDEX
            # write meanwhile tags as BLOOM does, as on any table without the partition (exact, slower)
            if wanted and pending:
                log.warning(
                    "not building the metadata table's index partitions of %s yet: instants are pending (%s); "
                    "the next write tries again%s",
                    self.storage.uri,
                    ", ".join(str(i) for i in pending),
                    "; RECORD_INDEX writes tag as BLOOM until then" if "record_index" in wanted else "",
                )
                return
            for build in wanted.values():
                build(timeline)
        self._reload()

    def _index_partitions_to_build(self, partitions: Collection[str]) -> dict[str, Callable[[Timeline], str]]:
        """The builders of the index partitions this writer enables that a metadata table holding
        `partitions` lacks (`_build_index_partitions_if_enabled`), by partition, in build order."""
        client = self._client
        if client is None or "files" not in partitions:
            return {}
        wc = client.write_config
        builds_columns = wc.metadata_column_stats is True and "column_stats" not in partitions
        builders: dict[str, tuple[bool, Callable[[Timeline], str]]] = {
            "record_index": (
                bool(wc.metadata_record_index) or wc.index_type == "RECORD_INDEX",
                lambda timeline: metadata_table.record_index_writer.initialize_record_index(
                    self.storage, self.config, timeline, min_file_groups=wc.metadata_record_index_min_file_groups
                ),
            ),
            "bloom_filters": (
                bool(wc.metadata_bloom_filters),
                lambda timeline: metadata_table.bloom_filters.initialize_bloom_filters(
                    self.storage, self.config, timeline, file_groups=wc.metadata_bloom_filter_file_groups
                ),
            ),
            "column_stats": (
                wc.metadata_column_stats is True,
                lambda timeline: metadata_table.stats_writer.initialize_column_stats(
                    self.storage, self.config, timeline, column_list=wc.metadata_column_stats_columns
                ),
            ),
            "partition_stats": (
                self.config.is_partitioned
                and wc.metadata_partition_stats is not False
                and (builds_columns or (wc.metadata_partition_stats is True and "column_stats" in partitions)),
                lambda timeline: metadata_table.stats_writer.initialize_partition_stats(
                    self.storage, self.config, timeline
                ),
            ),
        }
        kept = self.config.version.metadata_table.partitions  # what this table version's metadata table keeps
        return {n: b for n, (enabled, b) in builders.items() if enabled and n in kept and n not in partitions}

    def service_context(self, service: str | None = None) -> TableContext:
        """What the table services of this table receive (storage, config, lock, engine, fencing hook).

        `service`: the one service asking (a registry action, `savepoint`, `restore`); None asks
        for all of them. Refused like every table service (ReadOnlyTableVersionError on versions
        where lakeward does not run that service, MetadataTableError, TableClosedError): see `_writer`.
        """
        return self._writer(service=service).table_context

    def check_open(self) -> None:
        """TableClosedError after `close()`: writes and table services need `Table.open()` again."""
        if getattr(self, "_closed", False):
            raise TableClosedError(f"table {self.path} is closed: writes and table services need Table.open() again")

    def preview_context(self, service: str) -> TableContext:
        """What a dry run of `service` (`clean`, `archival`, `restore`) reads: refused as the service
        itself would be on this table version, and changing nothing, not even the metadata table a
        real run first builds (or drops partitions of) by the table's options."""
        return self._writer(service=service, gate=False).table_context

    def close(self) -> None:
        """Give back what the table holds: its lock provider's share of the ZooKeeper client.

        A ZooKeeper lock shares one client per process and ensemble; the last `close()` of
        its users ends the session, so a closed table leaves no connection or thread behind.
        Idempotent. Afterwards writes and table services raise TableClosedError (reads take
        no lock and still work).
        """
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            client.lock.close()

    def __enter__(self) -> Table:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _write(self, data: Any, operation: WriteOperation, engine: Engine | str | None, **kwargs: Any) -> WriteResult:
        """One write operation; a failed first write leaves an empty table as it was: the metadata table its
        gate built for it (nothing committed, nothing listed) is deleted again (`_undo_empty_bootstrap`)."""
        self._built_for_empty_table = False
        client = self._writer(write=True)
        try:
            result = client.write(data, operation, engine=engine, **kwargs)
        except BaseException:
            self._undo_empty_bootstrap()
            raise
        # The write has completed: a failing inline service must not make it look failed (a caller
        # retrying it would write its rows twice). It is logged; the next write, or the daemon, runs it.
        try:
            self._compact_inline()
            self._cluster_inline(client.write_config)
            if client.write_config.clean_automatic:
                self._clean_automatic(client.write_config.clean_max_commits)
        except (LakewardError, OSError) as exc:
            log.error(
                "write %s of %s completed; the inline compaction, clustering or clean after it failed (the next write "
                "or the daemon runs it again): %s",
                result.instant_time,
                self.path,
                exc,
                exc_info=True,
            )
        return result

    def _undo_empty_bootstrap(self) -> None:
        """Delete the metadata table this write's gate built on a table without any completed instant, when
        the write failed and the table still has none (bad input leaves the table exactly as it was)."""
        if not self._built_for_empty_table or self._client is None:
            return
        with self._client.lock:
            if not Timeline.load(self.storage, self.version.timeline_layout).completed():
                metadata_table.disable.delete_metadata_table(self.storage, reason="the first write failed")
                if self._properties_before_build is not None:  # byte for byte as before the build
                    self.storage.write_bytes(PROPERTIES_PATH, self._properties_before_build)
        self._reload()

    def upsert(self, data: Any, *, engine: Engine | str | None = None) -> WriteResult:
        """Insert new records and update existing ones (by record key); returns the instant."""
        return self._write(data, WriteOperation.UPSERT, engine)

    def insert(self, data: Any, *, engine: Engine | str | None = None) -> WriteResult:
        """Insert records without looking up existing keys (duplicates possible), filling small files."""
        return self._write(data, WriteOperation.INSERT, engine)

    def bulk_insert(self, data: Any, *, engine: Engine | str | None = None) -> WriteResult:
        """Insert records into new files only: the fastest initial load."""
        return self._write(data, WriteOperation.BULK_INSERT, engine)

    def delete(
        self, data: Any = None, *, keys: Sequence[Any] | Any = None, engine: Engine | str | None = None
    ) -> WriteResult:
        """Delete records given as rows (record key and partition columns) or as key values.

        `keys` are values of the record key field (one field), or dicts of the record key
        and partition fields; a list of them, or one alone. Unknown keys are ignored.
        """
        if (data is None) == (keys is None):
            raise ConfigError("delete() takes either rows or keys=..., not both or neither")
        if keys is not None:
            one = isinstance(keys, (str, bytes, Mapping)) or not isinstance(keys, Iterable)
            data = self._rows_for_keys([keys] if one else list(keys))
        return self._write(data, WriteOperation.DELETE, engine)

    def insert_overwrite(self, data: Any, *, engine: Engine | str | None = None) -> WriteResult:
        """Replace the partitions present in `data` with its records (a replacecommit)."""
        return self._write(data, WriteOperation.INSERT_OVERWRITE, engine)

    def insert_overwrite_table(self, data: Any, *, engine: Engine | str | None = None) -> WriteResult:
        """Replace the whole table with `data` (a replacecommit)."""
        return self._write(data, WriteOperation.INSERT_OVERWRITE_TABLE, engine)

    def delete_partition(self, partitions: str | Sequence[str], *, engine: Engine | str | None = None) -> WriteResult:
        """Drop whole partitions, given as partition paths (e.g. `city=sf`): a list of them, or one path."""
        listed = [partitions] if isinstance(partitions, str) else list(partitions)
        return self._write(None, WriteOperation.DELETE_PARTITION, engine, partitions=listed)

    def _rows_for_keys(self, keys: Sequence[Any]) -> pa.Table:
        if keys and isinstance(keys[0], Mapping):
            rows = [dict(k) for k in keys]
            names = list(dict.fromkeys(n for r in rows for n in r))
            schema = self.schema()
            if schema is not None and all(n in schema.names for n in names):
                # typed as the table's columns: a None value has no type of its own to infer
                return pa.Table.from_pylist(rows, schema=pa.schema([schema.field(n) for n in names]))
            return pa.Table.from_pylist(rows)
        if len(self.config.record_key_fields) != 1:
            raise ConfigError("keys=[...] needs dicts of field values: the record key has several fields")
        nulls = [i for i, k in enumerate(keys) if k is None]
        if nulls:
            raise InvalidRecordError(
                f"delete(keys=...): the key at position {nulls[0]} is null ({len(nulls)} null key(s) in all); "
                f"a record key ({self.config.record_key_fields[0]!r}) is never null"
            )
        if self.schema() is None:  # no data yet: nothing to delete, an empty delete commit
            fields = (*self.config.record_key_fields, *self.config.partition_fields)
            return pa.table({f: pa.array([], pa.string()) for f in fields})
        current = self.read(columns=[self.config.record_key_fields[0], *self.config.partition_fields], engine="local")
        wanted = pa.array(list(keys)).cast(current.schema.field(0).type)
        # lazy, and already loaded by the read above: opening a table needs no pyarrow.compute (~25 ms of
        # `lakeward show`'s start-up, issue 23)
        import pyarrow.compute as pc

        return current.filter(pc.is_in(current.column(0), value_set=wanted))

    # -- archival --------------------------------------------------------------------------
    def archive(self) -> ArchiveResult:
        """Move old completed instants to `.hoodie/archived/` as Hudi does (`hoodie.keep.min.commits`,
        `hoodie.keep.max.commits`; never past a pending instant, a savepoint or what a clean retains).

        Reads keep working; time travel to an archived instant fails with InstantNotFoundError
        naming the earliest readable instant.
        """
        return self.services.archival.execute()

    # -- compaction (merge-on-read) ---------------------------------------------------------
    def schedule_compaction(self, *, force: bool = False) -> str | None:
        """Plan a compaction of the file slices with log files; returns its instant time, or None.

        None when no compaction is due (fewer than `hoodie.compact.inline.max.delta.commits`
        delta commits since the last one, unless `force=True`), when no slice qualifies
        under `hoodie.compaction.strategy`, or while a write is in flight.
        """
        return self.services.compaction.schedule(force=force)

    def run_compaction(self, instant: str | Instant, *, engine: Engine | str | None = None) -> CompactionResult:
        """Execute a planned compaction (idempotent: re-running a half-done plan completes it)."""
        return self.services.compaction.execute(instant, engine=engine)

    def pending_compactions(self) -> list[str]:
        """Instant times of planned compactions that have not completed, oldest first."""
        return self.services.compaction.pending()

    def _compact_inline(self) -> None:
        """`hoodie.compact.inline=true`: after a write, schedule a compaction when due and run it.

        Inline compaction runs on every version lakeward compacts (6, 8, 9: see
        `TableVersion.runs_service`).
        """
        client = self._writer(write=True)
        if self.config.table_type is not TableType.MERGE_ON_READ or not client.write_config.compact_inline:
            return
        instant = self.services.compaction.schedule()
        if instant is not None:
            self.services.compaction.execute(instant)

    def _cluster_inline(self, config: WriteConfig) -> None:
        """`hoodie.clustering.inline=true`: after a write, plan and run a clustering once
        `hoodie.clustering.inline.max.commits` writes completed since the last replacecommit.
        `config`: the write's own (asking the writer again would read `hoodie.properties` again)."""
        if (
            not config.clustering_inline
            or self.service_state().writes_since_replace < config.clustering_inline_max_commits
        ):
            return
        instant = self.services.clustering.schedule()
        if instant is not None:
            self.services.clustering.execute(instant)

    def _clean_automatic(self, max_commits: int) -> None:
        """`hoodie.clean.automatic=true`: after a write, clean once `max_commits` writes completed since
        the last clean (Hudi's NUM_COMMITS trigger, `hoodie.clean.max.commits`), in the writer's thread."""
        if self.service_state().writes_since_clean >= max_commits:
            self.clean()

    # -- clustering ---------------------------------------------------------------------------
    def schedule_clustering(self) -> str | None:
        """Plan a clustering of small file slices (`hoodie.clustering.plan.strategy.*`); returns its instant, or None.

        None when no partition has small file slices to group, or while a write is in flight.
        Until the plan runs, writes that would update its file groups are rejected.
        """
        return self.services.clustering.schedule()

    def run_clustering(self, instant: str | Instant, *, engine: Engine | str | None = None) -> ClusteringResult:
        """Execute a planned clustering (idempotent: re-running a half-done plan completes it)."""
        return self.services.clustering.execute(instant, engine=engine)

    def pending_clustering(self) -> list[str]:
        """Instant times of planned clusterings that have not completed, oldest first."""
        return self.services.clustering.pending()

    # -- cleaning, savepoints, restore ----------------------------------------------------
    def schedule_clean(self) -> str | None:
        """Plan a clean under `hoodie.cleaner.policy`; returns its instant time, or None when nothing is to be
        deleted (or a clean is already pending: run it with `run_clean`)."""
        return self.services.clean.schedule()

    def run_clean(self, instant: str | Instant) -> CleanResult:
        """Execute a planned clean (idempotent: re-running a half-done clean completes it)."""
        return self.services.clean.execute(instant)

    def clean(self) -> CleanResult | None:
        """Finish pending cleans, then schedule and run a new one; the new clean's result (None: nothing to do)."""
        for pending in self.services.clean.pending():
            self.services.clean.execute(pending)
        instant = self.schedule_clean()
        return self.run_clean(instant) if instant is not None else None

    def pending_cleans(self) -> list[str]:
        """Instant times of planned cleans that have not completed, oldest first."""
        return self.services.clean.pending()

    def savepoint(self, instant: str | Instant, *, user: str | None = None, comment: str = "") -> str:
        """Savepoint a completed write: cleaning keeps its files; `restore` can roll the table back to it."""
        instant = instant_time_of(instant)
        return table_services.savepoint.savepoint(self._savepoint_context(), instant, user, comment)

    def savepoints(self) -> list[str]:
        """Instant times of the table's savepoints, oldest first."""
        return table_services.savepoint.savepoints(self.timeline())

    def delete_savepoint(self, instant: str | Instant) -> None:
        instant = instant_time_of(instant)
        table_services.savepoint.delete_savepoint(self._savepoint_context(), instant)

    def _savepoint_context(self) -> TableContext:
        """Savepoints change no data and the metadata table does not record them: no metadata-table
        gate (it would build a metadata table or drop index partitions for a savepoint)."""
        return self._writer(service="savepoint", gate=False).table_context

    def restore(self, savepoint_instant: str | Instant) -> RestoreResult:
        """Roll the table back to a savepoint: every write and compaction after it is undone (a restore instant)."""
        savepoint_instant = instant_time_of(savepoint_instant)
        table_services.savepoint.check_savepoint(self.storage, self.timeline(), savepoint_instant)  # before the gate
        result = table_services.savepoint.restore(self.service_context("restore"), savepoint_instant)
        self._reload()  # the restore dropped metadata-table index partitions: the next write rebuilds them
        return result

    # -- rollback and plans ----------------------------------------------------------------
    def rollback(self, instant: str | Instant) -> RollbackResult:
        """Undo an instant: a pending write, or the latest completed write or service commit.

        A completed instant can be rolled back only when nothing completed or is pending
        after it, and when it is not savepointed (use `restore` to go back further).
        """
        instant = instant_time_of(instant)
        self._finish_interrupted_restore()  # the target is judged on the table the restore left
        self._rollback_target(self.timeline(), instant)  # checked before the gate, and again under the lock
        client = self._writer(service="rollback")
        with client.lock:
            timeline = client.roll_back_failed_writes(keep=instant)  # this one is undone below, with its result
            target = self._rollback_target(timeline, instant)
            tz = self.config.timeline_timezone
            rollback_time = new_instant_time(timeline.latest_time(), tz)
            if not target.is_completed:
                return table_services.rollback.rollback_pending_instant(self.storage, target, rollback_time, tz)
            return table_services.rollback.rollback_completed_instant(self.storage, target, rollback_time, tz)

    def preview_rollback(self, instant: str | Instant) -> RollbackResult:
        """What `rollback(instant)` would delete now, changing nothing (a dry run; `rollback_instant_time`
        is empty). Checked like the rollback itself, on the timeline as it is (a real rollback first
        rolls back writes whose writer is gone)."""
        instant = instant_time_of(instant)
        self._writer(service="rollback", gate=False)  # refused as the rollback would be; changes nothing
        target = self._rollback_target(self.timeline(), instant)
        return table_services.rollback.RollbackResult(
            "", instant, tuple(table_services.rollback.rollback_files(self.storage, target))
        )

    def _rollback_target(self, timeline: Timeline, instant: str) -> Instant:
        """The instant `rollback(instant)` undoes: a pending write, or the latest completed write (checked)."""
        # a pending clustering is `clustering` on 8+ (a replacecommit, so a write, on 6): its plan too
        pending = [i for i in [*timeline.pending_writes(), *timeline.pending(Action.CLUSTERING)] if i.time == instant]
        if pending:
            return pending[0]
        completed = [i for i in timeline.completed_writes() if i.time == instant]
        if not completed:
            raise InstantNotFoundError(f"no write instant {instant} to roll back in {self.storage.uri}")
        # a completed rollback after it undid another instant and changed nothing else: as in Hudi, which
        # counts only commits after the target, the commits before a rolled-back one can be rolled back
        later = sorted(
            {
                i.time
                for i in timeline.instants
                if i.time > instant and not (i.action is Action.ROLLBACK and i.state is State.COMPLETED)
            }
        )
        if later:
            raise InstantExistsError(
                f"cannot roll back {instant}: instant(s) {later} came after it; roll those back first "
                "or restore a savepoint"
            )
        if instant in table_services.savepoint.savepoints(timeline):
            raise InstantExistsError(f"cannot roll back {instant}: it is savepointed; delete the savepoint first")
        table_services.rollback.check_metadata_rollback(self.storage, instant)
        return completed[0]

    def repair(self) -> list[str]:
        """Finish interrupted restores and rollbacks and roll back writes whose writer is gone; the
        writes rolled back.

        Gone means its heartbeat file stopped being refreshed (LAZY failed-writes policy). A
        pending write without a heartbeat file is left alone: its writer may still be running.
        """
        return list(self.services.rollback.execute().rolled_back)

    def pending_plans(self) -> list[Instant]:
        """Every pending instant: writes in flight and planned services (compaction, clustering, clean, ...)."""
        return self.timeline().pending()

    def initialize_metadata_table(self) -> MetadataTableInit | None:
        """Create the metadata table with its `files` partition (every table version), from a listing
        as of the latest completed instant, as Hudi does when it enables it on an existing table
        (`lakeward.core.metadata_table.bootstrap`; Hudi 0.14/0.15's layout on version 6). Every
        later commit keeps it; readers list files through it on versions 8 and 9.

        Writers build it by themselves before their first commit (`hoodie.metadata.enable` defaults to
        true); this builds it now: None when the table has one already (nothing is written),
        MetadataTableError while other instants are pending (Hudi's rule)."""
        client = self._writer(write=True, build=False)
        if metadata_partitions(self.config.to_properties()):
            self._metadata_table_gate()  # the index partitions this handle enables, if missing
            return None
        with client.lock:
            timeline = client.roll_back_failed_writes()
            result = metadata_table.bootstrap.initialize_metadata_table(self.storage, self.config, timeline=timeline)
        self.config, self._client = TableConfig.from_text(self.storage.read_bytes(PROPERTIES_PATH).decode()), None
        self._metadata_table_gate()  # the index partitions too (record_index, bloom_filters), when enabled
        return result

    # -- table version ---------------------------------------------------------------------
    def upgrade(self, to: int) -> UpgradeResult:
        """Upgrade the table to version `to` (8 or 9) as Apache Hudi's upgrade handlers do
        (`lakeward.core.table_services.upgrade`), under the table lock; lakeward never changes a version by itself.

        First, as Hudi: failed writes are rolled back and on merge-on-read tables every file slice
        with log files is compacted (an `UnBoundedCompactionStrategy` compaction); pending compaction,
        clustering and clean plans are run to completion first, since their plans were made under the
        old version's rules. A write still in flight, or another pending action (restore, index
        build, change tracking), refuses the upgrade (UpgradeError) before anything is written, as
        does a downgrade, version 7, CDC or lakeward secondary indexes (the upgrade does not carry them
        over, although lakeward writes both on tables created at 8 or 9).
        A metadata table is upgraded with it, as Hudi's `UpgradeDowngrade` upgrades the metadata table
        first (`upgrade_metadata_table`); `hoodie.metadata.enable=false` deletes it first instead.

        Crash-safe and resumable: run it again after a crash and it finishes the job; readers see the
        old version until the one atomic switch of `hoodie.properties`. Upgrading to the version the
        table has is a no-op (it only removes version 6 timeline files a crashed run left behind).
        """
        table_services.upgrade.check_target(self.version.number, to)
        if to != self.version.number:  # before the metadata-table gate, which may delete the metadata table
            table_services.upgrade.check_upgradable(self.storage, self.config)
        return self._change_version(
            lambda client, config: table_services.upgrade.upgrade_locked(client, self.services, config, to), to
        )

    def downgrade(self, to: int) -> UpgradeResult:
        """Downgrade the table to version `to` where lakeward runs Apache Hudi's downgrade handler: 9 -> 8
        (`NineToEightDowngradeHandler`: failed writes rolled back and log files compacted first, then the
        payload class and `hoodie.table.precombine.field` back in `hoodie.properties`, one atomic switch).
        Other downgrades are refused (UpgradeError naming Hudi's handlers for them) before anything is written.
        """
        table_services.upgrade.check_downgrade(self.version.number, to)
        return self._change_version(
            lambda client, config: table_services.upgrade.downgrade_locked(client, self.services, config, to), to
        )

    def _change_version(self, change: Callable[[WriteClient, TableConfig], UpgradeResult], to: int) -> UpgradeResult:
        """Run an upgrade or downgrade to version `to` under the table lock, on the properties as they are on
        storage then (another process may have changed the version meanwhile); this handle reloads afterwards.
        A metadata table changes version with its data table (`upgrade.upgrade_metadata_table`); none is
        built for the change (the next write builds one of the new version). A change to the version the
        table has (a no-op, or the end of a crashed upgrade) runs the metadata-table gate only to delete a
        metadata table left at the other version: it drops no index partition."""
        same = to == self.version.number and metadata_table.disable.version_mismatch(self.storage) is None
        client = self._writer(write=True, version_change=True, build=False, gate=not same)
        self._changing_version = True  # the services the change runs first build no metadata table either
        try:
            with client.lock:
                on_disk = TableConfig.from_text(self.storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
                result = change(client, on_disk)
        finally:
            self._changing_version = False
        self._reload()
        return result

    def _reload(self) -> None:
        """Read `hoodie.properties` again and drop the write client (it holds the old version's rules)."""
        self.config = TableConfig.from_text(self.storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
        client, self._client = self._client, None
        if client is not None:
            client.lock.close()

    # -- change data capture ---------------------------------------------------------------
    def enable_cdc(self, mode: str | SupplementalLoggingMode = SupplementalLoggingMode.DATA_BEFORE_AFTER) -> None:
        """Switch change data capture on for an existing table (or change its logging mode).

        Writes from now on persist their changes; CDC queries can begin at the latest
        instant on the timeline now, not before (earlier changes were never captured).
        Stop other writers first, or they keep writing without change data until reopened.
        """
        chosen = SupplementalLoggingMode.parse(mode)
        with self._writer(service="change_tracking").lock:
            current = TableConfig.from_text(self.storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
            if current.cdc_enabled and current.cdc_mode is chosen:
                self.config = current
                return
            since = current.cdc_since if current.cdc_enabled else self.timeline().latest_time()
            updated = replace(current, cdc_enabled=True, cdc_mode=chosen, cdc_since=since)
            backup = PROPERTIES_PATH + ".backup"
            self.storage.write_bytes(backup, current.to_text().encode())
            self.storage.write_bytes(PROPERTIES_PATH, updated.to_text().encode())
            self.storage.delete_file(backup)
        self.config = updated
        self._client = None

    def read_changes(
        self,
        begin: InstantTime,
        end: InstantTime | None = None,
        *,
        images: Images = "json",
        engine: Engine | str | None = None,
    ) -> pa.Table:
        """Every change (insert, update, delete) of the completed commits in (begin, end], oldest first.

        Columns `op` (`i`/`u`/`d`), `ts_ms` (the commit's instant time), `before`, `after`
        (images without `_hoodie_*` columns: JSON strings, or typed structs with
        `images="struct"`). `begin` is exclusive and must be a completed, active (not
        archived), retained (not cleaned) instant after CDC was enabled, or "earliest"
        (also "000"); `end` defaults to the latest completed instant. On table versions 8+
        the range is in completion time (the commits that completed in it, whatever their
        `ts_ms`: a range that begins at a write's instant time holds that write), as in
        Hudi 1.x and `read_incremental`; on version 6 in instant time. The per-file-group
        work runs on `engine` (local threads, or Spark tasks); the result is Arrow.
        """
        return self._run_once_more_if_moved(
            lambda: self.scan(query_type=read.scan.QueryType.CDC, begin=begin, end=end, images=images, engine=engine),
            read.scan.Scan.to_arrow,
        )

    def poll_changes(
        self, after: InstantTime = "earliest", *, images: Images = "json", engine: Engine | str | None = None
    ) -> tuple[pa.Table, str]:
        """The changes of the commits completed since position `after`, and the position to poll from next.

        For a consumer that polls: `changes, position = table.poll_changes(position)` delivers
        every commit once, none twice, whatever completes meanwhile. The position is the end of
        the range read: the latest completed write after which no earlier write is still in flight
        (on versions 8+ a completion time, on version 6 an instant time: what `read_changes` ranges
        are in); the commits of a write in flight come in a later poll, once it completed. Keep
        the position to resume after a restart. `after` is a position this returned, or
        "earliest" (the errors are `read_changes`'s).
        """
        timeline, begin, _, _ = self.change_range(after)
        end = read.incremental.latest_stable_instant(timeline, begin, self.storage)
        return self.read_changes(begin, end, images=images, engine=engine), end

    def change_range(
        self, begin: InstantTime | None, end: InstantTime | None = None
    ) -> tuple[Timeline, str, str | None, pa.Schema | None]:
        """Check a CDC range as every CDC surface does: (timeline, begin, end, table schema).

        `begin` resolved ("earliest"), `end` stopped before writes still in flight; raises
        ConfigError / InstantNotFoundError naming the problem (see `read_changes`).
        """
        timeline = self.timeline()
        start, stop = read.ranges.change_range(self.storage, self.config, timeline, begin, end)
        return timeline, start, stop, resolve_table_schema(self.storage, timeline, self.config)

    def schedule_change_tracking(self) -> str | None:
        """Plan persisting the changes of delta commits that have none yet (MERGE_ON_READ with CDC).

        Returns the plan's instant time, or None when every delta commit's changes are
        persisted already (or planned).
        """
        return self.services.change_tracking.schedule()

    def run_change_tracking(
        self, instant: str | Instant, *, engine: Engine | str | None = None
    ) -> ChangeTrackingResult:
        """Execute a change-tracking plan (idempotent: re-running a half-done plan completes it)."""
        return self.services.change_tracking.execute(instant, engine=engine)

    def pending_change_tracking(self) -> list[str]:
        """Instant times of change-tracking plans that have not completed, oldest first."""
        return self.services.change_tracking.pending()

    # -- secondary indexes ------------------------------------------------------------------
    def create_index(
        self,
        name: str,
        columns: str | Sequence[str],
        index_type: str = "bitmap",
        options: Mapping[str, Any] | None = None,
    ) -> IndexDefinition:
        """Define a secondary index (`bitmap`: exact value index; `text`: full-text words) on `columns`.

        Options: `auto_build` (compaction and clustering index the files they write),
        `max_selectivity`, `max_in_values`. The index files are written by index builds
        (`schedule_index_build` + `run_index_build`); until then reads scan as before.
        """
        return index.secondary.api.create_index(
            self.service_context("index_build"), self.schema(), name, columns, index_type, options
        )

    def drop_index(self, name: str) -> list[str]:
        """Remove an index and its files (IndexNotFoundError for an unknown name); the files removed."""
        index.secondary.definitions.find_definition(self.indexes(), name)  # before the gate
        return index.secondary.api.drop_index(self.service_context("index_build"), name)

    def indexes(self) -> list[IndexDefinition]:
        """The table's secondary index definitions."""
        return index.secondary.definitions.load_definitions(self.storage)

    def index_status(self) -> IndexStatus:
        """Which latest base files each index covers, which not yet, pending builds and index sizes."""
        return index.secondary.api.index_status(self.storage, self.timeline())

    def schedule_index_build(
        self, strategy: str = "INCREMENTAL", indexes: str | Sequence[str] | None = None
    ) -> str | None:
        """Plan an index build (`<t>.indexing.requested`); None when every base file is indexed.

        `INCREMENTAL`: base files without an index file yet; `ALL`: rebuild every latest base file.
        `indexes`: the index names to build (a list, or one name); None: every index.
        """
        chosen = [indexes] if isinstance(indexes, str) else indexes
        return self.services.index_build.schedule(strategy=strategy, indexes=chosen)

    def run_index_build(self, instant: str | Instant, *, engine: Engine | str | None = None) -> IndexBuildResult:
        """Execute a planned index build (idempotent: re-running a half-done build completes it)."""
        return self.services.index_build.execute(instant, engine=engine)

    def build_indexes(
        self, strategy: str = "INCREMENTAL", *, engine: Engine | str | None = None
    ) -> IndexBuildResult | None:
        """Finish pending index builds (one that died midway: its base files are left out of new plans),
        then schedule a new one and run it. The last build's result; None when nothing needed indexing."""
        result = None
        for pending in self.pending_index_builds():
            log.info("finishing the pending index build %s of %s", pending, self.path)
            result = self.run_index_build(pending, engine=engine)
        instant = self.schedule_index_build(strategy)
        return self.run_index_build(instant, engine=engine) if instant is not None else result

    def pending_index_builds(self) -> list[str]:
        """Instant times of planned index builds that have not completed, oldest first."""
        return self.services.index_build.pending()

    def rollback_index_build(self, instant: str | Instant) -> RollbackResult:
        """Undo a pending index build (a rollback instant); its index files are removed."""
        instant_time = instant_time_of(instant)
        table_services.index_build.execute.pending_index_build(self.timeline(), instant_time)  # before the gate
        return table_services.index_build.rollback_index_build(self.service_context("index_build"), instant_time)

    def explain(
        self,
        filters: Filters = None,
        *,
        as_of: InstantTime | None = None,
        read_optimized: bool = False,
    ) -> ScanExplain:
        """How `read(filters=...)` would read each file slice: through an index or by scanning, and why
        (and which slices partition pruning rules out)."""
        query = read.scan.QueryType.READ_OPTIMIZED if read_optimized else None
        return self.scan(query_type=query, filters=filters, as_of=as_of).explain()

    # -- reads ----------------------------------------------------------------------------
    def scan(
        self,
        *,
        query_type: QueryType | str | None = None,
        columns: str | Sequence[str] | None = None,
        filters: Filters = None,
        as_of: InstantTime | None = None,
        begin: InstantTime | None = None,
        end: InstantTime | None = None,
        images: Images = "json",
        engine: Engine | str | None = None,
        use_index: bool = True,
    ) -> Scan:
        """One read of the table, to plan (`plan()`), run (`to_arrow()`, `to_spark(spark)`) or `explain()`.

        `query_type`: "snapshot" (default; "time_travel" when `as_of` is given),
        "read_optimized", "time_travel" (`as_of`), "incremental" (`begin`, `end`) or "cdc"
        (`begin`, `end`, `images`). The scan sees the timeline as it is now.
        """
        chosen = self._read_engine(engine)
        query = read.scan.QueryType.parse(query_type) if query_type is not None else read.scan.QueryType.SNAPSHOT
        return read.scan.Scan(
            self.storage,
            self.config,
            self.timeline(),
            query,
            columns=columns,
            filters=filters,
            as_of=as_of,
            begin=begin,
            end=end,
            images=images,
            engine=chosen,
            use_index=use_index,
        )

    def _read_engine(self, engine: Engine | str | None) -> Engine:
        return resolve_engine(engine, default=resolve_engine(self.engine) if self.engine is not None else None)

    @staticmethod
    def _run(scan: Scan) -> Any:
        """A scan's rows on its engine: a Spark DataFrame on the Spark engine, else Arrow."""
        if scan.engine.name == "spark":
            return scan.to_spark(scan.engine.spark)  # type: ignore[attr-defined]
        return scan.to_arrow()

    def read(
        self,
        as_of: InstantTime | None = None,
        columns: str | Sequence[str] | None = None,
        filters: Filters = None,
        *,
        read_optimized: bool = False,
        engine: Engine | str | None = None,
    ) -> Any:
        """Snapshot of the table (latest, or as of a completed instant or a timestamp).

        A pyarrow Table on the local engine; a Spark DataFrame on the Spark engine.
        `read_optimized=True` reads base files only (merge-on-read tables: no log merging).
        """
        query = read.scan.QueryType.READ_OPTIMIZED if read_optimized else None
        return self._run_once_more_if_moved(
            lambda: self.scan(query_type=query, as_of=as_of, columns=columns, filters=filters, engine=engine)
        )

    def _run_once_more_if_moved(self, make_scan: Callable[[], Scan], run: Callable[[Scan], Any] | None = None) -> Any:
        """Run a scan; run a new one once if a file it listed went while it ran and the timeline moved.

        On version 6 a write in flight has its log listed with the committed ones, and its rollback
        deletes it; a clean removes older slices; an archival moves the instant files a range reads
        (on 8+ they are read from the LSM history instead). With the timeline unchanged the file is
        lost: the error stands. Spark plans are not run again (their tasks may have run already).
        """
        run = run or self._run
        scan = make_scan()
        try:
            return run(scan)
        except (MissingFileError, FileNotFoundError):
            if scan.engine.name == "spark" or self.timeline().files == scan.timeline.files:
                raise
            log.info("a file %s listed was removed while it was read (rollback, clean, archival): reading again", self)
            return run(make_scan())

    def incremental_range(
        self, begin: str | dt.datetime, end: str | dt.datetime | None = None
    ) -> tuple[Timeline, IncrementalRange]:
        """Resolve an incremental range (begin, end] as every incremental surface does.

        Times normalised in the timeline's time zone, the end moved before a write still in
        flight (an explicit end past one is an InstantNotFoundError), the range checked
        against what cleans retained; on table versions 8+ the range is in completion time.
        """
        timeline = self.timeline()
        return timeline, read.ranges.incremental_range(self.storage, self.config, timeline, begin, end)

    def read_incremental(
        self,
        begin: InstantTime,
        end: InstantTime | None = None,
        columns: str | Sequence[str] | None = None,
        filters: Filters = None,
        *,
        engine: Engine | str | None = None,
    ) -> Any:
        """Latest state of records changed by completed writes in (begin, end] (Arrow, or Spark on Spark).

        On table versions 8+ the range is in completion time (the writes that completed in
        it), as in Hudi 1.x; on version 6 in commit time.
        """
        return self._run_once_more_if_moved(
            lambda: self.scan(
                query_type=read.scan.QueryType.INCREMENTAL,
                begin=begin,
                end=end,
                columns=columns,
                filters=filters,
                engine=engine,
            )
        )
