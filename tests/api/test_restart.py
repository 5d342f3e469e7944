"""deskboxd killed with SIGKILL and started again on the same state directory and jailer: the
sandboxes whose QEMU still runs are re-adopted and keep working (same QEMU, guest state,
tokens and keys), the one whose QEMU died meanwhile is reported failed and its slot is cleaned,
and nothing is left once the deployment stops. deskboxd killed in the middle of a create and of
a delete: the new one either takes the VM over as a listed, working sandbox or ends it and
reclaims its slot; a delete repeated after the restart finishes, and the deployment holds what
it held before. Then both deskboxd and the jailer killed, and
deskboxd started first, beside the dead jailer's socket file: it waits for the new jailer. The
jailer alone killed: deskboxd fails what needs it, and takes up a new one. Last a
simulated reboot: every process gone, with what the kernel held (network namespaces, cgroups),
while the run directory, the slot directories on disk and the sandbox records stay: the new
jailer and deskboxd start, report the sandboxes failed, reclaim every slot directory and serve."""

import os
import signal
import threading
import time
import unittest

import requests

from harness import ApiTestCase, describe
from wsclient import CdpPage


class RestartTest(ApiTestCase):
    deployment = {"warm_pool": 0}

    def new_qemu(self, before, what):
        after = self.dbx.qemu_processes()
        new = {pid: slot for pid, slot in after.items() if pid not in before}
        self.assertEqual(len(new), 1, f"creating {what} should start exactly one QEMU (warm and prestart "
                                      f"pools are 0): before {before}, after {after}")
        return after, next(iter(new.items()))

    def test_jailer_killed_while_deskboxd_runs(self):
        dbx = self.dbx
        before = set(dbx.qemu_processes())
        h = self.create_sandbox(metadata={"name": "H"})["id"]
        pid_h = (set(dbx.qemu_processes()) - before).pop()
        j = self.create_sandbox(metadata={"name": "J"})["id"]
        pid_j, slot_j = next((p, s) for p, s in dbx.qemu_processes().items() if p not in before | {pid_h})
        for sid in (h, j):  # the create's own work in the guest is done
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and self.get_sandbox(sid)["browser_ready"] is not True:
                time.sleep(0.5)
        self.sh(h, "echo jailer-gone > /root/marker")
        listening = dbx.jailer_log.read_text().count("listening on")
        dbx.kill9_jailer()
        self.assertEqual(set(dbx.qemu_processes()), before | {pid_h, pid_j}, "QEMUs outlive the jailer")
        # What needs no privileged help goes on: commands in the guest, the screen.
        self.assertEqual(self.sh(h, "cat /root/marker"), "jailer-gone\n")
        self.expect(dbx.get(f"/v1/sandboxes/{h}/screenshot", timeout=120), 200, "a screenshot without the jailer")
        # What needs it fails at once and says why.
        r = dbx.post("/v1/sandboxes", json={"metadata": {"name": "no jailer"}}, timeout=120)
        self.expect_error(r, 500, "internal", mentions=("jailer is not running",))
        # A sandbox that fails meanwhile cannot have its slot destroyed: the slot is set aside.
        os.kill(pid_j, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.get_sandbox(j)["state"] != "failed":
            time.sleep(0.2)
        self.assertEqual(self.get_sandbox(j)["state"], "failed")
        self.assertIn(slot_j, dbx.slot_dirs(), "J's slot waits for a jailer")

        dbx.start_jailer()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and dbx.jailer_log.read_text().count("listening on") == listening:
            time.sleep(0.1)
        self.assertIn(f"QEMU pid {pid_h} runs on from before this jailer", dbx.jailer_log.read_text(),
                      "the new jailer takes the running QEMU as its own")
        # deskboxd connects to the new jailer at its next call: creates work again, and the slot
        # set aside is destroyed first.
        i = self.create_sandbox(metadata={"name": "I"})["id"]
        self.assertEqual(self.sh(i, "echo alive"), "alive\n")
        self.assertIn("connected again to the jailer", dbx.daemon_log.read_text())
        self.assertIn(f"slot {slot_j}: destroyed after all", dbx.daemon_log.read_text())
        # The slot the old jailer made is destroyed by the new one: QEMU and directory gone.
        for sid in (h, i, j):
            self.delete_sandbox(sid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (set(dbx.qemu_processes()) - before or dbx.slot_dirs()):
            time.sleep(0.2)
        self.assertEqual(set(dbx.qemu_processes()) - before, set(), "no QEMU once all are deleted")
        self.assertEqual(dbx.slot_dirs(), set(), "no slot directory once all are deleted")

    # ---- deskboxd killed in the middle of a call ---------------------------------------------

    def call_in_background(self, method, path, **kw):
        """Starts a request that deskboxd will not live to answer; returns (thread, outcome)."""
        out = {}

        def run():
            try:
                out["reply"] = requests.request(method, self.dbx.url + path, timeout=300,
                                                headers={"Authorization": f"Bearer {self.dbx.key}"}, **kw)
            except Exception as e:  # the connection breaks when deskboxd dies: that is the point
                out["error"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t, out

    def wait_settled(self, what, ok, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            time.sleep(0.5)
        self.fail(f"{what} within {timeout} s: QEMUs {self.dbx.qemu_processes()}, slot directories "
                  f"{sorted(self.dbx.slot_dirs())}, sandboxes {self.listed()}")

    def listed(self):
        return {s["id"]: s["state"] for s in self.expect(self.dbx.get("/v1/sandboxes"), 200)["sandboxes"]}

    def test_deskboxd_killed_mid_create(self):
        dbx = self.dbx
        qemus0, slots0, listed0 = set(dbx.qemu_processes()), dbx.slot_dirs(), self.listed()
        t, out = self.call_in_background("POST", "/v1/sandboxes", json={"metadata": {"name": "half-made"}})
        # The create is under way once its QEMU runs: the restore, the agent and the record are
        # still to come.
        deadline, new = time.monotonic() + 120, {}
        while time.monotonic() < deadline and not new and t.is_alive():
            new = {p: s for p, s in dbx.qemu_processes().items() if p not in qemus0}
            time.sleep(0.02)
        self.assertTrue(new, f"no QEMU appeared for the create: {out}")
        dbx.kill9_daemon()
        t.join(30)
        self.assertFalse(t.is_alive(), "the client's create did not end when deskboxd died")
        self.assertIn("error", out, f"deskboxd answered before it was killed: {out}")
        (pid, slot), = new.items()

        dbx.start_daemon()
        # Either taken over (a listed sandbox that works) or ended with its slot reclaimed;
        # anything else is a leak.
        adopted = {}

        def settled():
            listed = self.listed()
            added = {i: st for i, st in listed.items() if i not in listed0}
            q = dbx.qemu_processes()
            if pid in q:
                running = [i for i, st in added.items() if st == "running"]
                if len(running) == 1 and dbx.slot_dirs() == slots0 | {slot}:
                    adopted["id"] = running[0]
                    return True
                return False
            adopted.clear()
            return (set(q) == qemus0 and dbx.slot_dirs() == slots0
                    and all(st in ("failed", "stopped") for st in added.values()))
        self.wait_settled("the half-made sandbox adopted or reclaimed", settled)
        if adopted:
            sid = adopted["id"]
            self.assertEqual(self.get_sandbox(sid)["metadata"], {"name": "half-made"})
            self.assertEqual(self.sh(sid, "echo adopted"), "adopted\n", "the adopted sandbox works")
            self.delete_sandbox(sid)
        self.wait_settled("back to what the deployment held before the create",
                          lambda: set(dbx.qemu_processes()) == qemus0 and dbx.slot_dirs() == slots0)
        self.assertFalse(dbx.slot_cgroup_exists(slot) and slot not in slots0, f"slot {slot}'s cgroup is left")
        # The service goes on: a create now works and lands in a clean slot.
        sid = self.create_sandbox(metadata={"name": "after"})["id"]
        self.assertEqual(self.sh(sid, "echo fine"), "fine\n")
        self.delete_sandbox(sid)
        self.wait_settled("the last sandbox gone", lambda: set(dbx.qemu_processes()) == qemus0)

    def test_deskboxd_killed_mid_delete(self):
        dbx = self.dbx
        qemus0, slots0 = set(dbx.qemu_processes()), dbx.slot_dirs()
        sid = self.create_sandbox(metadata={"name": "half-deleted"})["id"]
        (pid, slot), = ((p, s) for p, s in dbx.qemu_processes().items() if p not in qemus0)
        # deskboxd ends a VM through the jailer: a jailer that does not answer holds the delete in
        # the middle, after deskboxd took it up and before the slot is gone; deskboxd dies there.
        jailer = dbx.jailer.pid
        os.kill(jailer, signal.SIGSTOP)
        try:
            t, out = self.call_in_background("DELETE", f"/v1/sandboxes/{sid}")
            time.sleep(1.5)
            self.assertTrue(t.is_alive(), f"the delete finished while the jailer was stopped: {out}")
            dbx.kill9_daemon()
            t.join(30)
            self.assertIn("error", out, f"deskboxd answered before it was killed: {out}")
        finally:
            os.kill(jailer, signal.SIGCONT)
        dbx.start_daemon()
        # The client heard nothing: it repeats the delete, which finishes whatever state the
        # restart found the sandbox in (taken over if the jailer had not yet ended the VM, failed
        # if it had).
        state = self.get_sandbox(sid)["state"]
        self.assertIn(state, ("running", "failed", "stopped"), "after the restart")
        r = dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
        self.assertEqual(r.status_code, 204, f"the repeated delete: {describe(r)}")
        self.assertEqual(self.get_sandbox(sid)["state"], "stopped")
        self.wait_settled("the deleted sandbox's QEMU and slot gone",
                          lambda: set(dbx.qemu_processes()) == qemus0 and dbx.slot_dirs() == slots0)
        self.assertFalse(dbx.slot_cgroup_exists(slot), f"slot {slot}'s cgroup is left")

    def test_restart_readopts_running_and_fails_dead(self):
        dbx = self.dbx
        before = dbx.qemu_processes()
        self.assertEqual(before, {}, "no QEMU before the first create")
        created_ms = {"A": time.time() * 1000}
        a = self.create_sandbox(metadata={"name": "A"})["id"]
        before, (pid_a, slot_a) = self.new_qemu(before, "A")
        created_ms["B"] = time.time() * 1000
        b = self.create_sandbox(metadata={"name": "B"})["id"]
        before, (pid_b, slot_b) = self.new_qemu(before, "B")
        c = self.create_sandbox(metadata={"name": "C"})["id"]
        before, (pid_c, slot_c) = self.new_qemu(before, "C")
        self.assertEqual(len({slot_a, slot_b, slot_c}), 3)
        self.assertEqual(max(before, key=dbx.process_start_ticks), pid_c, "C's QEMU is the newest")

        self.sh(a, "echo restart-marker > /root/marker && sync")
        token = self.expect(dbx.post(f"/v1/sandboxes/{a}/tokens", json={"scope": "view"}), 201)["token"]
        key = self.expect(dbx.post("/v1/keys", json={"name": "before-restart"}), 201)["key"]
        events_before = len(self.all_events(a))

        dbx.kill9_daemon()
        os.kill(pid_c, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and pid_c in dbx.qemu_processes():
            time.sleep(0.1)
        self.assertNotIn(pid_c, dbx.qemu_processes(), "C's QEMU did not go away after SIGKILL")
        self.assertEqual(set(dbx.qemu_processes()), {pid_a, pid_b},
                         "A's and B's QEMUs outlive deskboxd (the jailer owns them)")

        dbx.start_daemon()

        # Each was killed while (or soon after) its browser reloaded its pages after the restore;
        # the new deskboxd finishes that: every page runs script in a renderer made after its
        # sandbox's create, never left crashed.
        for sid, name, t in ((a, "A", created_ms["A"]), (b, "B", created_ms["B"])):
            shot = dbx.get(f"/v1/sandboxes/{sid}/screenshot", timeout=300)
            self.assertEqual(shot.status_code, 200, f"{name}: {describe(shot)}")
            self.assertIs(self.get_sandbox(sid)["browser_ready"], True, name)
            pages = [t2 for t2 in self.expect(dbx.get(f"/v1/sandboxes/{sid}/cdp/json/list"), 200)
                     if t2["type"] == "page"]
            self.assertTrue(pages, f"{name} has a page")
            for page in pages:
                p = CdpPage(dbx.port, sid, page["id"], dbx.key, timeout=120)
                try:
                    origin = p.evaluate("performance.timeOrigin")
                finally:
                    p.close()
                self.assertGreaterEqual(origin, t - 1000, f"{name}: a page from before its create")

        for sid, name in ((a, "A"), (b, "B")):
            sb = self.get_sandbox(sid)
            self.assertEqual(sb["state"], "running", f"{name} after the restart: {sb}")
            self.assertIsNone(sb["failure"], f"{name}: {sb}")
            self.assertEqual(sb["metadata"], {"name": name}, "the record survived")
        self.assertEqual(self.sh(a, "cat /root/marker"), "restart-marker\n", "A's guest state survived")
        self.assertEqual(self.sh(b, "echo alive"), "alive\n")
        self.assertEqual(set(dbx.qemu_processes()), {pid_a, pid_b},
                         "A and B kept their QEMU processes (adopted, not restarted)")

        sc = self.get_sandbox(c)
        self.assertEqual(sc["state"], "failed", f"C, whose QEMU was killed while deskboxd was down: {sc}")
        self.assertIsInstance(sc["failure"], str, sc)
        self.assertTrue(sc["failure"].strip(), f"C's failure names why: {sc}")
        self.assertIsNone(sc["expires_at"], sc)
        listed = {s["id"]: s["state"] for s in self.expect(dbx.get("/v1/sandboxes"), 200)["sandboxes"]}
        self.assertEqual(listed, {a: "running", b: "running", c: "failed"})
        failed = [e for e in self.all_events(c) if e["kind"] == "lifecycle" and e["lifecycle"]["to_state"] == "failed"]
        self.assertEqual(len(failed), 1, f"one lifecycle failed event for C: {failed}")
        self.expect_error(dbx.post(f"/v1/sandboxes/{c}/exec", json={"argv": ["true"]}), 409, "invalid_state")

        # C's slot: QEMU gone, slot directory and cgroup removed. Its netns may be re-pooled by
        # the daemon's network-slot pool, so the netns that remain must hold no VM.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if dbx.slot_dirs() == {slot_a, slot_b} and not dbx.slot_cgroup_exists(slot_c):
                break
            time.sleep(0.5)
        self.assertEqual(dbx.slot_dirs(), {slot_a, slot_b}, "slot directories after recovery")
        self.assertFalse(dbx.slot_cgroup_exists(slot_c), f"slot {slot_c}'s cgroup is left after recovery")
        ns = dbx.netns_names()
        for slot in (slot_a, slot_b):
            self.assertIn(f"{dbx.netns_prefix}{slot}", ns, "A's and B's network namespaces")
        occupied = [n for n in ns if dbx.netns_slot(n) in dbx.slot_dirs()
                    or dbx.slot_cgroup_exists(dbx.netns_slot(n))]
        self.assertEqual(len(occupied), 2, f"netns holding a VM after recovery: {occupied} (all: {ns})")
        deadline, pooled = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            pooled = dbx.metric_value("deskbox_pool_size", pool="netns")
            if pooled is not None and dbx.netns_count() == 2 + pooled:
                break
            time.sleep(0.5)
        self.assertIsNotNone(pooled, 'deskbox_pool_size{pool="netns"}')
        self.assertEqual(dbx.netns_count(), 2 + pooled,
                         f"netns = A's + B's + the {pooled:g} pooled network slots: {dbx.netns_names()}")

        self.expect(dbx.get(f"/v1/sandboxes/{a}", token=token), 200, "a token issued before the restart")
        self.expect(dbx.get("/v1/sandboxes", key=key), 200, "a key created before the restart")
        self.assertGreaterEqual(len(self.all_events(a)), events_before, "A's events from before the restart are kept")

        paused = self.expect(dbx.post(f"/v1/sandboxes/{a}/pause"), 200, "pause an adopted sandbox")
        self.assertEqual(paused["state"], "paused")
        resumed = self.expect(dbx.post(f"/v1/sandboxes/{a}/resume"), 200, "resume an adopted sandbox")
        self.assertEqual(resumed["state"], "running")
        self.assertEqual(self.sh(a, "cat /root/marker"), "restart-marker\n")

        self.delete_sandbox(b)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and pid_b in dbx.qemu_processes():
            time.sleep(0.2)
        self.assertNotIn(pid_b, dbx.qemu_processes(), "deleting an adopted sandbox stops its QEMU")


    def test_restart_with_the_jailer_killed_too(self):
        dbx = self.dbx
        sid = self.create_sandbox(metadata={"name": "D"})["id"]
        self.sh(sid, "echo both-killed > /root/marker && sync")
        pids = set(dbx.qemu_processes())
        dbx.kill9_daemon()
        dbx.kill9_jailer()
        self.assertTrue(dbx.socket.exists(), "a killed jailer leaves its socket file behind")
        self.assertEqual(set(dbx.qemu_processes()), pids, "QEMUs outlive deskboxd and the jailer")
        # deskboxd first: it finds the stale socket file, nobody accepting on it, and waits.
        dbx.start_daemon(wait=False)
        time.sleep(3)
        self.assertIsNone(dbx.daemon.poll(), f"deskboxd gave up without a jailer:\n{dbx.daemon_log.read_text()[-2000:]}")
        dbx.start_jailer()
        dbx.wait_daemon()
        self.assertIn("waiting up to", dbx.daemon_log.read_text(), "deskboxd said it waited for the jailer")
        sb = self.get_sandbox(sid)
        self.assertEqual(sb["state"], "running", f"adopted through the new jailer: {sb}")
        self.assertEqual(self.sh(sid, "cat /root/marker"), "both-killed\n")
        self.assertEqual(set(dbx.qemu_processes()) & pids, pids, "the same QEMUs, not new ones")
        self.delete_sandbox(sid)

    def test_start_after_a_simulated_reboot(self):
        dbx = self.dbx
        e = self.create_sandbox(metadata={"name": "E"})["id"]
        f = self.create_sandbox(metadata={"name": "F"})["id"]
        self.expect(dbx.post(f"/v1/sandboxes/{f}/pause"), 200, "pause F")
        self.sh(e, "echo before-reboot > /root/marker && sync")
        alive = {s["id"] for s in self.expect(dbx.get("/v1/sandboxes"), 200)["sandboxes"]
                 if s["state"] in ("running", "paused")}
        self.assertIn(e, alive)
        slots_before = dbx.slot_dirs()
        self.assertTrue(slots_before, "slot directories before the reboot")

        # The reboot: every process of the deployment ends at once, with no chance to clean up,
        # and what lives only in the kernel is gone: network namespaces and cgroups.
        dbx.kill9_daemon()
        dbx.kill9_jailer()
        qemus = set(dbx.qemu_processes())
        self.assertTrue(qemus <= set(dbx.kill_processes()), "every QEMU was killed")
        self.assertEqual(dbx.qemu_processes(), {}, "no QEMU after the reboot")
        dbx.remove_netns()
        dbx.remove_cgroups()
        self.assertEqual(dbx.netns_names(), [])
        self.assertEqual(dbx.cgroup_dirs(), [])
        # What stays: the run directory with the dead jailer's socket file, the slot
        # directories and the records that say running and paused.
        self.assertTrue(dbx.socket.exists(), "the stale socket file")
        self.assertEqual(dbx.slot_dirs(), slots_before, "the slot directories stay on disk")

        dbx.start_jailer()
        dbx.start_daemon()
        for sid in alive:
            sb = self.get_sandbox(sid)
            self.assertEqual(sb["state"], "failed", f"{sid}, whose VM the reboot ended: {sb}")
            self.assertTrue((sb["failure"] or "").strip(), f"the failure names why: {sb}")
        self.expect_error(dbx.post(f"/v1/sandboxes/{e}/exec", json={"argv": ["true"]}), 409, "invalid_state")
        lost = [ev for ev in self.all_events(e) if ev["kind"] == "lifecycle" and ev["lifecycle"]["to_state"] == "failed"]
        self.assertEqual(len(lost), 1, f"one lifecycle failed event for E: {lost}")
        # Every slot directory the reboot left is reclaimed (none holds a VM); the pools refill.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and dbx.slot_dirs() & slots_before:
            time.sleep(0.5)
        self.assertEqual(dbx.slot_dirs() & slots_before, set(),
                         f"slot directories from before the reboot are left: {sorted(dbx.slot_dirs())}")

        # The service works: a new sandbox, in a reclaimed slot or another.
        g = self.create_sandbox(metadata={"name": "G"})["id"]
        self.assertEqual(self.sh(g, "cat /root/marker 2>/dev/null || echo fresh"), "fresh\n",
                         "a new sandbox starts from the template, not from a lost guest's disk")
        self.assertEqual(len(dbx.qemu_processes()), 1, "one QEMU: G's (no pools)")
        for sid in (*alive, g):
            self.delete_sandbox(sid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (dbx.qemu_processes() or dbx.slot_dirs()):
            time.sleep(0.2)
        self.assertEqual(dbx.qemu_processes(), {}, "no QEMU once everything is deleted")
        self.assertEqual(dbx.slot_dirs(), set(), "no slot directory once everything is deleted")


if __name__ == "__main__":
    unittest.main()
