"""Generate the reference pages of docs/ from the code, so they cannot drift from it.

- docs/configuration.md: every `hoodie.*` option lakeward accepts (table properties, write and lock
  options from the pydantic models in core, Spark read options) and every daemon setting (from
  `lakeward.services.settings`) with its type, default and environment variable.
- docs/http-api.md: the daemon's HTTP API, from its OpenAPI schema.
- helm/lakeward/values.schema.json: the chart's `settings`, from the daemon's settings model.

    python scripts/gen_docs.py          # rewrite both pages
    python scripts/gen_docs.py --check  # exit 1 when a page is out of date (tests/test_docs.py does this)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from lakeward.core.config.lock import LockConfig
from lakeward.core.config.read import READ_DEFAULTS, READ_KEYS
from lakeward.core.config.write import ALTERNATIVE_KEYS, TABLE_CREATE_KEYS, WriteConfig
from lakeward.services.api.app import create_app
from lakeward.services.daemon import Daemon
from lakeward.services.settings import ENV_PREFIX, DaemonSettings, load_settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: What each option means (the models hold the key, type and default). tests/test_docs.py checks that
#: every key lakeward accepts has an entry here, so a new option cannot go undocumented.
DESCRIPTIONS: dict[str, str] = {
    "as.of.instant": "time travel: read as of this instant time or timestamp",
    "hoodie.bloom.index.filter.dynamic.max.entries": "dynamic filter growth bound",
    "hoodie.bloom.index.filter.type": "or `SIMPLE`",
    "hoodie.bloom.index.prune.by.ranges": "prune files by min/max record key",
    "hoodie.bucket.index.hash.field": (
        "fields hashed into buckets: a subset of the record key fields (others are refused, as by Hudi); "
        "their values are taken from the record key's text, as Hudi 1.x takes them (a complex key's "
        '`__null__` part hashes as null, `__empty__` as "")'
    ),
    "hoodie.bucket.index.num.buckets": "buckets per partition (BUCKET index)",
    "hoodie.cleaner.commits.retained": "commits whose snapshots stay readable",
    "hoodie.clean.automatic": "`true`: a writer cleans after its write once `hoodie.clean.max.commits` writes "
    "completed since the last clean, as Hudi's writers do (Hudi's default is `true`; lakeward leaves cleaning to "
    "the daemon, `Table.clean` and `lakeward clean` unless asked)",
    "hoodie.clean.max.commits": "with `hoodie.clean.automatic`: writes since the last clean that trigger one",
    "hoodie.cleaner.incremental.mode": "accepted for Hudi jobs' option sets; lakeward plans each clean over every "
    "file group, which deletes the same files as Hudi's incremental planning",
    "hoodie.cleaner.fileversions.retained": "slices kept per file group (file-versions policy)",
    "hoodie.cleaner.hours.retained": "hours kept (by-hours policy)",
    "hoodie.cleaner.policy": "or `KEEP_LATEST_FILE_VERSIONS`, `KEEP_LATEST_BY_HOURS`",
    "hoodie.cleaner.policy.failed.writes": "pending writes whose writer is gone (no heartbeat, expired, or process gone) are rolled back by the next write; never a live one",
    "hoodie.client.heartbeat.interval_in_ms": "heartbeat refresh of a writer (both policies)",
    "hoodie.client.heartbeat.tolerable.misses": "missed heartbeats before a pending write counts as failed",
    "hoodie.clustering.inline": "plan and run a clustering after the write that makes one due, in the writer's thread",
    "hoodie.clustering.inline.max.commits": "completed writes since the last replacecommit that make an inline clustering due",
    "hoodie.clustering.plan.strategy.max.bytes.per.group": "input bytes of one clustering group (one task)",
    "hoodie.clustering.plan.strategy.max.num.groups": "clustering groups per plan",
    "hoodie.clustering.plan.strategy.small.file.limit": "clustering takes slices whose base file is smaller",
    "hoodie.clustering.plan.strategy.sort.columns": "columns the clustered files are sorted by",
    "hoodie.clustering.plan.strategy.target.file.max.bytes": "size of the files a clustering writes",
    "hoodie.clustering.updates.strategy": "the only one: updates to file groups under a pending clustering are rejected",
    "hoodie.metadata.index.column.stats.enable": "`true` builds the `column_stats` metadata partition (v8/v9, on a "
    "table with a metadata table: per file and column min, max and null counts, for data skipping) and every "
    "commit keeps it; `false` drops an existing one (and `partition_stats`) before a write; unset: an existing "
    "one is kept",
    "hoodie.metadata.index.column.stats.column.list": "the columns a new `column_stats` partition covers, "
    "comma-separated (unset: the record key, partition path and commit time meta fields and the first primitive "
    "data columns, 32 in all, as Hudi 1.x)",
    "hoodie.metadata.index.partition.stats.enable": "`partition_stats` (per partition and column ranges, built "
    "with `column_stats` on partitioned tables unless `false`) is kept by every commit; `false` drops an "
    "existing one before a write",
    "hoodie.metadata.record.index.enable": "`true` builds the `record_index` metadata partition (every version, on a table "
    "with a metadata table) and every commit keeps it; `false` drops an existing one before a write; unset: an "
    "existing one is kept",
    "hoodie.metadata.record.index.min.filegroup.count": "the fewest file groups a new `record_index` partition gets",
    "hoodie.metadata.index.bloom.filter.enable": "`true` builds the `bloom_filters` metadata partition (v8/v9, on a "
    "table with a metadata table: every base file's bloom filter) and every commit keeps it; `false` drops an "
    "existing one before a write; unset: an existing one is kept",
    "hoodie.metadata.index.bloom.filter.file.group.count": "the file groups a new `bloom_filters` partition gets",
    "hoodie.bloom.index.use.metadata": "BLOOM tagging reads the base files' bloom filters from the metadata "
    "table's `bloom_filters` partition (when the table has it) instead of from their footers",
    "hoodie.metadata.index.secondary.enable": "unset or `false`: a write or table service first drops existing "
    "`secondary_index_*` metadata partitions (and their index definitions), which lakeward cannot maintain yet; "
    "`true`: such a write or service is refused",
    "hoodie.metadata.compact.max.delta.commits": "metadata table (every version): completed metadata delta commits "
    "since its last compaction that make the next one due (Hudi's default; see Metadata table)",
    "lakeward.metadata.compact.deflate.level": "metadata table: deflate level (1-9) of the GZ blocks of the base "
    "HFiles its compaction writes; 1 (the default) compresses in a third of the CPU of Java's 6 for files about "
    "21% larger (benchmarks/README.md, `mdt_overhead.py`); 6 writes blocks byte for byte as Java's GZIPOutputStream; "
    "Hudi and hudi-rs read any level",
    "hoodie.metadata.cleaner.commits.retained": "metadata table (every version): its clean keeps every file slice its last N "
    "completed commits need (Hudi's default)",
    "hoodie.combine.before.delete": "de-duplicate a batch by key",
    "hoodie.combine.before.insert": "de-duplicate a batch by key",
    "hoodie.combine.before.upsert": "de-duplicate a batch by key",
    "hoodie.commits.archival.batch": "archived entries per Avro block",
    "hoodie.timeline.compaction.batch.size": "versions 8+: files of one LSM history layer merged into one of the next, after each archival",
    "hoodie.compact.inline": "schedule (when due) and run a compaction after each write",
    "hoodie.compact.inline.max.delta.commits": "delta commits since the last compaction that make one due",
    "hoodie.compaction.logfile.size.threshold": "log-size strategy: the least log bytes a slice needs to be compacted",
    "hoodie.compaction.strategy": "or `UnBoundedCompactionStrategy` (Hudi class names accepted)",
    "hoodie.copyonwrite.record.size.estimate": "bytes per record for sizing; default: from recent commits, else the batch",
    "hoodie.database.name": "database (part of the checksum)",
    "hoodie.datasource.query.incremental.format": "incremental output: `latest_state` (records) or `cdc` (changes)",
    "hoodie.datasource.query.type": "`snapshot`, `read_optimized` or `incremental`",
    "hoodie.datasource.read.begin.instanttime": "incremental and CDC reads: exclusive begin instant (`earliest` for CDC)",
    "hoodie.datasource.read.end.instanttime": "incremental and CDC reads: inclusive end instant (default: latest)",
    "hoodie.datasource.streaming.startOffset": "streaming reads: `earliest`, `latest` or an instant time",
    "hoodie.datasource.write.hive_style_partitioning": "`field=value` partition folders",
    "hoodie.datasource.write.keygenerator.class": "`SimpleKeyGenerator`, `ComplexKeyGenerator`, `NonpartitionedKeyGenerator`, `TimestampBasedKeyGenerator` (Hudi class names or short names)",
    "hoodie.datasource.write.keygenerator.type": "key generator by short name: `SIMPLE`, `COMPLEX`, `NON_PARTITION`, `TIMESTAMP`",
    "hoodie.datasource.write.partitionpath.field": "partition field(s)",
    "hoodie.datasource.write.partitionpath.urlencode": "escape partition values as Hudi does (`eu/west` → folder `eu%2Fwest`); reads and filters see the original value",
    "hoodie.datasource.write.payload.class": "`DefaultHoodieRecordPayload` keeps a stored record whose ordering value is larger "
    "(event time), `OverwriteWithLatestAvroPayload` lets the latest write win (commit time); default: as "
    "`hoodie.record.merge.mode`",
    "hoodie.record.merge.mode": "`EVENT_TIME_ORDERING` or `COMMIT_TIME_ORDERING`, fixed at create; default: event time on "
    "versions 8/9 with an ordering field, else commit time (docs/library.md, merging)",
    "hoodie.write.record.merge.mode": "Hudi 1.x's writer key for `hoodie.record.merge.mode`",
    "hoodie.datasource.write.precombine.field": "ordering field",
    "hoodie.datasource.write.recordkey.field": "record key field(s), comma separated",
    "hoodie.datasource.write.table.name": "table name",
    "hoodie.datasource.write.table.type": "`COPY_ON_WRITE` or `MERGE_ON_READ` (`Table.create(table_type=...)` wins over it)",
    "hoodie.enable.data.skipping": "push filters down to secondary indexes",
    "hoodie.index.bloom.fpp": "bloom false-positive rate",
    "hoodie.index.bloom.num_entries": "bloom filter sizing",
    "hoodie.index.type": "`BLOOM`, `SIMPLE`, `BUCKET` or `RECORD_INDEX` (the metadata table's `record_index`, "
    "built on first use)",
    "hoodie.keep.max.commits": "archival keeps at least min; archives once over max",
    "hoodie.keep.min.commits": "archival keeps at least min; archives once over max",
    "hoodie.keygen.timebased.input.dateformat": "Joda date patterns (`yyyy-MM-dd'T'HH:mm:ss.SSSZ`), several "
    "separated by the delimiter",
    "hoodie.keygen.timebased.input.dateformat.list.delimiter.regex": "splits the input date formats (default `,`)",
    "hoodie.keygen.timebased.input.timezone": "zone of input dates without an offset (when `timezone` is unset)",
    "hoodie.keygen.timebased.output.dateformat": "Joda date pattern (`yyyy/MM/dd/HH`)",
    "hoodie.keygen.timebased.output.timezone": "zone of the partition path (when `timezone` is unset; else the "
    "parsed date's zone, or UTC)",
    "hoodie.keygen.timebased.timestamp.scalar.time.unit": "unit of `SCALAR` timestamps (`MILLISECONDS`, `SECONDS`, ...)",
    "hoodie.keygen.timebased.timestamp.type": "`UNIX_TIMESTAMP`, `EPOCHMILLISECONDS`, `EPOCHMICROSECONDS`, `SCALAR`, "
    "`DATE_STRING`, `MIXED`",
    "hoodie.keygen.timebased.timezone": "input and output zone of the time-based key generator",
    "hoodie.logfile.data.block.format": "merge-on-read log data blocks: `avro` or `parquet` (Parquet blocks use `hoodie.parquet.compression.codec`)",
    "hoodie.metadata.enable": "`true` (the default, as in Hudi since 0.11): every commit keeps the metadata table, "
    "and a table without one gets its `files` partition (plus the index partitions enabled) before its first "
    "write or table service, once no other instant is pending (every version); `false`: a write (or table "
    "service, upgrade) first deletes the table's metadata table and clears `hoodie.table.metadata.partitions`, "
    "as Hudi's writer does with this option",
    "hoodie.logfile.max.size": "merge-on-read: a write's log blocks roll over to the next log file version past this size",
    "hoodie.parquet.compression.codec": "`snappy`, `gzip`, `zstd`, `lz4`, `brotli`, `none`",
    "hoodie.parquet.max.file.size": "upper bound of a base file",
    "hoodie.parquet.small.file.limit": "files below this receive inserts first",
    "hoodie.populate.meta.fields": "`false`: virtual keys, the `_hoodie_*` columns are written null and keys are "
    'computed from the key fields (see "Tables without meta fields" in library.md)',
    "hoodie.table.cdc.enabled": 'persist change data for CDC queries (see "Change data capture")',
    "hoodie.table.cdc.supplemental.logging.mode": "`KEY_OP` (`OP_KEY_ONLY`), `DATA_BEFORE` or `DATA_BEFORE_AFTER`",
    "hoodie.table.name": "table name",
    "hoodie.table.complex.keygen.encoding": "how a `ComplexKeyGenerator` over one record key field stores keys: "
    "`FIELD_PREFIXED` (`id:k1`) or `VALUE_ONLY` (`k1`, as Hudi 0.14.1 to 1.0.2 could write them, HUDI-7001); "
    "recorded in `hoodie.properties` and honoured by every write",
    "hoodie.write.complex.keygen.validation.enable": "refuse writes to a single-field `ComplexKeyGenerator` table "
    "that records no key encoding and stores its keys otherwise than this writer would (each record would be "
    "stored twice); `false` writes anyway, as in Hudi",
    "hoodie.table.timeline.timezone": "`LOCAL` or `UTC` instant times",
    "hoodie.table.type": "same as `hoodie.datasource.write.table.type`",
    "hoodie.write.table.version": "the version of a new table: `6`, `8` (Hudi 1.0) or `9` (Hudi 1.1), as Hudi 1.x's "
    "writer takes it (`Table.create`'s `table_version` wins); a Spark data source write to an existing table of "
    "another version is refused (upgrade it first)",
    "hoodie.upsert.shuffle.parallelism": "threads of the local engine",
    "hoodie.write.concurrency.mode": "`optimistic_concurrency_control` forces `LAZY` failed-write cleaning",
    "hoodie.write.lock.client.num_retries": "retries of a lock client call",
    "hoodie.write.lock.client.wait_time_ms_between_retry": "wait between lock client retries",
    "hoodie.write.lock.conflict.resolution.strategy": "the only one: concurrent writes conflict when they touch the same file groups",
    "hoodie.write.lock.max_wait_time_ms_between_retry": "longest wait between lock attempts",
    "hoodie.write.lock.num_retries": "attempts to take the table lock",
    "hoodie.write.lock.provider": "`org.apache.hudi.client.transaction.lock.InProcessLockProvider` or `...ZookeeperBasedLockProvider`",
    "hoodie.write.lock.wait_time_ms": "how long to wait for the table lock",
    "hoodie.write.lock.wait_time_ms_between_retry": "first wait between lock attempts (doubles up to the max)",
    "hoodie.write.lock.zookeeper.base_path": "ZooKeeper lock settings",
    "hoodie.write.lock.zookeeper.connection_timeout_ms": "ZooKeeper lock settings",
    "hoodie.write.lock.zookeeper.lock_key": "ZooKeeper lock settings",
    "hoodie.write.lock.zookeeper.port": "ZooKeeper lock settings",
    "hoodie.write.lock.zookeeper.session_timeout_ms": "ZooKeeper lock settings",
    "hoodie.write.lock.zookeeper.url": "ZooKeeper lock settings",
    "hoodie.write.markers.type": "markers under `.hoodie/.temp/<instant>/`",
    "lakeward.cdc.images": "CDC images as `json` strings (Hudi) or typed `struct`s",
}

#: Defaults of table properties (they are parsed from hoodie.properties, not a pydantic model).
TABLE_DEFAULTS: dict[str, str] = {
    "hoodie.table.name": "the folder name",
    "hoodie.datasource.write.table.name": "the folder name",
    "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
    "hoodie.table.type": "COPY_ON_WRITE",
    "hoodie.datasource.write.recordkey.field": "(required)",
    "hoodie.datasource.write.keygenerator.class": "from the fields",
    "hoodie.datasource.write.keygenerator.type": "from the fields",
    "hoodie.datasource.write.hive_style_partitioning": "false",
    "hoodie.datasource.write.partitionpath.urlencode": "false",
    "hoodie.database.name": "default",
    "hoodie.table.timeline.timezone": "LOCAL",
    "hoodie.table.cdc.enabled": "false",
    "hoodie.table.complex.keygen.encoding": "FIELD_PREFIXED",
    "hoodie.table.cdc.supplemental.logging.mode": "DATA_BEFORE_AFTER",
    "hoodie.populate.meta.fields": "true",
    "hoodie.write.table.version": "6",
}


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        optional = type(None) in args
        return " | ".join(names) + (" (optional)" if optional else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}" if args else "map"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if hasattr(value, "value"):
        value = value.value
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def _cell(text: str) -> str:
    """A Markdown table cell: pipes escaped (once), one line."""
    return re.sub(r"(?<!\\)\|", r"\\|", text).replace("\n", " ")


def _model_rows(model: type[BaseModel]) -> list[tuple[str, str, str, str]]:
    rows = []
    for field in model.model_fields.values():
        key = str(field.alias)
        others = [f"`{k}`" for k, canonical in ALTERNATIVE_KEYS.items() if canonical == key]
        meaning = DESCRIPTIONS.get(key, "") + (f" (also spelled {', '.join(others)})" if others else "")
        rows.append((key, _type_name(field.annotation), _default(field), meaning))
    return sorted(rows)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for row in rows:
        first, *rest = row
        lines.append("| " + " | ".join([f"`{first}`", *(_cell(c) if c else "" for c in rest)]) + " |")
    return lines


def _settings_rows(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str, str]]:
    rows: list[tuple[str, str, str, str, str]] = []
    doc = (model.__doc__ or "").strip().split("\n")[0]
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        env = ENV_PREFIX + key.upper().replace(".", "__")
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows.extend(_settings_rows(annotation, f"{key}."))
            continue
        args = typing.get_args(annotation)
        item = args[0] if typing.get_origin(annotation) is list and args else None
        value = args[1] if typing.get_origin(annotation) is dict and len(args) == 2 else None
        description = field.description or doc
        if isinstance(item, type) and issubclass(item, BaseModel):
            rows.append((key, f"list of {item.__name__}", "[]", env + " (JSON)", description))
            rows.extend(_settings_rows(item, f"{key}[]."))
            continue
        if isinstance(value, type) and issubclass(value, BaseModel):
            rows.append((key, f"map of name to {value.__name__}", "{}", env + " (JSON)", description))
            continue
        rows.append((key, _type_name(annotation), _default(field), env if "[]" not in key else "", description))
    return rows


def configuration_markdown() -> str:
    write_keys = {str(f.alias) for f in WriteConfig.model_fields.values()}
    table_rows = sorted(
        (k, "string", TABLE_DEFAULTS.get(k, "none"), DESCRIPTIONS.get(k, ""))
        for k in TABLE_CREATE_KEYS
        if k not in write_keys
    )
    read_rows = sorted((k, "string", READ_DEFAULTS.get(k, "none"), DESCRIPTIONS.get(k, "")) for k in READ_KEYS)
    header = ("key", "type", "default", "meaning")
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/gen_docs.py from the code: do not edit by hand. -->",
        "",
        "Options use Apache Hudi's documented names. Pass them as `options={...}` to `Table.create` /",
        "`Table.open`, as `.option(...)` to the Spark data source, or as `-o KEY=VALUE` to the CLI.",
        "An unknown `hoodie.*` or `lakeward.*` key or a bad value fails at once with a `ConfigError` that names the key",
        "(and the closest known keys).",
        "",
        "## Table properties",
        "",
        "Set when the table is created; stored in `.hoodie/hoodie.properties`.",
        "",
        *_table(header, table_rows),
        "",
        "## Write options",
        "",
        *_table(header, _model_rows(WriteConfig)),
        "",
        "## Lock options",
        "",
        "The table lock taken around plan scheduling and commits (in-process by default; ZooKeeper for",
        "several processes).",
        "",
        *_table(header, _model_rows(LockConfig)),
        "",
        "## Spark read options",
        "",
        'Options of `spark.read.format("lakeward")` (and `readStream`).',
        "",
        *_table(header, read_rows),
        "",
        "## Daemon settings",
        "",
        "`lakeward serve` reads these from the YAML file given with `--config` (or named by",
        "`LAKEWARD_CONFIG`) and from environment variables, which win over the file. See",
        "[the daemon](daemon.md) for an example file.",
        "",
        *_table(("key", "type", "default", "environment variable", "meaning"), _settings_rows(DaemonSettings, "")),
        "",
    ]
    return "\n".join(lines)


def _openapi() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "lakeward.yaml"
        config.write_text("tables: {static: []}\nspark: {engine: local}\nhttp: {port: 0}\n")
        return create_app(Daemon(load_settings(config, env={}))).openapi()


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"list of {_schema_name(schema.get('items', {}))}"
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    return str(schema.get("type", "object"))


def _response(code: str, response: dict[str, Any]) -> str:
    """`200 (Successful Response: RunInfo)`: a response code, its meaning and its JSON model, if any."""
    schema = response.get("content", {}).get("application/json", {}).get("schema")
    model = f": {_schema_name(schema)}" if schema else ""
    return f"{code} ({response.get('description', '')}{model})"


def http_api_markdown() -> str:
    spec = _openapi()
    lines = [
        "# HTTP API reference",
        "",
        "<!-- Generated by scripts/gen_docs.py from the daemon's OpenAPI schema: do not edit by hand. -->",
        "",
        f"{spec['info'].get('description', '')} A running daemon serves this schema at `/openapi.json` and",
        "renders it at `/docs` (Swagger UI, served by the daemon itself). Calls that change something need",
        "`Authorization: Bearer <token>` with one of `http.api_tokens`; reads are open unless",
        "`http.protect_reads` is set.",
        "",
    ]
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            lines.append(f"## `{method.upper()} {path}`")
            lines.append("")
            summary = op.get("description") or op.get("summary") or ""
            if summary:
                lines.append(summary.strip())
                lines.append("")
            params = op.get("parameters", [])
            if params:
                lines.append("| parameter | in | type | required |")
                lines.append("| --- | --- | --- | --- |")
                for p in params:
                    kind = _schema_name(p.get("schema", {}))
                    lines.append(f"| `{p['name']}` | {p['in']} | {kind} | {'yes' if p.get('required') else 'no'} |")
                lines.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                lines.append(f"Request body: {_schema_name(body)}.")
                lines.append("")
            codes = ", ".join(_response(code, r) for code, r in op.get("responses", {}).items())
            lines.append(f"Responses: {codes}.")
            lines.append("")
    schemas = spec.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
        for name, schema in schemas.items():
            lines.append(f"### {name}")
            lines.append("")
            if schema.get("description"):
                lines += [str(schema["description"]).strip(), ""]
            props = schema.get("properties", {})
            required = set(schema.get("required", []))
            if props:
                lines.append("| field | type | required |")
                lines.append("| --- | --- | --- |")
                for field, prop in props.items():
                    lines.append(f"| `{field}` | {_schema_name(prop)} | {'yes' if field in required else 'no'} |")
                lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


CHART_SCHEMA = ROOT / "helm" / "lakeward" / "values.schema.json"
#: Settings the chart sets itself (`http` from its http values, the replica id from the pod name) or
#: from secrets (the ZooKeeper digest credentials, from `zookeeperAuth`): not in its `settings`.
CHART_OWNED_SETTINGS = {("http",), ("replica_id",), ("zookeeper", "digest_user"), ("zookeeper", "digest_password")}


def _inlined(node: Any, defs: dict[str, Any], path: tuple[str, ...] = ()) -> Any:
    """`node` with every `$ref` replaced by its definition (Helm's schema check resolves no `$defs`), the
    generated titles left out, and the chart-owned settings (`CHART_OWNED_SETTINGS`) removed."""
    if isinstance(node, list):
        return [_inlined(v, defs, path) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[1]]
        return _inlined({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs, path)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "properties":
            out[key] = {
                name: _inlined(prop, defs, (*path, name))
                for name, prop in value.items()
                if (*path, name) not in CHART_OWNED_SETTINGS
            }
        elif key == "required":
            out[key] = [name for name in value if (*path, name) not in CHART_OWNED_SETTINGS]
        else:
            out[key] = _inlined(value, defs, path)
    return out


def chart_values_schema() -> str:
    """helm/lakeward/values.schema.json with its `settings` generated from the daemon's settings model,
    so that the chart refuses the keys and values the daemon refuses (a typo was a CrashLoop) and
    takes every one it accepts."""
    schema = json.loads(CHART_SCHEMA.read_text())
    model = DaemonSettings.model_json_schema()
    settings = _inlined({k: v for k, v in model.items() if k != "$defs"}, model.get("$defs", {}))
    settings["description"] = schema["properties"]["settings"]["description"]
    schema["properties"]["settings"] = settings
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


#: Generated files, relative to the repository's root.
PAGES: dict[str, Callable[[], str]] = {
    "docs/configuration.md": configuration_markdown,
    "docs/http-api.md": http_api_markdown,
    "helm/lakeward/values.schema.json": chart_values_schema,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when a page differs from the code")
    args = parser.parse_args()
    stale = []
    for name, generate in PAGES.items():
        text = generate()
        path = ROOT / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}; run python scripts/gen_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
