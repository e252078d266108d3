"""How option values are parsed, once for every scope: booleans and comma-separated field lists.

Options arrive as Python values (`Table.create(options=...)`), Spark option strings or
`hoodie.properties` text; each kind of value has one parser here, so a key takes the same
spellings wherever it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lakeward.core.exceptions import ConfigError

#: Java's Integer.MAX_VALUE: Hudi reads most numeric options as Java ints; a larger value would
#: overflow later, after a write began, instead of failing when the options are read.
JAVA_INT_MAX = 2**31 - 1


def parse_bool(value: Any, key: str, *, exact: bool = False) -> bool:
    """`value` as a boolean: a bool, or `true` / `false` in any case and surrounded by spaces.

    `exact`: only the strings `true` and `false` themselves, as `hoodie.properties` holds
    them (what Hudi writes). Anything else raises ConfigError naming `key`.
    """
    if exact:
        if value in ("true", "false"):
            return bool(value == "true")
        raise ConfigError(f"{key}={value!r} must be exactly 'true' or 'false'")
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"{key}={value!r} must be true or false")


def parse_fields(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A field list: `"a, b"` (comma separated, blanks dropped) or a sequence of names; None is empty."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(value)
