#!/usr/bin/env python3
"""Sequential create/delete cycles through the API; prints deskboxd's and the jailer's open
files, threads and memory, the number of QEMU processes, network namespaces and slot
directories before and after. Nothing may grow.

  api_soak.py [--cycles N] [--warm-pool N] [--out FILE]   (default 200 cycles, warm pool 1,
                                                         /tmp/api_soak.json)
"""

import argparse
import glob
import json
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
    ap.add_argument("--out", default="/tmp/api_soak.json", help="the figures as JSON")
    args = ap.parse_args()
    figures = {"bench": "api_soak", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "args": vars(args),
               "reports": []}

    def write(**more):
        figures.update(more)
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)
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
                write(failed=f"cycle {i}: create {r.status_code} {r.text}", cycles_done=i)
                raise SystemExit(failure_report(dbx, f"cycle {i}: create {r.status_code} {r.text}"))
            sid = r.json()["id"]
            e = dbx.post(f"/v1/sandboxes/{sid}/exec", json={"argv": ["true"]}, timeout=120)
            if e.status_code != 200:
                write(failed=f"cycle {i}: exec {e.status_code} {e.text}", cycles_done=i)
                raise SystemExit(failure_report(dbx, f"cycle {i}: exec {e.status_code} {e.text}"))
            d = dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
            if d.status_code != 204:
                write(failed=f"cycle {i}: delete {d.status_code} {d.text}", cycles_done=i)
                raise SystemExit(failure_report(dbx, f"cycle {i}: delete {d.status_code} {d.text}"))
            if (i + 1) % 20 == 0:
                now = snapshot(dbx)
                figures["reports"].append({"cycles": i + 1, "seconds": time.monotonic() - t0, **now})
                print(f"{i + 1} cycles, {time.monotonic() - t0:.0f} s: {now}", flush=True)
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
        write(cycles_done=args.cycles, seconds=time.monotonic() - t0, before=before, after=after, grew=grew,
              ok=not grew)
        print(f"figures: {args.out}")
        raise SystemExit(1 if grew else 0)


if __name__ == "__main__":
    main()
