"""Table-level configuration: what `.hoodie/hoodie.properties` holds (table version 6)."""

from __future__ import annotations

import datetime as dt
import posixpath
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from lakeward.core.config.cdc import (
    CDC_ENABLED_KEY,
    CDC_MODE_KEY,
    CDC_SINCE_KEY,
    SupplementalLoggingMode,
)
from lakeward.core.config.properties import format_properties, parse_properties
from lakeward.core.config.values import parse_bool, parse_fields
from lakeward.core.exceptions import ConfigError, CorruptTableError
from lakeward.core.schema import avro_schema_json
from lakeward.core.storage import Storage
from lakeward.core.table_version import CURRENT, METAFOLDER, TableVersion, table_version

if TYPE_CHECKING:
    import pyarrow as pa

#: The version lakeward creates tables with (see `lakeward.core.table_version`).
TABLE_VERSION = CURRENT.number
TIMELINE_LAYOUT_VERSION = int(CURRENT.timeline_layout)
CHECKSUM_KEY = "hoodie.table.checksum"
#: The table's properties file, relative to its base path.
PROPERTIES_PATH = posixpath.join(METAFOLDER, "hoodie.properties")
#: Merge modes of table versions 8+ (`hoodie.record.merge.mode`) and the payload class with
#: the same semantics, which is what lakeward merges by.
MERGE_MODE_KEY = "hoodie.record.merge.mode"
#: `hoodie.record.merge.strategy.id` (table version 8): Hudi's ids of its built-in strategies.
MERGE_STRATEGY_ID_KEY = "hoodie.record.merge.strategy.id"
EVENT_TIME_STRATEGY_ID = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY_ID = "ce9acb64-bde0-424c-9b91-f6ebba25356d"


class TableType(str, Enum):
    COPY_ON_WRITE = "COPY_ON_WRITE"
    MERGE_ON_READ = "MERGE_ON_READ"

    @classmethod
    def parse(cls, value: str, key: str = "hoodie.table.type") -> TableType:
        normalized = value.strip().upper().replace("-", "_")
        aliases = {"COW": cls.COPY_ON_WRITE, "MOR": cls.MERGE_ON_READ}
        if normalized in aliases:
            return aliases[normalized]
        try:
            return cls(normalized)
        except ValueError:
            raise ConfigError(f"{key}={value!r} is not a table type; use COPY_ON_WRITE or MERGE_ON_READ") from None


class KeyGeneratorType(str, Enum):
    """Key generators, by the short name Hudi's `hoodie.datasource.write.keygenerator.type` uses."""

    SIMPLE = "org.apache.hudi.keygen.SimpleKeyGenerator"
    COMPLEX = "org.apache.hudi.keygen.ComplexKeyGenerator"
    NON_PARTITION = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
    TIMESTAMP = "org.apache.hudi.keygen.TimestampBasedKeyGenerator"

    @classmethod
    def parse(cls, value: str, key: str = "hoodie.table.keygenerator.class") -> KeyGeneratorType:
        v = value.strip()
        by_short = {m.name: m for m in cls} | {"NONPARTITIONED": cls.NON_PARTITION}
        by_class = {m.value: m for m in cls}
        # Older Spark writers record Spark-specific subclasses, Hudi's Flink writer the Avro ones
        # (`SimpleAvroKeyGenerator` by default); the keys and partition paths are the same.
        spark = v.replace("org.apache.hudi.keygen.Spark", "org.apache.hudi.keygen.")
        avro = v.replace("AvroKeyGenerator", "KeyGenerator") if v.startswith("org.apache.hudi.keygen.") else v
        if v.upper() in by_short:
            return by_short[v.upper()]
        for name in (v, spark, avro):
            if name in by_class:
                return by_class[name]
        raise ConfigError(
            f"{key}={value!r} is not a supported key generator; use one of "
            f"{sorted(m.name for m in cls)} or their Hudi class names"
        )


OVERWRITE_WITH_LATEST_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
SUPPORTED_PAYLOADS = (OVERWRITE_WITH_LATEST_PAYLOAD, DEFAULT_PAYLOAD)
#: `hoodie.compaction.record.merger.strategy`, which Hudi 0.14/0.15 records for merge-on-read
#: tables; the value is its default (event-time) strategy id. Readers decide by the payload
#: class first (hudi-rs too), so it is informational.
MERGER_STRATEGY_KEY = "hoodie.compaction.record.merger.strategy"
DEFAULT_MERGER_STRATEGY = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
#: `hoodie.table.initial.version` (table versions 8+): the version a table was created with.
INITIAL_VERSION_KEY = "hoodie.table.initial.version"
#: `hoodie.populate.meta.fields`: false makes a virtual-key table (no `_hoodie_*` values stored).
POPULATE_META_FIELDS_KEY = "hoodie.populate.meta.fields"
#: How a ComplexKeyGenerator over one record key field stores its keys (HUDI-7001): `FIELD_PREFIXED`
#: (`id:k1`, Hudi 0.14.0 and older, 0.14.1+ by default) or `VALUE_ONLY` (`k1`, what Hudi 0.14.1 to
#: 1.0.2 wrote with `hoodie.write.complex.keygen.new.encoding`). Hudi records it in `hoodie.properties`.
COMPLEX_KEYGEN_ENCODING_KEY = "hoodie.table.complex.keygen.encoding"
COMPLEX_KEYGEN_ENCODINGS = ("FIELD_PREFIXED", "VALUE_ONLY")

TIMESTAMP_KEYGEN_KEYS = (
    "hoodie.keygen.timebased.timestamp.type",
    "hoodie.keygen.timebased.input.dateformat",
    "hoodie.keygen.timebased.input.dateformat.list.delimiter.regex",
    "hoodie.keygen.timebased.output.dateformat",
    "hoodie.keygen.timebased.timezone",
    "hoodie.keygen.timebased.input.timezone",
    "hoodie.keygen.timebased.output.timezone",
    "hoodie.keygen.timebased.timestamp.scalar.time.unit",
)


def table_checksum(database: str, table_name: str) -> int:
    """Hudi's `hoodie.table.checksum`: CRC-32 of `<database>.<table>`."""
    return zlib.crc32(f"{database}.{table_name}".encode())


def validate_checksum(props: Mapping[str, str], source: str = "hoodie.properties") -> None:
    """Check `hoodie.table.checksum` as Hudi does when it loads table properties.

    The checksum is the unsigned CRC-32 of UTF-8 `<hoodie.database.name>.<hoodie.table.name>`
    (database "" when absent). A mismatch means the file was edited or damaged (or is not
    the table's): CorruptTableError naming both values. Tables written before Hudi 0.10
    carry no checksum and are accepted.
    """
    stored = props.get(CHECKSUM_KEY)
    if stored is None:
        return
    expected = table_checksum(props.get("hoodie.database.name", ""), props.get("hoodie.table.name", ""))
    if stored.strip() != str(expected):
        raise CorruptTableError(
            f"{source}: {CHECKSUM_KEY}={stored} does not match the table name "
            f"(CRC-32 of {props.get('hoodie.database.name', '')!r}.{props.get('hoodie.table.name', '')!r} "
            f"is {expected}); the file was modified or is damaged"
        )


def update_table_properties(storage: Storage, updates: Mapping[str, str], remove: Iterable[str] = ()) -> dict[str, str]:
    """Set `updates` (and drop the keys `remove`) in the table's `hoodie.properties`, keeping every other
    key as it is; the new properties.

    As Hudi's `HoodieTableConfig.modify`/`update`: the current file is saved as
    `hoodie.properties.backup` first (readers fall back to it), then the file is replaced in one step
    (an atomic rename on local disks, one PUT on object stores, so readers see the old or the new
    file), then the backup is deleted.
    """
    current = storage.read_bytes(PROPERTIES_PATH)
    props = parse_properties(current.decode("utf-8"))
    validate_checksum(props)
    props.update(updates)
    for key in remove:
        props.pop(key, None)
    backup = PROPERTIES_PATH + ".backup"
    storage.write_bytes(backup, current)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    storage.write_bytes(PROPERTIES_PATH, format_properties(props, f"Updated at {now}").encode())
    storage.delete_file(backup)
    return props


def _payload_for(props: Mapping[str, str]) -> str:
    """The payload class whose merging matches the table's (v6/v8 payload, or v9 merge mode)."""
    payload = props.get("hoodie.compaction.payload.class") or props.get("hoodie.table.legacy.payload.class")
    if payload:
        return payload
    mode = props.get(MERGE_MODE_KEY)
    if mode is None or mode == "COMMIT_TIME_ORDERING":
        return OVERWRITE_WITH_LATEST_PAYLOAD
    if mode == "EVENT_TIME_ORDERING":
        return DEFAULT_PAYLOAD
    raise CorruptTableError(f"{MERGE_MODE_KEY}={mode} is not supported; lakeward merges by event or commit time")


#: The merge modes a table can be created with, and the payload class that merges the same way.
MERGE_MODE_PAYLOADS = {"EVENT_TIME_ORDERING": DEFAULT_PAYLOAD, "COMMIT_TIME_ORDERING": OVERWRITE_WITH_LATEST_PAYLOAD}
#: Hudi 1.x's writer key for the merge mode (`hoodie.record.merge.mode` is the table's).
WRITE_MERGE_MODE_KEY = "hoodie.write.record.merge.mode"
PAYLOAD_OPTION_KEY = "hoodie.datasource.write.payload.class"


def _merge_options(opts: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(payload class, merge mode) that the options ask for (None: not given); ConfigError for a value
    lakeward cannot merge by, or for a payload and a mode that merge differently."""
    payload = opts.get(PAYLOAD_OPTION_KEY)
    if payload is not None and str(payload).strip() not in SUPPORTED_PAYLOADS:
        raise ConfigError(
            f"{PAYLOAD_OPTION_KEY}={payload!r} is not supported; "
            f"use {OVERWRITE_WITH_LATEST_PAYLOAD} or {DEFAULT_PAYLOAD}"
        )
    mode: str | None = None
    for key in (MERGE_MODE_KEY, WRITE_MERGE_MODE_KEY):
        value = opts.get(key)
        if value is None:
            continue
        value = str(value).strip().upper()
        if value not in MERGE_MODE_PAYLOADS:
            raise ConfigError(
                f"{key}={opts[key]!r} is not supported; use one of {sorted(MERGE_MODE_PAYLOADS)} "
                "(lakeward merges by event time or by commit time, not by a custom merger)"
            )
        if mode is not None and value != mode:
            raise ConfigError(f"{MERGE_MODE_KEY} and {WRITE_MERGE_MODE_KEY} disagree ({mode} and {value})")
        mode = value
    payload = None if payload is None else str(payload).strip()
    if payload is not None and mode is not None and MERGE_MODE_PAYLOADS[mode] != payload:
        raise ConfigError(f"{PAYLOAD_OPTION_KEY}={payload} merges differently from {MERGE_MODE_KEY}={mode}")
    return payload, mode


def _payload_of_new_table(opts: Mapping[str, Any], ordering: str | None, version: TableVersion) -> str:
    """The payload class (merging) of a new table: the one the options name, else Hudi's default for
    the version: event-time ordering when the table has an ordering field on versions 8+ (Hudi 1.x's
    `HoodieTableConfig` infers EVENT_TIME_ORDERING from a precombine field), the latest write
    winning otherwise (Hudi 0.x's OverwriteWithLatestAvroPayload)."""
    payload, mode = _merge_options(opts)
    if mode == "EVENT_TIME_ORDERING" and not ordering:
        raise ConfigError(
            f"{MERGE_MODE_KEY}=EVENT_TIME_ORDERING needs an ordering field "
            "(ordering_field= or hoodie.datasource.write.precombine.field)"
        )
    if payload is None and mode is not None:
        payload = MERGE_MODE_PAYLOADS[mode]
    if payload is None:
        payload = DEFAULT_PAYLOAD if ordering and version.merge_mode_property else OVERWRITE_WITH_LATEST_PAYLOAD
    return payload


@dataclass(frozen=True)
class TableConfig:
    """The persisted, immutable-after-create properties of a table."""

    name: str
    table_type: TableType
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...] = ()
    precombine_field: str | None = None
    key_generator: KeyGeneratorType = KeyGeneratorType.SIMPLE
    hive_style_partitioning: bool = False
    url_encode_partitions: bool = False
    database: str = "default"
    create_schema: str | None = None
    payload_class: str = OVERWRITE_WITH_LATEST_PAYLOAD
    archive_folder: str = "archived"
    timeline_timezone: str = "LOCAL"
    keygen_options: Mapping[str, str] = field(default_factory=dict)
    #: `hoodie.table.cdc.enabled`: writers persist change data (see `config.cdc`).
    cdc_enabled: bool = False
    cdc_mode: SupplementalLoggingMode = SupplementalLoggingMode.DATA_BEFORE_AFTER
    #: CDC switched on for an existing table: the latest instant then (queries begin there).
    cdc_since: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    #: `hoodie.table.version` (see `lakeward.core.table_version`).
    table_version: int = TABLE_VERSION

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "=:#!\\ /"):
            raise ConfigError(f"hoodie.table.name={self.name!r} must be a plain identifier")
        if not self.record_key_fields:
            raise ConfigError("hoodie.table.recordkey.fields must name at least one column")
        if self.payload_class not in SUPPORTED_PAYLOADS:
            raise ConfigError(
                f"hoodie.compaction.payload.class={self.payload_class!r} is not supported; "
                f"use one of {list(SUPPORTED_PAYLOADS)}"
            )
        kg = self.key_generator
        if kg is KeyGeneratorType.NON_PARTITION and self.partition_fields:
            raise ConfigError("hoodie.table.partition.fields must be empty with NonpartitionedKeyGenerator")
        if kg is KeyGeneratorType.SIMPLE and (len(self.record_key_fields) > 1 or len(self.partition_fields) > 1):
            raise ConfigError(
                "SimpleKeyGenerator takes one record key field and at most one partition field; "
                "use ComplexKeyGenerator (hoodie.table.keygenerator.class) for several"
            )
        if kg is KeyGeneratorType.TIMESTAMP and len(self.partition_fields) != 1:
            raise ConfigError("TimestampBasedKeyGenerator needs exactly one partition field")
        encoding = self.extra.get(COMPLEX_KEYGEN_ENCODING_KEY)
        if encoding is not None and encoding.strip().upper() not in COMPLEX_KEYGEN_ENCODINGS:
            raise ConfigError(
                f"{COMPLEX_KEYGEN_ENCODING_KEY}={encoding!r} is not a key encoding; use one of "
                f"{list(COMPLEX_KEYGEN_ENCODINGS)}"
            )
        if self.timeline_timezone.upper() not in ("LOCAL", "UTC"):
            raise ConfigError(f"hoodie.table.timeline.timezone={self.timeline_timezone!r} must be LOCAL or UTC")

    @property
    def is_partitioned(self) -> bool:
        return bool(self.partition_fields) and self.key_generator is not KeyGeneratorType.NON_PARTITION

    @property
    def complex_key_encoding_recorded(self) -> bool:
        """Whether `hoodie.properties` says how single-field complex keys are stored."""
        return COMPLEX_KEYGEN_ENCODING_KEY in self.extra

    @property
    def single_complex_key_value_only(self) -> bool:
        """Whether a ComplexKeyGenerator over one record key field stores the bare value (`k1`)
        rather than `id:k1`: the table records `hoodie.table.complex.keygen.encoding=VALUE_ONLY`."""
        encoding = self.extra.get(COMPLEX_KEYGEN_ENCODING_KEY, "FIELD_PREFIXED").strip().upper()
        return (
            self.key_generator is KeyGeneratorType.COMPLEX
            and len(self.record_key_fields) == 1
            and encoding == "VALUE_ONLY"
        )

    @property
    def populate_meta_fields(self) -> bool:
        """`hoodie.populate.meta.fields`: false when writers left the `_hoodie_*` columns empty.

        Readers then return the data columns only (as Hudi and hudi-rs do), and incremental
        reads cannot filter rows by `_hoodie_commit_time`.
        """
        return self.extra.get(POPULATE_META_FIELDS_KEY, "true").lower() != "false"

    @property
    def virtual_keys(self) -> TableConfig | None:
        """This config when the table stores no meta fields (record keys are made from its key
        fields by `core.keygen`), else None: the form key readers take."""
        return None if self.populate_meta_fields else self

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Refuse writer options that contradict the table's own `hoodie.properties` where a table
        cannot change after creation: `hoodie.populate.meta.fields` (a writer that fills, or
        leaves empty, the `_hoodie_*` columns against the table's files would mix both kinds), and
        the merging (payload class, merge mode), which every writer and reader of the table must
        share."""
        payload, mode = _merge_options(options)
        asked = payload or (MERGE_MODE_PAYLOADS[mode] if mode else None)
        if asked is not None and asked != self.payload_class:
            key = PAYLOAD_OPTION_KEY if payload else MERGE_MODE_KEY
            raise ConfigError(
                f"{key}={payload or mode} in the options, but the table merges with {self.payload_class} "
                "(hoodie.properties): a table's merging is fixed when it is created; drop the option"
            )
        if POPULATE_META_FIELDS_KEY not in options:
            return
        wanted = parse_bool(options[POPULATE_META_FIELDS_KEY], POPULATE_META_FIELDS_KEY)
        if wanted != self.populate_meta_fields:
            raise ConfigError(
                f"{POPULATE_META_FIELDS_KEY}={str(wanted).lower()} in the options, but the table's "
                f"hoodie.properties has {POPULATE_META_FIELDS_KEY}={str(self.populate_meta_fields).lower()}: "
                "it is fixed when a table is created; drop the option"
            )

    @property
    def virtual_key_field(self) -> str | None:
        """The data column that holds the record key of a virtual-key table's records, else None.

        A table written without meta fields stores no `_hoodie_record_key`: readers derive it
        from the key generator's fields. Merging log records (merge-on-read) reads it from one
        field, which is why Hudi allows only the simple key generator on merge-on-read
        virtual-key tables (`check_virtual_keys`).
        """
        if self.populate_meta_fields or len(self.record_key_fields) != 1:
            return None
        prefixed = self.key_generator is KeyGeneratorType.COMPLEX and not self.single_complex_key_value_only
        return None if prefixed else self.record_key_fields[0]

    @property
    def version(self) -> TableVersion:
        """What the table's version means on disk (timeline layout, naming, slicing rules)."""
        return table_version(self.table_version)

    @property
    def checksum(self) -> int:
        return table_checksum(self.database, self.name)

    def with_create_schema(self, schema_json: str) -> TableConfig:
        return replace(self, create_schema=schema_json)

    # -- (de)serialisation -----------------------------------------------------------------
    def to_properties(self) -> dict[str, str]:
        props = {
            "hoodie.table.name": self.name,
            "hoodie.database.name": self.database,
            "hoodie.table.type": self.table_type.value,
            "hoodie.table.version": str(self.table_version),
            "hoodie.timeline.layout.version": str(int(self.version.timeline_layout)),
            "hoodie.table.recordkey.fields": ",".join(self.record_key_fields),
        }
        version = self.version
        if self.partition_fields:
            props["hoodie.table.partition.fields"] = ",".join(self.partition_fields)
        if self.precombine_field:
            props[version.ordering_property] = self.precombine_field
        keygen = self.key_generator.value if version.keygen_property.endswith(".class") else self.key_generator.name
        props |= {
            version.keygen_property: keygen,
            "hoodie.datasource.write.hive_style_partitioning": str(self.hive_style_partitioning).lower(),
            "hoodie.datasource.write.partitionpath.urlencode": str(self.url_encode_partitions).lower(),
            "hoodie.datasource.write.drop.partition.columns": "false",
            "hoodie.archivelog.folder": self.archive_folder,
        }
        if version.payload_property:
            props["hoodie.compaction.payload.class"] = self.payload_class
        if version.merge_mode_property:
            event_time = self.payload_class == DEFAULT_PAYLOAD
            props[MERGE_MODE_KEY] = "EVENT_TIME_ORDERING" if event_time else "COMMIT_TIME_ORDERING"
            props["hoodie.timeline.path"] = "timeline"
            props["hoodie.timeline.history.path"] = "history"
            if version.merge_strategy_property:
                props[MERGE_STRATEGY_ID_KEY] = EVENT_TIME_STRATEGY_ID if event_time else COMMIT_TIME_STRATEGY_ID
        if version.table_format_property:
            props["hoodie.table.format"] = "native"
        if self.timeline_timezone.upper() != "LOCAL":
            props["hoodie.table.timeline.timezone"] = self.timeline_timezone.upper()
        if self.create_schema:
            props["hoodie.table.create.schema"] = self.create_schema
        props |= dict(self.keygen_options)
        if self.cdc_enabled:
            props[CDC_ENABLED_KEY] = "true"
            props[CDC_MODE_KEY] = self.cdc_mode.value
            if self.cdc_since:
                props[CDC_SINCE_KEY] = self.cdc_since
        props |= dict(self.extra)
        props["hoodie.table.checksum"] = str(self.checksum)
        return props

    def to_text(self) -> str:
        return format_properties(self.to_properties(), "Properties saved by lakeward")

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, Any],
        *,
        base_path: str,
        record_key: str | Sequence[str] | None = None,
        partition_by: str | Sequence[str] | None = None,
        ordering_field: str | None = None,
        table_name: str | None = None,
        table_type: str | None = None,
        key_generator: str | None = None,
        hive_style_partitioning: bool | None = None,
        url_encode_partitions: bool | None = None,
        schema: pa.Schema | None = None,
        version: TableVersion = CURRENT,
    ) -> TableConfig:
        """The config of a new table from its write options (`hoodie.datasource.write.*`, ...).

        Keyword arguments win over the equivalent `hoodie.*` options (what `Table.create`
        takes); the name defaults to `base_path`'s last segment, the key generator to the one
        the record key and partition fields call for. Raises ConfigError naming the key of
        the first bad value.
        """
        opts = options
        name = table_name or opts.get("hoodie.table.name") or opts.get("hoodie.datasource.write.table.name")
        if not name:
            name = posixpath.basename(base_path.rstrip("/")) or "table"
            name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        record_fields = parse_fields(record_key or opts.get("hoodie.datasource.write.recordkey.field"))
        partition_fields = parse_fields(partition_by or opts.get("hoodie.datasource.write.partitionpath.field"))
        typed = [f for f in partition_fields if ":" in f]
        if typed:  # stored as given, it made a table hudi-rs refuses (no column of that name)
            raise ConfigError(
                f"partition field(s) {typed} use CustomKeyGenerator's `field:TYPE` form, which lakeward does not "
                f"write; name the column alone (partition_by={typed[0].split(':', 1)[0]!r}), with "
                "key_generator='TIMESTAMP' and the hoodie.keygen.timebased.* options for a time-based partition"
            )
        ordering = ordering_field or opts.get("hoodie.datasource.write.precombine.field") or None
        kg_value = (
            key_generator
            or opts.get("hoodie.datasource.write.keygenerator.class")
            or opts.get("hoodie.datasource.write.keygenerator.type")
        )
        if kg_value:
            kg = KeyGeneratorType.parse(str(kg_value), "hoodie.datasource.write.keygenerator.class")
        elif not partition_fields:
            kg = KeyGeneratorType.NON_PARTITION
        elif len(record_fields) == 1 and len(partition_fields) == 1:
            kg = KeyGeneratorType.SIMPLE
        else:
            kg = KeyGeneratorType.COMPLEX
        payload = _payload_of_new_table(opts, ordering, version)
        hive_key, urlencode_key = (
            "hoodie.datasource.write.hive_style_partitioning",
            "hoodie.datasource.write.partitionpath.urlencode",
        )
        config = cls(
            name=str(name),
            table_type=TableType.parse(
                str(
                    table_type
                    or opts.get("hoodie.datasource.write.table.type")
                    or opts.get("hoodie.table.type")
                    or TableType.COPY_ON_WRITE.value
                ),
                "table_type" if table_type else "hoodie.datasource.write.table.type",
            ),
            record_key_fields=record_fields,
            partition_fields=partition_fields,
            precombine_field=ordering,
            key_generator=kg,
            hive_style_partitioning=(
                hive_style_partitioning
                if hive_style_partitioning is not None
                else parse_bool(opts.get(hive_key, False), hive_key)
            ),
            url_encode_partitions=(
                url_encode_partitions
                if url_encode_partitions is not None
                else parse_bool(opts.get(urlencode_key, False), urlencode_key)
            ),
            database=str(opts.get("hoodie.database.name", "default")),
            payload_class=str(payload),
            timeline_timezone=str(opts.get("hoodie.table.timeline.timezone", "LOCAL")).upper(),
            keygen_options={k: str(v) for k, v in opts.items() if k in TIMESTAMP_KEYGEN_KEYS},
            cdc_enabled=parse_bool(opts.get(CDC_ENABLED_KEY, False), CDC_ENABLED_KEY),
            cdc_mode=SupplementalLoggingMode.parse(opts.get(CDC_MODE_KEY, SupplementalLoggingMode.DATA_BEFORE_AFTER)),
            table_version=version.number,
        )
        if COMPLEX_KEYGEN_ENCODING_KEY in opts:
            encoding = str(opts[COMPLEX_KEYGEN_ENCODING_KEY]).strip().upper()
            config = replace(config, extra={**config.extra, COMPLEX_KEYGEN_ENCODING_KEY: encoding})
        if not parse_bool(opts.get(POPULATE_META_FIELDS_KEY, True), POPULATE_META_FIELDS_KEY):
            # virtual keys: writers leave the `_hoodie_*` columns empty (`lakeward.core.keygen.with_virtual_keys`)
            config = replace(config, extra={**config.extra, POPULATE_META_FIELDS_KEY: "false"})
        if version.lsm_history:
            # As Hudi 1.x records it: the version the table was created with, kept across upgrades.
            config = replace(config, extra={**config.extra, INITIAL_VERSION_KEY: str(version.number)})
        elif config.table_type is TableType.MERGE_ON_READ:
            # As Hudi 0.14/0.15 records it for merge-on-read tables (format doc 1.2).
            config = replace(config, extra={**config.extra, MERGER_STRATEGY_KEY: DEFAULT_MERGER_STRATEGY})
        if schema is not None:
            needed = (*record_fields, *partition_fields, *([ordering] if ordering else []))
            missing = [f for f in needed if f not in schema.names]
            if missing:
                raise ConfigError(f"schema lacks the record key / partition / ordering column(s) {missing}")
            config = config.with_create_schema(avro_schema_json(schema, config.name, null_first=False))
        return config

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TableConfig:
        """Build from `hoodie.properties` content written by lakeward or Apache Hudi."""
        for required in ("hoodie.table.name", "hoodie.table.type"):
            if required not in props:
                raise CorruptTableError(f"hoodie.properties lacks required key {required}")
        version = table_version(props.get("hoodie.table.version", "6"))
        validate_checksum(props)
        # v8+ may suffix custom-keygen partition fields with their type (`f:SIMPLE`).
        partition_fields = tuple(f.split(":", 1)[0] for f in parse_fields(props.get("hoodie.table.partition.fields")))
        kg_value = props.get("hoodie.table.keygenerator.class") or props.get("hoodie.table.keygenerator.type")
        if kg_value:
            key_generator = KeyGeneratorType.parse(kg_value)
        else:
            record_keys = parse_fields(props.get("hoodie.table.recordkey.fields"))
            key_generator = (
                KeyGeneratorType.NON_PARTITION
                if not partition_fields
                else KeyGeneratorType.SIMPLE
                if len(record_keys) == 1 and len(partition_fields) == 1
                else KeyGeneratorType.COMPLEX
            )
        known = {
            "hoodie.table.name",
            "hoodie.database.name",
            "hoodie.table.type",
            "hoodie.table.version",
            "hoodie.timeline.layout.version",
            "hoodie.table.recordkey.fields",
            "hoodie.table.partition.fields",
            "hoodie.table.precombine.field",
            "hoodie.table.keygenerator.class",
            "hoodie.table.keygenerator.type",
            "hoodie.table.ordering.fields",
            "hoodie.datasource.write.hive_style_partitioning",
            "hoodie.datasource.write.partitionpath.urlencode",
            "hoodie.datasource.write.drop.partition.columns",
            "hoodie.archivelog.folder",
            "hoodie.compaction.payload.class",
            "hoodie.table.timeline.timezone",
            "hoodie.table.create.schema",
            "hoodie.table.checksum",
            CDC_ENABLED_KEY,
            CDC_MODE_KEY,
            CDC_SINCE_KEY,
        }
        if props.get("hoodie.datasource.write.drop.partition.columns", "false") == "true":
            raise CorruptTableError("hoodie.datasource.write.drop.partition.columns=true is not supported")
        try:
            return cls(
                name=props["hoodie.table.name"],
                table_type=TableType.parse(props["hoodie.table.type"]),
                record_key_fields=parse_fields(props.get("hoodie.table.recordkey.fields")),
                partition_fields=partition_fields,
                precombine_field=(
                    props.get("hoodie.table.precombine.field")
                    or (props.get("hoodie.table.ordering.fields") or "").split(",")[0]
                    or None
                ),
                key_generator=key_generator,
                hive_style_partitioning=parse_bool(
                    props.get("hoodie.datasource.write.hive_style_partitioning", "false"),
                    "hoodie.datasource.write.hive_style_partitioning",
                    exact=True,
                ),
                url_encode_partitions=parse_bool(
                    props.get("hoodie.datasource.write.partitionpath.urlencode", "false"),
                    "hoodie.datasource.write.partitionpath.urlencode",
                    exact=True,
                ),
                database=props.get("hoodie.database.name", ""),
                create_schema=props.get("hoodie.table.create.schema"),
                payload_class=_payload_for(props),
                archive_folder=props.get("hoodie.archivelog.folder", "archived"),
                timeline_timezone=props.get("hoodie.table.timeline.timezone", "LOCAL"),
                keygen_options={k: v for k, v in props.items() if k in TIMESTAMP_KEYGEN_KEYS},
                cdc_enabled=parse_bool(props.get(CDC_ENABLED_KEY, "false"), CDC_ENABLED_KEY, exact=True),
                cdc_mode=SupplementalLoggingMode.parse(props.get(CDC_MODE_KEY, "DATA_BEFORE_AFTER")),
                cdc_since=props.get(CDC_SINCE_KEY) or None,
                extra={k: v for k, v in props.items() if k not in known and k not in TIMESTAMP_KEYGEN_KEYS},
                table_version=version.number,
            )
        except ConfigError as exc:
            raise CorruptTableError(f"hoodie.properties: {exc}") from exc

    @classmethod
    def from_text(cls, text: str) -> TableConfig:
        return cls.from_properties(parse_properties(text))


def check_virtual_keys(config: TableConfig) -> None:
    """Refuse what Hudi refuses on virtual-key tables (`hoodie.populate.meta.fields=false`):
    merge-on-read tables with any key generator but the simple one (log records are merged
    by one key field), and change data capture (which needs the stored meta fields)."""
    if config.populate_meta_fields:
        return
    if config.table_type is TableType.MERGE_ON_READ and config.virtual_key_field is None:
        raise ConfigError(
            "hoodie.populate.meta.fields=false on a MERGE_ON_READ table needs the simple key generator "
            f"(one record key field, not {list(config.record_key_fields)} with {config.key_generator.value}), "
            "as in Apache Hudi: use COPY_ON_WRITE, or keep the meta fields"
        )
    if config.cdc_enabled:
        raise ConfigError(
            "hoodie.table.cdc.enabled=true needs the meta fields: Apache Hudi does not support change data "
            "capture with hoodie.populate.meta.fields=false"
        )
