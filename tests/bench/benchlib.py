"""Shared pieces of the Python benchmarks: a private deployment (tests/api/harness.py), host
idleness, percentiles, process figures, and the figures as JSON with a common header (Results;
`benchlib.py stamp FILE` adds that header to the C++ benchmarks' JSON)."""

import datetime
import json
import os
import subprocess
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
    """Waits until the host is at least `threshold` idle over a second (pool refills done).
    DESKBOX_BENCH_QUIET_TIMEOUT caps the wait (seconds): on a host that other work keeps busy
    the ratios, whose sides alternate, still count."""
    global quiet_timeouts
    timeout = min(timeout, float(os.environ.get("DESKBOX_BENCH_QUIET_TIMEOUT", timeout)))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cpu_idle_fraction() >= threshold:
            return True
    quiet_timeouts += 1
    return False


quiet_timeouts = 0  # waits for a quiet host that timed out (Results writes it beside the figures)


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


# --- Figures as JSON (--out): one header for every benchmark, targets with their verdicts. ---

def git_commit(source=None):
    """The source tree's commit (short), with `dirty` when tracked files differ from it."""
    src = str(source or os.environ.get("DESKBOX_SOURCE_DIR") or
              os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    try:
        head = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        changed = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    return {"commit": head or None, "dirty": bool(changed) if head else None}


def accelerator():
    """What deskboxd's `--accelerator auto` resolves to (vmhost ResolveAccelerator): kvm when the
    CPU has vmx or svm and /dev/kvm opens, tcg otherwise."""
    try:
        flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
        os.close(fd)
    except OSError:
        return "tcg"
    return "kvm" if ("vmx" in flags or "svm" in flags) else "tcg"


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), None)
    mem_kib = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:")), 0)
    return {"cpu": cpu, "cores": os.cpu_count(), "ram_gib": round(mem_kib / 2**20, 1),
            "kernel": os.uname().release, "accelerator": accelerator()}


def header(bench, template=None, date=None):
    """The fields every benchmark's JSON starts with (scripts/bench-report shows them)."""
    when = date or datetime.datetime.now(datetime.timezone.utc)
    return {"bench": bench, "date_utc": when.strftime("%Y-%m-%dT%H:%M:%SZ"), **git_commit(),
            "machine": machine(), "template": template}


LONG_RUN_HELP = ("also check the absolute targets (times in ms): for the long run on a quiet host; "
                 "without it only the same-run ratios and correctness are checked, as CI does")


class Results:
    """A benchmark's figures and targets, written as JSON by finish(). A target is a ratio
    against a baseline measured in the same run, a correctness check, or an absolute time; the
    absolute ones count only with long_run (CI's hosts are shared and emulated: their absolute
    times drift between runs, ratios within a run do not)."""

    OPS = {"<=": lambda v, b: v <= b, ">=": lambda v, b: v >= b, "==": lambda v, b: v == b}

    def __init__(self, bench, args=None, long_run=False):
        self.bench, self.long_run = bench, long_run
        self.args = {k: v for k, v in vars(args).items() if k != "out"} if args else {}
        self.template = None
        self.figures, self.targets = {}, {}

    def figure(self, name, value):
        if isinstance(value, float):
            value = round(value, 3)
        self.figures[name] = value
        return value

    def target(self, name, value, op, bound, kind="ratio", unit=""):
        """Records a target and its verdict; kind: ratio, difference (against a same-run
        baseline), correctness, or absolute (checked only in the long run)."""
        checked = kind != "absolute" or self.long_run
        ok = bool(self.OPS[op](value, bound)) if value == value else False  # NaN misses
        self.targets[name] = {"value": round(value, 3) if isinstance(value, float) else value,
                              "target": f"{op} {bound}{unit}", "kind": kind, "checked": checked,
                              "ok": ok}
        return ok

    def finish(self, out):
        """Prints the verdict, writes the JSON (when out is set); returns the exit status."""
        missed = [k for k, t in self.targets.items() if t["checked"] and not t["ok"]]
        unchecked = [k for k, t in self.targets.items() if not t["checked"]]
        print(f"\ntargets ({'long run' if self.long_run else 'same-run ratios and correctness'}): "
              + ("all met" if not missed else "MISSED " + ", ".join(missed))
              + (f"; not checked without --long-run: {', '.join(unchecked)}" if unchecked else ""), flush=True)
        if out:
            doc = {**header(self.bench, self.template), "mode": "long-run" if self.long_run else "ci",
                   "args": self.args, "host_not_quiet": quiet_timeouts, "figures": self.figures,
                   "targets": self.targets, "ok": not missed}
            with open(out, "w") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
            print(f"figures: {out}")
        return 1 if missed else 0


def stamp(path, bench=None):
    """Adds the header's fields that a benchmark's JSON lacks (the C++ benchmarks write their own
    figures): date from the file's time, commit, machine. The template is the benchmark's own
    field (restore_bench names it; recording_encode_bench runs no guest)."""
    with open(path) as f:
        doc = json.load(f)
    when = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
    name = bench or doc.get("bench") or os.path.splitext(os.path.basename(path))[0]
    for k, v in header(name, doc.get("template"), when).items():
        doc.setdefault(k, v)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    # benchlib.py stamp FILE...: the header's missing fields added to each benchmark JSON.
    if len(sys.argv) < 3 or sys.argv[1] != "stamp":
        raise SystemExit("usage: benchlib.py stamp FILE...")
    for p in sys.argv[2:]:
        stamp(p)
