"""S3 specifics: building the pyarrow filesystem and the conditional PUT.

Options use the names hudi-rs (object_store) uses, so one dict configures both readers:
`aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`, `aws_region`,
`aws_endpoint_url` (e.g. `http://127.0.0.1:8333`), `aws_allow_http`. The endpoint, region and
`aws_allow_http` come from the environment (`AWS_ENDPOINT_URL`, ...) when not given, as in hudi-rs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from lakeward.core.exceptions import ConfigError, did_you_mean

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


#: Options taken from the environment (`AWS_ENDPOINT_URL`, ...) when not given, as hudi-rs takes them;
#: credentials need no entry: pyarrow and boto3 find them through the AWS SDK's own chain.
FROM_ENVIRONMENT = ("aws_endpoint_url", "aws_region", "aws_allow_http")


def resolved_options(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`options` checked, completed from the environment (`FROM_ENVIRONMENT`); ConfigError names the key."""
    env = os.environ if environ is None else environ
    given = _checked(options)
    for key in FROM_ENVIRONMENT:
        if key not in given and env.get(key.upper()):
            given[key] = env[key.upper()]
    allow = given.get("aws_allow_http", "").strip().lower()
    if allow not in ("", "true", "false"):
        raise ConfigError(f"aws_allow_http must be true or false, not {given['aws_allow_http']!r}")
    if "aws_endpoint_url" in given:
        scheme = urlparse(given["aws_endpoint_url"]).scheme
        if scheme not in ("http", "https") or not urlparse(given["aws_endpoint_url"]).netloc:
            raise ConfigError(
                f"aws_endpoint_url must be an http:// or https:// URL (e.g. http://127.0.0.1:8333), "
                f"not {given['aws_endpoint_url']!r}"
            )
        if scheme == "http" and allow == "false":
            raise ConfigError(
                f"aws_endpoint_url {given['aws_endpoint_url']!r} is plain http while aws_allow_http is false: "
                "set aws_allow_http=true (hudi-rs needs it too) or use https"
            )
    return given


def _checked(options: Mapping[str, str]) -> dict[str, str]:
    unknown = sorted(k for k in options if k.startswith("aws_") and k not in KNOWN_OPTIONS)
    if unknown:
        hint = did_you_mean(unknown[0], KNOWN_OPTIONS)
        raise ConfigError(f"unknown S3 option(s) {unknown}{hint}; known: {sorted(KNOWN_OPTIONS)}")
    return {k: v for k, v in options.items() if k in KNOWN_OPTIONS}


def filesystem(options: Mapping[str, str]) -> pafs.S3FileSystem:
    """A pyarrow S3 filesystem for the given options (see `resolved_options`)."""
    opts = resolved_options(options)
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
        kwargs["endpoint_override"] = endpoint.netloc
        kwargs["scheme"] = endpoint.scheme
    return pafs.S3FileSystem(**kwargs)


#: Attempts of one conditional PUT (timeouts, dropped connections, 409s, 5xx are retried).
PUT_ATTEMPTS = 4
#: Seconds an attempt waits for S3's answer: timeline files are small, and a writer holds the table
#: lock meanwhile (4 attempts of 60 s held it 4 minutes against a stalled server).
PUT_READ_TIMEOUT_S = 15


class S3ClientError(Exception):
    """botocore's errors, for callers that must not import botocore (it loads only for S3 tables).
    `maybe_written`: an attempt got no answer, so the object may exist now (or later, once a stalled
    server resumes): the outcome is unknown."""

    def __init__(self, message: str, maybe_written: bool = False):
        super().__init__(message)
        self.maybe_written = maybe_written


@lru_cache(maxsize=16)
def _client(frozen_options: tuple[tuple[str, str], ...]) -> Any:
    import boto3  # imported lazily: only S3 tables need it
    from botocore.config import Config

    opts = dict(frozen_options)
    client = boto3.client(
        "s3",
        aws_access_key_id=opts.get("aws_access_key_id"),
        aws_secret_access_key=opts.get("aws_secret_access_key"),
        aws_session_token=opts.get("aws_session_token"),
        region_name=opts.get("aws_region", "us-east-1"),
        endpoint_url=opts.get("aws_endpoint_url"),
        # put_if_absent retries itself: a blind retry of a conditional PUT whose first
        # attempt did succeed would see 412 and report a lost race that was won.
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=PUT_READ_TIMEOUT_S),
    )
    client.meta.events.register("before-sign.s3.PutObject", _no_expect_continue)
    return client


def _no_expect_continue(request: Any, **_: Any) -> None:
    """Send PUT bodies without `Expect: 100-continue` (timeline files are small).

    After an empty PUT (Hudi's `.requested` files are empty) sent with that header,
    SeaweedFS 4.x garbles its answer to the next PUT on the same connection: botocore
    then waits for the read timeout (60 s), and the retry reports a lost race although
    the first attempt wrote the file. Without the header every PUT answers at once.
    """
    if "Expect" in request.headers:
        del request.headers["Expect"]


def _holds(client: Any, bucket: str, key: str, data: bytes) -> bool:
    """True if the object at `key` has exactly the bytes `data`."""
    # lazy: boto3 loads only for S3
    from botocore.exceptions import ClientError

    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            return bool(body.read() == data)
        finally:
            body.close()
    except ClientError as exc:
        if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
            return False
        raise


def put_if_absent(options: Mapping[str, str], bucket: str, key: str, data: bytes) -> bool:
    """PUT `data` at `key` only if no object exists there; False when another writer won.

    Timeouts, dropped connections, 409 ConditionalRequestConflict and 5xx answers are
    retried. If an attempt may have written the object before failing (no answer), a
    later 412 is checked against the stored bytes: the same bytes mean this call won.
    Failures raise `S3ClientError`, saying whether an attempt may have written the object.
    """
    # lazy: boto3 loads only for S3
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

    maybe_written = False
    try:
        client = _client(tuple(sorted(_checked(options).items())))
        for attempt in range(1, PUT_ATTEMPTS + 1):
            try:
                client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
                return True
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
                if status == 412 or code == "PreconditionFailed":
                    return maybe_written and _holds(client, bucket, key, data)
                if not (status == 409 or code == "ConditionalRequestConflict" or status >= 500):
                    raise
                maybe_written = maybe_written or status >= 500
                if attempt == PUT_ATTEMPTS:
                    raise
            except HTTPClientError:  # sent, but no (complete) answer: may have been written
                maybe_written = True
                if attempt == PUT_ATTEMPTS:
                    raise
            except ConnectionError:  # not sent
                if attempt == PUT_ATTEMPTS:
                    raise
            time.sleep(0.1 * 2**attempt)
    except (BotoCoreError, ClientError) as exc:
        raise S3ClientError(str(exc), maybe_written=maybe_written) from exc
    raise AssertionError("unreachable")
