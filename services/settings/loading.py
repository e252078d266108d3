"""Loading: the YAML file and the environment into a validated :class:`DaemonSettings`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_settings import SettingsError as _PydanticSettingsError

from lakeward.services.names import CONFIG_ENV_VAR
from lakeward.services.settings.base import ENV_PREFIX, ConfigurationError, problems
from lakeward.services.settings.daemon import DaemonSettings
from lakeward.services.settings.sources import LoadContext, loading


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError([f"{path}: cannot read the configuration file ({exc.strerror or exc})"]) from None
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start : exc.start + 1].hex()
        raise ConfigurationError([f"{path}: not UTF-8 text (byte 0x{bad} at offset {exc.start})"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError([f"{path}: not valid YAML ({exc})"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError([f"{path}: the top level must be a mapping of sections, not {type(data).__name__}"])
    return data


def _check_env_sections(env: Mapping[str, str]) -> None:
    """A `LAKEWARD_<SECTION>__<KEY>` variable must name a section (`LAKEWARD_HTTPS__PORT` is a typo, not
    silently ignored). Variables without `__` may belong to other tools (LAKEWARD_URL is the CLI's)."""
    unknown = []
    for name in env:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or "__" not in upper:
            continue
        section = upper[len(ENV_PREFIX) :].split("__", 1)[0].lower()
        if section not in DaemonSettings.model_fields:
            unknown.append(f"{section}: unknown key (from the environment variable {name})")
    if unknown:
        raise ConfigurationError(unknown)


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
    _check_env_sections(env_vars)
    try:
        with loading(LoadContext(yaml_data=data, env=env_vars)):
            return DaemonSettings()
    except ValidationError as exc:
        raise ConfigurationError(problems(exc)) from None
    except _PydanticSettingsError as exc:
        # A list or map from the environment that is not JSON.
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        field = re.search(r'field "([^"]+)"', str(exc))
        where = field.group(1) if field else "environment"
        raise ConfigurationError([f"{where}: cannot parse a {ENV_PREFIX}* environment value as JSON{cause}"]) from None
