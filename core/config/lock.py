"""The lock scope of the config: Apache Hudi's `hoodie.write.lock.*` keys, validated.

`parse_lock_config(options)` reads Apache Hudi's documented `hoodie.write.lock.*` keys
(HoodieLockConfig / LockConfiguration); `lakeward.core.locks.lock_provider_for` builds the lock:

- `hoodie.write.lock.provider` (default: in-process):
  `org.apache.hudi.client.transaction.lock.InProcessLockProvider`,
  `org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider`, or the short
  names `in_process` / `zookeeper`.
- `hoodie.write.lock.wait_time_ms` (60000): how long one acquire waits.
- `hoodie.write.lock.client.num_retries` (0; Hudi's default is 50): further acquire
  attempts after a timeout, `hoodie.write.lock.client.wait_time_ms_between_retry`
  (5000) apart.
- `hoodie.write.lock.num_retries` (15), `hoodie.write.lock.wait_time_ms_between_retry`
  (1000, doubling), `hoodie.write.lock.max_wait_time_ms_between_retry` (16000): retries
  of each ZooKeeper operation.
- `hoodie.write.lock.zookeeper.url` (required for ZooKeeper):
  `host[:port][,host[:port]...][/chroot]`; `hoodie.write.lock.zookeeper.port` (2181)
  is added to hosts given without a port.
- `hoodie.write.lock.zookeeper.base_path` (required for ZooKeeper), e.g. `/hudi/locks`,
  and `hoodie.write.lock.zookeeper.lock_key` (default: the table name): the lock node
  is `<base_path>/<lock_key>`, the same node Hudi's Java writers use.
- `hoodie.write.lock.zookeeper.session_timeout_ms` (60000) and
  `hoodie.write.lock.zookeeper.connection_timeout_ms` (15000).
- `hoodie.write.lock.conflict.resolution.strategy`: only Hudi's default,
  `...SimpleConcurrentFileWritesConflictResolutionStrategy` (file-group conflicts).

Other `hoodie.write.lock.*` keys (file-system, Hive metastore, DynamoDB providers...) and
bad values raise ConfigError naming the key; keys outside `hoodie.write.lock.` are left
to the other validators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lakeward.core.config.values import JAVA_INT_MAX
from lakeward.core.exceptions import ConfigError

LOCK_PREFIX = "hoodie.write.lock."
#: The key naming the lock provider (the other lock keys tune the provider it names).
LOCK_PROVIDER_KEY = f"{LOCK_PREFIX}provider"
HUDI_IN_PROCESS = "org.apache.hudi.client.transaction.lock.InProcessLockProvider"
HUDI_ZOOKEEPER = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
HUDI_SIMPLE_CONFLICT_STRATEGY: Final = (
    "org.apache.hudi.client.transaction.SimpleConcurrentFileWritesConflictResolutionStrategy"
)
_PROVIDER_NAMES = {
    "in_process": "in_process",
    HUDI_IN_PROCESS: "in_process",
    "zookeeper": "zookeeper",
    HUDI_ZOOKEEPER: "zookeeper",
}


class LockConfig(BaseModel):
    """Validated lock options. Field aliases are the `hoodie.write.lock.*` keys."""

    # defer_build: the validator is built on first use, not at import (CLI start-up time)
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True, defer_build=True)

    provider: Literal["in_process", "zookeeper"] = Field("in_process", alias="hoodie.write.lock.provider")
    wait_time_ms: int = Field(60_000, alias="hoodie.write.lock.wait_time_ms", ge=0, le=JAVA_INT_MAX)
    client_num_retries: int = Field(0, alias="hoodie.write.lock.client.num_retries", ge=0, le=JAVA_INT_MAX)
    client_wait_time_ms_between_retry: int = Field(
        5_000, alias="hoodie.write.lock.client.wait_time_ms_between_retry", ge=0
    )
    num_retries: int = Field(15, alias="hoodie.write.lock.num_retries", ge=0, le=JAVA_INT_MAX)
    wait_time_ms_between_retry: int = Field(
        1_000, alias="hoodie.write.lock.wait_time_ms_between_retry", ge=0, le=JAVA_INT_MAX
    )
    max_wait_time_ms_between_retry: int = Field(
        16_000, alias="hoodie.write.lock.max_wait_time_ms_between_retry", ge=0, le=JAVA_INT_MAX
    )
    zookeeper_url: str | None = Field(None, alias="hoodie.write.lock.zookeeper.url", min_length=1)
    zookeeper_port: int = Field(2181, alias="hoodie.write.lock.zookeeper.port", gt=0, lt=65536)
    zookeeper_base_path: str | None = Field(None, alias="hoodie.write.lock.zookeeper.base_path")
    zookeeper_lock_key: str | None = Field(None, alias="hoodie.write.lock.zookeeper.lock_key", min_length=1)
    zookeeper_session_timeout_ms: int = Field(
        60_000, alias="hoodie.write.lock.zookeeper.session_timeout_ms", gt=0, le=JAVA_INT_MAX
    )
    zookeeper_connection_timeout_ms: int = Field(
        15_000, alias="hoodie.write.lock.zookeeper.connection_timeout_ms", gt=0, le=JAVA_INT_MAX
    )
    conflict_resolution_strategy: Literal[
        "org.apache.hudi.client.transaction.SimpleConcurrentFileWritesConflictResolutionStrategy"
    ] = Field(HUDI_SIMPLE_CONFLICT_STRATEGY, alias="hoodie.write.lock.conflict.resolution.strategy")

    @field_validator("provider", mode="before")
    @classmethod
    def _provider_name(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _PROVIDER_NAMES.get(value.strip(), value)
        return value

    @field_validator("zookeeper_url", "zookeeper_lock_key", "conflict_resolution_strategy", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @field_validator("zookeeper_base_path", mode="before")
    @classmethod
    def _znode_path(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip()
            if value != "/":
                value = value.rstrip("/")
            if not value.startswith("/") or "//" in value:
                raise ValueError("must be an absolute znode path such as /hudi/locks")
        return value

    @field_validator("zookeeper_lock_key", mode="after")
    @classmethod
    def _lock_key(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("/") or value.endswith("/") or "//" in value):
            raise ValueError("must be a znode name (no leading, trailing or double '/')")
        return value


#: Every key this module reads; other validators must accept them as known.
LOCK_OPTION_KEYS: frozenset[str] = frozenset(f.alias for f in LockConfig.model_fields.values() if f.alias)


def parse_lock_config(options: Mapping[str, Any] | None) -> LockConfig:
    """Validate the `hoodie.write.lock.*` keys of `options` (other keys are ignored)."""
    values: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if not key.startswith(LOCK_PREFIX):
            continue
        if key not in LOCK_OPTION_KEYS:
            raise ConfigError(
                f"unsupported lock option {key!r}; lakeward supports the in-process and "
                f"ZooKeeper lock providers with the keys {sorted(LOCK_OPTION_KEYS)}"
            )
        values[key] = value
    try:
        return LockConfig.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        info = LockConfig.model_fields.get(field)
        key = info.alias if info is not None and info.alias else field
        hint = ""
        if key == "hoodie.write.lock.provider":
            hint = f" (supported: {sorted(_PROVIDER_NAMES)})"
        raise ConfigError(f"option {key}={values.get(key)!r} is invalid: {err['msg']}{hint}") from None
