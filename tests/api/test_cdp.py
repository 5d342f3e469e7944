"""CDP through deskboxd with real clients (npm playwright-core, puppeteer-core and ws from
tests/e2e, run by Node): /json/* answers rewritten to deskbox's URLs, Playwright's
connectOverCDP with a header and with a query token, two scripts at once, Puppeteer's connect,
authentication and scopes, close frames when the sandbox goes away, the audit trail of method
names, and a browser context told to use a proxy that the sandbox's network refuses."""

import json
import os
import subprocess
import threading
import time
import unittest

from harness import ApiTestCase, require_npm_packages, source_dir

E2E = os.path.join(source_dir(), "tests", "e2e")
NODE = "node"


def run_client(*args, timeout=300):
    p = subprocess.run([NODE, os.path.join(E2E, "cdp_client.mjs"), *args], cwd=E2E, capture_output=True,
                       text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    if not lines:
        raise AssertionError(f"cdp_client {args[0]} printed nothing (exit {p.returncode}): {p.stderr[-2000:]}")
    return json.loads(lines[-1]), p


class CdpTest(ApiTestCase):
    deployment = {"warm_pool": 1}

    @classmethod
    def setUpClass(cls):
        require_npm_packages()
        super().setUpClass()

    def setUp(self):
        self.a = self.create_sandbox()["id"]

    def tearDown(self):
        self.delete_sandbox(self.a)

    def token(self, sid, scope):
        return self.expect(self.dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": scope}), 201)["token"]

    def test_json_endpoints_are_rewritten_and_authenticated(self):
        dbx, a = self.dbx, self.a
        cdp = self.token(a, "cdp")
        base = f"/v1/sandboxes/{a}/cdp"
        self.expect_error(dbx.get(base + "/json/version", key=None), 401, "unauthorized")
        self.expect_error(dbx.get(base + "/json/version", token=self.token(a, "view")), 403, "forbidden")
        self.expect_error(dbx.get(base + "/json/version", token=self.token(a, "control")), 403, "forbidden")
        b = self.create_sandbox()["id"]
        try:
            self.expect_error(dbx.get(base + "/json/version", token=self.token(b, "cdp")), 403, "forbidden")
        finally:
            self.delete_sandbox(b)

        v = self.expect(dbx.get(base + "/json/version", key=None, query_token=cdp), 200)
        ws = v["webSocketDebuggerUrl"]
        self.assertTrue(ws.startswith(f"ws://127.0.0.1:{dbx.port}{base}/devtools/browser/"), ws)
        self.assertTrue(ws.endswith(f"?token={cdp}"), "a query token comes back in the URLs: " + ws)
        self.assertIn("Chrome/", v["Browser"])
        v = self.expect(dbx.get(base + "/json/version/", token=cdp), 200)
        self.assertNotIn("token=", v["webSocketDebuggerUrl"], "a header token is not put in URLs")

        new = self.expect(dbx.request("PUT", base + "/json/new", params={"url": "data:text/html,<title>t1</title>"}), 200)
        self.assertRegex(new["id"], r"^[A-Za-z0-9-]+$")
        targets = self.expect(dbx.get(base + "/json/list"), 200)
        ids = [t["id"] for t in targets]
        self.assertIn(new["id"], ids)
        raw = dbx.get(base + "/json/list").text
        self.assertNotIn("10.88.0.2", raw, "no guest address may leak to clients")
        self.assertNotIn(":9222", raw)
        for t in targets:
            if "webSocketDebuggerUrl" in t:
                self.assertTrue(t["webSocketDebuggerUrl"].startswith(f"ws://127.0.0.1:{dbx.port}{base}/devtools/"), t)
        r = dbx.get(f"{base}/json/activate/{new['id']}")
        self.assertEqual(r.status_code, 200, r.text)
        r = dbx.get(f"{base}/json/close/{new['id']}")
        self.assertEqual(r.status_code, 200, r.text)
        self.expect_error(dbx.get(f"{base}/json/close/not..valid"), 404, "not_found")
        # A query token on a header-only route is still refused.
        self.expect_error(dbx.get(f"/v1/sandboxes/{a}", key=None, query_token=cdp), 401, "unauthorized")

    def test_playwright_and_puppeteer(self):
        dbx, a = self.dbx, self.a
        cdp = self.token(a, "cdp")
        http_url = f"{dbx.url}/v1/sandboxes/{a}/cdp"
        r, p = run_client("playwright", http_url, f"Bearer {cdp}")
        self.assertTrue(r["ok"], f"{r} {p.stderr[-2000:]}")
        self.assertGreater(r["screenshotBytes"], 1000)
        ws_url = f"ws://127.0.0.1:{dbx.port}/v1/sandboxes/{a}/cdp?token={cdp}"
        r, p = run_client("playwright", ws_url)
        self.assertTrue(r["ok"], f"{r} {p.stderr[-2000:]}")

        # Two scripts at once on one sandbox (one in the default context, one in its own), each
        # longer than the HTTP server's header deadline, which must not apply to WebSockets.
        results = [None, None]

        def go(i):
            results[i] = run_client("playwright" if i == 0 else "playwright-context", ws_url)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(360)
        for r in results:
            self.assertIsNotNone(r, "a concurrent script did not finish")
            self.assertTrue(r[0]["ok"], f"{r[0]} {r[1].stderr[-2000:]}")

        v = self.expect(dbx.get(f"/v1/sandboxes/{a}/cdp/json/version", key=None, query_token=cdp), 200)
        r, p = run_client("puppeteer", v["webSocketDebuggerUrl"])
        self.assertTrue(r["ok"], f"{r} {p.stderr[-2000:]}")

        # The audit trail has the methods, attributed to the token, and never their params.
        events = self.all_events(a)
        cdp_events = [e for e in events if e["kind"] == "cdp"]
        methods = {e["cdp"]["method"] for e in cdp_events}
        for m in ("Target.setAutoAttach", "Runtime.evaluate", "Page.captureScreenshot"):
            self.assertIn(m, methods)
        self.assertTrue(all(e["actor"]["kind"] == "token" for e in cdp_events), "CDP events name the token")
        self.assertNotIn("héllo from playwright", json.dumps(events), "CDP params are not recorded")
        self.assertGreater(dbx.metric_value("deskbox_cdp_messages_total", method="Runtime.evaluate") or 0, 0)

    def test_clients_get_a_close_frame_when_the_sandbox_goes(self):
        dbx = self.dbx
        b = self.create_sandbox()["id"]
        cdp = self.token(b, "cdp")
        url = f"ws://127.0.0.1:{dbx.port}/v1/sandboxes/{b}/cdp?token={cdp}"
        procs = [subprocess.Popen([NODE, os.path.join(E2E, "cdp_client.mjs"), "hold", url], cwd=E2E,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        try:
            for p in procs:
                line = p.stdout.readline()
                self.assertIn('"ready":true', line, f"the client did not get an answer: {line} {p.stderr.read()[-1000:] if not line else ''}")
            self.assertEqual(dbx.metric_value("deskbox_cdp_sessions"), 2)
            t0 = time.monotonic()
            self.delete_sandbox(b)
            for p in procs:
                out, err = p.communicate(timeout=30)
                r = json.loads(out.strip().splitlines()[-1])
                self.assertTrue(r["ok"], f"{r} {err[-1000:]}")
                self.assertEqual(r["code"], 1001, r)
                self.assertIn("sandbox stopped", r["reason"], r)
            self.assertLess(time.monotonic() - t0, 15)
            deadline = time.monotonic() + 10
            while dbx.metric_value("deskbox_cdp_sessions") != 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            self.assertEqual(dbx.metric_value("deskbox_cdp_sessions"), 0, "sessions are gone after the close")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()

    def test_pause_closes_sessions_and_refuses_new_ones(self):
        dbx, a = self.dbx, self.a
        cdp = self.token(a, "cdp")
        url = f"ws://127.0.0.1:{dbx.port}/v1/sandboxes/{a}/cdp?token={cdp}"
        p = subprocess.Popen([NODE, os.path.join(E2E, "cdp_client.mjs"), "hold", url], cwd=E2E,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertIn('"ready":true', p.stdout.readline())
            self.expect(dbx.post(f"/v1/sandboxes/{a}/pause"), 200)
            out, err = p.communicate(timeout=30)
            r = json.loads(out.strip().splitlines()[-1])
            self.assertEqual((r["code"], r["reason"]), (1001, "sandbox paused"), r)
            r, _ = run_client("hold", url)
            self.assertEqual(r.get("status"), 409, f"a paused sandbox refuses new CDP sessions: {r}")
            self.expect(dbx.post(f"/v1/sandboxes/{a}/resume"), 200)
        finally:
            if p.poll() is None:
                p.kill()

    def test_sessions_end_when_their_token_is_revoked_or_expires(self):
        dbx, a = self.dbx, self.a
        revoked = self.expect(dbx.post(f"/v1/sandboxes/{a}/tokens", json={"scope": "cdp"}), 201)
        expiring = self.expect(dbx.post(f"/v1/sandboxes/{a}/tokens", json={"scope": "cdp", "ttl_s": 8}), 201)
        lasting = self.token(a, "cdp")
        expires = time.monotonic() + 8
        procs = {name: subprocess.Popen([NODE, os.path.join(E2E, "cdp_client.mjs"), "hold",
                                         f"ws://127.0.0.1:{dbx.port}/v1/sandboxes/{a}/cdp?token={secret}"],
                                        cwd=E2E, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for name, secret in (("revoked", revoked["token"]), ("expiring", expiring["token"]),
                                      ("lasting", lasting))}
        try:
            for name, p in procs.items():
                self.assertIn('"ready":true', p.stdout.readline(), name)
            self.expect(dbx.request("DELETE", f"/v1/tokens/{revoked['id']}"), 204)
            out, err = procs["revoked"].communicate(timeout=30)
            r = json.loads(out.strip().splitlines()[-1])
            self.assertEqual((r["code"], r["reason"]), (1001, "the token was revoked"), f"{r} {err[-1000:]}")
            self.assertIsNone(procs["expiring"].poll(), "only the revoked token's session ended")
            out, err = procs["expiring"].communicate(timeout=30)
            r = json.loads(out.strip().splitlines()[-1])
            self.assertEqual((r["code"], r["reason"]), (1001, "the token expired"), f"{r} {err[-1000:]}")
            self.assertGreater(time.monotonic(), expires - 1.5, "closed before the token expired")
            self.assertIsNone(procs["lasting"].poll(), "a session of a token still valid stays")
            self.assertEqual(dbx.metric_value("deskbox_cdp_sessions"), 1)
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()

    def test_proxy_server_in_a_context_cannot_route_around_the_sandbox_network(self):
        dbx, a = self.dbx, self.a
        cdp = self.token(a, "cdp")
        # 10.88.0.1 is the sandbox's own gateway, inside the network namespace this deployment
        # made; the sandbox's firewall refuses the guest's connections there.
        r, p = run_client("proxy-context", f"{dbx.url}/v1/sandboxes/{a}/cdp", "http://10.88.0.1:3128",
                          f"Bearer {cdp}")
        self.assertTrue(r["ok"], f"{r} {p.stderr[-2000:]}")
        self.assertFalse(r["loaded"], f"the page loaded through a proxy the sandbox cannot reach: {r}")
        notable = [e for e in self.all_events(a) if e["kind"] == "cdp" and e["cdp"]["notable"]]
        self.assertTrue(any(e["cdp"]["method"] == "Target.createBrowserContext" for e in notable),
                        f"the proxy context is a notable audit event: {notable}")


class CdpRightAfterARestoreTest(ApiTestCase):
    """Nothing pooled: each create restores for its request and hands the sandbox out before the
    browser has reloaded its pages in new renderers. A script that connects at once, and a
    screenshot asked for at once, wait for the reload; they never see a page from the snapshot."""

    deployment = {"warm_pool": 0}

    @classmethod
    def setUpClass(cls):
        require_npm_packages()
        super().setUpClass()

    def token(self, sid, scope):
        return self.expect(self.dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": scope}), 201)["token"]

    def test_page_access_waits_for_the_reload_and_never_sees_the_snapshots_page(self):
        dbx = self.dbx
        created_ms = time.time() * 1000
        a = self.create_sandbox()
        try:
            self.assertIn(a["create_path"], ("cold", "prestarted"), a)
            self.assertIs(a["browser_ready"], False, "a restore's pages reload after its create")
            # The browser process answers /json/version before the pages are back.
            cdp_a = self.token(a["id"], "cdp")
            v = self.expect(dbx.get(f"/v1/sandboxes/{a['id']}/cdp/json/version", token=cdp_a), 200)
            self.assertIn("Chrome/", v["Browser"])
            # A screenshot asked for now is of the reloaded page.
            shot = self.expect(dbx.get(f"/v1/sandboxes/{a['id']}/screenshot", params={"format": "png"}, timeout=300), 200)
            self.assertEqual(shot.content[:8], b"\x89PNG\r\n\x1a\n")
            self.assertIs(self.get_sandbox(a["id"])["browser_ready"], True)

            created_b_ms = time.time() * 1000
            b = self.create_sandbox()
            try:
                self.assertIs(b["browser_ready"], False)
                cdp_b = self.token(b["id"], "cdp")
                rb, pb = run_client("existing-pages", f"{dbx.url}/v1/sandboxes/{b['id']}/cdp", f"Bearer {cdp_b}")
                self.assertTrue(rb["ok"], f"{rb} {pb.stderr[-2000:]}")
                ra, pa = run_client("existing-pages", f"{dbx.url}/v1/sandboxes/{a['id']}/cdp", f"Bearer {cdp_a}")
                self.assertTrue(ra["ok"], f"{ra} {pa.stderr[-2000:]}")
                for r, t in ((ra, created_ms), (rb, created_b_ms)):
                    for page in r["pages"]:
                        self.assertGreaterEqual(page["origin"], t - 1000,
                                                f"a page older than its sandbox's create: {r}")
                self.assertNotEqual(ra["pages"][0]["random"], rb["pages"][0]["random"])
                self.assertNotEqual(ra["pages"][0]["math"], rb["pages"][0]["math"])
                self.assertIs(self.get_sandbox(b["id"])["browser_ready"], True)
            finally:
                self.delete_sandbox(b["id"])
        finally:
            self.delete_sandbox(a["id"])


if __name__ == "__main__":
    unittest.main()
