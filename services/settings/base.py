"""What every settings section shares: the base model, the error type and how errors are worded."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

ENV_PREFIX = "LAKEWARD_"


class ConfigurationError(ValueError):
    """The configuration is invalid; ``problems`` holds one ``key: message`` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid lakeward configuration:\n  " + "\n  ".join(problems))


class Section(BaseModel):
    """A settings section: unknown keys are errors, values are frozen, numbers finite (no .inf, .nan)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def option_str(value: Any) -> str:
    """A YAML scalar as the string a ``hoodie.*`` or Spark option takes (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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


def problems(exc: ValidationError) -> list[str]:
    """One ``key: message`` line per error of ``exc``, worded for people (``must be > 0``, ``unknown key``)."""
    out = []
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
        out.append(f"{key or '(root)'}: {msg}")
    return out
