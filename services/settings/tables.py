"""The ``tables`` section: which tables the daemon looks after (a static list and discovery roots)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from lakeward.services.model import TableRef, root_name, table_location
from lakeward.services.settings.base import Section
from lakeward.services.settings.scheduling import check_group_name

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class StaticTable(Section):
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


class DiscoveryRoot(Section):
    """A directory scanned for tables (any folder holding ``.hoodie/hoodie.properties``)."""

    path: str = Field(min_length=1, description="Directory (URI) to scan.")
    max_depth: int = Field(
        default=3, ge=1, le=32, description="How many folder levels below `path` are scanned (1: children)."
    )
    group: str | None = Field(
        default=None,
        description="The scheduling group of the tables found here (null: the folder's name, as in their names).",
    )

    @field_validator("group")
    @classmethod
    def _group(cls, value: str | None) -> str | None:
        return None if value is None else check_group_name(value)

    def group_name(self) -> str:
        """The scheduling group of the tables found under this root."""
        return self.group or root_name(self.path)


class TablesSettings(Section):
    """Which tables the daemon looks after: a static list and discovery roots."""

    static: list[StaticTable] = Field(default_factory=list, description="Tables named explicitly.")
    roots: list[DiscoveryRoot] = Field(default_factory=list, description="Directories scanned for tables.")
    refresh_interval_s: float = Field(default=30.0, gt=0, description="Seconds between discovery cycles.")
    refresh_jitter: float = Field(
        default=0.1, ge=0, le=1, description="Random jitter of each cycle, as a fraction of `refresh_interval_s`."
    )
    load_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A table whose state (properties, timeline) or health listing a discovery cycle, or an API "
        "call (trigger, explain), cannot read within this many seconds is reported as a problem (the call gets 409) "
        "and skipped until that read returns: a hung mount or bucket holds up its own tables only.",
    )
    health_refresh_s: float = Field(
        default=300.0,
        ge=0,
        description="A table's health snapshot (a listing of its files) is retaken when its timeline changed, "
        "else at most this often (0: every cycle).",
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
            # one table in two spellings (/x/t and file:///x/t) is a duplicate too
            location = table_location(table.path)
            if location in paths:
                raise ValueError(f"[{i}].path: duplicate table path {table.path!r} (also entry {paths[location]})")
            names[table.name] = i
            paths[location] = i
        return tables

    def refs(self) -> list[TableRef]:
        """The static tables as :class:`TableRef` (discovered tables come from discovery)."""
        return [t.ref() for t in self.static]
