"""A sandbox deleted while operations on it are in flight: an exec, a file upload, screenshots, an
actions batch, a pause and a CDP session. Each ends with a clear answer -- a JSON error 409 or 410
for the HTTP calls, a WebSocket close for the CDP session -- nothing crashes, and the deployment
is left as it was (QEMU processes, network namespaces, deskboxd's file descriptors)."""

import select
import socket
import subprocess
import threading
import time
import unittest
from types import SimpleNamespace

from requests.structures import CaseInsensitiveDict

from harness import ApiTestCase, describe
from wsclient import WS_CLOSE, close_reason, ws_connect

GONE = (409, 410)  # deleted (410) or seen leaving the running state first (409)


class DeleteDuringOperationsTest(ApiTestCase):
    deployment = {"warm_pool": 0}

    def _client_connections(self):
        """Established connections to deskboxd's API port: clients' (this test's keep-alive
        pool among them), so not counted as deskboxd's own descriptors."""
        out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{self.dbx.port} )"],
                             capture_output=True, text=True, check=True).stdout
        return len([line for line in out.splitlines() if line.strip()])

    def _settled_counts(self):
        self.wait_settled()
        return (len(self.dbx.qemu_processes()), self.dbx.netns_count(),
                self.dbx.daemon_fd_count() - self._client_connections())

    def test_delete_ends_every_operation_in_flight(self):
        dbx = self.dbx
        # One sandbox made, used and deleted first, so that what deskboxd keeps for later
        # sandboxes (the egress uplink sockets it takes from the jailer in batches) is there
        # before the counts are taken.
        warm = self.create_sandbox()["id"]
        self.expect(dbx.get(f"/v1/sandboxes/{warm}/screenshot", params={"format": "jpeg"}, timeout=120), 200)
        self.delete_sandbox(warm)
        qemu_before, netns_before, fds_before = self._settled_counts()
        fds_list_before = dbx.daemon_fds()
        sid = self.create_sandbox()["id"]
        base = f"/v1/sandboxes/{sid}"
        # The screen mirror connected, so the screenshots below are served while the delete runs.
        self.expect(dbx.get(f"{base}/screenshot", params={"format": "jpeg"}, timeout=120), 200)

        results = {}

        def record(name, fn):
            try:
                results[name] = fn()
            except Exception as e:  # noqa: BLE001 - reported by the assertions below
                results[name] = e

        def slow_upload():
            # 64 KiB a second for up to 30 s, watching for an answer between chunks as curl does:
            # the delete ends the upload with an answer before the body is sent.
            sock = socket.create_connection(("127.0.0.1", dbx.port), timeout=60)
            try:
                sock.sendall((f"PUT {base}/files?path=/tmp/slow-upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              f"Authorization: Bearer {dbx.key}\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
                for _ in range(30):
                    if select.select([sock], [], [], 0)[0]:
                        break
                    try:
                        sock.sendall(b"10000\r\n" + b"x" * 65536 + b"\r\n")
                    except OSError:
                        break
                    time.sleep(1)
                answer = b""
                while True:
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        break
                    if not data:
                        break
                    answer += data
                head, _, body = answer.partition(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
                return SimpleNamespace(status_code=status, content=body, text=body.decode("utf-8", "replace"),
                                       headers=CaseInsensitiveDict(
                                           [line.split(": ", 1) for line in head.decode().split("\r\n")[1:]
                                            if ": " in line]),
                                       request=SimpleNamespace(method="PUT", url=f"{base}/files"))
            finally:
                sock.close()

        def screenshots():
            statuses = []
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                r = dbx.get(f"{base}/screenshot", params={"format": "jpeg"}, timeout=60)
                statuses.append(r)
                if r.status_code != 200:
                    break
            return statuses

        cdp = ws_connect(dbx.port, f"{base}/cdp", dbx.key)
        self.assertEqual(cdp.status_code, 101, f"CDP session: {cdp.status_code} {cdp.content[:300]!r}")
        cdp_close = {}

        def read_cdp():
            try:
                while True:
                    op, payload = cdp.ws.read_message()
                    if op == WS_CLOSE:
                        cdp_close["reason"] = close_reason(payload)
                        cdp.ws.send(WS_CLOSE, payload[:2])  # the closing handshake's answer
                        return
            except Exception as e:  # noqa: BLE001
                cdp_close["error"] = e
            finally:
                cdp.ws.sock.close()

        threads = [
            threading.Thread(target=record, args=("exec", lambda: dbx.post(
                f"{base}/exec", json={"shell": "sleep 40"}, timeout=120))),
            threading.Thread(target=record, args=("upload", slow_upload)),
            threading.Thread(target=record, args=("actions", lambda: dbx.post(
                f"{base}/actions", json={"actions": [{"type": "wait", "duration_ms": 15000}]}, timeout=120))),
            threading.Thread(target=record, args=("screenshots", screenshots)),
            threading.Thread(target=read_cdp),
        ]
        for t in threads:
            t.start()
        time.sleep(3)  # all of them under way
        pause = threading.Thread(target=record, args=("pause", lambda: dbx.post(f"{base}/pause", timeout=120)))
        pause.start()
        time.sleep(0.05)
        t0 = time.monotonic()
        self.delete_sandbox(sid)
        delete_s = time.monotonic() - t0
        for t in threads + [pause]:
            t.join(timeout=90)
            self.assertFalse(t.is_alive(), "an operation did not end after the delete")

        for name in ("exec", "upload", "actions"):
            r = results[name]
            self.assertNotIsInstance(r, Exception, f"{name}: {r!r}")
            self.assertIn(r.status_code, GONE, f"{name}: {describe(r)}")
            self.expect_error(r, r.status_code, "sandbox_gone" if r.status_code == 410 else "invalid_state", [sid])
        # The pause either finished before the delete took its turn (200) or learnt of the delete.
        r = results["pause"]
        self.assertNotIsInstance(r, Exception, f"pause: {r!r}")
        self.assertIn(r.status_code, (200,) + GONE, f"pause: {describe(r)}")
        if r.status_code != 200:
            self.expect_error(r, r.status_code, "sandbox_gone" if r.status_code == 410 else "invalid_state", [sid])
        shots = results["screenshots"]
        self.assertNotIsInstance(shots, Exception, f"screenshots: {shots!r}")
        for r in shots[:-1]:
            self.assertEqual(r.status_code, 200, describe(r))
        last = shots[-1]
        self.assertIn(last.status_code, GONE, f"the screenshot after the delete: {describe(last)}")
        self.expect_error(last, last.status_code, "sandbox_gone" if last.status_code == 410 else "invalid_state")
        self.assertNotIn("error", cdp_close, f"CDP session: {cdp_close}")
        code, reason = cdp_close["reason"]
        self.assertEqual(code, 1001, cdp_close)
        self.assertRegex(reason, r"^sandbox (paused|stopped)$", cdp_close)

        sb = self.get_sandbox(sid)
        self.assertEqual(sb["state"], "stopped", sb)
        lifecycle = [e["lifecycle"] for e in self.all_events(sid) if "lifecycle" in e]
        self.assertEqual(lifecycle[-1]["to_state"], "stopped", lifecycle)
        self.assertLess(delete_s, 60, "the delete waited for the exec")
        # New operations on the deleted sandbox are refused plainly.
        self.expect_error(dbx.post(f"{base}/exec", json={"shell": "true"}), 409, "invalid_state", [sid])
        self.expect_error(dbx.post(f"{base}/pause"), 409, "invalid_state", [sid])
        # Nothing left behind: the sandbox's QEMU, its netns, deskboxd's descriptors.
        now = self._settled_counts()
        self.assertLessEqual(now[0], qemu_before, "QEMU processes")
        self.assertLessEqual(now[1], netns_before, "network namespaces")
        self.assertLessEqual(now[2], fds_before + 1,
                             f"deskboxd file descriptors but client connections: before {fds_list_before}, "
                             f"after {dbx.daemon_fds()}")


if __name__ == "__main__":
    unittest.main()
