#!/usr/bin/env python3
"""Sequential create/delete cycles through the API; prints deskboxd's and the jailer's open
files, threads and memory, the number of QEMU processes, network namespaces and slot
directories before and after. Nothing may grow.

  api_soak.py [--cycles N] [--warm-pool N]   (default 200 cycles, warm pool 1)
"""

import argparse
import glob
import subprocess
import time

from benchlib import Deskbox, fd_count, rss_kib, thread_count, wait_quiet, wait_warm


def jailer_pid(dbx):
    out = subprocess.run(["pgrep", "-f", f"deskbox-jailer --socket {dbx.socket}"], capture_output=True, text=True)
    pids = [int(x) for x in out.stdout.split()]
    return pids[0] if pids else None


def snapshot(dbx):
    d, j = dbx.daemon_pid, jailer_pid(dbx)
    return {
        "deskboxd fds": fd_count(d), "deskboxd threads": thread_count(d), "deskboxd RSS KiB": rss_kib(d),
        "jailer fds": fd_count(j) if j else -1, "QEMU processes": len(dbx.qemu_processes()),
        "netns": dbx.netns_count(), "slot dirs": len(dbx.slot_dirs()),
    }


def failure_report(dbx, what):
    """What the deployment knew when a cycle failed: its logs and the failing guest's console."""
    def tail(path, n=60, skip=" INFO api: req_"):
        try:
            lines = [l for l in open(path, errors="replace").read().splitlines() if skip not in l]
        except OSError as e:
            return f"({e})"
        return "\n".join(lines[-n:])
    out = [what, f"---- {dbx.daemon_log}", tail(dbx.daemon_log), f"---- {dbx.jailer_log}", tail(dbx.jailer_log, 30)]
    for log in sorted(glob.glob(str(dbx.jailer_state / "slots" / "*" / "*.log"))):
        out += [f"---- {log}", tail(log, 25)]
    out.append(f"---- now: {snapshot(dbx)}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--warm-pool", type=int, default=1)
    args = ap.parse_args()
    with Deskbox(warm_pool=args.warm_pool) as dbx:
        # Warm up once so that lazily made things (event writer, database pages) exist.
        for _ in range(2):
            r = dbx.post("/v1/sandboxes", json={}, timeout=300)
            dbx.request("DELETE", f"/v1/sandboxes/{r.json()['id']}", timeout=120)
        wait_warm(dbx, args.warm_pool)
        wait_quiet()
        before = snapshot(dbx)
        t0 = time.monotonic()
        for i in range(args.cycles):
            r = dbx.post("/v1/sandboxes", json={"timeout_s": 600}, timeout=300)
            if r.status_code != 201:
                raise SystemExit(failure_report(dbx, f"cycle {i}: create {r.status_code} {r.text}"))
            sid = r.json()["id"]
            e = dbx.post(f"/v1/sandboxes/{sid}/exec", json={"argv": ["true"]}, timeout=120)
            if e.status_code != 200:
                raise SystemExit(failure_report(dbx, f"cycle {i}: exec {e.status_code} {e.text}"))
            d = dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
            if d.status_code != 204:
                raise SystemExit(failure_report(dbx, f"cycle {i}: delete {d.status_code} {d.text}"))
            if (i + 1) % 20 == 0:
                print(f"{i + 1} cycles, {time.monotonic() - t0:.0f} s: {snapshot(dbx)}", flush=True)
        wait_warm(dbx, args.warm_pool)
        wait_quiet()
        time.sleep(2)
        after = snapshot(dbx)
        print(f"\n{args.cycles} create/exec/delete cycles in {time.monotonic() - t0:.0f} s")
        print(f"  {'':20} {'before':>10} {'after':>10}")
        grew = []
        for k in before:
            print(f"  {k:20} {before[k]:>10} {after[k]:>10}")
            slack = 2048 if "RSS" in k else 0  # KiB: allocator noise, not a leak per cycle
            if after[k] > before[k] + slack:
                grew.append(k)
        print("  nothing grew" if not grew else f"  GREW: {', '.join(grew)}")
        raise SystemExit(1 if grew else 0)


if __name__ == "__main__":
    main()
