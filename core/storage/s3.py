"""S3 specifics: building the pyarrow filesystem and the conditional PUT.

Options use the names hudi-rs (object_store) uses, so one dict configures both readers:
`aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`, `aws_region`,
`aws_endpoint_url` (e.g. `http://127.0.0.1:8333`), `aws_allow_http`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from lakeward.core.exceptions import ConfigError

KNOWN_OPTIONS = frozenset(
    {
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "aws_region",
        "aws_endpoint_url",
        "aws_allow_http",
    }
)


def _checked(options: Mapping[str, str]) -> dict[str, str]:
    unknown = sorted(k for k in options if k.startswith("aws_") and k not in KNOWN_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown S3 option(s) {unknown}; known: {sorted(KNOWN_OPTIONS)}")
    return {k: v for k, v in options.items() if k in KNOWN_OPTIONS}


def filesystem(options: Mapping[str, str]) -> pafs.S3FileSystem:
    """A pyarrow S3 filesystem for the given options."""
    opts = _checked(options)
    kwargs: dict[str, Any] = {}
    if "aws_access_key_id" in opts:
        kwargs["access_key"] = opts["aws_access_key_id"]
        kwargs["secret_key"] = opts.get("aws_secret_access_key", "")
    if "aws_session_token" in opts:
        kwargs["session_token"] = opts["aws_session_token"]
    if "aws_region" in opts:
        kwargs["region"] = opts["aws_region"]
    if "aws_endpoint_url" in opts:
        endpoint = urlparse(opts["aws_endpoint_url"])
        kwargs["endpoint_override"] = endpoint.netloc or endpoint.path
        kwargs["scheme"] = endpoint.scheme or "https"
    return pafs.S3FileSystem(**kwargs)


@lru_cache(maxsize=16)
def _client(frozen_options: tuple[tuple[str, str], ...]) -> Any:
    import boto3  # imported lazily: only S3 tables need it

    opts = dict(frozen_options)
    return boto3.client(
        "s3",
        aws_access_key_id=opts.get("aws_access_key_id"),
        aws_secret_access_key=opts.get("aws_secret_access_key"),
        aws_session_token=opts.get("aws_session_token"),
        region_name=opts.get("aws_region", "us-east-1"),
        endpoint_url=opts.get("aws_endpoint_url"),
    )


def put_if_absent(options: Mapping[str, str], bucket: str, key: str, data: bytes) -> bool:
    """PUT `data` at `key` only if no object exists there; False when another writer won."""
    from botocore.exceptions import ClientError

    client = _client(tuple(sorted(_checked(options).items())))
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise
    return True
