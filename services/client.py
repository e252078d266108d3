"""A small client of the daemon's HTTP API, for the CLI, scripts and tests."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from lakeward.services.names import API_PREFIX, DEFAULT_URL, TOKEN_ENV_VAR, URL_ENV_VAR


class DaemonAPIError(Exception):
    """The daemon answered with an error (4xx/5xx) or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _seg(value: str) -> str:
    """`value` as one URL path segment: percent-encoded, '/' included (a discovered table is named after
    its folders, and a folder's name may hold '#', '?', '%' or a space)."""
    return quote(value, safe="")


class DaemonClient:
    """Calls one replica's API; raises DaemonAPIError with the daemon's own message."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout_s: float = 30.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        try:
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)
        except (httpx.InvalidURL, ValueError) as exc:
            raise DaemonAPIError(f"{url!r} is not a valid daemon URL (--url, LAKEWARD_URL): {exc}") from None
        #: The headers of the last answer (e.g. `X-Lakeward-Unmatched-Overrides` of `tables()`).
        self.last_headers: httpx.Headers = httpx.Headers()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise DaemonAPIError(f"cannot reach the daemon at {self.url}: {exc}") from None
        self.last_headers = response.headers
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise DaemonAPIError(f"{response.status_code}: {detail}", response.status_code)
        return response.json()

    def ready(self) -> dict[str, Any]:
        try:
            return dict(self._http.get("/readyz").json())
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            raise DaemonAPIError(f"cannot reach the daemon at {self.url}: {exc}") from None

    def tables(self) -> list[dict[str, Any]]:
        return list(self._call("GET", f"{API_PREFIX}/tables"))

    def table(self, name: str) -> dict[str, Any]:
        return dict(self._call("GET", f"{API_PREFIX}/tables/{_seg(name)}"))

    def plans(self, name: str | None = None) -> list[dict[str, Any]]:
        path = f"{API_PREFIX}/tables/{_seg(name)}/plans" if name else f"{API_PREFIX}/plans"
        return list(self._call("GET", path))

    def runs(self, state: str = "all", table: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"state": state, "limit": limit}
        if table:
            params["table"] = table
        return list(self._call("GET", f"{API_PREFIX}/runs", params=params))

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"{API_PREFIX}/runs/{_seg(run_id)}"))

    def trigger(
        self, name: str, action: str, mode: str = "schedule_and_run", instant: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"action": action, "mode": mode}
        if dry_run:
            body["dry_run"] = True
        if instant:
            body["instant"] = instant
        return dict(self._call("POST", f"{API_PREFIX}/tables/{_seg(name)}/trigger", json=body))

    def pause(self, name: str, reason: str = "") -> dict[str, Any]:
        return dict(self._call("POST", f"{API_PREFIX}/tables/{_seg(name)}/pause", json={"reason": reason}))

    def resume(self, name: str) -> dict[str, Any]:
        return dict(self._call("POST", f"{API_PREFIX}/tables/{_seg(name)}/resume"))

    def cancel(self, run_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"{API_PREFIX}/runs/{_seg(run_id)}/cancel"))

    def quarantine(self) -> list[dict[str, Any]]:
        return list(self._call("GET", f"{API_PREFIX}/quarantine"))

    def release(self, key: str) -> dict[str, Any]:
        return dict(self._call("POST", f"{API_PREFIX}/quarantine/release", json={"key": key}))

    def audit(self, limit: int = 100, token: str | None = None, target: str | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if token:
            params["token"] = token
        if target:
            params["target"] = target
        return list(self._call("GET", f"{API_PREFIX}/audit", params=params))

    def claims(self, limit: int = 10_000) -> dict[str, Any]:
        return dict(self._call("GET", f"{API_PREFIX}/claims", params={"limit": limit}))

    def explain(self, name: str, action: str | None = None) -> dict[str, Any]:
        params = {"action": action} if action else {}
        return dict(self._call("GET", f"{API_PREFIX}/tables/{_seg(name)}/explain", params=params))

    def health(self, name: str | None = None) -> Any:
        """One table's health report (a dict), or every table's (a list) without a name."""
        return self._call("GET", f"{API_PREFIX}/tables/{_seg(name)}/health" if name else f"{API_PREFIX}/health")


__all__ = ["DEFAULT_URL", "TOKEN_ENV_VAR", "URL_ENV_VAR", "DaemonAPIError", "DaemonClient"]
