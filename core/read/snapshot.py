"""Former home of the slice reader, now `lakeward.core.file_group.reader` (`FileGroupReader`).

Kept as a re-export because the interop suite (which stays untouched) imports it from here.
"""

from lakeward.core.file_group.reader import DICTIONARY_META_COLUMNS, FileGroupReader, read_file_slices

__all__ = ["DICTIONARY_META_COLUMNS", "FileGroupReader", "read_file_slices"]
