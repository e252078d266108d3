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


class TableClosedError(LakewardError):
    """A write or table service on a `Table` after its `close()`: open the table again."""


class StorageError(LakewardError, OSError):
    """A filesystem operation failed."""


class IndexNotFoundError(LakewardError, LookupError):
    """No secondary index of that name is defined on the table."""


class IndexExistsError(LakewardError, FileExistsError):
    """A secondary index of that name is already defined on the table."""


class UnsupportedTableVersionError(LakewardError):
    """The table's `hoodie.table.version` is one lakeward cannot open (e.g. 10 and later).

    Not a CorruptTableError: the table is valid, only newer (or older) than lakeward
    understands. `version` is the table's version, `supported` the ones lakeward opens.
    """

    def __init__(self, message: str, version: int | str, supported: tuple[int, ...] = ()):
        super().__init__(message)
        self.version = version
        self.supported = supported


class ReadOnlyTableVersionError(UnsupportedTableVersionError):
    """A write or table service was attempted on a table version lakeward only reads (8, 9)."""


class MetadataTableError(LakewardError):
    """A write to a table with a metadata table (`hoodie.table.metadata.partitions` non-empty),
    which lakeward does not maintain yet: refused before anything is written."""


class UpgradeError(LakewardError):
    """A table-version upgrade lakeward refuses (a downgrade, version 7, a table it cannot carry over):
    raised before anything is written."""


class TableVersionChangedError(LakewardError):
    """The table's version changed (an upgrade) after this handle read it: a write or a plan prepared
    under the old version is refused before it writes anything under the new one. Open the table again."""

    def __init__(self, message: str, expected: int, found: int):
        super().__init__(message)
        self.expected = expected
        self.found = found


class CorruptFileError(CorruptTableError):
    """A data file (base or log) a completed instant wrote is damaged: unreadable, truncated or
    torn. `path` is the file's URI, `instant` the completed instant that wrote it (None if unknown)."""

    def __init__(self, message: str, path: str | None = None, instant: str | None = None):
        super().__init__(message)
        self.path = path
        self.instant = instant


class MissingFileError(CorruptFileError):
    """A data file a completed instant wrote, still live (not replaced nor cleaned), is missing."""


class SharedLockRequiredError(ConcurrentWriteError):
    """Another process is writing the table while this writer uses the in-process lock.

    The in-process lock serialises the writers of one process only; two processes writing
    one table need a lock they share (ZooKeeper). Nothing was written.
    """


class SparkSessionLostError(LakewardError):
    """The Spark session's JVM cannot be reached (it died or was killed): the write was rolled back, or the
    service's plan stays pending; a new SparkSession (or the local engine) can run it again."""


class RollbackAbortedError(LakewardError):
    """A rollback stopped before deleting anything: the instant it targets completed meanwhile
    (or, resumed, another runner already completed the rollback)."""


def did_you_mean(key: str, known: Iterable[str], limit: int = 3) -> str:
    """` -- did you mean 'a' or 'b'?` naming the known keys closest to a misspelled `key` ('' when none is close)."""
    close = difflib.get_close_matches(key, sorted(set(known)), n=limit, cutoff=0.75)
    if not close:
        return ""
    return " -- did you mean " + " or ".join(repr(c) for c in close) + "?"
