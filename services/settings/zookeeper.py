"""The ``zookeeper`` section: claims coordination (or the in-process coordinator without hosts)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from lakeward.services.settings.base import Section


class ZooKeeperSettings(Section):
    """Claims coordination. Without hosts, an in-process coordinator is used: one replica only."""

    hosts: str | None = Field(
        default=None,
        description="host:port[,host:port...] (a YAML list is accepted); None: in-process coordinator.",
        json_schema_extra={
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]
        },
    )
    chroot: str = Field(default="/lakeward", description="Every node of the daemon lives under this path.")
    claims_path: str = Field(default="/claims", description="Where claims are created, under the chroot.")
    session_timeout_s: float = Field(default=30.0, gt=0, description="ZooKeeper session timeout.")
    connection_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "How long to wait for a connection at start, and for an answer to a read or write of the "
            "shared run history and audit log."
        ),
    )
    digest_user: str | None = Field(default=None, description="Digest auth user (with digest_password).")
    digest_password: SecretStr | None = Field(default=None, description="Digest auth password.")

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        if isinstance(value, str):
            parts = [p.strip() for p in value.split(",")]
            if not value.strip() or any(not p for p in parts):
                raise ValueError("must be host:port[,host:port...]")
            for part in parts:
                host, sep, port = part.rpartition(":")
                if sep and (not host or not port.isdigit()):
                    raise ValueError(f"{part!r} is not host or host:port")
            return ",".join(parts)
        return value

    @field_validator("chroot", "claims_path")
    @classmethod
    def _znode_path(cls, value: str) -> str:
        if not value.startswith("/") or (len(value) > 1 and value.endswith("/")) or "//" in value:
            raise ValueError("must be an absolute ZooKeeper path like /a/b (no trailing '/')")
        return value

    @model_validator(mode="after")
    def _auth_pair(self) -> ZooKeeperSettings:
        if (self.digest_user is None) != (self.digest_password is None):
            missing = "digest_password" if self.digest_password is None else "digest_user"
            raise ValueError(f"{missing}: digest_user and digest_password go together")
        return self

    @property
    def in_process(self) -> bool:
        """True when no ZooKeeper is configured: the in-process coordinator (single replica only)."""
        return self.hosts is None

    @property
    def connect_string(self) -> str | None:
        """The kazoo hosts string with the chroot appended (None for the in-process coordinator)."""
        if self.hosts is None:
            return None
        return self.hosts if self.chroot == "/" else self.hosts + self.chroot
