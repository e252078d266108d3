"""lakeward: Hudi-format (table version 6) lakehouse tables and their table services."""

from lakeward.core import Table, WriteOperation, WriteResult
from lakeward.core.exceptions import LakewardError

__all__ = ["LakewardError", "Table", "WriteOperation", "WriteResult"]
__version__ = "0.1.0"
