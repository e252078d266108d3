"""The ``http`` section: the HTTP API's bind address and bearer tokens."""

from __future__ import annotations

import hmac
import json
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from lakeward.services.settings.base import Section


def _split_tokens(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [t.strip() for t in text.split(",") if t.strip()]
    return value


class HttpSettings(Section):
    """The HTTP API (and /metrics, /healthz, /readyz)."""

    host: str = Field(default="127.0.0.1", min_length=1, description="Bind address (0.0.0.0 in a container).")
    port: int = Field(default=8080, ge=0, le=65535, description="Bind port (0: any free port).")
    api_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="Bearer tokens accepted; mutating calls need one (env: JSON list or comma-separated).",
    )
    protect_reads: bool = Field(
        default=False, description="Reads need a token too (/healthz, /readyz, /metrics stay open)."
    )

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_tokens(value)

    @field_validator("api_tokens")
    @classmethod
    def _nonempty(cls, tokens: list[SecretStr]) -> list[SecretStr]:
        for i, token in enumerate(tokens):
            secret = token.get_secret_value()
            if not secret or secret != secret.strip():
                raise ValueError(f"[{i}]: a token must be non-empty, without surrounding spaces")
        return tokens

    @model_validator(mode="after")
    def _reads_need_tokens(self) -> HttpSettings:
        if self.protect_reads and not self.api_tokens:
            raise ValueError("protect_reads: needs at least one entry in api_tokens")
        return self

    def token_ok(self, token: str | None) -> bool:
        """Whether ``token`` is one of the configured tokens (constant-time comparison)."""
        if not token:
            return False
        given = token.encode()
        return any(hmac.compare_digest(given, t.get_secret_value().encode()) for t in self.api_tokens)
