"""Shared pieces of the Python benchmarks: a private deployment (tests/api/harness.py), host
idleness, percentiles, process figures."""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from harness import Deskbox  # noqa: E402


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, int(p * len(v)))]


def cpu_idle_fraction(seconds=1.0):
    def read():
        f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return f[3] + f[4], sum(f)
    i0, t0 = read()
    time.sleep(seconds)
    i1, t1 = read()
    return (i1 - i0) / max(1, t1 - t0)


def wait_quiet(threshold=0.8, timeout=300):
    """Waits until the host is at least `threshold` idle over a second (pool refills done)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cpu_idle_fraction() >= threshold:
            return True
    return False


def wait_warm(dbx, want, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (dbx.metric_value("deskbox_pool_size", pool="warm") or 0) >= want:
            return True
        time.sleep(0.2)
    return False


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def thread_count(pid):
    return len(os.listdir(f"/proc/{pid}/task"))
