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

One module per section of the file (``tables``, ``policy``, ``concurrency``, ``scheduling``, ``resources``,
``zookeeper``, ``spark``, ``http``, ``log``, ``history``), the root model in ``daemon``, and loading in
``loading`` (with the sources it reads in ``sources``). Import the names from this package.
"""

from lakeward.services.names import CONFIG_ENV_VAR
from lakeward.services.settings.base import ENV_PREFIX, ConfigurationError
from lakeward.services.settings.concurrency import ActionTimeouts, ConcurrencySettings, RetrySettings
from lakeward.services.settings.daemon import DaemonSettings
from lakeward.services.settings.example import EXAMPLE_YAML
from lakeward.services.settings.history import HistorySettings
from lakeward.services.settings.http import ApiToken, HttpSettings
from lakeward.services.settings.loading import load_settings
from lakeward.services.settings.log import LogSettings
from lakeward.services.settings.policy import (
    ActionPolicy,
    ArchivalPolicy,
    ChangeTrackingPolicy,
    CleanPolicy,
    ClusteringPolicy,
    CompactionPolicy,
    EffectivePolicy,
    IndexBuildPolicy,
    OrphanCleanPolicy,
    PoliciesSettings,
    PolicySettings,
)
from lakeward.services.settings.resources import ActionMemory, ResourceSettings
from lakeward.services.settings.scheduling import DEFAULT_GROUP, GroupSettings, SchedulingSettings, TableScheduling
from lakeward.services.settings.spark import SparkSettings
from lakeward.services.settings.tables import DiscoveryRoot, StaticTable, TablesSettings
from lakeward.services.settings.zookeeper import ZooKeeperSettings

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_GROUP",
    "ENV_PREFIX",
    "EXAMPLE_YAML",
    "ActionMemory",
    "ActionPolicy",
    "ActionTimeouts",
    "ApiToken",
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
    "GroupSettings",
    "HistorySettings",
    "HttpSettings",
    "IndexBuildPolicy",
    "LogSettings",
    "OrphanCleanPolicy",
    "PoliciesSettings",
    "PolicySettings",
    "ResourceSettings",
    "RetrySettings",
    "SchedulingSettings",
    "SparkSettings",
    "StaticTable",
    "TableScheduling",
    "TablesSettings",
    "ZooKeeperSettings",
    "load_settings",
]
