"""The whole model: :class:`DaemonSettings`, every section under one root, read from its sources."""

from __future__ import annotations

from pydantic import Field, PrivateAttr, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from lakeward.core.config.lock import LOCK_OPTION_KEYS, LOCK_PROVIDER_KEY, parse_lock_config
from lakeward.core.config.write import parse_write_config
from lakeward.core.exceptions import ConfigError
from lakeward.services.model import ServiceAction, TableRef
from lakeward.services.settings.base import ENV_PREFIX
from lakeward.services.settings.concurrency import ConcurrencySettings
from lakeward.services.settings.example import EXAMPLE_YAML
from lakeward.services.settings.history import HistorySettings
from lakeward.services.settings.http import HttpSettings
from lakeward.services.settings.log import LogSettings
from lakeward.services.settings.policy import EffectivePolicy, PoliciesSettings
from lakeward.services.settings.resources import ResourceSettings
from lakeward.services.settings.scheduling import SchedulingSettings
from lakeward.services.settings.sources import LOAD, MappingEnvSource, YamlSource
from lakeward.services.settings.spark import SparkSettings
from lakeward.services.settings.tables import TablesSettings
from lakeward.services.settings.zookeeper import ZooKeeperSettings


class DaemonSettings(BaseSettings):
    """Everything the daemon (``lakeward serve``) is configured with. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        case_sensitive=False,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        # LAKEWARD_SCHEDULING__STARVING_SCORE=null: null, as in the YAML file (`null`: off / unbounded)
        env_parse_none_str="null",
    )

    tables: TablesSettings = Field(default_factory=TablesSettings)
    policies: PoliciesSettings = Field(default_factory=PoliciesSettings)
    concurrency: ConcurrencySettings = Field(default_factory=ConcurrencySettings)
    scheduling: SchedulingSettings = Field(default_factory=SchedulingSettings)
    resources: ResourceSettings = Field(default_factory=ResourceSettings)
    zookeeper: ZooKeeperSettings = Field(default_factory=ZooKeeperSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
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
        ctx = LOAD.get()
        if ctx is None:
            return (init_settings, env_settings)
        return (init_settings, MappingEnvSource(settings_cls, ctx.env), YamlSource(settings_cls, ctx.yaml_data))

    @model_validator(mode="after")
    def _limits_within_max_running(self) -> DaemonSettings:
        most = self.concurrency.max_running
        limits = [(f"scheduling.groups.{n}", g.max_concurrent_runs) for n, g in self.scheduling.groups.items()]
        limits += [("policies.defaults.scheduling", self.policies.defaults.scheduling.max_concurrent_runs)]
        limits += [
            (f"policies.overrides.{n}.scheduling", p.scheduling.max_concurrent_runs)
            for n, p in self.policies.overrides.items()
        ]
        for where, limit in limits:
            if limit is not None and limit > most:
                raise ValueError(f"{where}.max_concurrent_runs: must be <= concurrency.max_running ({most})")
        return self

    @model_validator(mode="after")
    def _memory_bounds_above_the_spark_driver(self) -> DaemonSettings:
        # On the Spark engine a run's bound holds for the driver's process group, whose JVM heap alone may
        # grow to spark.driver.memory: a bound not above it would fail that action's runs once the heap grew.
        if self.spark.engine != "spark" or self.resources.isolation != "process":
            return self
        heap = self.spark.driver_memory_mib()
        for action in ServiceAction:
            bound = self.resources.max_memory_mb.for_action(action)
            if bound is not None and bound <= heap:
                raise ValueError(
                    f"resources.max_memory_mb.{action.value}: {bound} MiB is not above spark.driver.memory "
                    f"({heap} MiB); on the Spark engine it bounds the Spark driver's processes, the JVM's heap "
                    "included: raise it (or null: unbounded)"
                )
        return self

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

    @model_validator(mode="after")
    def _table_options_valid(self) -> DaemonSettings:
        # The options every table is opened with, checked as the library checks `Table.open(options=...)`
        # (and the CLI's -o): an unknown hoodie.* key or a bad value would otherwise fail every run.
        where = [("policies.defaults", None), *((f"policies.overrides.{n}", n) for n in self.policies.overrides)]
        for prefix, table in where:
            options = self._options_of(self.policies.effective(table))
            try:
                parse_write_config(options, extra_known=LOCK_OPTION_KEYS)
                parse_lock_config(options)
            except ConfigError as exc:
                raise ValueError(f"{prefix}.hoodie_options: {exc}") from None
        return self

    def table_lock_options(self) -> dict[str, str]:
        """The table-lock options the daemon adds when ZooKeeper is configured (docs/daemon.md, "Table locks")."""
        zk = self.zookeeper
        if zk.hosts is None:
            return {}
        base = "" if zk.chroot == "/" else zk.chroot
        return {
            "hoodie.write.lock.provider": "zookeeper",
            "hoodie.write.lock.zookeeper.url": zk.hosts,
            "hoodie.write.lock.zookeeper.base_path": f"{base}/locks",
            "hoodie.write.lock.zookeeper.session_timeout_ms": str(int(zk.session_timeout_s * 1000)),
            "hoodie.write.lock.zookeeper.connection_timeout_ms": str(int(zk.connection_timeout_s * 1000)),
            "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        }

    def _options_of(self, policy: EffectivePolicy) -> dict[str, str]:
        options = self.table_lock_options()
        policy_options = policy.table_options()
        if LOCK_PROVIDER_KEY in policy_options:  # a lock of its own; other lock keys tune the daemon's
            options = {}
        options.update(policy_options)
        return options

    def table_options(self, table_name: str) -> dict[str, str]:
        """The `hoodie.*` options the daemon opens a table with: its lock defaults (`table_lock_options`),
        replaced by the policy's own lock when it names a provider (`hoodie.write.lock.provider`; other
        `hoodie.write.lock.*` keys are applied over the defaults), then the policy's other options."""
        return self._options_of(self.policy_for(table_name))

    def static_tables(self) -> list[TableRef]:
        return self.tables.refs()

    @classmethod
    def example_yaml(cls) -> str:
        """A documented example configuration (it loads; docs/daemon.md shows it)."""
        return EXAMPLE_YAML
