"""deskboxd's state directory: an online backup restored into a fresh state directory, and a full
state disk (a size-limited tmpfs, never the host's disk).

- Backup: deskboxd starts on the database an older release left (tests/api_unit/data/state-v3.db,
  migrated on open), API keys are made while `deskboxd backup` copies the database, one more
  after it; deskboxd stops, the copy is put in place in a new state directory, and the deskboxd
  started on it serves the records of the copy: the fixture's sandboxes and tokens, the keys made
  before the copy (a prefix of those made during it), not the one made after. No guest.
- Full disk: deskboxd on a 16 MiB tmpfs with one running sandbox; a file takes the rest of the
  space. Creating a sandbox, minting a token, making or revoking a key, changing metadata or the
  egress policy are answered 507 insufficient_storage and change nothing, no QEMU is left behind;
  reads, exec and the sandbox go on; events that cannot be appended are counted. Once the file is
  gone the same writes work, without a restart; then deskboxd stops and the database passes
  integrity_check, every record written before is there, and the event log verifies. One guest:
  run under `flock /tmp/deskbox-guest.lock`.
"""

import errno
import hashlib
import os
import pwd
import shutil
import sqlite3
import subprocess
import threading
import time
import unittest
from pathlib import Path

import requests

from harness import SERVICE_USER, ApiTestCase, Deskbox, describe, source_dir

FIXTURE = source_dir() / "tests" / "api_unit" / "data" / "state-v3.db"
FIXTURE_SANDBOXES = {  # id: the state deskboxd gives it (its VM is not there: alive ones fail)
    "sb-0000000000000001": "failed", "sb-0000000000000002": "failed", "sb-0000000000000003": "stopped",
    "sb-0000000000000004": "failed", "sb-0000000000000005": "failed",
}
LIVE_TOKEN = "dbt_" + "5" * 64  # planted for sandbox 3, valid until 2100
LIVE_TOKEN_ID = "tok_00000000000000c1"


def as_service_user(*cmd):
    return subprocess.run(["setpriv", "--reuid", SERVICE_USER, "--regid", SERVICE_USER, "--init-groups", "--",
                           *cmd], capture_output=True, text=True, timeout=60)


def chown_tree(path, user):
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(name, user.pw_uid, user.pw_gid)


def integrity(db_path):
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


class StateDiskTest(ApiTestCase):
    def setUp(self):
        if subprocess.run(["id", SERVICE_USER], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                            SERVICE_USER], check=True)
        self.user = pwd.getpwnam(SERVICE_USER)
        self.work = Path(f"/var/tmp/deskbox-statedisk-{os.getpid()}")
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(mode=0o711, parents=True)
        self.addCleanup(shutil.rmtree, self.work, True)
        self.dbx = None

    def deployment_on(self, state_dir, **kw):
        """A deployment (no pools: no guest unless a test creates one) on `state_dir`."""
        dbx = Deskbox(warm_pool=0, prestart_pool=0, extra_args=["--netns-pool", "0", "--recording", "off"], **kw)
        dbx.daemon_state = state_dir
        self.dbx = dbx

        def stop():
            report = dbx.stop()
            if report.problems:
                raise AssertionError(f"teardown of the deployment found leaks: {report}")
        self.addCleanup(stop)
        dbx.start()
        return dbx

    def stop_daemon(self, dbx):
        dbx.daemon.terminate()
        dbx.daemon.wait(timeout=90)
        self.assertEqual(dbx.daemon.returncode, 0, "deskboxd's exit on SIGTERM")

    # ---- backup and restore ------------------------------------------------------------------

    def test_backup_while_running_restores_into_a_new_state_dir(self):
        state = self.work / "state"
        state.mkdir(mode=0o700)
        shutil.copyfile(FIXTURE, state / "deskbox.db")
        self.plant_token(state / "deskbox.db")  # one live token, for after the restore
        chown_tree(state, self.user)
        dbx = self.deployment_on(state)

        for sid, st in FIXTURE_SANDBOXES.items():
            self.assertEqual(self.get_sandbox(sid)["state"], st, sid)
        made = {}
        for name in ("before-1", "before-2"):
            made[name] = self.expect(dbx.post("/v1/keys", json={"name": name}), 201)
        self.expect(dbx.request("DELETE", f"/v1/keys/{made['before-1']['id']}"), 204)

        # Keys made one after another the whole time the backup runs.
        backups = self.work / "backups"
        backups.mkdir()
        os.chown(backups, self.user.pw_uid, self.user.pw_gid)
        copy = backups / "deskbox-backup.db"
        stop = threading.Event()
        during = []
        failures = []

        def make_keys():
            with requests.Session() as s:
                while not stop.is_set():
                    r = s.post(dbx.url + "/v1/keys", json={"name": f"during-{len(during)}"},
                               headers={"Authorization": f"Bearer {dbx.key}"}, timeout=30)
                    if r.status_code != 201:
                        failures.append(describe(r))
                        return
                    during.append(r.json()["name"])
        writer = threading.Thread(target=make_keys)
        writer.start()
        try:
            deadline = time.monotonic() + 10
            while len(during) < 20 and not failures and time.monotonic() < deadline:
                time.sleep(0.01)
            backup = as_service_user(str(dbx.bin / "deskboxd"), "backup", "--state-dir", str(state), "--to", str(copy))
            n_at_end = len(during)
            deadline = time.monotonic() + 10
            while len(during) < n_at_end + 5 and not failures and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            stop.set()
            writer.join()
        self.assertEqual(failures, [])
        self.assertEqual(backup.returncode, 0, f"deskboxd backup: {backup.stdout}{backup.stderr}")
        self.assertIn("integrity_check ok", backup.stdout)
        self.assertIn("schema version 5", backup.stdout)
        self.assertEqual(integrity(copy), "ok")
        self.assertEqual(sorted(p.name for p in backups.iterdir()), [copy.name], "nothing but the copy")
        after = self.expect(dbx.post("/v1/keys", json={"name": "after-backup"}), 201)

        # The backup never replaces a file, and refuses root.
        again = as_service_user(str(dbx.bin / "deskboxd"), "backup", "--state-dir", str(state), "--to", str(copy))
        self.assertEqual(again.returncode, 1, again.stderr)
        self.assertIn("exists", again.stderr)
        as_root = subprocess.run([str(dbx.bin / "deskboxd"), "backup", "--state-dir", str(state), "--to",
                                  str(backups / "root.db")], capture_output=True, text=True, timeout=60)
        self.assertEqual(as_root.returncode, 1, as_root.stderr)
        self.assertIn("root", as_root.stderr)
        self.assertFalse((backups / "root.db").exists())

        # Restore: deskboxd stopped, the copy in place in a new state directory, deskboxd started.
        self.stop_daemon(dbx)
        restored = self.work / "restored"
        restored.mkdir(mode=0o700)
        shutil.copyfile(copy, restored / "deskbox.db")
        os.chmod(restored / "deskbox.db", 0o600)
        chown_tree(restored, self.user)
        dbx.daemon_state = restored
        dbx.start_daemon()

        for sid, st in FIXTURE_SANDBOXES.items():
            self.assertEqual(self.get_sandbox(sid)["state"], st, sid)
        names = [k["name"] for k in self.expect(dbx.get("/v1/keys"), 200)["keys"]]
        self.assertIn("before-2", names)
        self.assertNotIn("before-1", names, "revoked before the backup")
        self.assertNotIn("after-backup", names, "made after the backup")
        copied = [n for n in names if n.startswith("during-")]
        self.assertEqual(copied, [f"during-{i}" for i in range(len(copied))], "a prefix of the keys made during it")
        self.assertGreaterEqual(len(copied), 20)
        self.assertLess(len(copied), len(during))
        # The secrets of the copy's keys and tokens work; the key made after it does not.
        self.expect(dbx.get("/v1/keys", key=made["before-2"]["key"]), 200)
        self.expect_error(dbx.get("/v1/keys", key=after["key"]), 401, "unauthorized")
        self.expect(dbx.get("/v1/sandboxes/sb-0000000000000003", token=LIVE_TOKEN), 200)
        tokens = self.expect(dbx.get("/v1/sandboxes/sb-0000000000000003/tokens"), 200)["tokens"]
        self.assertEqual([t["id"] for t in tokens], [LIVE_TOKEN_ID])
        # The fixture's expired token is on record (revoking it is a no-op), an unknown one is not.
        self.expect(dbx.request("DELETE", "/v1/tokens/tok_00000000000000b3"), 204)
        self.expect_error(dbx.request("DELETE", "/v1/tokens/tok_00000000000000ff"), 404, "not_found")

    @staticmethod
    def plant_token(db_path):
        db = sqlite3.connect(db_path)
        with db:
            db.execute("INSERT INTO tokens (id, sandbox_id, scope, hash, created_at_ms, expires_at_ms, revoked_at_ms, "
                       "created_by) VALUES (?, 'sb-0000000000000003', 'view', ?, 1764400000500, 4102444800000, 0, "
                       "'key_00000000000000a1')", (LIVE_TOKEN_ID, hashlib.sha256(LIVE_TOKEN.encode()).digest()))
        db.close()
        for suffix in ("-wal", "-shm"):
            assert not Path(str(db_path) + suffix).exists()

    # ---- a full state disk -------------------------------------------------------------------

    def mount_tmpfs(self, path, size):
        path.mkdir(mode=0o700)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "deskbox-statedisk", str(path)],
                       check=True)

        def unmount():
            if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], capture_output=True)
        self.addCleanup(unmount)

    @staticmethod
    def fill(path):
        """A file that takes every byte the filesystem has left."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            for size in (1 << 20, 4096, 1):
                block = b"\xff" * size
                try:
                    while True:
                        os.write(fd, block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)

    def expect_full(self, resp):
        return self.expect_error(resp, 507, "insufficient_storage", mentions=("disk is full",))

    def test_full_state_disk(self):
        state = self.work / "state"
        self.mount_tmpfs(state, "16m")
        dbx = self.deployment_on(state)
        sb = self.create_sandbox(metadata={"job": "before"})
        sid = sb["id"]
        token = self.expect(dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": "control"}), 201)
        spare = self.expect(dbx.post("/v1/keys", json={"name": "spare"}), 201)
        self.sh(sid, "echo before-full")
        qemus = dbx.qemu_processes()
        self.assertEqual(len(qemus), 1)
        written_before = dbx.metric_value("deskbox_events_written")

        filler = state / "filler"
        self.fill(filler)
        self.assertLess(shutil.disk_usage(state).free, 64 << 10)

        # Writes: 507, nothing changed, no VM left behind.
        self.expect_full(dbx.post("/v1/sandboxes", json={}, timeout=120))
        self.assertEqual(dbx.qemu_processes(), qemus, "a sandbox that could not be put on record kept running")
        self.expect_full(dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": "view"}))
        self.expect_full(dbx.post("/v1/keys", json={"name": "full"}))
        self.expect_full(dbx.request("DELETE", f"/v1/keys/{spare['id']}"))
        self.expect_full(dbx.request("DELETE", f"/v1/tokens/{token['id']}"))
        self.expect_full(dbx.request("PATCH", f"/v1/sandboxes/{sid}", json={"metadata": {"job": "after"}}))
        self.expect_full(dbx.request("PUT", f"/v1/sandboxes/{sid}/egress", json={"default": "allow"}))

        # Reads, the guest, the credentials: as before.
        self.expect(dbx.get("/healthz"), 200)
        got = self.get_sandbox(sid)
        self.assertEqual(got["state"], "running")
        self.assertEqual(got["metadata"], {"job": "before"})
        self.assertEqual(self.expect(dbx.get(f"/v1/sandboxes/{sid}/egress"), 200)["default"], "deny")
        self.assertEqual(len(self.expect(dbx.get("/v1/sandboxes"), 200)["sandboxes"]), 1)
        self.expect(dbx.get(f"/v1/sandboxes/{sid}", token=token["token"]), 200)
        self.expect(dbx.get("/v1/keys", key=spare["key"]), 200)
        # The event log's last page may still have room for a record or two (tmpfs allocates
        # whole pages): commands go on working while their events fill it, until one cannot be
        # appended.
        for i in range(40):
            self.assertEqual(self.sh(sid, f"echo during-full-{i}").strip(), f"during-full-{i}")
            if dbx.metric_value("deskbox_events_write_errors"):
                break
        self.assertGreater(dbx.metric_value("deskbox_events_write_errors"), 0,
                           "40 commands' events were all appended to a log on a full disk")
        self.assertEqual(dbx.daemon.poll(), None, "deskboxd is still running")

        # Room again: the same writes work, without a restart.
        filler.unlink()
        self.expect(dbx.request("PATCH", f"/v1/sandboxes/{sid}", json={"metadata": {"job": "after"}}), 200)
        view = self.expect(dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": "view"}), 201)
        self.expect(dbx.post("/v1/keys", json={"name": "after"}), 201)
        self.expect(dbx.request("DELETE", f"/v1/keys/{spare['id']}"), 204)
        self.sh(sid, "echo after-full")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and dbx.metric_value("deskbox_events_written") <= written_before + 2:
            time.sleep(0.2)
        self.assertGreater(dbx.metric_value("deskbox_events_written"), written_before + 2)
        self.assertEqual(dbx.metric_value("deskbox_state_unsaved_sandboxes"), 0)

        # Stopped: the database and the event log are whole and hold everything written.
        self.stop_daemon(dbx)
        db_path = state / "deskbox.db"
        self.assertEqual(integrity(db_path), "ok")
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            self.assertEqual(db.execute("SELECT id, metadata FROM sandboxes").fetchall(), [(sid, '{"job":"after"}')])
            self.assertEqual(sorted(r[0] for r in db.execute("SELECT id FROM tokens")),
                             sorted([token["id"], view["id"]]))
            names = sorted(r[0] for r in db.execute("SELECT name FROM api_keys"))
            self.assertEqual(names, ["after", "bootstrap", "spare"])
        finally:
            db.close()
        verify = dbx.events_tool("verify", str(dbx.event_log_path(sid)))
        self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)


if __name__ == "__main__":
    unittest.main()
