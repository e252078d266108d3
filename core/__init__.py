"""lakeward.core: write and read Apache Hudi table version 6 tables."""

from lakeward.core.table import Table
from lakeward.core.write.client import WriteResult
from lakeward.core.write.operation import WriteOperation

__all__ = ["Table", "WriteOperation", "WriteResult"]
