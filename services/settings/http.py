"""The ``http`` section: the HTTP API's bind address and bearer tokens."""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from lakeward.services.settings.base import Section


def _split_tokens(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = json.loads(text)
        else:
            value = [t.strip() for t in text.split(",") if t.strip()]
    if isinstance(value, list):
        # A bare token (the old form, still valid) is named after its position: token-1, token-2, ...
        return [
            {"name": f"token-{i + 1}", "token": t} if isinstance(t, str | SecretStr) else t for i, t in enumerate(value)
        ]
    return value


#: A host name: dot-separated labels of letters, digits, '-' (and '_', which container names use).
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?$")


def check_host(value: str) -> str:
    """`value` if it is an IP address or a host name (not resolved here), else ValueError naming it."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not _HOST_NAME.match(value):
        raise ValueError(f"{value!r} is not a host name or an IP address")
    return value


class ApiToken(Section):
    """A bearer token and its name (the audit log records who called by this name, never the token)."""

    name: str = Field(
        min_length=1, max_length=100, pattern=r"^[\w.@-]+$", description="Who uses the token (in the audit log)."
    )
    token: SecretStr = Field(description="The bearer token itself.")

    def get_secret_value(self) -> str:
        """The token itself (as `SecretStr`, which bare tokens were before they had names)."""
        return self.token.get_secret_value()


class HttpSettings(Section):
    """The HTTP API (and /metrics, /healthz, /readyz)."""

    host: str = Field(default="127.0.0.1", min_length=1, description="Bind address (0.0.0.0 in a container).")
    port: int = Field(default=8080, ge=0, le=65535, description="Bind port (0: any free port).")
    api_tokens: Annotated[list[ApiToken], NoDecode] = Field(
        default_factory=list,
        description="Bearer tokens accepted; mutating calls need one. Each is a token (named token-1, "
        "token-2, ... by position) or {name, token} (env: JSON list or comma-separated).",
    )
    protect_reads: bool = Field(
        default=False, description="Reads need a token too (/healthz, /readyz, /metrics stay open)."
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return check_host(value)

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_tokens(value)

    @field_validator("api_tokens")
    @classmethod
    def _nonempty(cls, tokens: list[ApiToken]) -> list[ApiToken]:
        names: set[str] = set()
        for i, token in enumerate(tokens):
            secret = token.get_secret_value()
            if not secret or secret != secret.strip():
                raise ValueError(f"[{i}]: a token must be non-empty, without surrounding spaces")
            if token.name in names:
                raise ValueError(f"[{i}].name: {token.name!r} names two tokens")
            names.add(token.name)
        return tokens

    @model_validator(mode="after")
    def _reads_need_tokens(self) -> HttpSettings:
        if self.protect_reads and not self.api_tokens:
            raise ValueError("protect_reads: needs at least one entry in api_tokens")
        return self

    def token_ok(self, token: str | None) -> bool:
        """Whether ``token`` is one of the configured tokens (constant-time comparison)."""
        return self.token_name(token) is not None

    def token_name(self, token: str | None) -> str | None:
        """The name of the configured token ``token`` (None if it is not one; constant-time comparison)."""
        if not token:
            return None
        given = token.encode()
        found = None
        for t in self.api_tokens:
            if hmac.compare_digest(given, t.get_secret_value().encode()):
                found = t.name
        return found
