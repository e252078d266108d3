"""The ``spark`` section: the replica's one SparkSession, in its Spark driver process (or the local engine)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from lakeward.services.model import ServiceAction
from lakeward.services.settings.base import Section, option_str


class SparkSettings(Section):
    """The replica's one SparkSession (built in the Spark driver child process under ``resources.isolation:
    process``, in the daemon under ``thread``)."""

    master: str = Field(
        default="local[2]", min_length=1, description="Spark master URL (local[N], k8s://..., spark://...)."
    )
    app_name: str = Field(default="lakeward-services", min_length=1, description="Spark application name.")
    engine: Literal["spark", "local"] = Field(
        default="spark",
        description=(
            "spark: plans run as Spark jobs on this session, from the Spark driver process; "
            "local: lakeward's thread-pool engine, no JVM."
        ),
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark conf (numbers/booleans accepted).",
        json_schema_extra={"additionalProperties": {"type": ["string", "number", "boolean"]}},
    )
    fair_scheduler: bool = Field(default=True, description="spark.scheduler.mode=FAIR, each run in its action's pool.")
    pools: list[str] = Field(
        default_factory=lambda: [a.value for a in ServiceAction],
        description="Fair-scheduler pool names; a run goes to the pool named as its action if listed, else the first.",
    )

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: option_str(v) if isinstance(v, bool | int | float) else v for k, v in value.items()}
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

    def driver_memory_mib(self) -> int:
        """`spark.driver.memory` in MiB (Spark's default, 1g, when not set): the most the driver's JVM heap
        may grow to."""
        value = self.conf.get(DRIVER_MEMORY, "1g")
        found = _JVM_SIZE.fullmatch(value.strip().lower())
        if found is None:
            raise ValueError(f"conf.{DRIVER_MEMORY}: {value!r} is not a size such as 512m or 4g")
        number, unit = int(found.group(1)), found.group(2) or "m"  # a bare number is MiB, as for Spark
        return number * _BYTES_PER_UNIT[unit[0]] // 2**20


DRIVER_MEMORY = "spark.driver.memory"
#: A JVM memory size as Spark reads it: a number and an optional unit (b, k, m, g, t; kb, mb... too).
_JVM_SIZE = re.compile(r"(\d+)\s*([bkmgt]b?)?")
_BYTES_PER_UNIT = {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
