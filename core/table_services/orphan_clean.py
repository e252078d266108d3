"""Orphan-file removal as a table service: each run finds and (unless a dry run) deletes orphans.

The rules are `lakeward.core.orphans`'s (Hudi's repair rules: never files of pending
instants, of instants newer than the threshold, under `.hoodie/`, or referenced by
savepoints). There is no plan on the timeline: the run's report lists every file it removed,
or would remove in a dry run. Two table options set it (the daemon derives them from its
`orphan_clean` policy): `lakeward.orphan_clean.older_than_s` (default one day) and
`lakeward.orphan_clean.dry_run` (default true: find and list, delete nothing).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from lakeward.core.config.values import parse_bool
from lakeward.core.config.write import ORPHAN_CLEAN_DRY_RUN_KEY, ORPHAN_CLEAN_OLDER_THAN_KEY
from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConfigError
from lakeward.core.orphans import DEFAULT_OLDER_THAN, OrphanReport, remove_orphans
from lakeward.core.table_services.service import DirectService, ServiceReport

OLDER_THAN_KEY = ORPHAN_CLEAN_OLDER_THAN_KEY
DRY_RUN_KEY = ORPHAN_CLEAN_DRY_RUN_KEY


def orphan_clean_settings(options: Mapping[str, Any]) -> tuple[dt.timedelta, bool]:
    """(older_than, dry_run) from a table's options (module doc)."""
    older = options.get(OLDER_THAN_KEY)
    older_than = DEFAULT_OLDER_THAN if older is None else dt.timedelta(seconds=_seconds(older))
    dry_run = parse_bool(options.get(DRY_RUN_KEY, True), DRY_RUN_KEY)
    return older_than, dry_run


def _seconds(value: Any) -> float:
    """A finite, non-negative number of seconds; ConfigError naming the key otherwise."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0 or seconds > _MAX_SECONDS:
        raise ConfigError(f"{OLDER_THAN_KEY}={value!r} must be a number of seconds, 0 or more")
    return seconds


#: timedelta's own bound, in seconds.
_MAX_SECONDS = dt.timedelta.max.total_seconds()


class OrphanCleanService(DirectService[OrphanReport]):
    """Orphan removal as a table service (module doc)."""

    action = "orphan_clean"

    def execute(self, instant_time: str | None = None, *, engine: Engine | None = None) -> OrphanReport:
        older_than, dry_run = orphan_clean_settings(self.ctx.options)
        return remove_orphans(self.ctx, older_than, dry_run=dry_run)

    def report(self, result: OrphanReport) -> ServiceReport:
        if result.dry_run:
            files = tuple(o.path for o in result.orphans)
            detail = f"dry run: {len(files)} orphan file(s) would be removed ({result.orphan_bytes} bytes)"
        else:
            files = result.removed
            failed = sum(1 for r in result.removals if not r.removed)
            detail = f"{len(files)} orphan file(s) removed" + (f", {failed} could not be" if failed else "")
        return ServiceReport(None, nothing_to_do=not result.orphans, detail=detail, files=files)


__all__ = ["DRY_RUN_KEY", "OLDER_THAN_KEY", "OrphanCleanService", "orphan_clean_settings"]
