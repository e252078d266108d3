"""What a running process holds, read from `/proc`: threads, open files, resident memory, TCP
connections to a port, and the processes below it. For soak tests that watch a daemon replica from
outside (`lakeward serve` in a process of its own) and must show these stay flat."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Footprint:
    """One reading of a process (`read_footprint`)."""

    threads: int
    fds: int
    rss_mb: float
    zk_connections: int
    #: Every process below it (with the local engine: the forkserver, its resource tracker, the runs).
    descendants: int

    def row(self) -> str:
        return (
            f"threads {self.threads:3d}  fds {self.fds:4d}  rss {self.rss_mb:7.1f} MiB  "
            f"zk {self.zk_connections}  descendants {self.descendants}"
        )


def _status(pid: int) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def tcp_connections_to(pid: int, port: int) -> int:
    """Established TCP connections of process `pid` whose remote port is `port` (IPv4 and IPv6)."""
    inodes = _socket_inodes(pid)
    found = 0
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            remote_port = int(cols[2].rsplit(":", 1)[1], 16)
            if remote_port == port and cols[3] == "01" and cols[9] in inodes:  # 01: ESTABLISHED
                found += 1
    return found


def children_of(pid: int) -> list[int]:
    """The direct child processes of `pid`."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:  # gone
        return []
    for task in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def descendants_of(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...); ones that end meanwhile are skipped."""
    found, todo = [], [pid]
    while todo:
        children = children_of(todo.pop())
        found += children
        todo += children
    return found


def read_footprint(pid: int, zk_port: int) -> Footprint:
    """Threads, open file descriptors, resident memory, connections to ZooKeeper and descendants of `pid`."""
    status = _status(pid)
    return Footprint(
        threads=int(status["Threads"]),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        rss_mb=int(status["VmRSS"].split()[0]) / 1024,
        zk_connections=tcp_connections_to(pid, zk_port),
        descendants=len(descendants_of(pid)),
    )


__all__ = ["Footprint", "children_of", "descendants_of", "read_footprint", "tcp_connections_to"]
