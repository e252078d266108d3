"""Where format `lakeward` finds a table's S3 settings, so that Spark users configure S3 once.

In order: the read's or write's own `aws_*` options (`.option("aws_endpoint_url", ...)`, the names
`Table(storage_options=)` and hudi-rs take), then the session's Hadoop `fs.s3a.*` settings (which
Spark's own `s3a` scan uses: `spark.hadoop.fs.s3a.endpoint`, `...access.key`, `...secret.key`,
`...session.token`, `...endpoint.region`, `...connection.ssl.enabled`, and their per-bucket forms
`fs.s3a.bucket.<bucket>.*`), then the environment (`AWS_ENDPOINT_URL`, the AWS SDK's credential chain).
The driver resolves them and hands them to the Python data source as `aws_*` options, which reach
every Python task with the read's plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from lakeward.core.engine import Engine
from lakeward.core.storage import s3
from lakeward.core.table import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The prefix of the S3 options format `lakeward` takes (`s3.KNOWN_OPTIONS`).
PREFIX = "aws_"

#: lakeward's S3 option of each Hadoop `fs.s3a.*` setting that has one.
_FROM_HADOOP = {
    "access.key": "aws_access_key_id",
    "secret.key": "aws_secret_access_key",
    "session.token": "aws_session_token",
    "endpoint.region": "aws_region",
}


def is_storage_option(key: str) -> bool:
    return str(key).startswith(PREFIX)


def storage_options_of(options: Mapping[str, Any]) -> dict[str, str]:
    """The `aws_*` options among a read's or write's options; ConfigError names an unknown one."""
    given = {str(k): str(v) for k, v in options.items() if is_storage_option(str(k))}
    s3.resolved_options(given, environ={})  # checks names and values, adds nothing
    return given


def open_table(path: str, options: Mapping[str, Any], engine: Engine | None = None) -> Table:
    """The table at `path`, reached with the `aws_*` options among `options`."""
    return Table.open(path, storage_options=storage_options_of(options), engine=engine)


def hadoop_s3_options(settings: Mapping[str, str], bucket: str) -> dict[str, str]:
    """lakeward's S3 options from Hadoop `fs.s3a.*` settings (keys without `spark.hadoop.`); a
    per-bucket setting (`fs.s3a.bucket.<bucket>.endpoint`) wins over the general one."""

    def setting(name: str) -> str | None:
        value = settings.get(f"fs.s3a.bucket.{bucket}.{name}") or settings.get(f"fs.s3a.{name}")
        return value.strip() if value and value.strip() else None

    options = {key: value for name, key in _FROM_HADOOP.items() if (value := setting(name))}
    endpoint = setting("endpoint")
    if endpoint:
        if "://" not in endpoint:  # s3a takes a bare host and picks the scheme by this setting
            secure = (setting("connection.ssl.enabled") or "true").lower() != "false"
            endpoint = f"{'https' if secure else 'http'}://{endpoint}"
        options["aws_endpoint_url"] = endpoint
        if urlparse(endpoint).scheme == "http":
            options["aws_allow_http"] = "true"
    return options


_HADOOP_NAMES = (*_FROM_HADOOP, "endpoint", "connection.ssl.enabled")


def session_s3_settings(spark: SparkSession, bucket: str) -> dict[str, str]:
    """The session's Hadoop `fs.s3a.*` settings that `hadoop_s3_options` maps, general and for `bucket`:
    from the live Hadoop configuration (which also holds `spark.hadoop.*` and settings made at run
    time), or from the session's `spark.hadoop.*` conf where there is none (Spark Connect)."""
    names = [f"fs.s3a.{n}" for n in _HADOOP_NAMES] + [f"fs.s3a.bucket.{bucket}.{n}" for n in _HADOOP_NAMES]
    try:
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        found = {name: hadoop.get(name) for name in names}
    except Exception:  # noqa: BLE001 - no JVM context here (Spark Connect): the session conf has them
        found = {name: spark.conf.get(f"spark.hadoop.{name}", None) for name in names}
    return {name: str(value) for name, value in found.items() if value is not None}


def with_session_s3_options(spark: SparkSession, path: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` completed with the S3 options the session's `fs.s3a.*` settings give a table on S3;
    the options' own `aws_*` keys win."""
    parsed = urlparse(path)
    if parsed.scheme not in ("s3", "s3a"):
        return dict(options)
    return {**hadoop_s3_options(session_s3_settings(spark, parsed.netloc), parsed.netloc), **options}
