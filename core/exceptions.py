"""One small hierarchy of errors: every error lakeward raises on purpose is a LakewardError."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class LakewardError(Exception):
    """Base of every error lakeward raises deliberately."""


class ConfigError(LakewardError, ValueError):
    """An option is unknown or has a wrong value; the message names the key."""


class TableNotFoundError(LakewardError, FileNotFoundError):
    """The path holds no Hudi table (no readable `.hoodie/hoodie.properties`)."""


class TableExistsError(LakewardError, FileExistsError):
    """A table already exists where a new one was to be created."""


class CorruptTableError(LakewardError):
    """Table metadata (properties, timeline, file names) cannot be parsed."""


class SchemaError(LakewardError, ValueError):
    """A batch's schema is incompatible with the table's (missing key, type change, dropped column)."""


class InvalidRecordError(LakewardError, ValueError):
    """A record is unusable: null or empty record key, bad partition value."""


class InstantNotFoundError(LakewardError, LookupError):
    """No completed instant matches the requested time, or it is no longer retained."""


class InstantExistsError(LakewardError, FileExistsError):
    """A timeline file that must be created exactly once already exists (lost a race)."""


class ConcurrentWriteError(LakewardError):
    """Another writer committed a conflicting change to the same file groups first."""


class LockError(LakewardError):
    """The table lock could not be acquired or was lost."""


class StorageError(LakewardError, OSError):
    """A filesystem operation failed."""


class IndexNotFoundError(LakewardError, LookupError):
    """No secondary index of that name is defined on the table."""


class IndexExistsError(LakewardError, FileExistsError):
    """A secondary index of that name is already defined on the table."""


def did_you_mean(key: str, known: Iterable[str], limit: int = 3) -> str:
    """` -- did you mean 'a' or 'b'?` naming the known keys closest to a misspelled `key` ('' when none is close)."""
    close = difflib.get_close_matches(key, sorted(set(known)), n=limit, cutoff=0.75)
    if not close:
        return ""
    return " -- did you mean " + " or ".join(repr(c) for c in close) + "?"
