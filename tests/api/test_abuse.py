"""Abuse contained (docs/limits.md): a CPU burner in one guest hits its sandbox's CPU limits,
set at create and changed live, while another sandbox's screenshots and clicks stay within a
stated ratio of their latency next to an idle neighbour, measured in the same run; and inside
one guest a fork bomb, a memory hog and a /tmp filler hit the guest's own limits while its
desktop goes on (GuestLimitsTest).

The burner's share and cap are its QEMU's cgroup: the test finds that group by the weight the
create set (nothing else has it), reads the kernel's accounting of the group's CPU time, and
checks the files the limits wrote."""

import glob
import os
import statistics
import time
import unittest

from harness import ApiTestCase

# Stated ratios (docs/limits.md): the victim's p50 next to a burner at the default limits,
# against its p50 next to the same sandbox idle, measured in the same run. Three runs here:
# screenshot 1.06-1.55x (deskboxd's own work, contending with two busy vCPU threads on 2 cores),
# click 1.00-1.06x (the call is mostly its wait for the screen to settle).
SCREENSHOT_RATIO = 2.0
CLICK_RATIO = 1.5
BURNER_WEIGHT = 50
SAMPLES = 20
USAGE_SECONDS = 5.0


def read(path):
    with open(path) as f:
        return f.read()


def cpu(limits):
    """The CPU fields of a sandbox's `limits`."""
    return {k: limits[k] for k in ("cpu_weight", "cpu_max")}


def cpu_seconds(group):
    """CPU time the group has used, in seconds: cgroup v2 cpu.stat, or on v1 (where the jailer
    makes no cpuacct group) the user and system time of the processes in the cpu group."""
    if group["v2"]:
        stat = os.path.join(group["cpu"], "cpu.stat")
        for line in read(stat).splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        raise AssertionError(f"{stat} has no usage_usec")
    ticks = 0
    for pid in read(os.path.join(group["cpu"], "cgroup.procs")).split():
        fields = read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def cores_used(group, seconds=USAGE_SECONDS):
    t0, c0 = time.monotonic(), cpu_seconds(group)
    time.sleep(seconds)
    return (cpu_seconds(group) - c0) / (time.monotonic() - t0)


class CpuBurnerTest(ApiTestCase):
    # No pool: a refill's restore would burn CPU in the middle of the measurements.
    deployment = {"warm_pool": 0}

    def create(self, **body):
        r = self.dbx.post("/v1/sandboxes", json=body, timeout=300)
        self.expect(r, 201, f"create {body}")
        sid = r.json()["id"]
        deadline = time.time() + 300
        while not self.dbx.get(f"/v1/sandboxes/{sid}").json()["browser_ready"]:
            self.assertLess(time.time(), deadline, "the browser did not get ready")
            time.sleep(1)
        return r.json()

    def burner_group(self):
        """The slot cgroup with the burner's weight: {"v2": bool, "cpu": its path}."""
        name = self.dbx.cgroup_name
        v2 = os.path.exists(f"/sys/fs/cgroup/{name}/cgroup.procs")
        if v2:
            found = [os.path.dirname(p) for p in glob.glob(f"/sys/fs/cgroup/{name}/*/cpu.weight")
                     if read(p).strip() == str(BURNER_WEIGHT)]
        else:
            shares = str(BURNER_WEIGHT * 1024 // 100)
            found = [os.path.dirname(p) for p in glob.glob(f"/sys/fs/cgroup/cpu/{name}/*/cpu.shares")
                     if read(p).strip() == shares]
        self.assertEqual(len(found), 1, f"one slot group with the burner's weight, found {found}")
        return {"v2": v2, "cpu": found[0]}

    def quota(self, group):
        if group["v2"]:
            return read(os.path.join(group["cpu"], "cpu.max")).split()[0]
        return read(os.path.join(group["cpu"], "cpu.cfs_quota_us")).strip()

    def victim_latency(self, sid):
        """p50 ms of a PNG screenshot and of a click action (the call, the pointer moved there)."""
        shots, clicks = [], []
        for i in range(SAMPLES):
            t = time.monotonic()
            r = self.dbx.get(f"/v1/sandboxes/{sid}/screenshot", params={"format": "png"}, timeout=120)
            shots.append((time.monotonic() - t) * 1000)
            self.expect(r, 200, "screenshot")
            t = time.monotonic()
            r = self.dbx.post(f"/v1/sandboxes/{sid}/actions", timeout=120, json={
                "actions": [{"type": "click", "x": 300 + 40 * (i % 5), "y": 300 + 30 * (i % 4)}]})
            clicks.append((time.monotonic() - t) * 1000)
            self.expect(r, 200, "click")
        return statistics.median(shots), statistics.median(clicks)

    def patch_limits(self, sid, **limits):
        r = self.dbx.request("PATCH", f"/v1/sandboxes/{sid}", json={"limits": limits}, timeout=60)
        self.expect(r, 200, f"patch limits {limits}")
        return r.json()["limits"]

    def test_cpu_burner_hits_its_limits_and_the_neighbour_keeps_its_latency(self):
        victim = self.create()["id"]
        created = self.create(limits={"cpu_weight": BURNER_WEIGHT})
        burner = created["id"]
        self.assertEqual(cpu(created["limits"]), {"cpu_weight": BURNER_WEIGHT, "cpu_max": 2.0}, created)
        group = self.burner_group()
        self.assertEqual(self.quota(group), "200000", "the default cap is the template's 2 vCPUs")

        idle_shot, idle_click = self.victim_latency(victim)
        r = self.dbx.post(f"/v1/sandboxes/{burner}/exec", timeout=60, json={"argv": [
            "sh", "-c", "for i in 1 2 3 4; do setsid sh -c 'while :; do :; done' >/dev/null 2>&1 </dev/null & done"]})
        self.expect(r, 200, "start the burner")
        burning = cores_used(group)
        self.assertGreater(burning, 1.2, "four busy loops in a 2-vCPU guest keep more than one core busy")
        busy_shot, busy_click = self.victim_latency(victim)
        print(f"\nvictim p50 ms, neighbour idle -> burning {burning:.2f} cores at weight {BURNER_WEIGHT}: "
              f"screenshot {idle_shot:.1f} -> {busy_shot:.1f} ({busy_shot / idle_shot:.2f}x), "
              f"click {idle_click:.1f} -> {busy_click:.1f} ({busy_click / idle_click:.2f}x)", flush=True)

        # The cap, changed live: the burner gets at most half a CPU, however idle the host.
        self.assertEqual(cpu(self.patch_limits(burner, cpu_max=0.5)), {"cpu_weight": BURNER_WEIGHT, "cpu_max": 0.5})
        self.assertEqual(self.quota(group), "50000")
        capped = cores_used(group)
        print(f"burner capped at 0.5 CPU: {capped:.3f} cores", flush=True)
        self.assertLess(capped, 0.56)
        self.assertGreater(capped, 0.35, "the burner still runs, within its cap")

        # Back to the defaults: the stated ratios hold next to a burner of equal weight.
        self.assertEqual(cpu(self.patch_limits(burner, cpu_weight=100, cpu_max=2)), {"cpu_weight": 100, "cpu_max": 2.0})
        self.assertEqual(self.quota(group), "200000")
        self.assertGreater(cores_used(group, 3), 1.2)
        shot, click = self.victim_latency(victim)
        print(f"next to a burner at the default limits: screenshot {shot:.1f} ms ({shot / idle_shot:.2f}x), "
              f"click {click:.1f} ms ({click / idle_click:.2f}x)", flush=True)
        self.assertLessEqual(shot / idle_shot, SCREENSHOT_RATIO)
        self.assertLessEqual(click / idle_click, CLICK_RATIO)

        # The victim's own limits were never touched; deleting the burner frees its group.
        self.assertEqual(cpu(self.dbx.get(f"/v1/sandboxes/{victim}").json()["limits"]), {"cpu_weight": 100, "cpu_max": 2.0})
        self.assertEqual(self.dbx.request("DELETE", f"/v1/sandboxes/{burner}").status_code, 204)
        deadline = time.time() + 30
        while os.path.isdir(group["cpu"]) and time.time() < deadline:
            time.sleep(0.2)
        self.assertFalse(os.path.isdir(group["cpu"]), "the burner's cgroup is gone with it")


if __name__ == "__main__":
    unittest.main()


class GuestLimitsTest(ApiTestCase):
    """Inside one guest (docs/limits.md): a fork bomb, a memory hog, a /tmp filler and a disk
    filler, each run as an exec command, hit the limits of the commands' cgroup (user/exec: the
    guest's defaults, or the sandbox's `limits` set at create or by PATCH), its tmpfs sizes and
    root's disk quota, while the desktop
    goes on: Xvnc, Chromium and the agent keep their processes, screenshots and new commands
    work, and nothing of the abuse is left."""
    deployment = {"warm_pool": 1}

    EXEC_CG = "/sys/fs/cgroup/user/exec"

    def setUp(self):
        super().setUp()
        self.sid = self.create()

    def create(self, **body):
        r = self.dbx.post("/v1/sandboxes", json=body, timeout=300)
        sid = self.expect(r, 201, f"create {body}")["id"]
        self.addCleanup(lambda: self.dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=300))
        return sid

    def desktop(self, sid=None):
        """The pids of Xvnc, Chromium's browser process and the agent."""
        out = self.sh(sid or self.sid, "echo $(pgrep -x Xvnc) $(pgrep -xo chromium) $(pgrep -x deskbox-agent)")
        pids = out.split()
        self.assertEqual(len(pids), 3, f"Xvnc, chromium and the agent each run once: {out!r}")
        return pids

    def cg(self, name, sid=None):
        return self.sh(sid or self.sid, f"cat {self.EXEC_CG}/{name}").strip()

    def counters(self, name, sid=None):
        """A cgroup file of key/value lines (pids.events, memory.events) as a dict."""
        return {k: int(v) for k, v in (line.split() for line in self.cg(name, sid).splitlines())}

    def still_works(self, before, sid=None):
        sid = sid or self.sid
        self.assertEqual(self.desktop(sid), before, "the desktop's processes were not touched")
        r = self.dbx.get(f"/v1/sandboxes/{sid}/screenshot", params={"format": "png"}, timeout=120)
        self.expect(r, 200, "screenshot after the abuse")
        deadline = time.monotonic() + 60
        while (left := int(self.cg("pids.current", sid))) > 2:
            # 2: this command's shell and its cat
            self.assertLess(time.monotonic(), deadline, f"{left} processes of the abuse are left")
            time.sleep(1)

    def test_a_fork_bomb_hits_the_commands_pids_limit_set_live(self):
        before = self.desktop()
        self.assertEqual(self.cg("pids.max"), "1024", "the guest's default")
        # The desktop's own tasks (Chromium's threads) are counted apart, in user/session.
        desktop_tasks = int(self.sh(self.sid, "cat /sys/fs/cgroup/user/session/pids.current"))
        print(f"desktop tasks in user/session: {desktop_tasks}")
        self.assertLess(desktop_tasks, 4096 - 1024 - 512, "room for the browser to grow")
        r = self.dbx.request("PATCH", f"/v1/sandboxes/{self.sid}", json={"limits": {"exec_pids_max": 256}}, timeout=60)
        self.assertEqual(self.expect(r, 200, "patch exec_pids_max")["limits"]["exec_pids_max"], 256)
        self.assertEqual(self.cg("pids.max"), "256", "in force in the guest when the PATCH answered")
        max_before = self.counters("pids.events")["max"]
        # The command's own shell spins without forking, so that only the timeout ends it (and
        # with it, the process group: every copy of b).
        res = self.exec_in(self.sid, shell="b() { b | b & }; b; while :; do :; done", timeout_s=20, timeout=180)
        self.assertTrue(res["timed_out"], res)
        self.assertGreater(self.counters("pids.events")["max"], max_before, "forks were refused at pids.max")
        self.still_works(before)

    def test_a_memory_hog_is_killed_at_the_commands_memory_limit_set_at_create(self):
        sid = self.create(limits={"exec_memory_mib": 512})
        self.assertEqual(self.get_sandbox(sid)["limits"]["exec_memory_mib"], 512)
        self.assertEqual(int(self.cg("memory.max", sid)), 512 << 20, "in force when the create answered")
        before = self.desktop(sid)
        kills_before = self.counters("memory.events", sid)["oom_kill"]
        res = self.exec_in(sid, argv=["perl", "-e", '$x = "x" x (768 * 1024 * 1024); print "survived\n"'],
                           timeout_s=300, timeout=400)
        self.assertEqual(res["signal"], 9, f"a 768 MiB string over a 512 MiB limit: {res}")
        self.assertNotIn("survived", res["stdout"])
        self.assertGreater(self.counters("memory.events", sid)["oom_kill"], kills_before)
        self.still_works(before, sid)

    def test_a_tmp_filler_stops_at_the_tmpfs_size(self):
        limits = self.get_sandbox(self.sid)["limits"]
        self.assertEqual(int(self.cg("memory.max")), limits["exec_memory_mib"] << 20,
                         "the guest's default is what the API shows (half of the template's RAM)")
        before = self.desktop()
        total = int(self.sh(self.sid, "sed -n 's/^MemTotal: *\\([0-9]*\\) kB/\\1/p' /proc/meminfo")) * 1024
        res = self.exec_in(self.sid, shell="dd if=/dev/zero of=/tmp/fill bs=1M count=4096; "
                                           "stat -c %s /tmp/fill; rm -f /tmp/fill", timeout_s=300, timeout=400)
        self.assertIn("No space left on device", res["stderr"], res)
        filled = int(res["stdout"].split()[-1])
        self.assertLessEqual(filled, total // 4 + (1 << 20), "at most a quarter of RAM (size=25%)")
        self.assertGreater(filled, total // 8, "the filler wrote until /tmp was full")
        self.still_works(before)

    def fill_root(self, mib):
        """dd as an exec command into /root until it fails: what it wrote, in bytes."""
        res = self.exec_in(self.sid, shell=f"dd if=/dev/zero of=/root/fill bs=1M count={mib}; "
                                           "sync; stat -c %s /root/fill; rm -f /root/fill",
                           timeout_s=600, timeout=700)
        self.assertIn("Disk quota exceeded", res["stderr"], res)
        return int(res["stdout"].split()[-1])

    def test_a_disk_filler_stops_at_the_commands_disk_quota(self):
        self.assertEqual(self.get_sandbox(self.sid)["limits"]["exec_disk_mib"], 512)
        # Commands cannot override the quota: CAP_SYS_RESOURCE (bit 24) is out of their bounding set.
        bnd = int(self.sh(self.sid, "sed -n 's/^CapBnd:\t//p' /proc/self/status"), 16)
        self.assertFalse(bnd & (1 << 24), f"CapBnd {bnd:x}")
        free = int(self.sh(self.sid, "df -B1 --output=avail / | tail -n1"))
        self.assertGreater(free, 768 << 20, "the disk has room past the default limit")
        before = self.desktop()
        # The default: 512 MiB past the template's files of root (about 1 GiB is free).
        filled = self.fill_root(1024)
        print(f"default limit: {filled >> 20} MiB written of {free >> 20} MiB free")
        self.assertLessEqual(filled, 512 << 20)
        self.assertGreater(filled, 480 << 20)
        # Changed live: 64 MiB.
        r = self.dbx.request("PATCH", f"/v1/sandboxes/{self.sid}", json={"limits": {"exec_disk_mib": 64}}, timeout=60)
        self.assertEqual(self.expect(r, 200, "patch exec_disk_mib")["limits"]["exec_disk_mib"], 64)
        filled = self.fill_root(256)
        self.assertLessEqual(filled, 64 << 20)
        self.assertGreater(filled, 48 << 20)
        # The desktop's user is not counted against it: the browser's profile can still grow.
        out = self.sh(self.sid, "dd if=/dev/zero of=/root/keep bs=1M count=60 2>/dev/null; "
                                "runuser -u desk -- dd if=/dev/zero of=/home/desk/more bs=1M count=100 2>&1; "
                                "stat -c %s /home/desk/more; rm -f /home/desk/more /root/keep")
        self.assertEqual(out.split()[-1], str(100 << 20), out)
        self.still_works(before)
