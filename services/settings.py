"""The daemon's settings: one model, from a YAML file and ``LAKEWARD_*`` environment variables.

This is the only module of lakeward that reads the environment. Sources, lowest to highest
priority:

1. the defaults below;
2. a YAML file: the path given to :func:`load_settings`, else the one named by ``LAKEWARD_CONFIG``;
3. environment variables ``LAKEWARD_<SECTION>__<KEY>`` (``__`` separates nested keys, names are
   case-insensitive, lists and maps are JSON), e.g. ``LAKEWARD_ZOOKEEPER__HOSTS=zk1:2181,zk2:2181``,
   ``LAKEWARD_HTTP__API_TOKENS='["t1","t2"]'`` (or ``t1,t2``), ``LAKEWARD_LOG__FORMAT=text``.

Sections are merged key by key, so an environment variable replaces one key of the YAML file and
keeps the others. Everything is validated at start; :class:`ConfigurationError` lists every
problem with the key it is about (``zookeeper.session_timeout_s: must be > 0``). Unknown keys are
errors (typos must not pass silently).
"""

from __future__ import annotations

import hmac
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as _PydanticSettingsError
from pydantic_settings.sources.utils import parse_env_vars

from lakeward.services.model import ServiceAction, TableRef
from lakeward.services.names import CONFIG_ENV_VAR

ENV_PREFIX = "LAKEWARD_"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ConfigurationError(ValueError):
    """The configuration is invalid; ``problems`` holds one ``key: message`` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid lakeward configuration:\n  " + "\n  ".join(problems))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------------------------- tables


class StaticTable(_Section):
    """A table named in the configuration."""

    path: str = Field(min_length=1, description="Base path (URI) of the table, e.g. /data/orders or s3://bucket/t.")
    name: str | None = Field(
        default=None, description="Name in the API, metrics and claims; defaults to the path's last segment."
    )

    @field_validator("path")
    @classmethod
    def _strip_path(cls, value: str) -> str:
        stripped = value.strip()
        stripped = stripped.rstrip("/") or stripped
        if not stripped:
            raise ValueError("must not be empty")
        return stripped

    @model_validator(mode="after")
    def _default_name(self) -> StaticTable:
        name = self.name if self.name is not None else self.path.rstrip("/").rsplit("/", 1)[-1]
        if not _NAME_RE.match(name):
            raise ValueError(
                f"name: {name!r} is not a valid table name (letters, digits, '.', '_', '-'; "
                "set `name` explicitly when the path's last segment is not one)"
            )
        object.__setattr__(self, "name", name)
        return self

    def ref(self) -> TableRef:
        assert self.name is not None
        return TableRef(name=self.name, path=self.path)


class DiscoveryRoot(_Section):
    """A directory scanned for tables (any folder holding ``.hoodie/hoodie.properties``)."""

    path: str = Field(min_length=1, description="Directory (URI) to scan.")
    max_depth: int = Field(
        default=3, ge=1, le=32, description="How many folder levels below `path` are scanned (1: children)."
    )


class TablesSettings(_Section):
    """Which tables the daemon looks after: a static list and discovery roots."""

    static: list[StaticTable] = Field(default_factory=list, description="Tables named explicitly.")
    roots: list[DiscoveryRoot] = Field(default_factory=list, description="Directories scanned for tables.")
    refresh_interval_s: float = Field(default=30.0, gt=0, description="Seconds between discovery cycles.")
    refresh_jitter: float = Field(
        default=0.1, ge=0, le=1, description="Random jitter of each cycle, as a fraction of `refresh_interval_s`."
    )

    @field_validator("static")
    @classmethod
    def _unique(cls, tables: list[StaticTable]) -> list[StaticTable]:
        names: dict[str, int] = {}
        paths: dict[str, int] = {}
        for i, table in enumerate(tables):
            assert table.name is not None
            if table.name in names:
                raise ValueError(f"[{i}].name: duplicate table name {table.name!r} (also entry {names[table.name]})")
            if table.path in paths:
                raise ValueError(f"[{i}].path: duplicate table path {table.path!r} (also entry {paths[table.path]})")
            names[table.name] = i
            paths[table.path] = i
        return tables

    def refs(self) -> list[TableRef]:
        """The static tables as :class:`TableRef` (discovered tables come from discovery)."""
        return [t.ref() for t in self.static]


# ------------------------------------------------------------------------------------------- policies


class ActionPolicy(_Section):
    """What every action has: whether the daemon schedules it on its own."""

    enabled: bool = Field(
        default=True, description="Schedule new plans of this action by policy (pending ones always run)."
    )


class CompactionPolicy(ActionPolicy):
    """Merge-on-read compaction."""

    max_delta_commits: int = Field(
        default=5, gt=0, description="Schedule a compaction once this many delta commits completed since the last one."
    )
    max_delta_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Also schedule once the oldest uncompacted delta commit is this old (None: off).",
    )


class CleanPolicy(ActionPolicy):
    """Cleaning of old file slices; its retention keeps what readers of older instants need."""

    policy: Literal["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS"] = Field(
        default="KEEP_LATEST_COMMITS", description="Which file slices stay (hoodie.cleaner.policy)."
    )
    commits_retained: int = Field(
        default=10, gt=0, description="KEEP_LATEST_COMMITS: slices for the last N commits stay."
    )
    file_versions_retained: int = Field(
        default=3, gt=0, description="KEEP_LATEST_FILE_VERSIONS: the latest N slices stay."
    )
    hours_retained: int = Field(default=24, gt=0, description="KEEP_LATEST_BY_HOURS: slices for the last N hours stay.")
    min_commits_between: int = Field(
        default=1, gt=0, description="Schedule a clean at most once per N completed commits."
    )


class ClusteringPolicy(ActionPolicy):
    """Clustering of small files."""

    enabled: bool = Field(default=False, description="Schedule clustering plans by policy.")
    every_n_commits: int = Field(default=4, gt=0, description="Schedule a clustering once per N completed commits.")
    small_file_limit_bytes: int = Field(
        default=300 * 1024 * 1024, ge=0, description="Base files smaller than this are clustered."
    )
    target_file_max_bytes: int = Field(
        default=1024 * 1024 * 1024, gt=0, description="Size of the files a clustering writes."
    )
    max_num_groups: int = Field(default=30, gt=0, description="At most this many groups per plan.")
    sort_columns: list[str] = Field(default_factory=list, description="Columns the rewritten files are sorted by.")


class ArchivalPolicy(ActionPolicy):
    """Archival of the active timeline (timeline retention)."""

    keep_min_commits: int = Field(default=20, gt=0, description="The active timeline keeps at least this many commits.")
    keep_max_commits: int = Field(
        default=30, gt=0, description="Archive when the active timeline holds more than this."
    )


class ChangeTrackingPolicy(ActionPolicy):
    """Change tracking (CDC) of new commits."""

    enabled: bool = Field(default=False, description="Schedule change-tracking plans by policy.")
    every_n_commits: int = Field(default=1, gt=0, description="Schedule once per N completed commits.")


class IndexBuildPolicy(ActionPolicy):
    """Secondary-index builds."""

    enabled: bool = Field(default=False, description="Schedule index builds by policy.")
    columns: list[str] = Field(default_factory=list, description="Columns to index (required when enabled).")


#: hoodie.* keys that a policy field sets: give the policy field instead (one place for each knob).
_POLICY_OWNED_KEYS: dict[str, str] = {
    "hoodie.compact.inline.max.delta.commits": "compaction.max_delta_commits",
    "hoodie.cleaner.policy": "clean.policy",
    "hoodie.cleaner.commits.retained": "clean.commits_retained",
    "hoodie.cleaner.fileversions.retained": "clean.file_versions_retained",
    "hoodie.cleaner.hours.retained": "clean.hours_retained",
    "hoodie.clustering.plan.strategy.small.file.limit": "clustering.small_file_limit_bytes",
    "hoodie.clustering.plan.strategy.target.file.max.bytes": "clustering.target_file_max_bytes",
    "hoodie.clustering.plan.strategy.max.num.groups": "clustering.max_num_groups",
    "hoodie.clustering.plan.strategy.sort.columns": "clustering.sort_columns",
    "hoodie.keep.min.commits": "archival.keep_min_commits",
    "hoodie.keep.max.commits": "archival.keep_max_commits",
}

HoodieValue = str | int | float | bool


class PolicySettings(_Section):
    """A table policy: when each action is scheduled, retention, pause, and extra ``hoodie.*`` options.

    As an override, only the keys given replace the defaults' (maps are merged key by key).
    """

    paused: bool = Field(default=False, description="Nothing is scheduled or run on the table (pending plans wait).")
    compaction: CompactionPolicy = Field(default_factory=CompactionPolicy)
    clean: CleanPolicy = Field(default_factory=CleanPolicy)
    clustering: ClusteringPolicy = Field(default_factory=ClusteringPolicy)
    archival: ArchivalPolicy = Field(default_factory=ArchivalPolicy)
    change_tracking: ChangeTrackingPolicy = Field(default_factory=ChangeTrackingPolicy)
    index_build: IndexBuildPolicy = Field(default_factory=IndexBuildPolicy)
    hoodie_options: dict[str, HoodieValue] = Field(
        default_factory=dict, description="Extra hoodie.* options passed to the table when it is opened."
    )

    @field_validator("hoodie_options")
    @classmethod
    def _hoodie_keys(cls, options: dict[str, HoodieValue]) -> dict[str, HoodieValue]:
        for key in options:
            if not key.startswith("hoodie."):
                raise ValueError(f"[{key!r}]: option keys must start with 'hoodie.'")
            if key in _POLICY_OWNED_KEYS:
                raise ValueError(f"[{key!r}]: set by the policy; use `{_POLICY_OWNED_KEYS[key]}` instead")
        return options


class EffectivePolicy(PolicySettings):
    """The policy of one table: the defaults merged with the table's override, cross-checked."""

    table: str | None = Field(default=None, description="The table it applies to (None: the defaults).")

    @model_validator(mode="after")
    def _consistent(self) -> EffectivePolicy:
        if self.archival.keep_min_commits >= self.archival.keep_max_commits:
            raise ValueError(
                f"archival.keep_min_commits: must be < archival.keep_max_commits ({self.archival.keep_max_commits})"
            )
        if self.index_build.enabled and not self.index_build.columns:
            raise ValueError("index_build.columns: required when index_build is enabled")
        return self

    def for_action(self, action: ServiceAction) -> ActionPolicy | None:
        """The policy section of ``action`` (None for rollback, which is never scheduled by policy)."""
        if action is ServiceAction.ROLLBACK:
            return None
        section: ActionPolicy = getattr(self, action.value)
        return section

    def schedules(self, action: ServiceAction) -> bool:
        """Whether the daemon schedules new plans of ``action`` on this table (False when paused)."""
        section = self.for_action(action)
        return not self.paused and section is not None and section.enabled

    def table_options(self) -> dict[str, str]:
        """The ``hoodie.*`` options for the table: the policy's knobs, then ``hoodie_options``."""
        opts: dict[str, Any] = {
            "hoodie.compact.inline.max.delta.commits": self.compaction.max_delta_commits,
            "hoodie.cleaner.policy": self.clean.policy,
            "hoodie.cleaner.commits.retained": self.clean.commits_retained,
            "hoodie.cleaner.fileversions.retained": self.clean.file_versions_retained,
            "hoodie.cleaner.hours.retained": self.clean.hours_retained,
            "hoodie.clustering.plan.strategy.small.file.limit": self.clustering.small_file_limit_bytes,
            "hoodie.clustering.plan.strategy.target.file.max.bytes": self.clustering.target_file_max_bytes,
            "hoodie.clustering.plan.strategy.max.num.groups": self.clustering.max_num_groups,
            "hoodie.keep.min.commits": self.archival.keep_min_commits,
            "hoodie.keep.max.commits": self.archival.keep_max_commits,
        }
        if self.clustering.sort_columns:
            opts["hoodie.clustering.plan.strategy.sort.columns"] = ",".join(self.clustering.sort_columns)
        opts.update(self.hoodie_options)
        return {k: _option_str(v) for k, v in opts.items()}


def _option_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class PoliciesSettings(_Section):
    """Default policy for every table, and per-table overrides keyed by table name."""

    defaults: PolicySettings = Field(default_factory=PolicySettings)
    overrides: dict[str, PolicySettings] = Field(
        default_factory=dict, description="Per-table overrides (table name -> the keys that differ)."
    )

    def effective(self, table: str | None) -> EffectivePolicy:
        merged = self.defaults.model_dump()
        if table is not None and table in self.overrides:
            merged = _deep_merge(merged, self.overrides[table].model_dump(exclude_unset=True))
        return EffectivePolicy.model_validate({**merged, "table": table})

    @model_validator(mode="after")
    def _check_effective(self) -> PoliciesSettings:
        for where, table in [("defaults", None), *((f"overrides.{name}", name) for name in self.overrides)]:
            try:
                self.effective(table)
            except ValidationError as exc:
                first = _problems(exc)[0]
                raise ValueError(f"{where}.{first}") from None
        return self


# ---------------------------------------------------------------------------------------- concurrency


class ActionTimeouts(_Section):
    """Seconds a run of each action may take before it is cancelled (and counted as a failure)."""

    rollback: float = Field(default=600, gt=0)
    clean: float = Field(default=1800, gt=0)
    compaction: float = Field(default=3600, gt=0)
    clustering: float = Field(default=7200, gt=0)
    archival: float = Field(default=600, gt=0)
    change_tracking: float = Field(default=3600, gt=0)
    index_build: float = Field(default=7200, gt=0)

    def for_action(self, action: ServiceAction) -> float:
        value: float = getattr(self, action.value)
        return value


class RetrySettings(_Section):
    """Retries of a failed run, with exponential backoff: base * 2**(attempt-1), capped at max."""

    max_attempts: int = Field(default=3, ge=1, description="Runs of a plan per claim, the first included.")
    backoff_base_s: float = Field(default=5.0, gt=0, description="Wait before the first retry.")
    backoff_max_s: float = Field(default=300.0, gt=0, description="Longest wait between retries.")

    @model_validator(mode="after")
    def _order(self) -> RetrySettings:
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError(f"backoff_max_s: must be >= backoff_base_s ({self.backoff_base_s})")
        return self

    def backoff_s(self, attempt: int) -> float:
        """Wait before retry number ``attempt`` (1: the first retry)."""
        return float(min(self.backoff_max_s, self.backoff_base_s * 2 ** max(0, attempt - 1)))


class ConcurrencySettings(_Section):
    """How much runs at once on this replica, timeouts, retries and quarantine."""

    max_running: int = Field(default=4, gt=0, description="Plans running at once on this replica.")
    max_running_per_table: int = Field(default=1, gt=0, description="Plans running at once on one table.")
    timeouts_s: ActionTimeouts = Field(default_factory=ActionTimeouts)
    retries: RetrySettings = Field(default_factory=RetrySettings)
    quarantine_after_failures: int = Field(
        default=3, gt=0, description="A plan that failed this many times is quarantined until released by on-call."
    )

    @model_validator(mode="after")
    def _order(self) -> ConcurrencySettings:
        if self.max_running_per_table > self.max_running:
            raise ValueError(f"max_running_per_table: must be <= max_running ({self.max_running})")
        return self


# ------------------------------------------------------------------------------------------ zookeeper


class ZooKeeperSettings(_Section):
    """Claims coordination. Without hosts, an in-process coordinator is used: one replica only."""

    hosts: str | None = Field(
        default=None, description="host:port[,host:port...] (a YAML list is accepted); None: in-process coordinator."
    )
    chroot: str = Field(default="/lakeward", description="Every node of the daemon lives under this path.")
    claims_path: str = Field(default="/claims", description="Where claims are created, under the chroot.")
    session_timeout_s: float = Field(default=30.0, gt=0, description="ZooKeeper session timeout.")
    connection_timeout_s: float = Field(default=10.0, gt=0, description="How long to wait for a connection at start.")
    digest_user: str | None = Field(default=None, description="Digest auth user (with digest_password).")
    digest_password: SecretStr | None = Field(default=None, description="Digest auth password.")

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        if isinstance(value, str):
            parts = [p.strip() for p in value.split(",")]
            if not value.strip() or any(not p for p in parts):
                raise ValueError("must be host:port[,host:port...]")
            for part in parts:
                host, sep, port = part.rpartition(":")
                if sep and (not host or not port.isdigit()):
                    raise ValueError(f"{part!r} is not host or host:port")
            return ",".join(parts)
        return value

    @field_validator("chroot", "claims_path")
    @classmethod
    def _znode_path(cls, value: str) -> str:
        if not value.startswith("/") or (len(value) > 1 and value.endswith("/")) or "//" in value:
            raise ValueError("must be an absolute ZooKeeper path like /a/b (no trailing '/')")
        return value

    @model_validator(mode="after")
    def _auth_pair(self) -> ZooKeeperSettings:
        if (self.digest_user is None) != (self.digest_password is None):
            missing = "digest_password" if self.digest_password is None else "digest_user"
            raise ValueError(f"{missing}: digest_user and digest_password go together")
        return self

    @property
    def in_process(self) -> bool:
        """True when no ZooKeeper is configured: the in-process coordinator (single replica only)."""
        return self.hosts is None

    @property
    def connect_string(self) -> str | None:
        """The kazoo hosts string with the chroot appended (None for the in-process coordinator)."""
        if self.hosts is None:
            return None
        return self.hosts if self.chroot == "/" else self.hosts + self.chroot


# ---------------------------------------------------------------------------------------------- spark


class SparkSettings(_Section):
    """The replica's one SparkSession."""

    master: str = Field(
        default="local[2]", min_length=1, description="Spark master URL (local[N], k8s://..., spark://...)."
    )
    app_name: str = Field(default="lakeward-services", min_length=1, description="Spark application name.")
    engine: Literal["spark", "local"] = Field(
        default="spark",
        description="spark: plans run as Spark jobs on this session; local: lakeward's thread-pool engine, no JVM.",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark conf (numbers/booleans accepted).")
    fair_scheduler: bool = Field(default=True, description="spark.scheduler.mode=FAIR, each run in its action's pool.")
    pools: list[str] = Field(
        default_factory=lambda: [a.value for a in ServiceAction],
        description="Fair-scheduler pool names; a run goes to the pool named as its action if listed, else the first.",
    )

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: _option_str(v) if isinstance(v, bool | int | float) else v for k, v in value.items()}
        return value

    @field_validator("pools")
    @classmethod
    def _pools(cls, pools: list[str]) -> list[str]:
        if not pools:
            raise ValueError("at least one pool")
        if len(set(pools)) != len(pools) or any(not p.strip() for p in pools):
            raise ValueError("pool names must be unique and non-empty")
        return pools

    def pool_for(self, action: ServiceAction) -> str:
        return action.value if action.value in self.pools else self.pools[0]


# ----------------------------------------------------------------------------------------------- http


def _split_tokens(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [t.strip() for t in text.split(",") if t.strip()]
    return value


class HttpSettings(_Section):
    """The HTTP API (and /metrics, /healthz, /readyz)."""

    host: str = Field(default="127.0.0.1", min_length=1, description="Bind address (0.0.0.0 in a container).")
    port: int = Field(default=8080, ge=0, le=65535, description="Bind port (0: any free port).")
    api_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="Bearer tokens accepted; mutating calls need one (env: JSON list or comma-separated).",
    )
    protect_reads: bool = Field(
        default=False, description="Reads need a token too (/healthz, /readyz, /metrics stay open)."
    )

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_tokens(value)

    @field_validator("api_tokens")
    @classmethod
    def _nonempty(cls, tokens: list[SecretStr]) -> list[SecretStr]:
        for i, token in enumerate(tokens):
            secret = token.get_secret_value()
            if not secret or secret != secret.strip():
                raise ValueError(f"[{i}]: a token must be non-empty, without surrounding spaces")
        return tokens

    @model_validator(mode="after")
    def _reads_need_tokens(self) -> HttpSettings:
        if self.protect_reads and not self.api_tokens:
            raise ValueError("protect_reads: needs at least one entry in api_tokens")
        return self

    def token_ok(self, token: str | None) -> bool:
        """Whether ``token`` is one of the configured tokens (constant-time comparison)."""
        if not token:
            return False
        given = token.encode()
        return any(hmac.compare_digest(given, t.get_secret_value().encode()) for t in self.api_tokens)


# ------------------------------------------------------------------------------------------------ log


class LogSettings(_Section):
    """Logging: JSON lines (for collectors) or text (for people)."""

    format: Literal["json", "text"] = Field(default="json", description="json or text.")
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(default="INFO", description="Log level.")

    @field_validator("format", "level", mode="before")
    @classmethod
    def _case(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str):
            return value.strip().upper() if info.field_name == "level" else value.strip().lower()
        return value


# ------------------------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class _LoadContext:
    yaml_data: dict[str, Any]
    env: Mapping[str, str]


_LOAD: ContextVar[_LoadContext | None] = ContextVar("lakeward_settings_load", default=None)


class _MappingEnvSource(EnvSettingsSource):
    """The environment source, over a given mapping instead of os.environ."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._mapping, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class _YamlSource(PydanticBaseSettingsSource):
    """The YAML file's content, passed through whole so unknown keys are reported."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


@contextmanager
def _loading(ctx: _LoadContext) -> Iterator[None]:
    token = _LOAD.set(ctx)
    try:
        yield
    finally:
        _LOAD.reset(token)


# ------------------------------------------------------------------------------------------- settings


class DaemonSettings(BaseSettings):
    """Everything the daemon (``lakeward serve``) is configured with. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        case_sensitive=False,
        extra="forbid",
        frozen=True,
    )

    tables: TablesSettings = Field(default_factory=TablesSettings)
    policies: PoliciesSettings = Field(default_factory=PoliciesSettings)
    concurrency: ConcurrencySettings = Field(default_factory=ConcurrencySettings)
    zookeeper: ZooKeeperSettings = Field(default_factory=ZooKeeperSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    drain_time_s: float = Field(
        default=60.0, ge=0, description="On SIGTERM, running plans get this long to finish before they are cancelled."
    )
    replica_id: str | None = Field(
        default=None,
        description="This replica's name in claims, logs and the API (default: host-pid; the pod name in Kubernetes).",
    )

    _policy_cache: dict[str | None, EffectivePolicy] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        ctx = _LOAD.get()
        if ctx is None:
            return (init_settings, env_settings)
        return (init_settings, _MappingEnvSource(settings_cls, ctx.env), _YamlSource(settings_cls, ctx.yaml_data))

    @model_validator(mode="after")
    def _overrides_name_tables(self) -> DaemonSettings:
        # Tables under discovery roots are named only when found, so overrides can be checked
        # against the static list only when there are no roots.
        if self.tables.roots:
            return self
        known = {t.name for t in self.tables.static}
        for name in self.policies.overrides:
            if name not in known:
                raise ValueError(
                    f"policies.overrides.{name}: unknown table {name!r} (not in tables.static; "
                    f"known: {', '.join(sorted(n for n in known if n)) or 'none'})"
                )
        return self

    def policy_for(self, table_name: str) -> EffectivePolicy:
        """The effective policy of a table: ``policies.defaults`` merged with its override, if any."""
        cached = self._policy_cache.get(table_name)
        if cached is None:
            cached = self.policies.effective(table_name)
            self._policy_cache[table_name] = cached
        return cached

    def static_tables(self) -> list[TableRef]:
        return self.tables.refs()

    @classmethod
    def example_yaml(cls) -> str:
        """A documented example configuration (it loads; docs/daemon.md shows it)."""
        return EXAMPLE_YAML


# ------------------------------------------------------------------------------------------- loading


_MESSAGES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "extra_forbidden": "unknown key",
    "missing": "required",
}
_KEYED = re.compile(r"^(\[[^\]]+\][\w.]*|[A-Za-z_][\w.]*(?:\[\d+\][\w.]*)*): (.*)$", re.S)


def _num(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _key(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _problems(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        if err["type"] == "value_error":
            msg = str(ctx.get("error", err["msg"]))
        elif err["type"] in _MESSAGES:
            msg = _MESSAGES[err["type"]].format(**{k: _num(v) for k, v in ctx.items()})
        else:
            msg = re.sub(r"^Input should be", "must be", err["msg"])
        # A validator's message may start with the key it is about, relative to the model it checks.
        match = _KEYED.match(msg)
        key = _key(loc)
        if match:
            sub, msg = match.group(1), match.group(2)
            if sub.startswith("["):
                key = key + sub
            else:
                key = f"{key}.{sub}" if key else sub
        problems.append(f"{key or '(root)'}: {msg}")
    return problems


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError([f"{path}: cannot read the configuration file ({exc.strerror or exc})"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError([f"{path}: not valid YAML ({exc})"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError([f"{path}: the top level must be a mapping of sections, not {type(data).__name__}"])
    return data


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> DaemonSettings:
    """Load and validate the daemon's settings.

    ``path``: the YAML file (default: ``$LAKEWARD_CONFIG``, else none). ``env``: the environment
    (default ``os.environ``; tests pass a dict). ``LAKEWARD_*`` variables win over the file.
    Raises :class:`ConfigurationError` naming every bad key.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    if path is None:
        configured = environ.get(CONFIG_ENV_VAR)
        path = configured if configured else None
    data = _read_yaml(Path(path)) if path is not None else {}
    # LAKEWARD_CONFIG names the file; it is not a setting.
    env_vars = {k: v for k, v in environ.items() if k.upper() != CONFIG_ENV_VAR}
    try:
        with _loading(_LoadContext(yaml_data=data, env=env_vars)):
            return DaemonSettings()
    except ValidationError as exc:
        raise ConfigurationError(_problems(exc)) from None
    except _PydanticSettingsError as exc:
        # A list or map from the environment that is not JSON.
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        field = re.search(r'field "([^"]+)"', str(exc))
        where = field.group(1) if field else "environment"
        raise ConfigurationError([f"{where}: cannot parse a {ENV_PREFIX}* environment value as JSON{cause}"]) from None


EXAMPLE_YAML = """\
# lakeward serve --config lakeward.yaml   (or LAKEWARD_CONFIG=lakeward.yaml)
# Any key can be overridden by an environment variable LAKEWARD_<SECTION>__<KEY>,
# e.g. LAKEWARD_ZOOKEEPER__HOSTS=zk1:2181 or LAKEWARD_HTTP__API_TOKENS=token1,token2.

tables:
  static:                      # tables named explicitly; name defaults to the path's last segment
    - path: /data/lake/orders
    - path: s3://lake/events
      name: events
  roots:                       # directories scanned for tables (folders with .hoodie/)
    - path: /data/lake/ingest
      max_depth: 2
  refresh_interval_s: 30       # one discovery cycle every 30 s ...
  refresh_jitter: 0.1          # ... give or take 10%

policies:
  defaults:                    # every table
    paused: false
    compaction:
      enabled: true
      max_delta_commits: 5     # schedule after 5 delta commits
    clean:
      enabled: true
      policy: KEEP_LATEST_COMMITS
      commits_retained: 10     # readers may read as of the last 10 commits
    clustering:
      enabled: false
      small_file_limit_bytes: 314572800
    archival:
      enabled: true
      keep_min_commits: 20
      keep_max_commits: 30
    change_tracking:
      enabled: false
    index_build:
      enabled: false
    hoodie_options:            # passed to the table as is (keys start with hoodie.)
      hoodie.parquet.compression.codec: zstd
  overrides:                   # per table name: only the keys that differ
    orders:
      compaction:
        max_delta_commits: 10
      clustering:
        enabled: true
        sort_columns: [customer_id]
    events:
      paused: true

concurrency:
  max_running: 4               # plans at once on this replica
  max_running_per_table: 1
  timeouts_s:                  # seconds per run, by action
    compaction: 3600
    clustering: 7200
  retries:
    max_attempts: 3
    backoff_base_s: 5
    backoff_max_s: 300
  quarantine_after_failures: 3 # then it waits for `lakeward release`

zookeeper:
  hosts: null                  # null: in-process coordinator (one replica only); else "zk1:2181,zk2:2181"
  chroot: /lakeward
  claims_path: /claims
  session_timeout_s: 30
  connection_timeout_s: 10
  # digest_user: lakeward      # digest auth; the password best from LAKEWARD_ZOOKEEPER__DIGEST_PASSWORD

spark:
  master: local[2]
  app_name: lakeward-services
  conf:
    spark.sql.shuffle.partitions: 8
  fair_scheduler: true
  engine: spark                # spark, or local (thread pool, no JVM: small tables)

http:
  host: 127.0.0.1              # 0.0.0.0 in a container
  port: 8080
  api_tokens: []               # best from LAKEWARD_HTTP__API_TOKENS; mutating calls need one
  protect_reads: false

log:
  format: json                 # json or text
  level: INFO

drain_time_s: 60               # on SIGTERM, running plans get this long before they are cancelled
# replica_id: lakeward-0       # default host-pid; LAKEWARD_REPLICA_ID=$(POD_NAME) in Kubernetes
"""

__all__ = [
    "CONFIG_ENV_VAR",
    "ENV_PREFIX",
    "ActionPolicy",
    "ActionTimeouts",
    "ArchivalPolicy",
    "ChangeTrackingPolicy",
    "CleanPolicy",
    "ClusteringPolicy",
    "CompactionPolicy",
    "ConcurrencySettings",
    "ConfigurationError",
    "DaemonSettings",
    "DiscoveryRoot",
    "EffectivePolicy",
    "HttpSettings",
    "IndexBuildPolicy",
    "LogSettings",
    "PoliciesSettings",
    "PolicySettings",
    "RetrySettings",
    "SparkSettings",
    "StaticTable",
    "TablesSettings",
    "ZooKeeperSettings",
    "load_settings",
]
