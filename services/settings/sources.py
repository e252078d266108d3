"""Where settings come from: a YAML file's content and an environment mapping, set for one load."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource
from pydantic_settings.sources.utils import parse_env_vars


@dataclass(frozen=True)
class LoadContext:
    """What one :func:`load_settings` call reads: the YAML file's content and the environment."""

    yaml_data: dict[str, Any]
    env: Mapping[str, str]


LOAD: ContextVar[LoadContext | None] = ContextVar("lakeward_settings_load", default=None)


class MappingEnvSource(EnvSettingsSource):
    """The environment source, over a given mapping instead of os.environ."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._mapping, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class YamlSource(PydanticBaseSettingsSource):
    """The YAML file's content, passed through whole so unknown keys are reported."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


@contextmanager
def loading(ctx: LoadContext) -> Iterator[None]:
    """Make ``ctx`` the sources of the settings built inside the block (a context variable: thread-safe)."""
    token = LOAD.set(ctx)
    try:
        yield
    finally:
        LOAD.reset(token)
