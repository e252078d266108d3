"""State transitions of instants: requested -> inflight -> completed, each a file under `.hoodie/`.

Requested and completed files are created with an atomic create-if-absent, so two
writers can never take the same instant time nor both complete it; a completed file
is never overwritten.
"""

from __future__ import annotations

import posixpath

from lakeward.core.exceptions import ConcurrentWriteError, CorruptTableError
from lakeward.core.storage import Storage
from lakeward.core.table_version import TimelineLayout, rules_for_layout
from lakeward.core.timeline.instant import Action, Instant, State
from lakeward.core.timeline.instant_time import new_instant_time
from lakeward.core.timeline.lsm_history import load_archived_instants, read_archived_content
from lakeward.core.timeline.metadata import CommitMetadata
from lakeward.core.timeline.timeline import Timeline


def instant_path(instant: Instant) -> str:
    """Path of the instant's file: in `.hoodie/` (layout 1) or `.hoodie/timeline/` (layout 2)."""
    return posixpath.join(instant.layout.timeline_folder, instant.file_name)


def create_requested(
    storage: Storage,
    time: str,
    action: Action,
    content: bytes = b"",
    layout: TimelineLayout = TimelineLayout.V1,
) -> Instant:
    """Take instant time `time` for `action`: its requested file, created only if absent."""
    instant = Instant(time, action, State.REQUESTED, layout=layout)
    storage.create_if_absent(instant_path(instant), content)
    return instant


def transition_to_inflight(storage: Storage, requested: Instant, content: bytes = b"") -> Instant:
    """requested -> inflight. ConcurrentWriteError when the requested file is gone: a restore or another
    process's rollback undid the instant since it was requested, and an inflight file written now would
    bring it back (a write would then complete that the restore reports rolled back)."""
    if not storage.exists(instant_path(requested)):
        raise ConcurrentWriteError(
            f"{requested} was rolled back (by a restore, or a rollback in another process) before it began: "
            "nothing was written; retry"
        )
    inflight = requested.with_state(State.INFLIGHT)
    storage.write_bytes(instant_path(inflight), content)
    return inflight


def complete(storage: Storage, inflight: Instant, content: bytes, timezone: str = "LOCAL") -> Instant:
    """Publish the completed instant: the single atomic step that makes a write visible.

    On timeline layout 2 the completed file is named `<t>_<c>.<action>` with a completion
    time `c` taken now, later than every requested and completion time on the timeline (so
    completion times increase in the order instants complete, and exceed `t`), in the
    table's timeline time zone `timezone`.
    """
    completion = None
    if inflight.layout.completion_time_in_name:
        latest = Timeline.load(storage, inflight.layout).latest_time()
        completion = new_instant_time(max(latest or "", inflight.time), timezone)
    completed = inflight.with_state(State.COMPLETED, completion)
    storage.create_if_absent(instant_path(completed), content)
    return completed


def read_instant(storage: Storage, instant: Instant) -> bytes:
    """The content of an instant's file; for an archived instant, its row in the LSM history.

    A completed instant of the active timeline whose file is gone was archived since the
    timeline was loaded (an archival beside the reader): on layout 2 its content is read
    from the LSM history; otherwise FileNotFoundError.
    """
    if instant.archive_file is not None:
        return read_archived_content(storage, instant)
    try:
        return storage.read_bytes(instant_path(instant))
    except FileNotFoundError:
        history = rules_for_layout(instant.layout).history_folder
        if not instant.is_completed or history is None:
            raise
        for archived in load_archived_instants(storage, history, instant.time, instant.time):
            if archived.action is instant.action.completed_action:
                return read_archived_content(storage, archived)
        raise


def delete_pending_files(
    storage: Storage, time: str, action: Action, layout: TimelineLayout = TimelineLayout.V1
) -> None:
    """Remove the requested and inflight files of a pending instant (after its rollback)."""
    for state in (State.INFLIGHT, State.REQUESTED):
        storage.delete_file(instant_path(Instant(time, action, state, layout=layout)))


def read_commit_metadata(storage: Storage, instant: Instant) -> CommitMetadata:
    """The commit metadata (JSON or Avro) of a completed commit, deltacommit or replacecommit.

    An empty file is empty metadata on version 6 and a CorruptTableError on versions 8+
    (`MetadataEncoding.empty_is_valid`).
    """
    data = read_instant(storage, instant)
    if not data.strip() and not rules_for_layout(instant.layout).metadata_encoding.empty_is_valid:
        where = storage.uri_of(instant.archive_file or instant_path(instant))
        raise CorruptTableError(
            f"completed {instant.action.value} {instant.file_name} ({where}) is empty: a Hudi 1.x timeline "
            "holds Avro commit metadata in every completed write (the file was truncated?)"
        )
    return CommitMetadata.from_bytes(data, instant.file_name)
