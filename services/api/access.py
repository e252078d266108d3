"""Who may call what: reads open unless `http.protect_reads`; mutating calls need a bearer token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, params
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lakeward.services.settings import HttpSettings

_bearer = HTTPBearer(auto_error=False)


@dataclass(frozen=True)
class Access:
    """The two guards a route depends on: `read` (GET under the API prefix) and `write` (POST)."""

    read: params.Depends
    write: params.Depends


def access_for(http: HttpSettings) -> Access:
    """The guards for the daemon's `http` settings."""

    def require_token(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if not http.api_tokens:
            raise HTTPException(403, "mutating calls are disabled: no http.api_tokens are configured")
        if credentials is None:
            raise HTTPException(401, "this call needs 'Authorization: Bearer <token>'", {"WWW-Authenticate": "Bearer"})
        if not http.token_ok(credentials.credentials):
            raise HTTPException(403, "the bearer token is not one of http.api_tokens")

    def reads_allowed(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if http.protect_reads:
            require_token(credentials)

    return Access(read=Depends(reads_allowed), write=Depends(require_token))
