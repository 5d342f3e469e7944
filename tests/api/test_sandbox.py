"""deskboxd's REST API against real guests, on one private deployment with a warm pool of one:
input validation without side effects, exec, file transfer, clipboard, resolution, the event
timeline (API, follow stream and the on-disk hash chain), the inactivity timeout, tokens, keys,
metrics and file-descriptor hygiene. Tests are numbered: they share the deployment and sandbox
S, and the key test, which revokes keys down to the last one, runs last."""

import base64
import datetime
import hashlib
import http.client
import json
import os
import queue
import secrets
import select
import shutil
import socket
import struct
import time
import unittest
import urllib.parse
import zlib

import requests
from requests.structures import CaseInsensitiveDict

from harness import (ApiTestCase, CREATE_TIMEOUT_S, REQUEST_ID_RE, SANDBOX_ID_RE, TIME_RE, b64, describe,
                     parse_metrics, parse_time)

MIB = 1 << 20
UNICODE_TEXT = "héllo wörld — 日本語 🎉"
KEEPME_URL = "http://127.0.0.1:9223/json/new?data:text/html,%3Ctitle%3Ekeepme%3C/title%3E"
SANDBOX_FIELDS = {"id", "state", "template", "resolution", "timeout_s", "on_timeout", "expires_at",
                  "created_at", "updated_at", "stopped_at", "metadata", "egress", "failure", "create_path",
                  "create_ms", "events_url"}


class RawRequest:
    def __init__(self, method, url):
        self.method, self.url = method, url


class RawResponse:
    """Enough of requests.Response for describe() and expect_error()."""

    def __init__(self, method, url, status, headers, content):
        self.request = RawRequest(method, url)
        self.status_code = status
        self.headers = CaseInsensitiveDict(headers)
        self.content = content


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc)


def last_record_payload(data):
    """(offset, length) of the last record's payload in an event log (recorder/README.md)."""
    if data[:8] != b"DBXEVT1\0":
        raise AssertionError(f"not an event log: magic {data[:8]!r}")
    id_len = int.from_bytes(data[12:16], "big")
    pos = 16 + id_len + 32
    last = None
    while pos + 4 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        if pos + 4 + length + 32 > len(data):
            break
        last = (pos + 4, length)
        pos += 4 + length + 32
    if last is None:
        raise AssertionError("the event log has no complete record")
    return last


def png_chunks(data):
    """(type, payload) of each chunk of a PNG file."""
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        yield kind, data[pos + 8:pos + 8 + length]
        pos += 12 + length


class SandboxTest(ApiTestCase):
    @classmethod
    def setUpClass(cls):
        cls.start_deployment(warm_pool=1)
        try:
            t = cls("test_01_bad_input_is_rejected_without_side_effects")
            t.wait_settled()
            cls.s_created = t.create_sandbox(metadata={"suite": "sandbox"})
            cls.s = cls.s_created["id"]
            cls.secrets_issued = [cls.dbx.key]
        except BaseException:
            cls._failed = True
            cls.stop_deployment()
            raise

    # ---- helpers ----------------------------------------------------------------------------

    def check_sandbox(self, sb, what="sandbox"):
        self.assertEqual(set(sb) & SANDBOX_FIELDS, SANDBOX_FIELDS, f"{what}: missing fields in {sb}")
        self.assertRegex(sb["id"], SANDBOX_ID_RE)
        self.assertIn(sb["state"], ("creating", "running", "paused", "failed", "stopped"), sb)
        self.assertEqual(sb["template"], self.dbx.template, f"{what}: template")
        self.assertIsInstance(sb["resolution"].get("width"), int, sb)
        self.assertIsInstance(sb["resolution"].get("height"), int, sb)
        self.assertIn(sb["on_timeout"], ("pause", "stop"), sb)
        for k in ("created_at", "updated_at"):
            self.assertRegex(sb[k], TIME_RE, f"{what}: {k}")
        for k in ("expires_at", "stopped_at"):
            if sb[k] is not None:
                self.assertRegex(sb[k], TIME_RE, f"{what}: {k}")
        if sb["state"] == "running":
            self.assertIsNotNone(sb["expires_at"], f"{what}: a running sandbox has expires_at")
        else:
            self.assertIsNone(sb["expires_at"], f"{what}: expires_at is null unless running")
        self.assertIn(sb["create_path"], ("warm", "prestarted", "cold"), sb)
        self.assertIsInstance(sb["create_ms"], (int, float), sb)
        self.assertEqual(sb["events_url"], f"/v1/sandboxes/{sb['id']}/events", sb)

    def assert_expires_in(self, sb, seconds, slack=3.0):
        left = (parse_time(sb["expires_at"]) - now_utc()).total_seconds()
        self.assertTrue(seconds - slack <= left <= seconds + slack,
                        f"expires_at should be about now + {seconds} s, is now + {left:.1f} s: {sb}")

    def side_effect_snapshot(self):
        return self.all_sandbox_ids(), set(self.dbx.netns_names())

    def assert_no_side_effect(self, before, what):
        ids, netns = self.side_effect_snapshot()
        self.assertEqual(ids, before[0], f"{what}: the set of sandboxes changed")
        self.assertEqual(netns - before[1], set(), f"{what}: new network namespaces appeared")

    def raw_request(self, method, path, body_chunks, content_length=None, chunked=False,
                    content_type="application/json"):
        """Sends a body in pieces on a raw socket, stopping when the server answers early or
        closes; returns the response. For bodies the server must refuse before reading them."""
        sock = socket.create_connection(("127.0.0.1", self.dbx.port), timeout=60)
        try:
            head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.dbx.port}",
                    f"Authorization: Bearer {self.dbx.key}", f"Content-Type: {content_type}",
                    "Connection: close"]
            head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {content_length}")
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            for i, piece in enumerate(body_chunks):
                # A server may answer from the headers alone; give it a moment before the body.
                readable, _, _ = select.select([sock], [], [], 1.0 if i == 0 else 0)
                if readable:
                    break
                try:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                except (BrokenPipeError, ConnectionResetError):
                    break
            else:
                try:
                    if chunked:
                        sock.sendall(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            content = resp.read()
            return RawResponse(method, f"{self.dbx.url}{path}", resp.status, dict(resp.getheaders()), content)
        finally:
            sock.close()

    def files_url(self, sid, path, **extra):
        q = "path=" + urllib.parse.quote(path, safe="") if path is not None else ""
        for k, v in extra.items():
            q += f"&{k}={v}"
        return f"/v1/sandboxes/{sid}/files?{q}"

    def guest_path_exists(self, sid, path):
        res = self.exec_in(sid, argv=["test", "-e", path])
        return res["exit_code"] == 0

    # ---- tests ------------------------------------------------------------------------------

    def test_01_bad_input_is_rejected_without_side_effects(self):
        dbx, s = self.dbx, self.s
        self.wait_settled()
        before = self.side_effect_snapshot()
        big_value = "x" * (MIB + 1024)
        oversized = json.dumps({"metadata": {"k": big_value}}).encode()
        chunks = [oversized[i:i + 65536] for i in range(0, len(oversized), 65536)]
        bad_meta = {f"k{i}": "v" for i in range(65)}
        cases = [
            ("malformed JSON", lambda: dbx.post("/v1/sandboxes", data=b'{"timeout_s": 10,',
                                                headers={"Content-Type": "application/json"}),
             400, "invalid_json", ["json"]),
            ("malformed JSON (exec)", lambda: dbx.post(f"/v1/sandboxes/{s}/exec", data=b"[",
                                                       headers={"Content-Type": "application/json"}),
             400, "invalid_json", ["json"]),
            ("body is not an object", lambda: dbx.post("/v1/sandboxes", json=[]), 400, "invalid_request", []),
            ("timeout_s is a string", lambda: dbx.post("/v1/sandboxes", json={"timeout_s": "10"}),
             400, "invalid_request", ["timeout_s"]),
            ("timeout_s is 0", lambda: dbx.post("/v1/sandboxes", json={"timeout_s": 0}),
             400, "invalid_request", ["timeout_s"]),
            ("timeout_s above 604800", lambda: dbx.post("/v1/sandboxes", json={"timeout_s": 604801}),
             400, "invalid_request", ["timeout_s"]),
            ("on_timeout unknown", lambda: dbx.post("/v1/sandboxes", json={"on_timeout": "explode"}),
             400, "invalid_request", ["on_timeout"]),
            ("65 metadata keys", lambda: dbx.post("/v1/sandboxes", json={"metadata": bad_meta}),
             400, "invalid_request", ["metadata"]),
            ("unknown field", lambda: dbx.post("/v1/sandboxes", json={"timeout_s": 60, "bogus_field": 1}),
             400, "invalid_request", ["bogus_field"]),
            ("oversized body (Content-Length)",
             lambda: self.raw_request("POST", "/v1/sandboxes", chunks, content_length=len(oversized)),
             413, "payload_too_large", []),
            ("oversized body (chunked)",
             lambda: self.raw_request("POST", "/v1/sandboxes", chunks, chunked=True),
             413, "payload_too_large", []),
            ("unknown sandbox", lambda: dbx.get("/v1/sandboxes/sb-0123456789abcdef"),
             404, "not_found", ["sb-0123456789abcdef"]),
            ("exec in an unknown sandbox",
             lambda: dbx.post("/v1/sandboxes/sb-0123456789abcdef/exec", json={"argv": ["true"]}),
             404, "not_found", ["sb-0123456789abcdef"]),
            ("malformed sandbox id", lambda: dbx.get("/v1/sandboxes/not-an-id"), 404, "not_found", []),
            ("unknown route", lambda: dbx.get("/v1/nope"), 404, "not_found", []),
            ("unknown sub-route", lambda: dbx.get(f"/v1/sandboxes/{s}/nope"), 404, "not_found", []),
            ("wrong method on a collection", lambda: dbx.request("DELETE", "/v1/sandboxes"),
             405, "method_not_allowed", []),
            ("wrong method on exec", lambda: dbx.request("PUT", f"/v1/sandboxes/{s}/exec", json={}),
             405, "method_not_allowed", []),
            ("exec with argv and shell",
             lambda: dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["true"], "shell": "true"}),
             400, "invalid_request", ["argv", "shell"]),
            ("exec with neither argv nor shell", lambda: dbx.post(f"/v1/sandboxes/{s}/exec", json={}),
             400, "invalid_request", []),
            ("exec argv is a string", lambda: dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": "echo hi"}),
             400, "invalid_request", ["argv"]),
            ("exec relative cwd", lambda: dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["pwd"], "cwd": "tmp"}),
             400, "invalid_request", ["cwd"]),
            ("exec stdin_b64 not base64",
             lambda: dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["cat"], "stdin_b64": "!!!"}),
             400, "invalid_request", ["stdin_b64"]),
            ("exec timeout_s above 3600",
             lambda: dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["true"], "timeout_s": 3601}),
             400, "invalid_request", ["timeout_s"]),
            ("exec encoding unknown",
             lambda: dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["true"], "encoding": "latin1"}),
             400, "invalid_request", ["encoding"]),
            ("events limit 0", lambda: dbx.get(f"/v1/sandboxes/{s}/events?limit=0"),
             400, "invalid_request", ["limit"]),
            ("events limit 10001", lambda: dbx.get(f"/v1/sandboxes/{s}/events?limit=10001"),
             400, "invalid_request", ["limit"]),
            ("token scope unknown", lambda: dbx.post(f"/v1/sandboxes/{s}/tokens", json={"scope": "admin"}),
             400, "invalid_request", ["scope"]),
            ("token scope missing", lambda: dbx.post(f"/v1/sandboxes/{s}/tokens", json={}),
             400, "invalid_request", ["scope"]),
            ("clipboard text not a string", lambda: dbx.request("PUT", f"/v1/sandboxes/{s}/clipboard",
                                                                json={"text": 5}),
             400, "invalid_request", ["text"]),
            ("resolution 99999x1",
             lambda: dbx.post("/v1/sandboxes", json={"resolution": {"width": 99999, "height": 1}}),
             422, "unsupported_resolution", ["99999"]),
            ("unknown template",
             lambda: dbx.post("/v1/sandboxes", json={"template": "nosuch@0000000000000000"}),
             422, "unknown_template", ["nosuch@0000000000000000"]),
        ]
        for path in ("/tmp/../etc/passwd", "relative/path", "/tmp/a\x00b", "/" + "a" * 5000):
            cases.append((f"files GET path={path[:40]!r}", lambda p=path: dbx.get(self.files_url(s, p)),
                          400, "invalid_path", ["path"]))
        for path in ("/tmp/../tmp/traversal", "relative/path", "/tmp/a\x00b"):
            cases.append((f"files PUT path={path!r}",
                          lambda p=path: dbx.request("PUT", self.files_url(s, p), data=b"must not be written"),
                          400, "invalid_path", ["path"]))
        cases.append(("files GET without path", lambda: dbx.get(f"/v1/sandboxes/{s}/files"),
                      400, "invalid_request", ["path"]))
        cases.append(("files PUT mode=999", lambda: dbx.request("PUT", self.files_url(s, "/tmp/m", mode="999"),
                                                                data=b"x"),
                      400, "invalid_request", ["mode"]))
        for what, do, status, code, mentions in cases:
            with self.subTest(what):
                self.expect_error(do(), status, code, mentions)
                self.assert_no_side_effect(before, what)
        for path in ("/tmp/traversal", "/root/relative/path", "/tmp/a"):
            with self.subTest(f"{path} was not written"):
                self.assertFalse(self.guest_path_exists(s, path), f"a refused upload created {path} in the guest")

    def test_02_sandbox_object(self):
        sb = self.s_created
        self.check_sandbox(sb, "create response")
        self.assertEqual(sb["create_path"], "warm", f"the warm pool was full, yet: {sb}")
        self.assertEqual(sb["metadata"], {"suite": "sandbox"})
        self.assertEqual(sb["egress"], {"default": "deny", "allow": [], "deny": []},
                         "no egress given → the operator's default policy")
        self.assertIsNone(sb["failure"])
        self.assertIsNone(sb["stopped_at"])
        self.assertEqual(sb["on_timeout"], "pause")
        self.assertEqual(sb["timeout_s"], 3600, "default timeout from configuration")
        templates = self.expect(self.dbx.get("/v1/templates"), 200)["templates"]
        default = [t for t in templates if t.get("default")]
        self.assertEqual(len(default), 1, f"exactly one default template: {templates}")
        self.assertEqual(default[0]["name"], self.dbx.template)
        self.assertEqual(sb["resolution"], {"width": default[0]["screen"]["width"],
                                            "height": default[0]["screen"]["height"]},
                         "a sandbox created without a resolution has the template's")
        got = self.get_sandbox(self.s)
        self.check_sandbox(got, "GET")
        self.assertEqual(got["id"], self.s)
        listed = self.expect(self.dbx.get("/v1/sandboxes"), 200)["sandboxes"]
        self.assertIn(self.s, [x["id"] for x in listed])
        paused = self.expect(self.dbx.get("/v1/sandboxes?state=paused"), 200)["sandboxes"]
        self.assertNotIn(self.s, [x["id"] for x in paused], "?state=paused lists only paused sandboxes")
        patched = self.expect(self.dbx.request("PATCH", f"/v1/sandboxes/{self.s}",
                                               json={"metadata": {"replaced": "yes"}, "timeout_s": 7200}), 200)
        self.assertEqual(patched["metadata"], {"replaced": "yes"}, "metadata replaces")
        self.assertEqual(patched["timeout_s"], 7200)
        self.assert_expires_in(patched, 7200)

    def test_03_exec(self):
        s = self.s
        r = self.exec_in(s, argv=["echo", "hello", "world"])
        for k in ("exit_code", "signal", "stdout", "stderr", "encoding", "truncated", "timed_out", "duration_ms"):
            self.assertIn(k, r, f"exec result lacks {k}: {r}")
        self.assertEqual((r["exit_code"], r["signal"], r["stdout"], r["stderr"], r["encoding"], r["truncated"],
                          r["timed_out"]), (0, 0, "hello world\n", "", "utf8", False, False), r)
        self.assertIsInstance(r["duration_ms"], int)

        r = self.exec_in(s, shell="echo $((6*7)); echo oops >&2; exit 3")
        self.assertEqual((r["exit_code"], r["stdout"], r["stderr"]), (3, "42\n", "oops\n"), r)

        r = self.exec_in(s, argv=["sh", "-c", "exit 7"])
        self.assertEqual(r["exit_code"], 7, r)

        r = self.exec_in(s, shell="kill -KILL $$")
        self.assertEqual((r["signal"], r["exit_code"]), (9, -1), f"a command killed by SIGKILL: {r}")

        r = self.exec_in(s, shell='printf "%s|%s" "$FOO" "$BAR"', env={"FOO": "bar baz", "BAR": "ü"})
        self.assertEqual(r["stdout"], "bar baz|ü", r)

        r = self.exec_in(s, argv=["pwd"], cwd="/tmp")
        self.assertEqual(r["stdout"], "/tmp\n", r)

        r = self.exec_in(s, argv=["cat"], stdin_b64=b64(b"line one\nline two\n"))
        self.assertEqual(r["stdout"], "line one\nline two\n", r)

        every_byte = bytes(range(256)) * 4
        r = self.exec_in(s, argv=["cat"], stdin_b64=b64(every_byte), encoding="base64")
        self.assertEqual(r["encoding"], "base64", r)
        self.assertEqual(base64.b64decode(r["stdout"]), every_byte, "binary stdin → stdout, base64 both ways")

        r = self.exec_in(s, shell=r"printf '\000\001\377\376'; printf '\377' >&2", encoding="base64")
        self.assertEqual(base64.b64decode(r["stdout"]), b"\x00\x01\xff\xfe", r)
        self.assertEqual(base64.b64decode(r["stderr"]), b"\xff", r)

        resp = self.dbx.post(f"/v1/sandboxes/{s}/exec",
                             json={"shell": r"printf 'ok\377\376ok'", "encoding": "utf8"}, timeout=120)
        r = self.expect(resp, 200, "non-UTF-8 output in utf8 mode")  # strict UTF-8 JSON parse
        self.assertIsInstance(r["stdout"], str)
        self.assertTrue(r["stdout"].startswith("ok") and r["stdout"].endswith("ok"), r)

        r = self.exec_in(s, shell="head -c 100000 /dev/zero | tr '\\0' x", max_output_bytes=10)
        self.assertTrue(r["truncated"], f"output above max_output_bytes is truncated: {r}")
        self.assertLessEqual(len(r["stdout"].encode()), 10, r)

        self.expect_error(self.dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["/nonexistent/program"]}),
                          502, "guest_error")
        self.expect_error(self.dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["pwd"], "cwd": "/nonexistent"}),
                          502, "guest_error")

        started = time.monotonic()
        r = self.exec_in(s, argv=["sleep", "5"], timeout_s=1)
        wall = time.monotonic() - started
        self.assertTrue(r["timed_out"], f"sleep 5 with timeout_s=1: {r}")
        self.assertLess(r["duration_ms"], 4500, r)
        self.assertLess(wall, 4.5, f"exec with timeout_s=1 answered after {wall:.1f} s")

    def test_04_files(self):
        s = self.s
        size = 10 * MIB
        data = bytes(range(256)) * 16 + os.urandom(size - 4096)

        def pieces():
            step = 100_003  # uneven on purpose: chunk boundaries fall anywhere
            for i in range(0, len(data), step):
                yield data[i:i + step]

        r = self.dbx.request("PUT", self.files_url(s, "/tmp/big.bin"), data=pieces(), timeout=600,
                             headers={"Content-Type": "application/octet-stream"})
        body = self.expect(r, 200, "streamed PUT of 10 MiB")
        self.assertEqual(body, {"path": "/tmp/big.bin", "bytes": size})
        digest = hashlib.sha256(data).hexdigest()
        out = self.sh(s, "sha256sum /tmp/big.bin")
        self.assertEqual(out.split()[0], digest, "the guest's copy differs from what was sent")

        r = self.dbx.get(self.files_url(s, "/tmp/big.bin"), stream=True, timeout=600)
        try:
            self.assertEqual(r.status_code, 200, describe(r))
            self.assertEqual(r.headers.get("Content-Type", "").split(";")[0], "application/octet-stream")
            self.assertIn("chunked", r.headers.get("Transfer-Encoding", ""), "file downloads are streamed chunked")
            h, n = hashlib.sha256(), 0
            for chunk in r.iter_content(1 << 16):
                h.update(chunk)
                n += len(chunk)
        finally:
            r.close()
        self.assertEqual(n, size, "downloaded size")
        self.assertEqual(h.hexdigest(), digest, "the downloaded bytes differ from the uploaded ones")

        r = self.dbx.get(self.files_url(s, "/tmp/does-not-exist"))
        self.expect_error(r, 404, "file_not_found", ["/tmp/does-not-exist"])

        self.expect_error(self.dbx.get(self.files_url(s, "/tmp")), 400, "invalid_path")
        r = self.dbx.request("PUT", self.files_url(s, "/tmp/deep/er/f.txt"), data=b"x")
        self.expect_error(r, 404, "file_not_found")
        r = self.dbx.request("PUT", self.files_url(s, "/tmp/deep/er/f.txt", mode="0600", parents="1"), data=b"x")
        self.assertEqual(self.expect(r, 200), {"path": "/tmp/deep/er/f.txt", "bytes": 1})
        self.assertEqual(self.sh(s, "stat -c %a /tmp/deep/er/f.txt").strip(), "600", "mode=0600")

        r = self.dbx.request("PUT", self.files_url(s, "/tmp/empty"), data=b"")
        self.assertEqual(self.expect(r, 200), {"path": "/tmp/empty", "bytes": 0})
        r = self.dbx.get(self.files_url(s, "/tmp/empty"))
        self.assertEqual((r.status_code, r.content), (200, b""), describe(r))
        self.sh(s, "rm -rf /tmp/big.bin /tmp/deep /tmp/empty")

    def test_05_clipboard(self):
        s = self.s
        r = self.dbx.request("PUT", f"/v1/sandboxes/{s}/clipboard", json={"text": UNICODE_TEXT})
        self.assertEqual(r.status_code, 204, describe(r))
        got = self.expect(self.dbx.get(f"/v1/sandboxes/{s}/clipboard"), 200)
        self.assertEqual(got, {"text": UNICODE_TEXT})
        out = self.sh(s, "xclip -selection clipboard -o", env={"DISPLAY": ":0"})
        self.assertEqual(out, UNICODE_TEXT, "the guest's X CLIPBOARD selection")

    def test_06_resolution(self):
        egress = {"allow": ["Example.COM:443", "*.example.com"]}
        sb = self.create_sandbox(resolution={"width": 1024, "height": 768}, egress=egress)
        try:
            self.check_sandbox(sb)
            self.assertEqual(sb["egress"], {"default": "deny", "allow": ["example.com:443", "*.example.com"], "deny": []},
                             "egress is returned in canonical form")
            self.assertEqual(sb["resolution"], {"width": 1024, "height": 768}, sb)
            self.assertEqual(self.get_sandbox(sb["id"])["resolution"], {"width": 1024, "height": 768})
            deadline, out = time.monotonic() + 15, ""
            while time.monotonic() < deadline:
                out = self.exec_in(sb["id"], shell="xdpyinfo -display :0 | grep dimensions",
                                   env={"DISPLAY": ":0"})["stdout"]
                if "1024x768 pixels" in out:
                    break
                time.sleep(1)
            self.assertIn("1024x768 pixels", out, "the guest's X screen")
            # The screenshot has the new size and, once Chromium has repainted at it, shows its
            # window (many colours, not just the desktop background and the pointer).
            deadline, colours = time.monotonic() + 30, 0
            while time.monotonic() < deadline:
                r = self.dbx.get(f"/v1/sandboxes/{sb['id']}/screenshot")
                self.assertEqual(r.status_code, 200, describe(r))
                self.assertEqual(r.headers["Content-Type"], "image/png")
                self.assertEqual(struct.unpack(">II", r.content[16:24]), (1024, 768), "PNG size")
                self.assertEqual((r.headers["X-Screen-Width"], r.headers["X-Screen-Height"]), ("1024", "768"))
                raw = zlib.decompress(b"".join(chunk for kind, chunk in png_chunks(r.content) if kind == b"IDAT"))
                stride = 1 + 1024 * 3
                self.assertEqual(len(raw), 768 * stride, "raw RGB rows, one filter byte each")
                colours = len({raw[y * stride + 1 + x * 3:y * stride + 4 + x * 3]
                               for y in range(0, 768, 4) for x in range(0, 1024, 2)})
                if colours >= 100:
                    break
                time.sleep(1)
            self.assertGreaterEqual(colours, 100, "the screenshot shows the browser window")
            j = self.dbx.get(f"/v1/sandboxes/{sb['id']}/screenshot", params={"format": "jpeg", "quality": 50})
            self.assertEqual((j.status_code, j.content[:2]), (200, b"\xff\xd8"), describe(j))
            self.expect_error(self.dbx.get(f"/v1/sandboxes/{sb['id']}/screenshot", params={"format": "gif"}),
                              400, "invalid_request", ["format"])
        finally:
            self.delete_sandbox(sb["id"])

    def test_07_events(self):
        dbx = self.dbx
        keys = self.expect(dbx.get("/v1/keys"), 200)["keys"]
        key_ids = [k["id"] for k in keys]
        created = self.create_sandbox()
        e = created["id"]
        stream = dbx.follow(f"/v1/sandboxes/{e}/events?follow=1&since=0")
        streamed = []
        request_ids = {}
        try:
            if stream.status != 200:
                self.fail(f"follow=1 answered {stream.status}: {stream.read_all_text()}")
            self.assertEqual(stream.headers.get("content-type", "").split(";")[0], "application/x-ndjson")
            self.assertTrue(stream.chunked, "follow=1 is sent chunked")

            r = dbx.post(f"/v1/sandboxes/{e}/exec", json={"argv": ["echo", "timeline"]}, timeout=120)
            self.expect(r, 200)
            request_ids["exec"] = r.headers.get("X-Request-Id")
            deadline = time.monotonic() + 10
            while not any(x["kind"] == "exec" for x in streamed):
                left = deadline - time.monotonic()
                try:
                    ev = stream.next_event(timeout=max(0.01, left))
                except queue.Empty:
                    self.fail(f"no exec event on the follow stream within 10 s; got {streamed}")
                self.assertIsNotNone(ev, f"the follow stream ended early ({stream.error}); got {streamed}")
                streamed.append(ev)

            r = dbx.request("PUT", self.files_url(e, "/tmp/events.txt"), data=b"twelve bytes")
            self.expect(r, 200)
            request_ids["upload"] = r.headers.get("X-Request-Id")
            r = dbx.get(self.files_url(e, "/tmp/events.txt"))
            self.assertEqual((r.status_code, r.content), (200, b"twelve bytes"), describe(r))
            request_ids["download"] = r.headers.get("X-Request-Id")

            r = dbx.post(f"/v1/sandboxes/{e}/pause")
            paused = self.expect(r, 200, "pause")
            request_ids["pause"] = r.headers.get("X-Request-Id")
            self.check_sandbox(paused)
            self.assertEqual(paused["state"], "paused")
            self.expect_error(dbx.post(f"/v1/sandboxes/{e}/exec", json={"argv": ["true"]}), 409, "invalid_state")
            self.expect_error(dbx.post(f"/v1/sandboxes/{e}/pause"), 409, "invalid_state")
            listed = self.expect(dbx.get("/v1/sandboxes?state=paused"), 200)["sandboxes"]
            self.assertIn(e, [x["id"] for x in listed], "?state=paused")

            r = dbx.post(f"/v1/sandboxes/{e}/resume")
            resumed = self.expect(r, 200, "resume")
            request_ids["resume"] = r.headers.get("X-Request-Id")
            self.assertEqual(resumed["state"], "running")
            self.assert_expires_in(resumed, resumed["timeout_s"], slack=5)
            self.expect_error(dbx.post(f"/v1/sandboxes/{e}/resume"), 409, "invalid_state")

            r = dbx.request("DELETE", f"/v1/sandboxes/{e}", timeout=CREATE_TIMEOUT_S)
            self.assertEqual(r.status_code, 204, describe(r))
            request_ids["delete"] = r.headers.get("X-Request-Id")

            deadline = time.monotonic() + 15
            while True:
                try:
                    ev = stream.next_event(timeout=max(0.01, deadline - time.monotonic()))
                except queue.Empty:
                    self.fail(f"the follow stream did not end within 15 s of the delete; got {streamed}")
                if ev is None:
                    break
                streamed.append(ev)
            self.assertIsNone(stream.error, "the follow stream ended cleanly (terminating chunk)")
        finally:
            stream.close()

        stopped = self.get_sandbox(e)
        self.check_sandbox(stopped, "GET after delete")
        self.assertEqual(stopped["state"], "stopped")
        self.assertIsNotNone(stopped["stopped_at"])
        self.expect_error(dbx.post(f"/v1/sandboxes/{e}/exec", json={"argv": ["true"]}), 409, "invalid_state")
        r = dbx.request("DELETE", f"/v1/sandboxes/{e}")
        self.assertEqual(r.status_code, 204, f"deleting again: {describe(r)}")
        self.assertNotIn(e, [x["id"] for x in self.expect(dbx.get("/v1/sandboxes"), 200)["sandboxes"]],
                         "the default list leaves stopped sandboxes out")
        self.assertIn(e, [x["id"] for x in self.expect(dbx.get("/v1/sandboxes?state=stopped"), 200)["sandboxes"]])

        events = self.all_events(e)
        # The follow stream ends once the sandbox is stopped and its recording's last segment
        # (finished off the event loop) is logged: an auditor following the timeline misses nothing.
        self.assertEqual([x["seq"] for x in streamed], [x["seq"] for x in events],
                         "the follow stream and GET events list the same events")
        self.assertEqual(streamed, events, "the follow stream and GET events give the same JSON")
        last_segment = [x for x in streamed if x["kind"] == "recording" and x["recording"].get("phase") == "segment"]
        self.assertTrue(last_segment, f"the recording's segment events on the follow stream: {streamed[-4:]}")
        seqs = [x["seq"] for x in events]
        self.assertEqual(seqs, sorted(set(seqs)), f"seq strictly increasing: {seqs}")
        for ev in events:
            self.assertEqual(ev["sandbox_id"], e, ev)
            self.assertRegex(ev["time"], TIME_RE, ev)
            self.assertIn(ev["kind"], ("lifecycle", "action", "viewer_input", "cdp", "egress", "exec", "file",
                                       "recording"), ev)
            self.assertIn(ev["kind"], ev, f"the kind's fields sit under its name: {ev}")
            self.assertIn(ev["actor"]["kind"], ("system", "api_key", "token", "agent", "human"), ev)

        def lifecycle(to, reason=None):
            return lambda x: (x["kind"] == "lifecycle" and x["lifecycle"]["to_state"] == to
                              and (reason is None or x["lifecycle"]["reason"] == reason))

        expected = [
            ("created", lifecycle("running"), None),
            ("exec", lambda x: x["kind"] == "exec" and x["exec"]["argv"] == ["echo", "timeline"], "exec"),
            ("upload", lambda x: x["kind"] == "file" and x["file"]["direction"] == "upload", "upload"),
            ("download", lambda x: x["kind"] == "file" and x["file"]["direction"] == "download", "download"),
            ("paused", lifecycle("paused", "api"), "pause"),
            ("resumed", lifecycle("running", "api"), "resume"),
            ("stopped", lifecycle("stopped", "api"), "delete"),
        ]
        pos, found = 0, {}
        for name, match, _ in expected:
            while pos < len(events) and not match(events[pos]):
                pos += 1
            self.assertLess(pos, len(events), f"no {name!r} event after the previous ones, in order: "
                                              f"{json.dumps(events, indent=1)[:6000]}")
            found[name] = events[pos]
            pos += 1
        ex = found["exec"]["exec"]
        self.assertEqual((ex["exit_code"], ex["timed_out"], ex["stdout_bytes"]), (0, False, len("timeline\n")), ex)
        self.assertEqual(found["resumed"]["lifecycle"]["from_state"], "paused")
        for name in ("upload", "download"):
            f = found[name]["file"]
            self.assertEqual((f["path"], f["bytes"], f["ok"]), ("/tmp/events.txt", 12, True), f)
        for name, _, rid_key in expected:
            if rid_key is None:
                continue
            ev = found[name]
            self.assertEqual(ev["actor"]["kind"], "api_key", f"{name}: {ev}")
            self.assertIn(ev["actor"]["id"], key_ids, f"{name}: the actor is the key used: {ev}")
            self.assertTrue(ev["actor"].get("remote", "").startswith("127.0.0.1:"), f"{name}: {ev}")
            rid = request_ids.get(rid_key)
            self.assertRegex(rid or "", REQUEST_ID_RE, f"every response carries X-Request-Id ({rid_key})")
            self.assertEqual(ev.get("request_id"), rid, f"{name}: the event names the request (X-Request-Id)")

        pages, since = [], 0
        while True:
            page = self.events(e, since=since, limit=2)
            self.assertLessEqual(len(page["events"]), 2, "limit=2")
            if not page["events"]:
                break
            pages += page["events"]
            self.assertGreater(page["next_since"], since, f"next_since does not advance: {page}")
            since = page["next_since"]
        self.assertEqual(pages, events, "paging with limit=2 and next_since yields every event once")
        page = self.events(e, since=events[2]["seq"])
        self.assertEqual(page["events"], events[3:], "since=SEQ returns the events after SEQ")

        path = dbx.event_log_path(e)
        deadline, res = time.monotonic() + 10, None
        while time.monotonic() < deadline:
            res = dbx.events_tool("verify", str(path))
            if res.returncode == 0 and res.stdout.startswith(f"ok: {len(events)} events"):
                break
            time.sleep(0.5)
        self.assertEqual(res.returncode, 0, f"deskbox-events verify {path}: {res.stdout}{res.stderr}")
        self.assertTrue(res.stdout.startswith(f"ok: {len(events)} events"),
                        f"the log on disk holds the events the API lists ({len(events)}): {res.stdout}")
        copy = dbx.root / f"{e}.flipped.events"
        shutil.copyfile(path, copy)
        data = bytearray(copy.read_bytes())
        offset, length = last_record_payload(bytes(data))
        data[offset + length // 2] ^= 0x01
        copy.write_bytes(bytes(data))
        res = dbx.events_tool("verify", str(copy))
        self.assertEqual(res.returncode, 1, f"a flipped byte in the last record must fail verification: "
                                            f"{res.stdout}{res.stderr}")

    def test_08_timeout_pauses_and_resume_keeps_the_page(self):
        dbx = self.dbx
        t = self.create_sandbox(timeout_s=600)["id"]
        try:
            self.sh(t, f"curl -s -m 30 -X PUT '{KEEPME_URL}'")
            deadline, pages = time.monotonic() + 30, ""
            while time.monotonic() < deadline:
                pages = self.exec_in(t, argv=["curl", "-s", "-m", "10", "http://127.0.0.1:9223/json/list"])["stdout"]
                if '"keepme"' in pages:
                    break
                time.sleep(1)
            self.assertIn('"keepme"', pages, "the page opened through CDP")

            patched = self.expect(dbx.request("PATCH", f"/v1/sandboxes/{t}", json={"timeout_s": 5}), 200)
            self.assert_expires_in(patched, 5)
            sb = self.wait_state(t, "paused", 20)
            self.check_sandbox(sb)
            self.assertIsNone(sb["expires_at"])
            paused = [x for x in self.all_events(t)
                      if x["kind"] == "lifecycle" and x["lifecycle"]["to_state"] == "paused"]
            self.assertTrue(paused, "a lifecycle paused event")
            self.assertEqual(paused[-1]["lifecycle"]["reason"], "timeout", paused[-1])
            self.assertEqual(paused[-1]["actor"]["kind"], "system", paused[-1])

            resumed = self.expect(dbx.post(f"/v1/sandboxes/{t}/resume"), 200, "resume after the timeout")
            self.assertEqual(resumed["state"], "running")
            self.assert_expires_in(resumed, 5, slack=3)  # the countdown restarts
            self.expect(dbx.request("PATCH", f"/v1/sandboxes/{t}", json={"timeout_s": 600}), 200)
            pages = self.exec_in(t, argv=["curl", "-s", "-m", "10", "http://127.0.0.1:9223/json/list"])["stdout"]
            self.assertIn('"keepme"', pages, "the page survives pause and resume")
        finally:
            self.delete_sandbox(t)

    def test_09_timeout_stops(self):
        created = self.create_sandbox(timeout_s=5, on_timeout="stop")
        t = created["id"]
        self.assertEqual(created["on_timeout"], "stop")
        self.assert_expires_in(created, 5)
        sb = self.wait_state(t, "stopped", 25)
        self.check_sandbox(sb)
        self.assertIsNone(sb["expires_at"])
        lived = (parse_time(sb["stopped_at"]) - parse_time(sb["created_at"])).total_seconds()
        self.assertGreaterEqual(lived, 4.0, f"stopped {lived:.1f} s after creation, timeout_s was 5")
        stops = [x for x in self.all_events(t) if x["kind"] == "lifecycle" and x["lifecycle"]["to_state"] == "stopped"]
        self.assertEqual(len(stops), 1, stops)
        self.assertEqual(stops[0]["lifecycle"]["reason"], "timeout", stops[0])
        r = self.dbx.request("DELETE", f"/v1/sandboxes/{t}")
        self.assertEqual(r.status_code, 204, describe(r))

    def test_10_tokens(self):
        dbx, s = self.dbx, self.s
        r = dbx.post(f"/v1/sandboxes/{s}/tokens", json={"scope": "control", "ttl_s": 600})
        tok = self.expect(r, 201, "create token")
        self.assertEqual(set(tok), {"id", "token", "scope", "sandbox_id", "created_at", "expires_at"}, tok)
        self.assertRegex(tok["id"], r"^tok_[0-9a-f]{16}$")
        self.assertRegex(tok["token"], r"^dbt_[0-9a-f]{64}$")
        self.assertEqual((tok["scope"], tok["sandbox_id"]), ("control", s))
        ttl = (parse_time(tok["expires_at"]) - parse_time(tok["created_at"])).total_seconds()
        self.assertAlmostEqual(ttl, 600, delta=1, msg=str(tok))
        secret = tok["token"]
        self.secrets_issued.append(secret)
        view = self.expect(dbx.post(f"/v1/sandboxes/{s}/tokens", json={"scope": "view"}), 201)
        self.secrets_issued.append(view["token"])
        default_ttl = (parse_time(view["expires_at"]) - parse_time(view["created_at"])).total_seconds()
        self.assertAlmostEqual(default_ttl, 3600, delta=1, msg="default ttl_s")

        self.expect(dbx.get(f"/v1/sandboxes/{s}", token=secret), 200, "control token: GET")
        r = dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["true"]}, token=secret, timeout=120)
        self.expect(r, 200, "control token: exec")
        self.expect(dbx.get(f"/v1/sandboxes/{s}", token=view["token"]), 200, "view token: GET")
        self.expect_error(dbx.post(f"/v1/sandboxes/{s}/exec", json={"argv": ["true"]}, token=view["token"]),
                          403, "forbidden")
        self.expect_error(dbx.get("/v1/sandboxes", token=secret), 403, "forbidden")

        listed = dbx.get(f"/v1/sandboxes/{s}/tokens")
        body = self.expect(listed, 200)
        self.assertIn(tok["id"], [x["id"] for x in body["tokens"]])
        for x in body["tokens"]:
            self.assertNotIn("token", x, f"listed tokens carry no secret: {x}")
        self.assertNotIn(secret, listed.text)
        self.assertNotIn(secret[4:], listed.text)

        self.expect_error(dbx.post("/v1/sandboxes/sb-0123456789abcdef/tokens", json={"scope": "view"}),
                          404, "not_found")
        self.expect_error(dbx.post(f"/v1/sandboxes/{s}/tokens", json={"scope": "view", "ttl_s": 0}),
                          400, "invalid_request", ["ttl_s"])
        self.expect_error(dbx.post(f"/v1/sandboxes/{s}/tokens", json={"scope": "view", "ttl_s": 2592001}),
                          400, "invalid_request", ["ttl_s"])

        r = dbx.request("DELETE", f"/v1/tokens/{tok['id']}")
        self.assertEqual(r.status_code, 204, describe(r))
        self.expect_error(dbx.get(f"/v1/sandboxes/{s}", token=secret), 401, "unauthorized")
        after = self.expect(dbx.get(f"/v1/sandboxes/{s}/tokens"), 200)["tokens"]
        self.assertNotIn(tok["id"], [x["id"] for x in after], "a revoked token is not listed")
        self.expect_error(dbx.request("DELETE", "/v1/tokens/tok_0123456789abcdef"), 404, "not_found")

        self.expect_error(dbx.get(f"/v1/sandboxes/{s}", token="dbt_" + secrets.token_hex(32)), 401, "unauthorized")
        log = dbx.daemon_log_bytes()
        for sec in self.secrets_issued:
            self.assertNotIn(sec.encode(), log, "a secret appears in the daemon log")
            self.assertNotIn(sec[4:].encode(), log, "a secret's hex part appears in the daemon log")

    def test_11_metrics(self):
        self.wait_settled()
        self.dbx.get("/v1/nope")
        created = len(self.all_sandbox_ids())  # stopped ones are kept, so: every create so far
        r = self.dbx.get("/metrics")
        self.assertEqual(r.status_code, 200, describe(r))
        ctype = r.headers.get("Content-Type", "")
        self.assertTrue(ctype.startswith("text/plain"), ctype)
        self.assertIn("version=0.0.4", ctype)
        samples = parse_metrics(r.text)
        names = {n for n, _, _ in samples}

        running = self.expect(self.dbx.get("/v1/sandboxes?state=running"), 200)["sandboxes"]
        gauge = [v for n, l, v in samples if n == "deskbox_sandboxes" and l.get("state") == "running"]
        self.assertEqual(len(gauge), 1, 'one deskbox_sandboxes{state="running"} sample')
        self.assertEqual(gauge[0], len(running), "running sandboxes: the gauge and the API agree")

        buckets = [(l, v) for n, l, v in samples if n == "deskbox_create_seconds_bucket"]
        self.assertTrue(buckets, "deskbox_create_seconds_bucket")
        inf = sum(v for l, v in buckets if l.get("le") == "+Inf")
        self.assertGreaterEqual(inf, created, f"every create so far is counted ({created} sandboxes)")
        self.assertIn("deskbox_create_seconds_count", names)
        self.assertIn("deskbox_create_seconds_sum", names)

        warm = [v for n, l, v in samples if n == "deskbox_pool_size" and l.get("pool") == "warm"]
        self.assertEqual(warm, [1.0], 'deskbox_pool_size{pool="warm"} with a full warm pool of 1')

        http = [(l, v) for n, l, v in samples if n == "deskbox_http_requests_total"]
        self.assertTrue(http, "deskbox_http_requests_total")
        for labels, _ in http:
            self.assertIn("route", labels, labels)
            self.assertIn("status", labels, labels)
        self.assertTrue(any(l["status"] == "404" for l, _ in http), "404s are counted")
        self.assertTrue(any(l["status"] == "201" for l, _ in http), "201s are counted")
        for n, l, _ in samples:
            for value in l.values():
                self.assertNotRegex(value, r"sb-[0-9a-f]{16}", f"a sandbox id in a label of {n}: routes are "
                                                               "templates, not paths")

    def test_12_no_fd_leak(self):
        dbx, s = self.dbx, self.s
        self.wait_settled()
        dbx.session.close()
        time.sleep(1)
        baseline = dbx.daemon_fd_count()
        url = dbx.url
        auth = {"Authorization": f"Bearer {dbx.key}"}
        for i in range(20):
            requests.get(f"{url}/v1/sandboxes/{s}", headers=auth, timeout=30).close()
            requests.get(f"{url}/v1/nope", headers=auth, timeout=30).close()
            requests.post(f"{url}/v1/sandboxes", data=b"{", headers=auth, timeout=30).close()
            requests.get(f"{url}/v1/sandboxes", headers={"Authorization": "Bearer dbk_nope"}, timeout=30).close()
        for i in range(5):
            st = dbx.follow(f"/v1/sandboxes/{s}/events?follow=1&since=0")
            self.assertEqual(st.status, 200)
            try:
                st.next_line(timeout=10)
            except queue.Empty:
                self.fail(f"follow {i + 1} of 5: no event within 10 s of the stream's head")
            finally:
                st.close()
        for i in range(5):
            sock = socket.create_connection(("127.0.0.1", dbx.port), timeout=10)
            sock.sendall(f"POST /v1/sandboxes/{s}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {dbx.key}\r\n"
                         "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"argv\"".encode())
            sock.close()
        for i in range(5):
            sock = socket.create_connection(("127.0.0.1", dbx.port), timeout=10)
            sock.sendall(b"GET /v1/sandboxes HTT")
            sock.close()
        deadline, count = time.monotonic() + 15, None
        while time.monotonic() < deadline:
            count = dbx.daemon_fd_count()
            if count <= baseline + 2:
                break
            time.sleep(0.5)
        fds = dbx.daemon_fds()
        self.assertLessEqual(count, baseline + 2,
                             f"deskboxd holds {count} fds, {baseline} before the burst of requests: {fds}")
        self.expect(dbx.get(f"/v1/sandboxes/{s}"), 200, "still serving")

    def test_99_keys(self):
        """Runs last: it revokes every key but the deployment's own."""
        dbx = self.dbx
        r = dbx.post("/v1/keys", json={"name": "ci-one"})
        k1 = self.expect(r, 201, "create key")
        self.assertEqual(set(k1), {"id", "name", "key", "created_at"}, k1)
        self.assertRegex(k1["id"], r"^key_[0-9a-f]{16}$")
        self.assertRegex(k1["key"], r"^dbk_[0-9a-f]{64}$")
        self.assertEqual(k1["name"], "ci-one")
        self.assertRegex(k1["created_at"], TIME_RE)
        k2 = self.expect(dbx.post("/v1/keys", json={"name": "ci-two"}), 201)
        self.secrets_issued += [k1["key"], k2["key"]]

        self.expect(dbx.get("/v1/sandboxes", key=k1["key"]), 200, "a new key works")
        k3 = self.expect(dbx.post("/v1/keys", json={"name": "made-by-k2"}, key=k2["key"]), 201,
                         "a key can make keys")
        self.secrets_issued.append(k3["key"])
        created_ids = {k1["id"], k2["id"], k3["id"]}

        listed = dbx.get("/v1/keys")
        keys = self.expect(listed, 200)["keys"]
        self.assertTrue(created_ids <= {k["id"] for k in keys}, keys)
        for k in keys:
            self.assertEqual(set(k), {"id", "name", "created_at"}, f"listed keys carry no secret: {k}")
        for sec in self.secrets_issued:
            self.assertNotIn(sec, listed.text)
            self.assertNotIn(sec[4:], listed.text)
        own = [k["id"] for k in keys if k["id"] not in created_ids]
        self.assertEqual(len(own), 1, f"only the bootstrap key existed before this test: {keys}")

        self.expect_error(dbx.post("/v1/keys", json={"name": ""}), 400, "invalid_request", ["name"])
        self.expect_error(dbx.post("/v1/keys", json={"name": "n" * 65}), 400, "invalid_request", ["name"])
        self.expect_error(dbx.post("/v1/keys", json={}), 400, "invalid_request", ["name"])
        self.expect_error(dbx.request("DELETE", "/v1/keys/key_0123456789abcdef"), 404, "not_found")

        r = dbx.request("DELETE", f"/v1/keys/{k1['id']}")
        self.assertEqual(r.status_code, 204, describe(r))
        self.expect_error(dbx.get("/v1/sandboxes", key=k1["key"]), 401, "unauthorized")
        self.assertNotIn(k1["id"], [k["id"] for k in self.expect(dbx.get("/v1/keys"), 200)["keys"]])

        # Down to the deployment's own key, then it cannot be revoked.
        for k in (k2, k3):
            r = dbx.request("DELETE", f"/v1/keys/{k['id']}")
            self.assertEqual(r.status_code, 204, describe(r))
        keys = self.expect(dbx.get("/v1/keys"), 200)["keys"]
        self.assertEqual([k["id"] for k in keys], own, "only the deployment's own key is left")
        self.expect_error(dbx.request("DELETE", f"/v1/keys/{own[0]}"), 409, "last_key")
        self.expect(dbx.get("/v1/sandboxes"), 200, "the last key still works after the refused revoke")
        self.assertEqual([k["id"] for k in self.expect(dbx.get("/v1/keys"), 200)["keys"]], own)

        log = dbx.daemon_log_bytes()
        for sec in self.secrets_issued:
            self.assertNotIn(sec[4:].encode(), log, "a key or token secret appears in the daemon log")


if __name__ == "__main__":
    unittest.main()
