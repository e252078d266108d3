"""Writes: the write client (control plane and commit protocol: instants, markers, heartbeats, locks and
conflict checks), partitioning, file-group write handles, and the data planes (`plane/`)."""

from lakeward.core.lazy import on_first_use

__getattr__ = on_first_use(__name__)  # submodules load when first used (start-up time, issue 23)
