"""Claim latency benchmark: create and release of ZooKeeper claims (ephemeral znodes).

Starts a local standalone ZooKeeper the way the tests do (`tests.support.zookeeper.
ZooKeeperServer`: the Debian package's jar on a free loopback port, temporary data dir),
or uses `--hosts` if given. One `ZooKeeperCoordinator` then claims N distinct work items
one after another (`try_claim`: one create, parents created on first use) and releases each
(`release`: exists + versioned delete); a second round measures `is_valid` (the fencing
check: one get) too. Prints p50 / p95 / p99 / max in milliseconds, and the conflict path
(a second replica's `try_claim` of a held key).

Usage: python benchmarks/claims.py [--claims 1000] [--hosts 127.0.0.1:2181]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from lakeward.services.claims import OwnerInfo, ZooKeeperCoordinator  # noqa: E402


def percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    q = statistics.quantiles(ms, n=100)
    return f"p50 {q[49]:.3f} ms  p95 {q[94]:.3f} ms  p99 {q[98]:.3f} ms  max {ms[-1]:.3f} ms"


def run(hosts: str, claims: int) -> None:
    base = f"/lakeward-bench/{int(time.time())}"
    a = ZooKeeperCoordinator(hosts, base_path=base, owner=OwnerInfo.current("bench-a"))
    b = ZooKeeperCoordinator(hosts, base_path=base, owner=OwnerInfo.current("bench-b"))
    a.start()
    b.start()
    try:
        keys = [f"table{i % 50}/compaction/2026010100{i:04d}" for i in range(claims)]
        for key in keys[:20]:  # warm-up (parent nodes, connection)
            claim = a.try_claim(key)
            assert claim is not None
            a.release(claim)
        create, release, valid, conflict = [], [], [], []
        for key in keys:
            t0 = time.perf_counter()
            claim = a.try_claim(key)
            t1 = time.perf_counter()
            assert claim is not None
            t2 = time.perf_counter()
            assert a.is_valid(claim)
            t3 = time.perf_counter()
            assert b.try_claim(key) is None
            t4 = time.perf_counter()
            a.release(claim)
            t5 = time.perf_counter()
            create.append(t1 - t0)
            valid.append(t3 - t2)
            conflict.append(t4 - t3)
            release.append(t5 - t4)
        t0 = time.perf_counter()
        live = a.live_claims()
        listing = time.perf_counter() - t0
        print(f"claims: {claims} against ZooKeeper at {hosts}")
        print(f"  create (try_claim)     {percentiles(create)}")
        print(f"  release                {percentiles(release)}")
        print(f"  is_valid (fencing)     {percentiles(valid)}")
        print(f"  conflict (other owner) {percentiles(conflict)}")
        print(f"  live_claims over 50 tables: {listing * 1000:.2f} ms ({len(live)} live)")
    finally:
        a.close()
        b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--hosts", help="an existing ZooKeeper (default: start a local one)")
    args = parser.parse_args()
    if args.hosts:
        run(args.hosts, args.claims)
        return
    from tests.support.zookeeper import ZooKeeperServer, free_port

    workdir = Path(tempfile.mkdtemp(prefix="lakeward-bench-zookeeper-"))
    server = ZooKeeperServer(workdir, free_port())
    try:
        server.start()
        print(f"local ZooKeeper started in {server.startup_seconds:.1f}s")
        run(server.hosts, args.claims)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
