"""Spark entry points: `register(spark)` makes format `lakeward` available; `SparkEngine` runs core on Spark."""

from lakeward.core.engine.spark import SparkEngine
from lakeward.core.spark.datasource import FORMAT, read_dataframe, register, write_dataframe

__all__ = ["FORMAT", "SparkEngine", "read_dataframe", "register", "write_dataframe"]
