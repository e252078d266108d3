"""How format `lakeward` maps Spark's Hadoop `fs.s3a.*` settings to lakeward's S3 options."""

from __future__ import annotations

import pytest

from lakeward.core.exceptions import ConfigError
from lakeward.core.spark.storage_settings import hadoop_s3_options, storage_options_of


def test_a_bare_endpoint_takes_its_scheme_from_the_ssl_setting():
    assert hadoop_s3_options({"fs.s3a.endpoint": "minio:9000"}, "b") == {"aws_endpoint_url": "https://minio:9000"}
    plain = hadoop_s3_options({"fs.s3a.endpoint": "minio:9000", "fs.s3a.connection.ssl.enabled": "false"}, "b")
    assert plain == {"aws_endpoint_url": "http://minio:9000", "aws_allow_http": "true"}
    given = hadoop_s3_options({"fs.s3a.endpoint": "http://minio:9000"}, "b")
    assert given == {"aws_endpoint_url": "http://minio:9000", "aws_allow_http": "true"}


def test_credentials_region_and_per_bucket_settings():
    settings = {
        "fs.s3a.access.key": "general",
        "fs.s3a.bucket.lake.access.key": "lake's",
        "fs.s3a.secret.key": "s",
        "fs.s3a.session.token": "t",
        "fs.s3a.endpoint.region": "eu-west-1",
        "fs.s3a.endpoint": "  ",  # blank: unset
    }
    assert hadoop_s3_options(settings, "lake") == {
        "aws_access_key_id": "lake's",
        "aws_secret_access_key": "s",
        "aws_session_token": "t",
        "aws_region": "eu-west-1",
    }
    assert hadoop_s3_options(settings, "other")["aws_access_key_id"] == "general"


def test_storage_options_among_read_options_are_checked():
    options = {"hoodie.datasource.query.type": "snapshot", "aws_region": "us-east-1"}
    assert storage_options_of(options) == {"aws_region": "us-east-1"}
    with pytest.raises(ConfigError, match="aws_regoin"):
        storage_options_of({"aws_regoin": "us-east-1"})
    with pytest.raises(ConfigError, match="aws_endpoint_url"):
        storage_options_of({"aws_endpoint_url": "minio:9000"})
