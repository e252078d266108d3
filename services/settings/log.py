"""The ``log`` section: JSON lines or text, and the level."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from lakeward.services.settings.base import Section


class LogSettings(Section):
    """Logging: JSON lines (for collectors) or text (for people)."""

    format: Literal["json", "text"] = Field(default="json", description="json or text.")
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(default="INFO", description="Log level.")

    @field_validator("format", "level", mode="before")
    @classmethod
    def _case(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str):
            return value.strip().upper() if info.field_name == "level" else value.strip().lower()
        return value
