#!/usr/bin/env python3
"""Fork/snapshot mechanism spike (issue #22, item 1): how long does a running sandbox stop, and
how long does a point-in-time copy of it (RAM, devices and disk) take, for each mechanism QEMU
offers?

Run it as root, holding the shared guest lock, from the repository root:

    flock /tmp/deskbox-guest.lock python3 tests/spike/snapshot_spike.py [--reps 5] [--settle 20]
        [--template /var/cache/deskbox/templates/desktop@<hash>] [--only a-stream,b-precopy,...]

It restores the cached desktop template the way vmhost/src/restorer.cc does (microvm, qboot, TCG
tb-size 512, 2 vCPUs, 2 GiB RAM as a private copy-on-write mapping of the template's `ram` file, a
qcow2 overlay on the template disk, virtio-blk, virtio-net on a tap that QEMU creates in an empty network namespace of its own
(never up, no address: the guest has no network), the agent's
virtio-serial port; `-incoming defer`, x-ignore-shared, `cont`), lets the guest run (the desktop's
Chromium is live), measures its dirty-page rate, then repeats each mechanism --reps times:

  a-stream     stop -> blockdev-snapshot-sync -> migrate to a file (stream format) -> cont
  a-mapped     stop -> blockdev-snapshot-sync -> migrate with mapped-ram -> cont
  a-multifd    as a-mapped, with multifd (2 channels): mapped-ram's parallel mode
  b-precopy    live pre-copy migration to a file (downtime-limit 100 ms, pause-before-switchover;
               blockdev-snapshot-sync in the pre-switchover pause), then cont on the source
  b-mapped     as b-precopy with mapped-ram
  b-tight      as b-precopy with no query-migrate inside the stop window: the overlay switch and
               migrate-continue are sent together on the pre-switchover event, cont on the
               completed event
  c-private    background-snapshot on the restored guest as is (RAM a private file mapping):
               expected to be refused; QEMU's error is printed
  c-tmpfs      background-snapshot of a second source whose RAM is a shared tmpfs file (eligible
               for userfaultfd write-protect); QEMU runs as root. stop -> blockdev-snapshot-sync
               -> migrate (background-snapshot) -> cont as soon as the migration is active.
  c-own        background-snapshot of the same source, QEMU stopping and resuming the guest
               itself (no disk switch possible inside its stop; the restore check copies the live
               overlay instead)
  d-shared     the same tmpfs-RAM source: stop -> blockdev-snapshot-sync -> migrate with
               x-ignore-shared (device state only) -> cp --sparse the RAM file -> cont; the
               restore check maps the copy privately (share=off, readonly) as a template restore
               does, so forks of one snapshot would share its pages copy-on-write.
               Runs before c-tmpfs on that source: c's preparation allocates all of tmpfs RAM.

For every run it prints the source stop time (QEMU's STOP event to its RESUME event, both
stamped by QEMU), the disk overlay switch (the blockdev-snapshot-sync round trip, inside the stop
window), the total time (first command to the snapshot complete and the source running), bytes
(file size and bytes allocated on disk) and whether the snapshot restores: a second QEMU started
with `-incoming defer`, its disk a fresh overlay on the frozen layer, loads the file, is sent
`cont` and is still running 2 s later. b-tight runs also print QEMU's events from STOP on
(ms offsets). Then a p50/p95 table per mechanism. It also probes, as
uid 65534, whether an unprivileged process may create a userfaultfd (the cost side of c).

Every file lives in a directory under /var/tmp (the tmpfs RAM copy under /dev/shm); all QEMUs it
started are killed and both directories removed on exit, error or SIGTERM. Python 3 standard library only.
"""

import argparse
import ctypes
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

QEMU = "qemu-system-x86_64"
CPU = "Nehalem,+rdrand,+arat"
MEM_MIB = 2048
TB_MIB = 512
GUEST_MAC = "52:54:00:de:5b:02"
AGENT_PORT = "org.deskbox.agent"
BIG_BANDWIDTH = 64 << 30  # bytes/s: no throttle (QEMU's default cap is 128 MiB/s)


class QmpError(Exception):
    pass


class Qmp:
    """Minimal synchronous QMP client; events are queued while waiting for replies."""

    def __init__(self, path, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.buf = b""
        self.events = []
        self.seen = []  # every event since clear_events, including those waited for
        self._read(timeout)  # greeting
        self.cmd("qmp_capabilities")

    def _read(self, timeout):
        while b"\n" not in self.buf:
            self.sock.settimeout(max(timeout, 0.01))
            data = self.sock.recv(65536)
            if not data:
                raise QmpError("QMP connection closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        m = json.loads(line)
        if "event" in m:
            self.seen.append(m)
        return m

    def cmd(self, name, timeout=120.0, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline - time.monotonic())
            if "event" in m:
                self.events.append(m)
            elif "error" in m:
                raise QmpError(f"{name}: {m['error'].get('desc')}")
            elif "return" in m:
                return m["return"]

    def wait_event(self, name, pred=lambda d: True, timeout=120.0):
        deadline = time.monotonic() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e["event"] == name and pred(e.get("data", {})):
                    return self.events.pop(i)
            left = deadline - time.monotonic()
            if left <= 0:
                raise QmpError(f"no {name} event within {timeout} s")
            try:
                m = self._read(left)
            except socket.timeout:
                continue
            if "event" in m:
                self.events.append(m)

    def clear_events(self):
        self.events = []
        self.seen = []

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def ev_time(e):
    ts = e["timestamp"]
    return ts["seconds"] + ts["microseconds"] / 1e6


def stop_window(q):
    """Seconds from QEMU's first STOP event to its last RESUME event (QEMU's own timestamps)."""
    stops = [ev_time(e) for e in q.events if e["event"] == "STOP"]
    resumes = [ev_time(e) for e in q.events if e["event"] == "RESUME"]
    if not stops or not resumes:
        raise QmpError(f"no STOP/RESUME pair: {[e['event'] for e in q.events]}")
    return max(resumes) - min(stops)


def timeline(q):
    """QEMU's events from the first STOP on, as ms offsets: where the stop window went."""
    stops = [ev_time(e) for e in q.events if e["event"] == "STOP"]
    if not stops:
        return ""
    t0 = min(stops)
    parts = []
    for e in sorted(q.seen, key=ev_time):
        if ev_time(e) < t0:
            continue
        name = e["event"] if e["event"] != "MIGRATION" else e["data"].get("status")
        parts.append(f"{name}@{(ev_time(e) - t0) * 1000:.0f}")
    return " ".join(parts)


def set_caps(q, **caps):
    q.cmd("migrate-set-capabilities",
          capabilities=[{"capability": k.replace("_", "-"), "state": v} for k, v in caps.items()])


ALL_CAPS = dict(events=True, x_ignore_shared=False, mapped_ram=False, multifd=False,
                pause_before_switchover=False, background_snapshot=False)


class Spike:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="snapshot-spike.", dir="/var/tmp")
        self.shm = None
        self.procs = []
        self.n = 0
        self.template = args.template

    # ---------- QEMU processes ----------

    def start_qemu(self, tag, disk, ram_arg):
        d = os.path.join(self.tmp, tag)
        os.makedirs(d, exist_ok=True)
        qmp = os.path.join(d, "qmp.sock")
        # Its own empty network namespace (unshare execs QEMU, same pid): the tap QEMU creates there
        # is never up and has no address; the template's virtio-net state needs a vnet_hdr tap.
        argv = ["unshare", "--net", "--", QEMU, "-name", f"spike-{tag},debug-threads=on",
                "-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem",
                "-bios", "/usr/share/qemu/qboot.rom",
                "-accel", f"tcg,tb-size={TB_MIB}", "-cpu", CPU, "-smp", "2", "-m", f"{MEM_MIB}M",
                "-object", ram_arg,
                "-nodefaults", "-no-user-config", "-display", "none", "-msg", "timestamp=on",
                "-serial", f"file:{d}/console.log",
                "-drive", f"id=root,file={disk},format=qcow2,if=none,cache=writeback,discard=unmap",
                "-device", "virtio-blk-device,drive=root",
                "-netdev", "tap,id=net0,ifname=spike0,script=no,downscript=no,vnet_hdr=on",
                "-device", f"virtio-net-device,netdev=net0,mac={GUEST_MAC}",
                "-device", "virtio-serial-device,max_ports=2",
                "-chardev", f"socket,id=agent,path={d}/agent.sock,server=on,wait=off",
                "-device", f"virtserialport,chardev=agent,name={AGENT_PORT}",
                "-qmp", f"unix:{qmp},server=on,wait=off",
                "-incoming", "defer"]
        log = open(os.path.join(d, "qemu.log"), "wb")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        log.close()
        self.procs.append(p)
        try:
            q = Qmp(qmp)
        except Exception:
            raise RuntimeError(f"QEMU {tag} did not start: {self.qemu_log(tag)}")
        return p, q

    def qemu_log(self, tag):
        try:
            with open(os.path.join(self.tmp, tag, "qemu.log"), errors="replace") as f:
                return f.read()[-1500:].strip()
        except OSError:
            return ""

    def stop_qemu(self, p, q):
        if q:
            try:
                q.cmd("quit", timeout=5)
            except Exception:
                pass
            q.close()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def cleanup(self):
        for p in list(self.procs):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        self.procs = []
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.shm:
            shutil.rmtree(self.shm, ignore_errors=True)

    def overlay(self, name, backing, backing_fmt):
        path = os.path.join(self.tmp, name)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", backing_fmt, "-b", backing,
                        path], check=True)
        return path

    def restore_template(self, tag, ram_arg, ignore_shared=True):
        disk = self.overlay(f"{tag}-disk0.qcow2", os.path.join(self.template, "disk.img"), "raw")
        p, q = self.start_qemu(tag, disk, ram_arg)
        t0 = time.monotonic()
        try:
            set_caps(q, events=True, x_ignore_shared=ignore_shared)
            q.cmd("migrate-incoming", uri="file:" + os.path.join(self.template, "state"))
            e = q.wait_event("MIGRATION",
                             lambda d: d["status"] in ("completed", "failed", "cancelled"))
            if e["data"]["status"] != "completed":
                raise RuntimeError(f"template restore {e['data']['status']}: "
                                   f"{q.cmd('query-migrate').get('error-desc')}")
            q.cmd("cont")
        except (OSError, QmpError) as ex:
            time.sleep(0.5)
            raise RuntimeError(f"template restore into {tag}: {ex}: {self.qemu_log(tag)}")
        print(f"# {tag}: template restored in {time.monotonic() - t0:.2f} s", flush=True)
        return p, q, disk

    def private_ram(self):
        return (f"memory-backend-file,id=mem,size={MEM_MIB}M,mem-path={self.template}/ram,"
                "share=off,readonly=on,rom=off")

    # ---------- measurement helpers ----------

    def dirty_rate(self, q):
        try:
            q.cmd("calc-dirty-rate", **{"calc-time": 2})
            time.sleep(2.5)
            for _ in range(20):
                r = q.cmd("query-dirty-rate")
                if r.get("status") == "measured":
                    return r.get("dirty-rate")
                time.sleep(0.5)
        except QmpError as e:
            return f"n/a ({e})"
        return "n/a"

    def prepare(self, q, **caps):
        """Capabilities (ALL_CAPS with `caps` over them) and parameters set, events cleared: the
        saved state's path, the capabilities and the start time of one run."""
        caps = {**ALL_CAPS, **caps}
        set_caps(q, **caps)
        self.migrate_params(q, caps["multifd"])
        state = os.path.join(self.tmp, "state.bin")
        q.clear_events()
        return state, caps, time.monotonic()

    def migrate_params(self, q, multifd=False):
        params = {"max-bandwidth": BIG_BANDWIDTH, "downtime-limit": self.args.downtime_ms}
        if multifd:
            params["multifd-channels"] = 2
        q.cmd("migrate-set-parameters", **params)

    def wait_migration(self, q, timeout=180):
        e = q.wait_event("MIGRATION", lambda d: d["status"] in ("completed", "failed", "cancelled"),
                         timeout)
        info = q.cmd("query-migrate")
        if e["data"]["status"] != "completed":
            raise QmpError(f"migration {e['data']['status']}: {info.get('error-desc')}")
        return info

    def snapshot_disk(self, q, tag):
        """The overlay switch: the active layer is frozen; returns (frozen path, seconds)."""
        active = self.active[tag]
        new = os.path.join(self.tmp, f"{tag}-layer{self.n}.qcow2")
        self.n += 1
        t = time.monotonic()
        q.cmd("blockdev-snapshot-sync", device="root", **{"snapshot-file": new, "format": "qcow2"})
        dt = time.monotonic() - t
        self.active[tag] = new
        return active, dt

    def check_restore(self, state, frozen_disk, caps, ram_arg=None):
        """Restores a snapshot in a second QEMU: (ok, seconds to load, detail)."""
        tag = f"dest{self.n}"
        self.n += 1
        disk = self.overlay(f"{tag}.qcow2", frozen_disk, "qcow2")
        p, q = None, None
        try:
            p, q = self.start_qemu(tag, disk, ram_arg or self.private_ram())
            set_caps(q, **{**ALL_CAPS, **{k: v for k, v in caps.items()
                                          if k in ("mapped_ram", "multifd", "x_ignore_shared")}})
            if caps.get("multifd"):
                q.cmd("migrate-set-parameters", **{"multifd-channels": 2})
            t = time.monotonic()
            q.cmd("migrate-incoming", uri="file:" + state)
            e = q.wait_event("MIGRATION",
                             lambda d: d["status"] in ("completed", "failed", "cancelled"), 120)
            load = time.monotonic() - t
            if e["data"]["status"] != "completed":
                return False, load, q.cmd("query-migrate").get("error-desc", e["data"]["status"])
            q.cmd("cont")
            time.sleep(2)
            st = q.cmd("query-status")
            ok = st.get("running") and st.get("status") == "running"
            return bool(ok), load, st.get("status")
        except Exception as ex:
            return False, 0.0, f"{ex} {self.qemu_log(tag)}"
        finally:
            if p:
                self.stop_qemu(p, q)
            for f in glob.glob(os.path.join(self.tmp, f"{tag}*")):
                if os.path.isdir(f):
                    shutil.rmtree(f, ignore_errors=True)
                else:
                    os.unlink(f)

    # ---------- mechanisms ----------

    def run_stop_save(self, q, tag, mapped, multifd):
        """(a) stop -> overlay switch -> save -> cont."""
        state, caps, t0 = self.prepare(q, mapped_ram=mapped, multifd=multifd)
        q.cmd("stop")
        frozen, disk_s = self.snapshot_disk(q, tag)
        q.cmd("migrate", uri="file:" + state)
        info = self.wait_migration(q)
        q.cmd("cont")
        total = time.monotonic() - t0
        return dict(stop=stop_window(q), disk=disk_s, total=total,
                    qemu_downtime=info.get("downtime"), state=state, frozen=frozen, caps=caps,
                    transferred=info.get("ram", {}).get("transferred"))

    def run_precopy(self, q, tag, mapped, tight=False):
        """(b) live pre-copy to a file; overlay switch in the pre-switchover pause; cont.
        tight: no query-migrate inside the stop window: the overlay switch and migrate-continue
        go out together on the pre-switchover event, cont on the completed event."""
        state, caps, t0 = self.prepare(q, mapped_ram=mapped, pause_before_switchover=True)
        q.cmd("migrate", uri="file:" + state)
        if tight:
            return self._precopy_tight(q, tag, state, caps, t0)
        q.wait_event("MIGRATION", lambda d: d["status"] in ("pre-switchover", "failed", "cancelled"),
                     180)
        st = q.cmd("query-migrate")
        if st.get("status") != "pre-switchover":
            raise QmpError(f"migration {st.get('status')}: {st.get('error-desc')}")
        frozen, disk_s = self.snapshot_disk(q, tag)
        q.cmd("migrate-continue", state="pre-switchover")
        info = self.wait_migration(q)
        q.cmd("cont")
        total = time.monotonic() - t0
        return dict(stop=stop_window(q), disk=disk_s, total=total,
                    qemu_downtime=info.get("downtime"), state=state, frozen=frozen, caps=caps,
                    transferred=info.get("ram", {}).get("transferred"),
                    passes=info.get("ram", {}).get("dirty-sync-count"))

    def _precopy_tight(self, q, tag, state, caps, t0):
        e = q.wait_event("MIGRATION",
                         lambda d: d["status"] in ("pre-switchover", "failed", "cancelled"), 180)
        if e["data"]["status"] != "pre-switchover":
            raise QmpError(f"migration {e['data']['status']}: {q.cmd('query-migrate').get('error-desc')}")
        active = self.active[tag]
        new = os.path.join(self.tmp, f"{tag}-layer{self.n}.qcow2")
        self.n += 1
        t = time.monotonic()
        # Both commands in one write; QEMU runs them in order.
        q.sock.sendall((json.dumps({"execute": "blockdev-snapshot-sync", "arguments": {
            "device": "root", "snapshot-file": new, "format": "qcow2"}}) + "\n" +
            json.dumps({"execute": "migrate-continue", "arguments": {"state": "pre-switchover"}}) +
            "\n").encode())
        replies = []
        while len(replies) < 2:
            m = q._read(60)
            if "event" in m:
                q.events.append(m)
                continue
            if "error" in m:
                raise QmpError(f"disk switch / migrate-continue: {m['error'].get('desc')}")
            replies.append(m)
            if len(replies) == 1:
                disk_s = time.monotonic() - t
        self.active[tag] = new
        e = q.wait_event("MIGRATION", lambda d: d["status"] in ("completed", "failed", "cancelled"), 180)
        q.cmd("cont")  # the source may run again whatever the outcome
        total = time.monotonic() - t0
        info = q.cmd("query-migrate")
        if e["data"]["status"] != "completed":
            raise QmpError(f"migration {e['data']['status']}: {info.get('error-desc')}")
        return dict(stop=stop_window(q), disk=disk_s, total=total, timeline=timeline(q),
                    qemu_downtime=info.get("downtime"), state=state, frozen=active, caps=caps,
                    transferred=info.get("ram", {}).get("transferred"),
                    passes=info.get("ram", {}).get("dirty-sync-count"))

    def run_background_own(self, q, tag):
        """(c) background-snapshot left to stop and resume the guest itself: no disk switch."""
        state, caps, t0 = self.prepare(q, background_snapshot=True)
        q.cmd("migrate", uri="file:" + state)
        info = self.wait_migration(q)
        total = time.monotonic() - t0
        # No overlay switch: the "frozen" layer for the restore check is the live one, copied.
        frozen = os.path.join(self.tmp, f"{tag}-copy{self.n}.qcow2")
        self.n += 1
        shutil.copyfile(self.active[tag], frozen)
        return dict(stop=stop_window(q), disk=0.0, total=total,
                    qemu_downtime=info.get("downtime"), state=state, frozen=frozen, caps=caps,
                    transferred=info.get("ram", {}).get("transferred"))

    def run_shared_copy(self, q, tag, ram):
        """(d) RAM a shared tmpfs file: stop -> overlay switch -> device state only
        (x-ignore-shared) -> copy the RAM file (sparse) -> cont. Forks map the copy privately."""
        copy = os.path.join(self.shm, f"ram-copy{self.n}")
        self.n += 1
        state, caps, t0 = self.prepare(q, x_ignore_shared=True)
        q.cmd("stop")
        frozen, disk_s = self.snapshot_disk(q, tag)
        q.cmd("migrate", uri="file:" + state)
        info = self.wait_migration(q)
        t_copy = time.monotonic()
        subprocess.run(["cp", "--sparse=always", ram, copy], check=True)
        copy_s = time.monotonic() - t_copy
        q.cmd("cont")
        total = time.monotonic() - t0
        return dict(stop=stop_window(q), disk=disk_s, total=total, copy_s=copy_s,
                    qemu_downtime=info.get("downtime"), state=state, frozen=frozen, caps=caps,
                    transferred=info.get("ram", {}).get("transferred"), ram_copy=copy,
                    ram_arg=(f"memory-backend-file,id=mem,size={MEM_MIB}M,mem-path={copy},"
                             "share=off,readonly=on,rom=off"))

    def run_background(self, q, tag):
        """(c) stop -> overlay switch -> background-snapshot started -> cont once it is active."""
        state, caps, t0 = self.prepare(q, background_snapshot=True)
        q.cmd("stop")
        frozen, disk_s = self.snapshot_disk(q, tag)
        q.cmd("migrate", uri="file:" + state)
        q.wait_event("MIGRATION", lambda d: d["status"] in ("active", "failed", "cancelled"), 60)
        # The migration thread stops and resumes (to the old, stopped state) around its setup.
        deadline = time.monotonic() + 30
        while True:
            s = q.cmd("query-migrate")
            if s.get("status") != "active" or s.get("ram", {}).get("transferred", 0) > 0 \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.002)
        q.cmd("cont")
        resumed = time.monotonic() - t0
        info = self.wait_migration(q)
        total = time.monotonic() - t0
        return dict(stop=stop_window(q), disk=disk_s, total=total,
                    qemu_downtime=info.get("downtime"), state=state, frozen=frozen, caps=caps,
                    transferred=info.get("ram", {}).get("transferred"), resumed=resumed)

    def measure(self, name, q, tag, fn):
        rows = []
        for i in range(self.args.reps):
            try:
                r = fn()
            except Exception as ex:
                print(f"{name} run {i}: FAILED: {ex}", flush=True)
                try:
                    q.cmd("migrate_cancel")
                except Exception:
                    pass
                try:
                    if not q.cmd("query-status").get("running"):
                        q.cmd("cont")
                except Exception:
                    pass
                rows.append(None)
                if i == 0:
                    break
                continue
            st = os.stat(r["state"])
            r["size"] = st.st_size
            r["alloc"] = st.st_blocks * 512
            ok, load, detail = self.check_restore(r["state"], r["frozen"], r["caps"], r.get("ram_arg"))
            r.update(restore_ok=ok, restore_s=load, restore_detail=detail)
            os.unlink(r["state"])
            if r.get("ram_copy"):
                r["alloc"] += os.stat(r["ram_copy"]).st_blocks * 512
                os.unlink(r["ram_copy"])
            extra = ""
            if "passes" in r:
                extra += f" passes={r['passes']}"
            if "copy_s" in r:
                extra += f" ram_copy={r['copy_s'] * 1000:.0f}ms"
            if r.get("timeline"):
                extra += f" events_ms=[{r['timeline']}]"
            if "resumed" in r:
                extra += f" cont_after={r['resumed'] * 1000:.0f}ms"
            print(f"{name} run {i}: stop={r['stop'] * 1000:.0f}ms disk_switch={r['disk'] * 1000:.1f}ms "
                  f"total={r['total']:.2f}s qemu_downtime={r['qemu_downtime']}ms "
                  f"file={r['size'] / 2**20:.0f}MiB alloc={r['alloc'] / 2**20:.0f}MiB "
                  f"ram_transferred={(r['transferred'] or 0) / 2**20:.0f}MiB{extra} "
                  f"restore={'ok' if ok else 'FAILED'} ({load:.2f}s load, {detail})", flush=True)
            rows.append(r)
        self.results[name] = rows

    def uffd_probe(self):
        """What an unprivileged uid (65534) gets from userfaultfd, as a slot's QEMU would."""
        out = {}
        for label, flags in (("userfaultfd(O_CLOEXEC)", os.O_CLOEXEC),
                             ("userfaultfd(O_CLOEXEC|UFFD_USER_MODE_ONLY)", os.O_CLOEXEC | 1)):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                try:
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                    libc = ctypes.CDLL(None, use_errno=True)
                    fd = libc.syscall(323, flags)  # __NR_userfaultfd on x86_64
                    res = "ok" if fd >= 0 else os.strerror(ctypes.get_errno())
                    try:
                        os.close(os.open("/dev/userfaultfd", os.O_RDWR))
                        dev = "ok"
                    except OSError as e:
                        dev = e.strerror
                    os.write(w, f"{res}|{dev}".encode())
                finally:
                    os._exit(0)
            os.close(w)
            res, dev = os.read(r, 200).decode().split("|")
            os.close(r)
            os.waitpid(pid, 0)
            out[label] = res
            out["open(/dev/userfaultfd)"] = dev
        with open("/proc/sys/vm/unprivileged_userfaultfd") as f:
            sysctl = f.read().strip()
        print(f"# uid 65534 with vm.unprivileged_userfaultfd={sysctl}: " +
              "; ".join(f"{k} -> {v}" for k, v in out.items()), flush=True)

    def run(self):
        self.results = {}
        self.active = {}
        only = set(self.args.only.split(",")) if self.args.only else None
        want = lambda n: only is None or n in only
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  "
              f"{subprocess.run([QEMU, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}"
              f"  kernel {os.uname().release}  {os.cpu_count()} CPUs", flush=True)
        print(f"# template {self.template}; reps {self.args.reps}; settle {self.args.settle} s; "
              f"downtime-limit {self.args.downtime_ms} ms; max-bandwidth {BIG_BANDWIDTH >> 30} GiB/s; "
              f"files under {self.tmp}", flush=True)
        self.uffd_probe()

        if any(want(n) for n in ("a-stream", "a-mapped", "a-multifd", "b-precopy", "b-mapped", "b-tight",
                                "c-private")):
            p, q, disk = self.restore_template("src", self.private_ram())
            self.active["src"] = disk
            time.sleep(self.args.settle)
            print(f"# src dirty rate: {self.dirty_rate(q)} MiB/s (calc-dirty-rate, 2 s)", flush=True)
            if want("a-stream"):
                self.measure("a-stream", q, "src", lambda: self.run_stop_save(q, "src", False, False))
            if want("a-mapped"):
                self.measure("a-mapped", q, "src", lambda: self.run_stop_save(q, "src", True, False))
            if want("a-multifd"):
                self.measure("a-multifd", q, "src", lambda: self.run_stop_save(q, "src", True, True))
            if want("b-precopy"):
                self.measure("b-precopy", q, "src", lambda: self.run_precopy(q, "src", False))
            if want("b-mapped"):
                self.measure("b-mapped", q, "src", lambda: self.run_precopy(q, "src", True))
            if want("b-tight"):
                self.measure("b-tight", q, "src", lambda: self.run_precopy(q, "src", False, True))
            if want("c-private"):
                try:
                    set_caps(q, **{**ALL_CAPS, "background_snapshot": True})
                    print("c-private: background-snapshot accepted on a private file mapping", flush=True)
                except QmpError as e:
                    print(f"c-private: refused: {e}", flush=True)
                set_caps(q, **ALL_CAPS)
            print(f"# src still {q.cmd('query-status')['status']} after {self.n} files named", flush=True)
            self.stop_qemu(p, q)

        if want("c-tmpfs") or want("d-shared") or want("c-own"):
            self.shm = tempfile.mkdtemp(prefix="snapshot-spike.", dir="/dev/shm")
            ram = os.path.join(self.shm, "ram")
            t = time.monotonic()
            subprocess.run(["cp", "--sparse=always", os.path.join(self.template, "ram"), ram], check=True)
            print(f"# tmpfs RAM copy: {time.monotonic() - t:.2f} s, "
                  f"{os.stat(ram).st_blocks * 512 / 2**20:.0f} MiB allocated", flush=True)
            p, q, disk = self.restore_template(
                "tsrc", f"memory-backend-file,id=mem,size={MEM_MIB}M,mem-path={ram},share=on")
            self.active["tsrc"] = disk
            time.sleep(self.args.settle)
            print(f"# tsrc dirty rate: {self.dirty_rate(q)} MiB/s (calc-dirty-rate, 2 s)", flush=True)
            # d first: c's write-tracking preparation reads every page, which allocates the
            # whole 2 GiB in tmpfs.
            if want("d-shared"):
                self.measure("d-shared", q, "tsrc", lambda: self.run_shared_copy(q, "tsrc", ram))
            if want("c-tmpfs"):
                self.measure("c-tmpfs", q, "tsrc", lambda: self.run_background(q, "tsrc"))
            print(f"# tmpfs RAM file now {os.stat(ram).st_blocks * 512 / 2**20:.0f} MiB allocated",
                  flush=True)
            if want("c-own"):
                self.measure("c-own", q, "tsrc", lambda: self.run_background_own(q, "tsrc"))
            self.stop_qemu(p, q)

        self.table()

    def table(self):
        def pct(xs, p):
            xs = sorted(xs)
            if not xs:
                return float("nan")
            k = (len(xs) - 1) * p
            lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
            return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

        print()
        print(f"{'mechanism':<11} {'runs':>4} {'stop p50':>9} {'stop p95':>9} {'disk p50':>9} "
              f"{'total p50':>10} {'total p95':>10} {'file MiB':>9} {'alloc MiB':>10} {'restore':>8}")
        for name, rows in self.results.items():
            good = [r for r in rows if r]
            if not good:
                print(f"{name:<11} {len(rows):>4}  all failed")
                continue
            s = [r["stop"] * 1000 for r in good]
            t = [r["total"] for r in good]
            d = [r["disk"] * 1000 for r in good]
            print(f"{name:<11} {len(good):>4} {pct(s, .5):>7.0f}ms {pct(s, .95):>7.0f}ms "
                  f"{pct(d, .5):>7.1f}ms {pct(t, .5):>9.2f}s {pct(t, .95):>9.2f}s "
                  f"{statistics.median(r['size'] for r in good) / 2**20:>9.0f} "
                  f"{statistics.median(r['alloc'] for r in good) / 2**20:>10.0f} "
                  f"{sum(r['restore_ok'] for r in good):>4}/{len(good):<3}")
        print("stop: QEMU's STOP to RESUME events; disk: blockdev-snapshot-sync round trip inside "
              "the stop; total: first command to snapshot complete and source running", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--settle", type=float, default=20.0,
                    help="seconds the restored guest runs before the first measurement")
    ap.add_argument("--downtime-ms", type=int, default=100)
    ap.add_argument("--template", default=None)
    ap.add_argument("--only", default="", help="comma-separated mechanism names (default: all)")
    args = ap.parse_args()
    if args.template is None:
        found = sorted(glob.glob("/var/cache/deskbox/templates/desktop@*"))
        if not found:
            sys.exit("no template under /var/cache/deskbox/templates")
        args.template = found[-1]
    if os.geteuid() != 0:
        sys.exit("run as root (the template is root's; c-tmpfs needs userfaultfd)")
    spike = Spike(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    try:
        spike.run()
    finally:
        spike.cleanup()


if __name__ == "__main__":
    main()
