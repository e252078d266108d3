"""Former home of the merge-on-read reader, now `lakeward.core.file_group.reader`.

Kept as a re-export because the interop suite (which stays untouched) imports it from here.
"""

from lakeward.core.file_group.reader import (
    MergeSettings,
    VisibleInstants,
    merge_log_blocks,
    read_merged_file_slice,
    visible_log_blocks,
)

__all__ = ["MergeSettings", "VisibleInstants", "merge_log_blocks", "read_merged_file_slice", "visible_log_blocks"]
