"""Write options: Apache Hudi's documented `hoodie.*` keys, validated, with their defaults.

Options arrive as a flat `{key: value}` mapping (strings or Python values, as from a
Spark `.option(...)` call). Unknown `hoodie.*` and `lakeward.*` keys and bad values fail fast
with a ConfigError naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from lakeward.core.config.cdc import CDC_ENABLED_KEY, CDC_MODE_KEY, SupplementalLoggingMode
from lakeward.core.config.table import (
    COMPLEX_KEYGEN_ENCODING_KEY,
    MERGE_MODE_KEY,
    POPULATE_META_FIELDS_KEY,
    TIMESTAMP_KEYGEN_KEYS,
    WRITE_MERGE_MODE_KEY,
    KeyGeneratorType,
    TableConfig,
    TableType,
)
from lakeward.core.config.values import JAVA_INT_MAX, parse_bool, parse_fields
from lakeward.core.exceptions import ConfigError, did_you_mean

#: lakeward's own table options outside `WriteConfig`: orphan removal's age and dry run (the daemon's
#: `orphan_clean` policy passes them; `core/table_services/orphan_clean.py` reads them).
ORPHAN_CLEAN_OLDER_THAN_KEY = "lakeward.orphan_clean.older_than_s"
ORPHAN_CLEAN_DRY_RUN_KEY = "lakeward.orphan_clean.dry_run"
LAKEWARD_SERVICE_KEYS = frozenset({ORPHAN_CLEAN_OLDER_THAN_KEY, ORPHAN_CLEAN_DRY_RUN_KEY})

#: The most file groups a metadata-table index partition gets (Hudi's default
#: `hoodie.metadata.record.index.max.filegroup.count`).
METADATA_FILE_GROUPS_MAX = 10_000

#: Hudi 1.x's writer key for the version of the tables it creates (`Table.create`'s `table_version`).
WRITE_TABLE_VERSION_KEY = "hoodie.write.table.version"

#: Keys read by Table.create (table properties), accepted in write options too.
TABLE_CREATE_KEYS = frozenset(
    {
        WRITE_TABLE_VERSION_KEY,
        MERGE_MODE_KEY,
        WRITE_MERGE_MODE_KEY,
        "hoodie.table.name",
        "hoodie.datasource.write.table.name",
        "hoodie.datasource.write.table.type",
        "hoodie.table.type",
        "hoodie.datasource.write.recordkey.field",
        "hoodie.datasource.write.partitionpath.field",
        "hoodie.datasource.write.precombine.field",
        "hoodie.datasource.write.keygenerator.class",
        "hoodie.datasource.write.keygenerator.type",
        "hoodie.datasource.write.hive_style_partitioning",
        "hoodie.datasource.write.partitionpath.urlencode",
        POPULATE_META_FIELDS_KEY,
        COMPLEX_KEYGEN_ENCODING_KEY,
        "hoodie.database.name",
        "hoodie.table.timeline.timezone",
        "hoodie.keygen.timebased.timestamp.type",
        "hoodie.keygen.timebased.input.dateformat",
        "hoodie.keygen.timebased.input.dateformat.list.delimiter.regex",
        "hoodie.keygen.timebased.output.dateformat",
        "hoodie.keygen.timebased.timezone",
        "hoodie.keygen.timebased.input.timezone",
        "hoodie.keygen.timebased.output.timezone",
        "hoodie.keygen.timebased.timestamp.scalar.time.unit",
        "hoodie.table.cdc.enabled",
        "hoodie.table.cdc.supplemental.logging.mode",
    }
)


#: `lakeward.metadata.compact.deflate.level`'s default: the deflate level of the base HFiles the metadata
#: table's compaction writes. 1, not Java's 6: on 2M record-index keys it compresses in a third of the
#: CPU (1.0 s against 2.9 s, the largest part of the compaction) for files about 21% larger; any level is
#: gzip that Hudi and hudi-rs read (benchmarks/README.md, `mdt_overhead.py`).
DEFAULT_METADATA_COMPACTION_DEFLATE_LEVEL = 1


class WriteConfig(BaseModel):
    """Validated write options. Field aliases are the `hoodie.*` keys users pass."""

    # defer_build: the validator is built on first use, not at import (CLI start-up time)
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True, defer_build=True)

    #: `true` (the default, as in Apache Hudi since 0.11): every write and table service keeps the metadata
    #: table, and builds one first when the table has none; `false`: delete it before writing, as Hudi's writer does.
    metadata_enable: bool = Field(True, alias="hoodie.metadata.enable")
    #: RECORD_INDEX: keys are located through the metadata table's `record_index` partition
    #: (built on first use, as `hoodie.metadata.record.index.enable=true` does).
    index_type: Literal["BLOOM", "SIMPLE", "BUCKET", "RECORD_INDEX"] = Field("BLOOM", alias="hoodie.index.type")
    bucket_num_buckets: int = Field(4, alias="hoodie.bucket.index.num.buckets", gt=0, le=JAVA_INT_MAX)
    bucket_hash_field: str | None = Field(None, alias="hoodie.bucket.index.hash.field")
    bloom_num_entries: int = Field(60000, alias="hoodie.index.bloom.num_entries", gt=0, le=JAVA_INT_MAX)
    bloom_fpp: float = Field(1e-9, alias="hoodie.index.bloom.fpp", gt=0, lt=1)
    bloom_filter_type: Literal["DYNAMIC_V0", "SIMPLE"] = Field("DYNAMIC_V0", alias="hoodie.bloom.index.filter.type")
    bloom_max_entries: int = Field(100000, alias="hoodie.bloom.index.filter.dynamic.max.entries", gt=0, le=JAVA_INT_MAX)
    bloom_prune_by_ranges: bool = Field(True, alias="hoodie.bloom.index.prune.by.ranges")
    #: BLOOM tagging reads the base files' bloom filters from the metadata table's `bloom_filters`
    #: partition (when the table has it) instead of from each file's footer.
    bloom_index_use_metadata: bool = Field(False, alias="hoodie.bloom.index.use.metadata")
    max_file_size: int = Field(120 * 1024 * 1024, alias="hoodie.parquet.max.file.size", gt=0)
    small_file_limit: int = Field(100 * 1024 * 1024, alias="hoodie.parquet.small.file.limit", ge=0)
    #: None: estimated from the batch's Arrow size until commits give a measured average.
    record_size_estimate: int | None = Field(None, alias="hoodie.copyonwrite.record.size.estimate", gt=0)
    compression: Literal["snappy", "gzip", "zstd", "lz4", "brotli", "none", "uncompressed"] = Field(
        "snappy", alias="hoodie.parquet.compression.codec"
    )
    combine_before_insert: bool = Field(False, alias="hoodie.combine.before.insert")
    combine_before_upsert: bool = Field(True, alias="hoodie.combine.before.upsert")
    combine_before_delete: bool = Field(True, alias="hoodie.combine.before.delete")
    #: Refuse writes to a single-field ComplexKeyGenerator table whose stored keys are encoded
    #: otherwise than this writer would key them (Hudi's HUDI-7001 check; see `keygen.is_complex_key`).
    complex_keygen_validation: bool = Field(True, alias="hoodie.write.complex.keygen.validation.enable")
    payload_class: str | None = Field(None, alias="hoodie.datasource.write.payload.class")
    markers_type: Literal["DIRECT"] = Field("DIRECT", alias="hoodie.write.markers.type")
    #: Hudi's EAGER (single writer) / LAZY (multi-writer; forced by optimistic concurrency control).
    #: lakeward rolls back, under both, only pending writes whose writer is gone (core/write/client.py).
    failed_writes_cleaner_policy: Literal["EAGER", "LAZY"] = Field("EAGER", alias="hoodie.cleaner.policy.failed.writes")
    concurrency_mode: Literal["SINGLE_WRITER", "OPTIMISTIC_CONCURRENCY_CONTROL"] = Field(
        "SINGLE_WRITER", alias="hoodie.write.concurrency.mode"
    )
    #: A writer refreshes `.hoodie/.heartbeat/<instant>` this often while its instant is in flight.
    heartbeat_interval_ms: int = Field(60000, alias="hoodie.client.heartbeat.interval_in_ms", gt=0, le=JAVA_INT_MAX)
    #: A heartbeat older than this many intervals (or missing) marks its instant as failed.
    heartbeat_tolerable_misses: int = Field(2, alias="hoodie.client.heartbeat.tolerable.misses", gt=0, le=JAVA_INT_MAX)
    #: Archival: the active timeline keeps at least `min` and at most `max` completed commits.
    keep_min_commits: int = Field(20, alias="hoodie.keep.min.commits", gt=0)
    keep_max_commits: int = Field(30, alias="hoodie.keep.max.commits", gt=0)
    #: Archival: entries per Avro data block of the archive log file.
    archival_batch: int = Field(10, alias="hoodie.commits.archival.batch", gt=0)
    #: Archival on versions 8+: a layer of the LSM history holding this many files is merged into one file
    #: of the next layer (`lsm_writer.compact_and_clean`).
    timeline_compaction_batch: int = Field(10, alias="hoodie.timeline.compaction.batch.size", gt=1, le=JAVA_INT_MAX)
    #: Cleaning: which old file slices a clean removes (see core/table_services/clean).
    cleaner_policy: Literal["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS"] = Field(
        "KEEP_LATEST_COMMITS", alias="hoodie.cleaner.policy"
    )
    #: KEEP_LATEST_COMMITS: every file slice needed to read as of the last N completed commits stays.
    cleaner_commits_retained: int = Field(10, alias="hoodie.cleaner.commits.retained", gt=0)
    #: KEEP_LATEST_FILE_VERSIONS: the latest N file slices of every file group stay.
    cleaner_file_versions_retained: int = Field(3, alias="hoodie.cleaner.fileversions.retained", gt=0)
    #: KEEP_LATEST_BY_HOURS: every file slice needed to read as of the commits of the last N hours stays.
    cleaner_hours_retained: int = Field(24, alias="hoodie.cleaner.hours.retained", gt=0)
    #: Writers clean after their write (once `clean_max_commits` writes completed since the last clean).
    #: Hudi's default is true; lakeward's is false: the daemon, `Table.clean` or the CLI clean.
    clean_automatic: bool = Field(False, alias="hoodie.clean.automatic")
    clean_max_commits: int = Field(1, alias="hoodie.clean.max.commits", gt=0)
    #: Accepted for Hudi jobs' option sets: lakeward plans every clean over every file group, which
    #: deletes the same files as Hudi's incremental planning (it only saves Hudi a listing).
    clean_incremental_mode: bool = Field(True, alias="hoodie.cleaner.incremental.mode")
    parallelism: int | None = Field(None, alias="hoodie.upsert.shuffle.parallelism", gt=0)
    #: Compaction (merge-on-read): schedule and run one after each write when due.
    compact_inline: bool = Field(False, alias="hoodie.compact.inline")
    #: A compaction is due once this many delta commits completed since the last one.
    compact_max_delta_commits: int = Field(5, alias="hoodie.compact.inline.max.delta.commits", gt=0)
    #: Which slices a plan takes: LogFileSizeBasedCompactionStrategy (slices whose logs reach
    #: `hoodie.compaction.logfile.size.threshold`, largest first) or UnBoundedCompactionStrategy (all with logs).
    compaction_strategy: Literal["LogFileSizeBasedCompactionStrategy", "UnBoundedCompactionStrategy"] = Field(
        "LogFileSizeBasedCompactionStrategy", alias="hoodie.compaction.strategy"
    )
    compaction_log_size_threshold: int = Field(0, alias="hoodie.compaction.logfile.size.threshold", ge=0)
    #: Merge-on-read: how data blocks hold their records (Avro, as Hudi's default, or Parquet).
    log_block_format: Literal["avro", "parquet"] = Field("avro", alias="hoodie.logfile.data.block.format")
    #: Merge-on-read: a log file rolls over to the next version past this size (Hudi: 1 GiB).
    log_max_size: int = Field(1024 * 1024 * 1024, alias="hoodie.logfile.max.size", gt=0)
    #: Clustering: file slices whose base file is smaller than this are planned (Hudi: 300 MB).
    clustering_small_file_limit: int = Field(
        300 * 1024 * 1024, alias="hoodie.clustering.plan.strategy.small.file.limit", ge=0
    )
    #: Clustering: the size of the files a clustering writes (a group's output file count is its size / this).
    clustering_target_file_max_bytes: int = Field(
        1024 * 1024 * 1024, alias="hoodie.clustering.plan.strategy.target.file.max.bytes", gt=0
    )
    #: Clustering: the input bytes one group (one task) takes at most (Hudi: 2 GB).
    clustering_max_bytes_per_group: int = Field(
        2 * 1024 * 1024 * 1024, alias="hoodie.clustering.plan.strategy.max.bytes.per.group", gt=0
    )
    #: Clustering: at most this many groups per plan.
    clustering_max_num_groups: int = Field(30, alias="hoodie.clustering.plan.strategy.max.num.groups", gt=0)
    #: Clustering: comma-separated columns the rewritten files are sorted by (none: rows keep their order).
    clustering_sort_columns: str | None = Field(None, alias="hoodie.clustering.plan.strategy.sort.columns")
    #: Clustering after writes: the write that makes one due (`clustering_inline_max_commits` completed
    #: writes since the last replacecommit) plans and runs it, in the writer's thread.
    clustering_inline: bool = Field(False, alias="hoodie.clustering.inline")
    clustering_inline_max_commits: int = Field(4, alias="hoodie.clustering.inline.max.commits", gt=0)
    #: What a write that updates a file group under a pending clustering does: only Hudi's default,
    #: reject it (SparkRejectUpdateStrategy; full class names accepted).
    clustering_updates_strategy: Literal["SparkRejectUpdateStrategy"] = Field(
        "SparkRejectUpdateStrategy", alias="hoodie.clustering.updates.strategy"
    )
    #: Metadata table (v8/v9): lakeward keeps its `files` partition, and `column_stats`,
    #: `partition_stats` and `record_index` when the table has them (built on the first write when
    #: their option is `true`); a partition whose option is `false` is dropped (as a Hudi writer with
    #: it disabled drops it); the index partitions lakeward cannot maintain yet refuse the write
    #: unless disabled.
    metadata_column_stats: bool | None = Field(None, alias="hoodie.metadata.index.column.stats.enable")
    #: The columns a new `column_stats` index covers, comma-separated (unset: the record key, partition
    #: path and commit time meta fields and the first primitive data columns, 32 in all, as Hudi 1.x).
    metadata_column_stats_columns: str | None = Field(None, alias="hoodie.metadata.index.column.stats.column.list")
    metadata_partition_stats: bool | None = Field(None, alias="hoodie.metadata.index.partition.stats.enable")
    metadata_record_index: bool | None = Field(None, alias="hoodie.metadata.record.index.enable")
    #: The fewest file groups a new `record_index` partition gets (Hudi's default 10).
    metadata_record_index_min_file_groups: int = Field(
        10, alias="hoodie.metadata.record.index.min.filegroup.count", gt=0, le=METADATA_FILE_GROUPS_MAX
    )
    #: `true`: keep every base file's bloom filter in the metadata table's `bloom_filters` partition
    #: (built on the first write that enables it); `false` drops an existing one; unset keeps what is there.
    metadata_bloom_filters: bool | None = Field(None, alias="hoodie.metadata.index.bloom.filter.enable")
    #: The file groups a new `bloom_filters` partition gets (Hudi's default 4; fixed afterwards).
    metadata_bloom_filter_file_groups: int = Field(
        4, alias="hoodie.metadata.index.bloom.filter.file.group.count", gt=0, le=METADATA_FILE_GROUPS_MAX
    )
    #: Hudi 1.x secondary indexes (`secondary_index_*` metadata partitions), which lakeward cannot maintain yet:
    #: unset or false drops them before a write or table service (`metadata_table.gate`); true refuses it.
    metadata_secondary_index: bool | None = Field(None, alias="hoodie.metadata.index.secondary.enable")
    #: Metadata table (every table version): its own compaction is planned once this many metadata delta commits
    #: completed since its last compaction (Hudi 1.x's default).
    metadata_compact_max_delta_commits: int = Field(10, alias="hoodie.metadata.compact.max.delta.commits", gt=0)
    #: Metadata table: the deflate level (1-9) of the GZ blocks of the base HFiles its compaction writes
    #: (`DEFAULT_METADATA_COMPACTION_DEFLATE_LEVEL`); 6 is Java's `GZIPOutputStream`, what Hudi's writer uses;
    #: 1 and 2 deflate with ISA-L's igzip (`file_group.deflate`), about 5x faster than zlib's level 1.
    metadata_compact_deflate_level: int = Field(
        DEFAULT_METADATA_COMPACTION_DEFLATE_LEVEL, alias="lakeward.metadata.compact.deflate.level", ge=1, le=9
    )
    #: Metadata table: its clean keeps every file slice needed by its last N completed commits.
    metadata_cleaner_commits_retained: int = Field(20, alias="hoodie.metadata.cleaner.commits.retained", gt=0)

    @field_validator(
        "compression",
        "index_type",
        "bloom_filter_type",
        "markers_type",
        "failed_writes_cleaner_policy",
        "concurrency_mode",
        "log_block_format",
        mode="before",
    )
    @classmethod
    def _normalize_enum(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @field_validator(
        "index_type",
        "bloom_filter_type",
        "markers_type",
        "failed_writes_cleaner_policy",
        "concurrency_mode",
        mode="before",
    )
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("*", mode="before")
    @classmethod
    def _strict_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        """Booleans as every other reader of the options takes them (`parse_bool`: true or false in any
        case); pydantic alone also took `yes`, `on` and `1`, which other checks then refused mid-write."""
        assert info.field_name is not None
        field = cls.model_fields[info.field_name]
        if value is not None and field.annotation in (bool, bool | None):
            return parse_bool(value, field.alias or info.field_name)
        return value

    @model_validator(mode="after")
    def _check_bloom_filter_size(self) -> WriteConfig:
        """Hudi's bloom filter sizing (`num_entries`, `fpp`) must give a bit count within a Java int."""
        bits = math.ceil(self.bloom_num_entries * (-math.log(self.bloom_fpp) / (math.log(2) ** 2)))
        if bits > JAVA_INT_MAX:
            raise ValueError(
                f"hoodie.index.bloom.num_entries={self.bloom_num_entries} with hoodie.index.bloom.fpp="
                f"{self.bloom_fpp} makes a bloom filter of {bits} bits, past Java's int range: lower either"
            )
        return self

    @model_validator(mode="after")
    def _check_archival_bounds(self) -> WriteConfig:
        if self.keep_min_commits >= self.keep_max_commits:
            raise ValueError(
                f"hoodie.keep.min.commits ({self.keep_min_commits}) must be less than "
                f"hoodie.keep.max.commits ({self.keep_max_commits})"
            )
        return self

    @property
    def lazy_failed_writes(self) -> bool:
        """Whether failed writes are found by expired heartbeats (LAZY), as Hudi forces under OCC."""
        return self.failed_writes_cleaner_policy == "LAZY" or self.concurrency_mode == "OPTIMISTIC_CONCURRENCY_CONTROL"

    @field_validator("compaction_strategy", "clustering_updates_strategy", mode="before")
    @classmethod
    def _short_class_name(cls, value: Any) -> Any:
        """Hudi's full class names (org.apache.hudi.table.action.compact.strategy.X) are accepted."""
        return value.strip().rsplit(".", 1)[-1] if isinstance(value, str) else value

    @field_validator("cleaner_policy", mode="before")
    @classmethod
    def _cleaner_policy(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("compression", "log_block_format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


def write_table_version(options: Mapping[str, Any]) -> int | None:
    """The table version `hoodie.write.table.version` asks for (None: not given)."""
    value = options.get(WRITE_TABLE_VERSION_KEY)
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(
            f"option {WRITE_TABLE_VERSION_KEY}={value!r} is invalid: a table version (6, 8 or 9)"
        ) from None


def check_table_options(config: TableConfig, options: Mapping[str, Any]) -> None:
    """Refuse options that name a table property with another value than the table's `hoodie.properties`.

    Table properties are fixed when a table is created: a writer opening the table with another
    record key, partition path, ordering field, key generator, table type, version, partition
    folder naming, merging, time zone or change-data setting would otherwise be silently held to
    the table's own. As Apache Hudi's data source does, a conflict (or a bad value) is a ConfigError
    naming the key, raised when the table is opened, before anything on it changes.
    """
    config.check_options(options)  # merging (payload class, merge mode) and meta fields
    checks: list[tuple[str, Any, Any]] = []
    for key in ("hoodie.table.name", "hoodie.datasource.write.table.name"):
        if key in options:
            checks.append((key, str(options[key]).strip(), config.name))
    for key in ("hoodie.datasource.write.table.type", "hoodie.table.type"):
        if key in options:
            checks.append((key, TableType.parse(str(options[key]), key), config.table_type))
    for key in ("hoodie.datasource.write.keygenerator.class", "hoodie.datasource.write.keygenerator.type"):
        if key in options:
            checks.append((key, KeyGeneratorType.parse(str(options[key]), key), config.key_generator))
    for key, existing_fields in (
        ("hoodie.datasource.write.recordkey.field", config.record_key_fields),
        ("hoodie.datasource.write.partitionpath.field", config.partition_fields),
    ):
        if key in options:
            checks.append((key, parse_fields(str(options[key])), existing_fields))
    if "hoodie.datasource.write.precombine.field" in options:
        ordering = str(options["hoodie.datasource.write.precombine.field"]).strip() or None
        checks.append(("hoodie.datasource.write.precombine.field", ordering, config.precombine_field))
    for key, existing in (
        ("hoodie.datasource.write.hive_style_partitioning", config.hive_style_partitioning),
        ("hoodie.datasource.write.partitionpath.urlencode", config.url_encode_partitions),
    ):
        if key in options:
            checks.append((key, parse_bool(options[key], key), existing))
    for key in TIMESTAMP_KEYGEN_KEYS:
        if key in options:
            checks.append((key, str(options[key]), config.keygen_options.get(key)))
    if "hoodie.table.timeline.timezone" in options:
        zone = str(options["hoodie.table.timeline.timezone"]).strip().upper()
        checks.append(("hoodie.table.timeline.timezone", zone, config.timeline_timezone))
    requested = write_table_version(options)
    if requested is not None and requested != config.version.number:
        raise ConfigError(
            f"{WRITE_TABLE_VERSION_KEY}={options[WRITE_TABLE_VERSION_KEY]!r} conflicts with the existing table, "
            f"which is version {config.version.number}: upgrade it first (Table.upgrade(to={requested}) or "
            f"`lakeward upgrade`)"
        )
    if CDC_ENABLED_KEY in options and parse_bool(options[CDC_ENABLED_KEY], CDC_ENABLED_KEY) != config.cdc_enabled:
        raise ConfigError(
            f"{CDC_ENABLED_KEY}={options[CDC_ENABLED_KEY]!r} conflicts with the existing table, whose value is "
            f"{str(config.cdc_enabled).lower()!r} (table properties are fixed when a table is created; switch "
            "change data capture on with Table.enable_cdc())"
        )
    if CDC_MODE_KEY in options and config.cdc_enabled:
        checks.append((CDC_MODE_KEY, SupplementalLoggingMode.parse(options[CDC_MODE_KEY]), config.cdc_mode))
    for key, given, existing in checks:
        if given != existing:
            shown = ",".join(existing) if isinstance(existing, tuple) else getattr(existing, "value", existing)
            raise ConfigError(
                f"{key}={options[key]!r} conflicts with the existing table, whose value is {shown!r} "
                "(table properties are fixed when a table is created)"
            )


#: Other spellings of write option keys, as Apache Hudi accepts them (its `withAlternatives`): Hudi 1.x
#: documents the cleaner's keys as `hoodie.clean.*`, and 0.x as `hoodie.cleaner.*`.
ALTERNATIVE_KEYS: dict[str, str] = {
    "hoodie.clean.policy": "hoodie.cleaner.policy",
    "hoodie.clean.commits.retained": "hoodie.cleaner.commits.retained",
    "hoodie.clean.fileversions.retained": "hoodie.cleaner.fileversions.retained",
    "hoodie.clean.hours.retained": "hoodie.cleaner.hours.retained",
    "hoodie.clean.failed.writes.policy": "hoodie.cleaner.policy.failed.writes",
}


def _alias_map() -> dict[str, str]:
    return {f.alias: name for name, f in WriteConfig.model_fields.items() if f.alias}


def lakeward_write_keys() -> frozenset[str]:
    """lakeward's own write option keys (`lakeward.*`), for surfaces that refuse other non-Hudi keys."""
    return frozenset(key for key in _alias_map() if key.startswith("lakeward."))


def check_no_storage_options(options: Mapping[str, Any] | None) -> None:
    """Refuse S3 settings (`aws_*`) given as table options: they would be ignored (table options are
    `hoodie.*` and `lakeward.*` keys) and the table reached with the defaults (AWS, no credentials),
    failing far from the cause. They belong in `storage_options`."""
    misplaced = sorted(k for k in (options or {}) if str(k).startswith("aws_"))
    if misplaced:
        raise ConfigError(
            f"{', '.join(misplaced)}: storage settings go in storage_options=, not options= "
            "(table options are hoodie.* and lakeward.* keys; docs/library.md, object stores)"
        )


def parse_write_config(options: Mapping[str, Any] | None, extra_known: frozenset[str] = frozenset()) -> WriteConfig:
    """Validate options; keys outside `hoodie.*` and `lakeward.*` are ignored, unknown ones of those
    two namespaces are errors naming the key (a misspelt option must not be silently dropped)."""
    aliases = _alias_map()
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # canonical key -> the key the options used
    for given, value in (options or {}).items():
        key = ALTERNATIVE_KEYS.get(given, given)
        if key in values and str(values[key]) != str(value):
            raise ConfigError(
                f"options {spelled[key]}={values[key]!r} and {given}={value!r} set one option to two values"
            )
        spelled.setdefault(key, given)
        if key in aliases:
            values[key] = value
        elif key in extra_known or key in TABLE_CREATE_KEYS or key in LAKEWARD_SERVICE_KEYS:
            continue
        elif key.startswith(("hoodie.", "lakeward.")):
            known = [*aliases, *ALTERNATIVE_KEYS, *extra_known, *TABLE_CREATE_KEYS, *LAKEWARD_SERVICE_KEYS]
            raise ConfigError(
                f"unknown option {key!r}{did_you_mean(key, known)} (every supported option: docs/configuration.md)"
            )
    try:
        return WriteConfig.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        if not err["loc"]:  # a check across keys: its message names them
            raise ConfigError(str(err["msg"]).removeprefix("Value error, ")) from None
        field = str(err["loc"][0]) if err["loc"] else "?"
        alias = WriteConfig.model_fields[field].alias if field in WriteConfig.model_fields else None
        key = alias or field
        raise ConfigError(f"option {spelled.get(key, key)}={values.get(str(key))!r} is invalid: {err['msg']}") from None
