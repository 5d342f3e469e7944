#!/usr/bin/env python3
"""Sandbox lifecycles through the API, two at a time, while the deployment's resources are
sampled: nothing may grow.

A cycle: create → exec (`echo`) → screenshot → one action (a key press; 200) → one CDP call
through deskboxd's proxy (`Runtime.evaluate("1+1")` on a page target, found with
`/cdp/json/list`) → delete. `--parallel` workers run cycles until `--cycles` have run.

After every cycle the deployment is sampled: deskboxd's open files, threads and RSS, the
jailer's open files and RSS, this deployment's QEMU processes, network namespaces, cgroup
directories and slot directories. The first `--warm-up` cycles fill caches; then, with every
sandbox deleted, the warm pool full and the host quiet (30 s at most), the baseline is taken.
After the last cycle the same state is waited for again, and the counts for up to `--settle` s.

Exit 1 (growth) when a count (open files, threads, QEMU processes, netns, cgroups, slot
directories) ends above its baseline, when deskboxd (--destroy-on-exit) and the jailer's sweep
leave anything at stop, or when deskboxd's or the jailer's RSS grows by more than
--rss-slope-kib per 100 cycles: both its least-squares slope over the samples after the warm-up
and its baseline-to-end rise per 100 cycles. Exit 2 when a cycle fails or the run passes
--max-minutes, with the deployment's logs (failure_report). Figures, targets and every sample:
--out JSON. Every request has a timeout.

  api_soak.py [--cycles N] [--parallel N] [--warm-up N] [--warm-pool N] [--rss-slope-kib KIB]
              [--settle S] [--max-minutes M] [--out FILE]
      (default 200 cycles, 2 at a time, warm-up 10% of the cycles (at least 2), warm pool 1,
      2048 KiB per 100 cycles, 120 s, 2 min a cycle / parallel + 5)
"""

import argparse
import glob
import json
import os
import sys
import threading
import time
import traceback

import requests

from benchlib import Deskbox, fd_count, header, pct, rss_kib, thread_count, wait_quiet, wait_warm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from wsclient import CdpPage  # noqa: E402

# Counts that must come back to their baseline once every sandbox is deleted.
COUNTS = ["deskboxd fds", "deskboxd threads", "jailer fds", "QEMU processes", "netns", "cgroups", "slot dirs"]
RSS = ["deskboxd RSS KiB", "jailer RSS KiB"]


def cgroup_count(dbx):
    """Directories in this deployment's cgroup trees (one per controller hierarchy on cgroup v1):
    the deployment's own and each slot's."""
    return sum(1 for top in dbx.cgroup_dirs() for _ in os.walk(top))


def snapshot(dbx):
    d, j = dbx.daemon_pid, dbx.jailer.pid  # setpriv execs the jailer: its pid is the Popen's
    return {
        "deskboxd fds": fd_count(d), "deskboxd threads": thread_count(d), "deskboxd RSS KiB": rss_kib(d),
        "jailer fds": fd_count(j), "jailer RSS KiB": rss_kib(j), "QEMU processes": len(dbx.qemu_processes()),
        "netns": dbx.netns_count(), "cgroups": cgroup_count(dbx), "slot dirs": len(dbx.slot_dirs()),
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
    try:
        out.append(f"---- now: {snapshot(dbx)}")
    except (OSError, AssertionError) as e:
        out.append(f"---- now: ({e})")
    return "\n".join(out)


def slope_per_100(points):
    """Least-squares slope of (cycle, value) points, per 100 cycles; 0 with fewer than 2 cycles."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return 100 * sum((x - mx) * (y - my) for x, y in points) / sxx


class Figures:
    """The JSON --out: figures, targets with their verdicts (the shape scripts/bench-report reads:
    {value, target, kind, ok}), and whatever else the run wants kept (its samples)."""

    def __init__(self, args):
        self.args = {k: v for k, v in vars(args).items() if k != "out"}
        self.figures, self.targets, self.extra = {}, {}, {}
        self.template = None

    def figure(self, name, value):
        self.figures[name] = round(value, 3) if isinstance(value, float) else value

    def target(self, name, value, op, bound, kind, unit=""):
        ok = value <= bound if op == "<=" else value == bound
        self.targets[name] = {"value": round(value, 3) if isinstance(value, float) else value,
                              "target": f"{op} {bound}{unit}", "kind": kind, "ok": ok}
        return ok

    def write(self, out):
        """Prints the verdict and writes the JSON with the benchmarks' common header; returns
        the exit status."""
        missed = [k for k, t in self.targets.items() if not t["ok"]]
        print("\ntargets: " + ("all met" if not missed else "MISSED " + ", ".join(missed)), flush=True)
        doc = {**header("api_soak", self.template), "args": self.args, "figures": self.figures,
               "targets": self.targets, "ok": not missed, **self.extra}
        with open(out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print(f"figures: {out}")
        return 1 if missed else 0


class CycleFailed(Exception):
    pass


class Soak:
    """Runs cycles on `parallel` threads, each with its own HTTP session; samples after each."""

    def __init__(self, dbx, args):
        self.dbx, self.args = dbx, args
        self.lock = threading.Lock()
        self.next_cycle = 0
        self.done = 0
        self.failure = None
        self.samples = []  # {"cycle": cycles done, "s": seconds since start, **snapshot}
        self.cycles = []   # {"cycle", "worker", "create_path", "ms": {step: ms}}
        self.t0 = time.monotonic()
        self.deadline = None

    def call(self, session, method, path, want, what, timeout=120, **kw):
        r = session.request(method, self.dbx.url + path, timeout=timeout,
                            headers={"Authorization": f"Bearer {self.dbx.key}"}, **kw)
        if r.status_code != want:
            raise CycleFailed(f"{what}: {r.status_code} {r.text[:500]}")
        return r

    def cycle(self, session, n, worker):
        ms, sid = {}, None

        def step(name, fn):
            t = time.perf_counter()
            out = fn()
            ms[name] = round((time.perf_counter() - t) * 1000, 1)
            return out
        try:
            sb = step("create", lambda: self.call(session, "POST", "/v1/sandboxes", 201, "create",
                                                  timeout=300, json={"timeout_s": 600}).json())
            sid = sb["id"]
            base = f"/v1/sandboxes/{sid}"
            out = step("exec", lambda: self.call(session, "POST", base + "/exec", 200, "exec",
                                                 json={"argv": ["echo", f"cycle {n}"]}).json())
            if out.get("exit_code") != 0 or out.get("stdout") != f"cycle {n}\n":
                raise CycleFailed(f"exec: {out}")
            shot = step("screenshot", lambda: self.call(session, "GET", base + "/screenshot", 200, "screenshot",
                                                        params={"format": "jpeg"}))
            if not shot.content.startswith(b"\xff\xd8"):
                raise CycleFailed(f"screenshot: not a JPEG ({shot.headers.get('Content-Type')})")
            act = step("action", lambda: self.call(session, "POST", base + "/actions", 200, "actions",
                                                   json={"actions": [{"type": "key", "keys": "shift"}],
                                                         "settle": {"no_change_ms": 500}}).json())
            if act.get("performed") != 1:
                raise CycleFailed(f"actions: {act}")
            step("cdp", lambda: self.cdp_call(session, sid))
            sid_done, sid = sid, None
            step("delete", lambda: self.call(session, "DELETE", f"/v1/sandboxes/{sid_done}", 204, "delete"))
            return {"cycle": n, "worker": worker, "id": sid_done, "create_path": sb.get("create_path"), "ms": ms}
        except (CycleFailed, requests.RequestException, OSError, EOFError, AssertionError, ValueError) as e:
            if sid is not None:  # leave nothing behind that the deployment's stop would have to find
                try:
                    session.request("DELETE", self.dbx.url + f"/v1/sandboxes/{sid}", timeout=120,
                                    headers={"Authorization": f"Bearer {self.dbx.key}"})
                except requests.RequestException:
                    pass
            raise CycleFailed(f"cycle {n} (worker {worker}, sandbox {sid}, steps done {ms}): "
                              f"{type(e).__name__}: {e}") from e

    def cdp_call(self, session, sid):
        targets = self.call(session, "GET", f"/v1/sandboxes/{sid}/cdp/json/list", 200, "cdp /json/list").json()
        page = next((t for t in targets if t.get("type") == "page"), None)
        if page is None:
            raise CycleFailed(f"cdp /json/list: no page target in {targets}")
        cdp = CdpPage(self.dbx.port, sid, page["id"], self.dbx.key, timeout=120)
        try:
            value = cdp.evaluate("1+1")
        finally:
            cdp.close()
        if value != 2:
            raise CycleFailed(f"cdp Runtime.evaluate(1+1) answered {value!r}")

    def worker(self, worker, until):
        session = requests.Session()
        try:
            while True:
                with self.lock:
                    if self.failure or self.next_cycle >= until:
                        return
                    if time.monotonic() > self.deadline:
                        self.failure = f"time limit: {self.args.max_minutes} min, {self.done} cycles done"
                        return
                    n = self.next_cycle
                    self.next_cycle += 1
                try:
                    rec = self.cycle(session, n, worker)
                    with self.lock:
                        self.done += 1
                        self.cycles.append(rec)
                        s = {"cycle": self.done, "s": round(time.monotonic() - self.t0, 1), **snapshot(self.dbx)}
                        self.samples.append(s)
                except CycleFailed as e:
                    with self.lock:
                        self.failure = self.failure or str(e)
                    return
                except Exception:  # a bug here, not in the deployment: still stop the others
                    with self.lock:
                        self.failure = self.failure or f"cycle {n}: {traceback.format_exc()}"
                    return
                if self.done % 10 == 0 or self.done == until:
                    print(f"{self.done} cycles, {s['s']:.0f} s: " +
                          ", ".join(f"{k} {v}" for k, v in s.items() if k not in ("cycle", "s")), flush=True)
        finally:
            session.close()

    def run(self, until):
        """Cycles up to number `until` on the workers; False when one failed."""
        threads = [threading.Thread(target=self.worker, args=(w, until), daemon=True)
                   for w in range(self.args.parallel)]
        for t in threads:
            t.start()
        for t in threads:
            # Every request is bounded; this is the backstop if one is not.
            t.join(max(1.0, self.deadline - time.monotonic() + 900))
        if any(t.is_alive() for t in threads):
            self.failure = self.failure or "a worker did not finish within its time limit"
        elif self.failure is None and self.done < until:
            self.failure = f"{self.done} of {until} cycles done, no failure recorded"
        return self.failure is None


def idle(dbx, warm_pool, baseline=None, settle_s=120):
    """Waits until every sandbox is gone, the warm pool is full and the host quiet, then samples;
    with a baseline, samples again (for up to settle_s) until no count is above it."""
    deadline = time.monotonic() + settle_s
    wait_warm(dbx, warm_pool, timeout=settle_s)
    # A quiet host means the refill's restore has finished; on a host that other work keeps busy
    # it never comes, and the counts below do not need it.
    wait_quiet(timeout=min(30, settle_s))
    time.sleep(2)
    now = snapshot(dbx)
    while baseline is not None and time.monotonic() < deadline and any(now[k] > baseline[k] for k in COUNTS):
        time.sleep(1)
        now = snapshot(dbx)
    return now


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=200, help="cycles in all, the warm-up's included")
    ap.add_argument("--parallel", type=int, default=2, help="cycles at a time")
    ap.add_argument("--warm-up", type=int, help="cycles before the baseline (default: 10%% of --cycles, at least 2)")
    ap.add_argument("--warm-pool", type=int, default=1)
    ap.add_argument("--rss-slope-kib", type=float, default=2048,
                    help="most RSS growth allowed, KiB per 100 cycles (default 2048: 20 KiB a cycle)")
    ap.add_argument("--settle", type=float, default=120, help="seconds allowed for the counts to come back")
    ap.add_argument("--max-minutes", type=float, help="time limit for the cycles (default: 2 min a cycle)")
    ap.add_argument("--out", default="/tmp/api_soak.json", help="figures, targets and samples as JSON")
    args = ap.parse_args()
    if args.warm_up is None:
        args.warm_up = max(2, args.cycles // 10)
    if args.max_minutes is None:
        args.max_minutes = 2 * args.cycles / args.parallel + 5
    if not 1 <= args.parallel <= 8 or not 0 < args.warm_up < args.cycles - 1:
        ap.error("want 1..8 workers and at least 2 cycles after the warm-up")
    res = Figures(args)

    with Deskbox(warm_pool=args.warm_pool) as dbx:
        res.template = dbx.template
        soak = Soak(dbx, args)
        soak.deadline = time.monotonic() + args.max_minutes * 60
        start = idle(dbx, args.warm_pool)
        print(f"start: {start}", flush=True)
        ok = soak.run(args.warm_up)
        baseline = idle(dbx, args.warm_pool) if ok else None
        if ok:
            print(f"baseline after {args.warm_up} warm-up cycles: {baseline}", flush=True)
            t_measured = time.monotonic()
            ok = soak.run(args.cycles)
            seconds = time.monotonic() - t_measured
        res.extra.update(start=start, baseline=baseline, samples=soak.samples, cycles=soak.cycles)
        res.figure("cycles_done", soak.done)
        res.target("cycles_done", soak.done, "==", args.cycles, kind="correctness")
        if not ok:
            report = failure_report(dbx, soak.failure)
            res.extra["error"] = soak.failure
            res.write(args.out)
            print(report, file=sys.stderr, flush=True)
            raise SystemExit(2)

        end = idle(dbx, args.warm_pool, baseline, args.settle)
        res.extra["end"] = end
        measured = [s for s in soak.samples if s["cycle"] > args.warm_up]
        n = args.cycles - args.warm_up
        per_cycle = [sum(c["ms"].values()) / 1000 for c in soak.cycles if c["cycle"] >= args.warm_up]
        print(f"\n{args.cycles} cycles ({args.warm_up} warm-up), {args.parallel} at a time; "
              f"{n} after the warm-up in {seconds:.0f} s ({seconds / n:.1f} s a cycle, "
              f"one cycle's own time p50 {pct(per_cycle, 0.5):.1f} s)")
        res.figure("seconds_after_warm_up", seconds)
        res.figure("seconds_per_cycle", seconds / n)
        res.figure("cycle_p50_s", pct(per_cycle, 0.5))
        res.figure("create_paths", {p: sum(1 for c in soak.cycles if c["create_path"] == p)
                                    for p in sorted({c["create_path"] or "?" for c in soak.cycles})})
        for step_name in ("create", "exec", "screenshot", "action", "cdp", "delete"):
            res.figure(f"{step_name}_p50_ms", pct([c["ms"][step_name] for c in soak.cycles], 0.5))
        print(f"  {'':18} {'baseline':>9} {'end':>9} {'min':>9} {'max':>9} {'slope/100 cycles':>17}")
        grew = []
        for k in COUNTS + RSS:
            vals = [s[k] for s in measured]
            slope = slope_per_100([(s["cycle"], s[k]) for s in measured])
            key = k.lower().replace(" ", "_")
            res.figure(f"{key}_baseline", baseline[k])
            res.figure(f"{key}_end", end[k])
            res.figure(f"{key}_slope_per_100", slope)
            print(f"  {k:18} {baseline[k]:>9} {end[k]:>9} {min(vals):>9} {max(vals):>9} {slope:>17.1f}")
            if k in COUNTS:
                if not res.target(f"{key}_end", end[k], "<=", baseline[k], kind="difference"):
                    grew.append(k)
            else:
                # Growth is the smaller of the slope and the baseline-to-end rate: over a short run
                # the slope alone is noisy (allocations of the cycles in flight), and the end alone
                # may catch a cache still filling; a leak raises both.
                end_rate = 100 * (end[k] - baseline[k]) / n
                res.figure(f"{key}_end_rate_per_100", end_rate)
                if not res.target(f"{key}_growth_per_100", min(slope, end_rate), "<=", args.rss_slope_kib,
                                  kind="slope", unit=" KiB"):
                    grew.append(k)
        # What deskboxd (--destroy-on-exit) and the jailer's sweep should leave: nothing.
        problems = dbx.stop().problems
        res.extra["stop_problems"] = problems
        if not res.target("stop_problems", len(problems), "==", 0, kind="correctness"):
            grew.append(f"left at stop: {problems}")
        print("  nothing grew" if not grew else f"  GREW: {', '.join(grew)}")
        res.extra["grew"] = grew
    status = res.write(args.out)
    raise SystemExit(1 if grew or status else 0)


if __name__ == "__main__":
    main()
