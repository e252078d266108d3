"""Change data capture settings of a table: `hoodie.table.cdc.*` in `hoodie.properties`.

Three supplemental logging levels say how much a writer persists per change (the rest is
computed from file slices when read):

- `KEY_OP` (Hudi's `OP_KEY_ONLY`): the operation and record key only;
- `DATA_BEFORE`: also the before-image;
- `DATA_BEFORE_AFTER` (Hudi's default): both images and the commit time.
"""

from __future__ import annotations

from enum import Enum

from lakeward.core.exceptions import ConfigError

CDC_ENABLED_KEY = "hoodie.table.cdc.enabled"
CDC_MODE_KEY = "hoodie.table.cdc.supplemental.logging.mode"
#: Not a Hudi key: the latest instant on the timeline when CDC was switched on for an
#: existing table. Changes are only complete after it, so CDC queries must begin there.
CDC_SINCE_KEY = "lakeward.table.cdc.enabled.after"
CDC_KEYS = frozenset({CDC_ENABLED_KEY, CDC_MODE_KEY})


class SupplementalLoggingMode(str, Enum):
    """How much CDC data a writer persists. Values are the names Hudi 0.14/0.15 store."""

    KEY_OP = "OP_KEY_ONLY"
    DATA_BEFORE = "DATA_BEFORE"
    DATA_BEFORE_AFTER = "DATA_BEFORE_AFTER"

    @classmethod
    def parse(cls, value: str | SupplementalLoggingMode, key: str = CDC_MODE_KEY) -> SupplementalLoggingMode:
        """Accepts lakeward's names, Hudi's names and Hudi's pre-release names, in any case."""
        if isinstance(value, SupplementalLoggingMode):
            return value
        normalized = str(value).strip().upper()
        aliases = {
            "KEY_OP": cls.KEY_OP,
            "OP_KEY_ONLY": cls.KEY_OP,
            "OP_KEY": cls.KEY_OP,
            "CDC_OP_KEY": cls.KEY_OP,
            "DATA_BEFORE": cls.DATA_BEFORE,
            "WITH_BEFORE": cls.DATA_BEFORE,
            "CDC_DATA_BEFORE": cls.DATA_BEFORE,
            "DATA_BEFORE_AFTER": cls.DATA_BEFORE_AFTER,
            "WITH_BEFORE_AFTER": cls.DATA_BEFORE_AFTER,
            "CDC_DATA_BEFORE_AFTER": cls.DATA_BEFORE_AFTER,
        }
        if normalized not in aliases:
            raise ConfigError(
                f"{key}={value!r} is not a supplemental logging mode; use KEY_OP (OP_KEY_ONLY), "
                "DATA_BEFORE or DATA_BEFORE_AFTER"
            )
        return aliases[normalized]

    @property
    def has_before(self) -> bool:
        return self is not SupplementalLoggingMode.KEY_OP

    @property
    def has_after(self) -> bool:
        return self is SupplementalLoggingMode.DATA_BEFORE_AFTER
