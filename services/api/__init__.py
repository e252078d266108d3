"""The daemon's HTTP API for on-call engineers (FastAPI): health, tables, plans, runs, triggers."""

from lakeward.services.api.app import API_PREFIX, create_app

__all__ = ["API_PREFIX", "create_app"]
