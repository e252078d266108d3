"""Writes: the write client (control plane and commit protocol: instants, markers, heartbeats, locks and
conflict checks), partitioning, file-group write handles, and the data planes (`plane/`)."""
