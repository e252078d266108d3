"""Format `lakeward` without a call: PySpark 4 registers, at session start-up, the `DefaultSource` of
every importable top-level package named `pyspark_*` (a Python data source).

Sessions get reads through `spark.read.format("lakeward").load(path)` this way; call
`lakeward.spark.register(spark)` for secondary-index pushdown, `df.write.format("lakeward")` and the
SQL functions. PySpark looks the package up once per JVM, with the driver's default Python
(PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON, else `python3` on PATH -- e.g. an activated virtualenv),
by listing its Python path (`pkgutil.iter_modules`): a regular install is found, while an editable
install (`pip install -e`) is only found when the checkout is on that Python path.
"""

from lakeward.core.spark.datasource import auto_data_source_class

DefaultSource = auto_data_source_class()

__all__ = ["DefaultSource"]
