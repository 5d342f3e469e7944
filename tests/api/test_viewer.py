"""The live view against a real guest. Headless Chromium on the host (Debian's, driven by npm
playwright-core) opens /view?token=…, whose noVNC connects to /vnc and shows the desktop. A view
token watches, but its keys never reach the guest's page, even when the viewer turns noVNC's
view-only switch off. A control token types into the page. Both are attributed in the event log.
Expired, revoked and wrong-scope tokens are refused. A raw RFB-over-WebSocket client checks that
the bridge drops input, refuses what a viewer has no reason to send, and closes viewers when the
sandbox pauses or their token is revoked or expires."""

import json
import os
import struct
import subprocess
import time
import unittest
import urllib.parse

from harness import E2E_DIR as E2E, OneSandboxTestCase, describe, require_npm_packages
from wsclient import WS_BINARY, WS_CLOSE, CdpPage, close_reason, ws_connect
PAGE = ('<!doctype html><title>viewer</title><style>body{margin:0;font:28px sans-serif}'
        '#f{position:fixed;left:20px;top:20px;width:60vw;font-size:32px}</style>'
        '<input id="f" autocomplete="off"><p style="margin-top:120px">watched by a viewer</p>')


def run_viewer(url, text=None, timeout=400):
    args = ["node", os.path.join(E2E, "viewer_client.mjs"), url] + ([text] if text else [])
    p = subprocess.run(args, cwd=E2E, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    if not lines:
        raise AssertionError(f"viewer_client printed nothing (exit {p.returncode}): {p.stderr[-2000:]}")
    return json.loads(lines[-1])


class RfbOverWs:
    """A byte stream over the binary messages of a /vnc WebSocket."""

    def __init__(self, ws):
        self.ws = ws
        self.buf = b""

    def read(self, n):
        while len(self.buf) < n:
            opcode, payload = self.ws.read_message()
            if opcode == WS_CLOSE:
                raise EOFError(f"closed: {close_reason(payload)}")
            self.buf += payload
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, data):
        self.ws.send(WS_BINARY, data)

    def handshake(self):
        version = self.read(12)
        assert version.startswith(b"RFB 003."), version
        self.send(b"RFB 003.008\n")
        n = self.read(1)[0]
        types = self.read(n)
        assert 1 in types, types
        self.send(b"\x01")
        assert self.read(4) == b"\0\0\0\0"
        self.send(b"\x00")  # not shared: the bridge makes it shared anyway
        w, h = struct.unpack(">HH", self.read(4))
        self.read(16)
        self.read(struct.unpack(">I", self.read(4))[0])
        return w, h


class ViewerTest(OneSandboxTestCase):
    @classmethod
    def setUpClass(cls):
        require_npm_packages()
        super().setUpClass()

    def setUp(self):
        self.open_page(PAGE)
        deadline = time.time() + 60
        self.page.evaluate("document.getElementById('f').focus()")
        while self.page.evaluate("document.hasFocus() && document.activeElement.id") != "f":
            self.assertLess(time.time(), deadline, "the test page never got focus")
            time.sleep(0.2)
            self.page.evaluate("document.getElementById('f').focus()")

    # ---- helpers ----------------------------------------------------------------------------------

    def token(self, scope, **extra):
        return self.expect(self.dbx.post(f"/v1/sandboxes/{self.sid}/tokens", json={"scope": scope, **extra}), 201)

    def view_url(self, secret):
        return f"http://127.0.0.1:{self.dbx.port}/v1/sandboxes/{self.sid}/view?token={urllib.parse.quote(secret)}"

    def field(self):
        return self.page.evaluate("document.getElementById('f').value")

    def viewer_events(self, token_id, timeout=30):
        deadline = time.time() + timeout
        while True:
            found = [e for e in self.all_events(self.sid)
                     if e["kind"] == "viewer_input" and e["actor"]["id"] == token_id]
            if found or time.time() > deadline:
                return found
            time.sleep(0.5)

    def screen(self):
        s = self.expect(self.dbx.get(f"/v1/sandboxes/{self.sid}/cursor"), 200)["screen"]
        return s["width"], s["height"]

    # ---- tests ------------------------------------------------------------------------------------

    def test_a_view_token_watches_but_its_keys_never_reach_the_guest(self):
        view = self.token("view")
        out = run_viewer(self.view_url(view["token"]), "blocked")
        self.assertEqual(out.get("status"), 200, out)
        self.assertEqual(out.get("state"), "connected", out)
        self.assertGreater(out.get("colours", 0), 8, f"the canvas shows the desktop, not a blank: {out}")
        self.assertEqual(tuple(out["size"]), self.screen(), "noVNC's canvas has the guest's screen size")
        self.assertTrue(out.get("typed"), out)
        self.assertEqual(out.get("errors"), [], out)
        time.sleep(2)
        self.assertEqual(self.field(), "", "a view token's keys were dropped by deskboxd")
        events = self.viewer_events(view["id"])
        keys = [e for e in events if e["viewer_input"]["kind"] == "key"]
        self.assertTrue(keys, events)
        self.assertTrue(all(e["viewer_input"]["dropped"] for e in keys), keys)
        self.assertGreaterEqual(sum(e["viewer_input"]["count"] for e in keys), len("blocked") * 2)
        self.assertEqual(keys[0]["actor"]["kind"], "human")

    def test_a_control_token_types_into_the_guest(self):
        control = self.token("control")
        out = run_viewer(self.view_url(control["token"]), "hello42")
        self.assertEqual(out.get("status"), 200, out)
        self.assertGreater(out.get("colours", 0), 8, out)
        deadline = time.time() + 30
        while self.field() != "hello42" and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.field(), "hello42", "a control token's keys reach the focused field")
        keys = [e for e in self.viewer_events(control["id"]) if e["viewer_input"]["kind"] == "key"]
        self.assertTrue(keys)
        self.assertFalse(any(e["viewer_input"]["dropped"] for e in keys), keys)

    def test_refused_tokens_and_bad_requests(self):
        dbx, sid = self.dbx, self.sid
        revoked = self.token("view")
        self.expect(dbx.request("DELETE", f"/v1/tokens/{revoked['id']}"), 204)
        expired = self.token("view", ttl_s=1)
        time.sleep(2.5)
        for t in (revoked, expired):
            with self.subTest(token=t["id"]):
                page = dbx.get(f"/v1/sandboxes/{sid}/view", key=None, params={"token": t["token"]})
                self.expect_error(page, 401, "unauthorized")
                ws = ws_connect(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={t['token']}")
                self.assertEqual(ws.status_code, 401, describe(ws))
        out = run_viewer(self.view_url(revoked["token"]))
        self.assertEqual(out.get("status"), 401, out)
        cdp = self.token("cdp")
        self.expect_error(dbx.get(f"/v1/sandboxes/{sid}/view", key=None, params={"token": cdp["token"]}), 403, "forbidden")
        self.assertEqual(ws_connect(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={cdp['token']}").status_code, 403)
        view = self.token("view")
        self.expect_error(dbx.get(f"/v1/sandboxes/{sid}/vnc", key=None, params={"token": view["token"]}), 400,
                          "invalid_request", ["WebSocket"])
        # The page sets a cookie for its WebSocket and modules; without it (or with a bad one)
        # they are refused.
        page = dbx.get(f"/v1/sandboxes/{sid}/view", key=None, params={"token": view["token"]})
        self.assertEqual(page.status_code, 200, describe(page))
        self.assertIn("text/html", page.headers["Content-Type"])
        self.assertIn("script-src 'self' 'nonce-", page.headers["Content-Security-Policy"])
        self.assertEqual(page.headers["Referrer-Policy"], "no-referrer")
        cookie = page.headers["Set-Cookie"]
        self.assertIn(f"deskbox_view={view['token']}; Path=/v1/sandboxes/{sid}/;", cookie)
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Strict", cookie)
        asset = f"/v1/sandboxes/{sid}/view/novnc/core/rfb.js"
        self.expect_error(dbx.get(asset, key=None), 401, "unauthorized")
        ok = dbx.get(asset, key=None, headers={"Cookie": f"deskbox_view={view['token']}"})
        self.assertEqual(ok.status_code, 200, describe(ok))
        self.assertIn("javascript", ok.headers["Content-Type"])
        self.assertIn("export default class RFB", ok.text)
        self.expect_error(dbx.get(asset, key=None, headers={"Cookie": f"deskbox_view={revoked['token']}"}), 401,
                          "unauthorized")
        for bad in ("core/../../../etc/passwd", "core/.hidden.js", "app/ui.js", "core/rfb.js.map", "vnc.html"):
            with self.subTest(path=bad):
                r = dbx.get(f"/v1/sandboxes/{sid}/view/novnc/{bad}", key=None,
                            headers={"Cookie": f"deskbox_view={view['token']}"})
                self.assertIn(r.status_code, (400, 404), describe(r))

    def test_many_viewers_at_once(self):
        # All of them come from the host's one address: the guest's Xvnc must not take a burst of
        # connections for an attack (its blacklist would refuse the sixth for 10 s).
        view = self.token("view")
        answers = [ws_connect(self.dbx.port, f"/v1/sandboxes/{self.sid}/vnc?token={view['token']}") for _ in range(12)]
        try:
            for ans in answers:
                self.assertEqual(ans.status_code, 101, describe(ans))
            for ans in answers:
                self.assertEqual(RfbOverWs(ans.ws).handshake(), self.screen())
        finally:
            for ans in answers:
                if ans.ws:
                    ans.ws.close()

    def test_the_bridge_filters_a_raw_viewer_and_closes_viewers_on_pause(self):
        dbx, sid = self.dbx, self.sid
        view = self.token("view")
        ans = ws_connect(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={view['token']}")
        self.assertEqual(ans.status_code, 101, describe(ans))
        rfb = RfbOverWs(ans.ws)
        self.assertEqual(rfb.handshake(), self.screen())
        # Keys (plain and QEMU extended), a click and clipboard text from a view token: dropped.
        for down in (1, 0):
            rfb.send(struct.pack(">BBxxI", 4, down, ord("z")))
            rfb.send(struct.pack(">BBHII", 255, 0, down, ord("q"), 16))
        rfb.send(struct.pack(">BBHH", 5, 1, 100, 100) + struct.pack(">BBHH", 5, 0, 100, 100))
        rfb.send(struct.pack(">BxxxI", 6, 4) + b"evil")
        # A display request passes: the guest answers with an update.
        rfb.send(struct.pack(">BBHHHH", 3, 0, 0, 0, 64, 64))
        self.assertEqual(rfb.read(1)[0], 0, "a FramebufferUpdate came back")
        time.sleep(2)
        self.assertEqual(self.field(), "")
        # Something no viewer sends ends the connection, with the cause.
        rfb.send(b"\x07\x00\x00\x00")
        with self.assertRaises(EOFError) as closed:
            while True:
                rfb.read(65536)
        self.assertIn("unknown RFB message type 7", str(closed.exception))
        ans.ws.sock.close()
        kinds = {(e["viewer_input"]["kind"], e["viewer_input"]["dropped"]) for e in self.viewer_events(view["id"])}
        self.assertTrue({("key", True), ("pointer", True), ("clipboard", True)} <= kinds, kinds)
        # Pausing the sandbox closes its viewers with the reason; they may reconnect once it runs.
        control = self.token("control")
        ans = ws_connect(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={control['token']}")
        self.assertEqual(ans.status_code, 101, describe(ans))
        rfb = RfbOverWs(ans.ws)
        rfb.handshake()
        self.expect(dbx.post(f"/v1/sandboxes/{sid}/pause", timeout=120), 200)
        try:
            with self.assertRaises(EOFError) as closed:
                while True:
                    rfb.read(65536)
            self.assertIn("paused", str(closed.exception))
            ans.ws.sock.close()
            self.assertEqual(ws_connect(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={control['token']}").status_code, 409)
        finally:
            self.expect(dbx.post(f"/v1/sandboxes/{sid}/resume", timeout=120), 200)
        self.page.close()  # pausing ended the CDP session
        self.page = CdpPage(dbx.port, sid, self.target, dbx.key)
        ans = ws_connect(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={control['token']}")
        self.assertEqual(ans.status_code, 101, describe(ans))
        self.assertEqual(RfbOverWs(ans.ws).handshake(), self.screen())
        # Revoking a token closes the viewers connected with it.
        self.expect(dbx.request("DELETE", f"/v1/tokens/{control['id']}"), 204)
        with self.assertRaises(EOFError) as closed:
            rfb = RfbOverWs(ans.ws)
            while True:
                rfb.read(65536)
        self.assertIn("revoked", str(closed.exception))
        ans.ws.sock.close()

    def test_a_viewer_is_closed_when_its_token_expires(self):
        dbx, sid = self.dbx, self.sid
        short = self.token("view", ttl_s=6)
        ans = ws_connect(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={short['token']}")
        self.assertEqual(ans.status_code, 101, describe(ans))
        rfb = RfbOverWs(ans.ws)
        self.assertEqual(rfb.handshake(), self.screen())
        # A viewer of a longer-lived token on the same sandbox stays.
        other = ws_connect(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={self.token('view')['token']}")
        self.assertEqual(other.status_code, 101, describe(other))
        other_rfb = RfbOverWs(other.ws)
        other_rfb.handshake()
        expires = time.time() + 6
        rfb.send(struct.pack(">BBHHHH", 3, 0, 0, 0, 64, 64))
        self.assertEqual(rfb.read(1)[0], 0, "a FramebufferUpdate came back before the expiry")
        with self.assertRaises(EOFError) as closed:
            while True:
                rfb.read(65536)
        self.assertIn("the token expired", str(closed.exception))
        self.assertGreater(time.time(), expires - 1.5, "closed before the token expired")
        self.assertLess(time.time(), expires + 10, "closed long after the token expired")
        ans.ws.sock.close()
        other_rfb.send(struct.pack(">BBHHHH", 3, 0, 0, 0, 64, 64))
        self.assertEqual(other_rfb.read(1)[0], 0, "the other token's viewer still gets updates")
        other.ws.sock.close()


if __name__ == "__main__":
    unittest.main()
