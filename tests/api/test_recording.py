"""Screen recording against a real guest: the sandbox's screen is recorded from create on, in
segments of fragmented MP4 that ffprobe and ffmpeg read without an error; each finished segment
is chained into the event log, and verify names a segment that was modified, removed or planted.
The replay page, in a real headless Chromium, plays the video beside the timeline, and seeking to
an action's event shows the frame that action produced (compared with a screenshot taken through
the API just after it). Also: Range and ETag, the replay scope, deletion, a recording that is
off, a deleted sandbox's recording, and a kill -9 of deskboxd in the middle of a segment."""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
import unittest
import zlib

from harness import E2E_DIR as E2E, OneSandboxTestCase, describe, require_npm_packages

FFPROBE = shutil.which("ffprobe") or "/usr/bin/ffprobe"
FFMPEG = shutil.which("ffmpeg") or "/usr/bin/ffmpeg"

# A page that is one colour, changed by each click: red, blue, red, ...
PAGE = """<!doctype html><title>rec</title>
<style>html, body { margin: 0; height: 100%; cursor: default; }</style>
<body style="background: rgb(255, 255, 255)">
<script>
  window.clicks = 0;
  addEventListener('mousedown', () => {
    window.clicks += 1;
    document.body.style.background = window.clicks % 2 ? 'rgb(230, 20, 20)' : 'rgb(20, 20, 230)';
  });
</script></body>"""
RED, BLUE = (230, 20, 20), (20, 20, 230)


def png_pixels(data, points):
    """The RGB values at `points` of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"unsupported PNG (depth {depth}, type {ctype})"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return [tuple(rows[y][x * bpp:x * bpp + 3]) for x, y in points]


def near(rgb, want, tol=60):
    return all(abs(a - b) <= tol for a, b in zip(rgb, want))


def probe(path):
    """ffprobe's view of a file, and ffmpeg's decode errors (empty when it decodes cleanly)."""
    p = subprocess.run([FFPROBE, "-v", "error", "-show_streams", "-count_frames", "-of", "json", path],
                       capture_output=True, text=True, timeout=300)
    # passthrough: frames at their own times (variable frame rate), not resampled to a guessed
    # constant rate, which makes the null muxer complain about repeated timestamps.
    d = subprocess.run([FFMPEG, "-v", "error", "-i", path, "-fps_mode", "passthrough", "-enc_time_base", "-1",
                        "-f", "null", "-"],
                       capture_output=True, text=True, timeout=300)
    info = json.loads(p.stdout or "{}")
    return info, (p.stderr + d.stderr).strip(), p.returncode | d.returncode


def run_replay(url, plan, timeout=400):
    p = subprocess.run(["node", os.path.join(E2E, "replay_client.mjs"), url, json.dumps(plan)],
                       cwd=E2E, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    if not lines:
        raise AssertionError(f"replay_client printed nothing (exit {p.returncode}): {p.stderr[-2000:]}")
    return json.loads(lines[-1])


class RecordingTest(OneSandboxTestCase):
    # Short segments and fragments, so that a test sees finished segments within seconds.
    deployment = {"extra_args": ["--recording-segment", "10", "--recording-keyframe", "1"]}

    @classmethod
    def setUpClass(cls):
        require_npm_packages()
        super().setUpClass()

    # ---- helpers --------------------------------------------------------------------------------

    def recording(self, sid=None, **kw):
        return self.expect(self.dbx.get(f"/v1/sandboxes/{sid or self.sid}/recording", **kw), 200)

    def rec_dir(self, sid=None):
        return self.dbx.daemon_state / "recordings" / (sid or self.sid)

    def wait_segments(self, predicate, what, timeout=90):
        deadline = time.time() + timeout
        while True:
            rec = self.recording()
            if predicate(rec):
                return rec
            self.assertLess(time.time(), deadline, f"{what}: {json.dumps(rec)[:1500]}")
            time.sleep(1)

    def finished(self, rec):
        return [s for s in rec["segments"] if not s["live"]]

    def replay_token(self, sid=None, status=201):
        r = self.dbx.post(f"/v1/sandboxes/{sid or self.sid}/tokens", json={"scope": "replay", "ttl_s": 600})
        return self.expect(r, status)

    def click(self, x, y):
        # Under emulation the page repaints well after the pointer's own update: a longer quiet
        # period lets the settled frame be the repainted one.
        r = self.dbx.post(f"/v1/sandboxes/{self.sid}/actions",
                          json={"actions": [{"type": "click", "x": x, "y": y}],
                                "settle": {"quiet_ms": 2500, "timeout_ms": 20000}}, timeout=120)
        return self.expect(r, 200, "click")

    def events(self, sid=None, kind=None):
        out, since = [], 0
        while True:
            page = self.expect(self.dbx.get(f"/v1/sandboxes/{sid or self.sid}/events",
                                            params={"since": since, "limit": 1000}), 200)
            out += page["events"]
            if len(page["events"]) < 1000:
                break
            since = page["next_since"]
        return [e for e in out if kind is None or e["kind"] == kind]

    def download(self, path, **kw):
        r = self.dbx.get(path, **kw)
        self.assertEqual(r.status_code, 200, describe(r))
        return r

    def verify(self, sid=None):
        return self.expect(self.dbx.get(f"/v1/sandboxes/{sid or self.sid}/events/verify", timeout=120), 200)

    # ---- tests ----------------------------------------------------------------------------------

    def test_1_the_replay_page_shows_the_frame_each_action_produced(self):
        self.open_page(PAGE)
        deadline = time.time() + 60
        while self.page.evaluate("document.hasFocus()") is not True:
            self.assertLess(time.time(), deadline, "the test page never got focus")
            time.sleep(0.2)
        info = self.expect(self.dbx.get(f"/v1/sandboxes/{self.sid}"), 200)
        w, h = info["resolution"]["width"], info["resolution"]["height"]
        # Sample away from the pointer (drawn into the frames) and below the browser's toolbar.
        points = [(w // 4, h // 2), (3 * w // 4, 2 * h // 3)]
        seqs, colours = [], []
        for i, want in enumerate([RED, BLUE, RED]):
            before = {e["seq"] for e in self.events(kind="action")}
            self.click(w // 2, h // 2 + 40 * i)
            self.assertEqual(self.page.evaluate("window.clicks"), i + 1, "the click reached the page")
            png = self.dbx.get(f"/v1/sandboxes/{self.sid}/screenshot", params={"format": "png"})
            self.assertEqual(png.status_code, 200, describe(png))
            got = png_pixels(png.content, points)
            self.assertTrue(all(near(p, want, 30) for p in got), f"screenshot after click {i}: {got}")
            colours.append(want)
            new = [e for e in self.events(kind="action") if e["seq"] not in before]
            self.assertEqual(len(new), 1, new)
            seqs.append(new[0]["seq"])
            time.sleep(1.5)
        # The clicks' fragments are on disk (a keyframe every second).
        time.sleep(2.5)
        tok = self.replay_token()
        url = f"{self.dbx.url}/v1/sandboxes/{self.sid}/replay?token={tok['token']}"
        out = run_replay(url, {"seeks": [{"seq": s, "points": points} for s in seqs]})
        self.assertEqual(out.get("status"), 200, out)
        self.assertNotIn("error", out, out)
        self.assertEqual(out["errors"], [], out)
        video = out["video"]
        self.assertIsNone(video["error"], video)
        self.assertEqual((video["width"], video["height"]), (w, h), video)
        self.assertGreater(video["advanced"], 0.5, f"the video did not play: {video}")
        for s in seqs:
            self.assertIn(s, out["events"])
            self.assertIn(s, out["rows"], "the timeline lists the test's actions")
        self.assertEqual(out["verify_ok"], "true", out)
        rec = self.recording()
        times = {e["seq"]: e["time"] for e in self.events(kind="action")}
        for seek, want in zip(out["seeks"], colours):
            self.assertTrue(all(near(p, want) for p in seek["pixels"]),
                            f"event {seek['seq']} ({times.get(seek['seq'])}) at {seek['time']:.3f} s shows "
                            f"{seek['pixels']}, not {want}; dropped {rec['dropped_frames']}, segments "
                            f"{[(s['index'], s['start_ms'], s['end_ms'], s['video_offset_ms']) for s in rec['segments']]}")
            self.assertEqual(seek["current_row"], seek["seq"], "the event sought is highlighted")

    def test_2_segments_ranges_and_etags(self):
        rec = self.wait_segments(lambda r: len(self.finished(r)) >= 1, "no finished segment")
        self.assertEqual(rec["status"], "recording", rec)
        self.assertTrue(rec["enabled"])
        self.assertGreaterEqual(self.dbx.metric_value("deskbox_recordings_active"), 1)
        self.assertGreaterEqual(self.dbx.metric_value("deskbox_recording_segments_total"), 1)
        self.assertTrue(any(s["live"] for s in rec["segments"]), "a live segment is being written")
        seg = self.finished(rec)[0]
        self.assertRegex(seg["sha256"], r"^[0-9a-f]{64}$")
        self.assertLessEqual(seg["start_ms"], seg["end_ms"])
        self.assertLessEqual(seg["end_ms"] - seg["start_ms"], 10_500, "segments last at most 10 s")
        # The segment's event holds its hash and size.
        evs = [e["recording"] for e in self.events(kind="recording") if e["recording"]["phase"] == "segment"]
        logged = {e["index"]: e for e in evs}
        self.assertEqual(logged[seg["index"]]["sha256"], seg["sha256"])
        self.assertEqual(logged[seg["index"]]["bytes"], seg["bytes"])

        body = self.download(seg["url"]).content
        self.assertEqual(len(body), seg["bytes"])
        self.assertEqual(hashlib.sha256(body).hexdigest(), seg["sha256"])

        r = self.download(f"/v1/sandboxes/{self.sid}/recording.mp4", timeout=120)
        full = r.content
        etag = r.headers["ETag"]
        self.assertEqual(r.headers["Content-Type"], "video/mp4")
        self.assertEqual(r.headers["Accept-Ranges"], "bytes")
        self.assertEqual(int(r.headers["Content-Length"]), len(full))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "all.mp4")
            with open(path, "wb") as f:
                f.write(full)
            info, errors, rc = probe(path)
            self.assertEqual((rc, errors), (0, ""), "the joined recording decodes without an error")
            stream = info["streams"][0]
            self.assertEqual(stream["codec_name"], "h264")
            self.assertGreater(int(stream["nb_read_frames"]), 1)

        # Ranges: a slice, the tail, one past the end; the ETag.
        n = len(full)
        for header, first, last in [("bytes=100-1099", 100, 1099), ("bytes=-50", n - 50, n - 1),
                                    (f"bytes={n - 10}-", n - 10, n - 1), (f"bytes=10-{n + 100}", 10, n - 1)]:
            r = self.dbx.get(f"/v1/sandboxes/{self.sid}/recording.mp4", headers={"Range": header})
            if r.headers.get("ETag") != etag:
                break  # the live segment grew meanwhile: the body changed (checked below on a segment)
            self.assertEqual(r.status_code, 206, f"{header}: {describe(r)}")
            self.assertEqual(r.headers["Content-Range"], f"bytes {first}-{last}/{n}")
            self.assertEqual(r.content, full[first:last + 1], header)
        r = self.dbx.get(seg["url"], headers={"Range": "bytes=7-19"})
        self.assertEqual((r.status_code, r.content), (206, body[7:20]))
        r = self.dbx.get(seg["url"], headers={"Range": f"bytes={len(body)}-"})
        self.expect_error(r, 416, "range_not_satisfiable")
        self.assertEqual(r.headers["Content-Range"], f"bytes */{len(body)}")
        r = self.dbx.get(seg["url"], headers={"If-None-Match": f"\"{seg['sha256'][:32]}\""})
        self.assertEqual(r.status_code, 304, describe(r))

        # Names that are not segments, segments that do not exist, sandboxes that do not exist.
        base = f"/v1/sandboxes/{self.sid}/recording/segments/"
        for name in ["0.mp4", "000000.mp4.bak", "..%2F..%2Fstate.db", "999999.mp4", "00000a.mp4", "%2e%2e"]:
            r = self.dbx.get(base + name)
            self.assertEqual(r.status_code, 404, f"{name}: {describe(r)}")
            self.assertIn("error", r.json())
        for path in ["/recording", "/recording.mp4", "/recording/segments/000000.mp4", "/events/verify",
                     "/replay", "/events/head"]:
            self.expect_error(self.dbx.get("/v1/sandboxes/sb-00000000000000aa" + path), 404, "not_found")

    def test_3_a_replay_token_reads_the_recording_and_nothing_else(self):
        tok = self.replay_token()["token"]
        base = f"/v1/sandboxes/{self.sid}"
        for path in ["/recording", "/events", "/events/verify", "/events/head", "/replay"]:
            self.expect(self.dbx.get(base + path, key=None, token=tok, timeout=120), 200)
            self.expect(self.dbx.get(base + path, key=None, query_token=tok, timeout=120), 200)
        self.assertEqual(self.dbx.get(base + "/recording.mp4", key=None, query_token=tok,
                                      headers={"Range": "bytes=0-99"}).status_code, 206)
        refused = [("GET", "/screenshot"), ("POST", "/actions"), ("GET", "/cursor"),
                   ("GET", "/cdp/json/version"), ("DELETE", "/recording"), ("POST", "/exec"),
                   ("GET", "/view"), ("POST", "/pause"), ("DELETE", "")]
        for method, path in refused:
            r = self.dbx.request(method, base + path, key=None, token=tok, json={})
            self.assertEqual(r.status_code, 403, f"{method} {path}: {describe(r)}")
        other = "/v1/sandboxes/sb-00000000000000bb/recording"
        self.expect_error(self.dbx.get(other, key=None, token=tok), 403, "forbidden")
        view = self.expect(self.dbx.post(f"{base}/tokens", json={"scope": "view"}), 201)["token"]
        self.expect_error(self.dbx.get(base + "/recording", key=None, token=view), 403, "forbidden")

    def test_4_deletion_and_tampering(self):
        self.wait_segments(lambda r: len(self.finished(r)) >= 1, "no finished segment")
        before = max(s["index"] for s in self.recording()["segments"])
        self.assertEqual(self.dbx.request("DELETE", f"/v1/sandboxes/{self.sid}/recording").status_code, 204)
        rec = self.recording()
        self.assertTrue(all(s["index"] > before for s in rec["segments"]), rec)
        deleted = [e for e in self.events(kind="recording") if e["recording"]["phase"] == "deleted"]
        self.assertTrue(deleted and deleted[-1]["recording"]["index"] > before, deleted)
        self.assertFalse(any((self.rec_dir() / f"{i:06}.mp4").exists() for i in range(before + 1)))
        # Recording goes on in a new segment.
        rec = self.wait_segments(lambda r: any(not s["live"] and s["index"] > before for s in r["segments"]),
                                 "no new segment after the deletion")
        v = self.verify()
        self.assertTrue(v["ok"], v)
        self.assertGreaterEqual(v["segments_checked"], 1)
        seg = self.finished(rec)[-1]
        path = self.rec_dir() / seg["file"]
        original = path.read_bytes()
        try:
            changed = bytearray(original)
            changed[len(changed) // 2] ^= 1
            path.write_bytes(bytes(changed))
            v = self.verify()
            self.assertFalse(v["ok"])
            self.assertIn(("segment_modified", seg["file"]), [(p["kind"], p.get("file")) for p in v["problems"]], v)
            path.unlink()
            v = self.verify()
            self.assertIn(("segment_missing", seg["file"]), [(p["kind"], p.get("file")) for p in v["problems"]], v)
            planted = self.rec_dir() / "000900.mp4"
            planted.write_bytes(original)
            path.write_bytes(original)
            v = self.verify()
            self.assertEqual([(p["kind"], p.get("file")) for p in v["problems"]], [("segment_unlisted", "000900.mp4")])
            planted.unlink()
        finally:
            path.write_bytes(original)
        self.assertTrue(self.verify()["ok"])
        head = self.expect(self.dbx.get(f"/v1/sandboxes/{self.sid}/events/head"), 200)
        self.assertRegex(head["head"], r"^[0-9a-f]{64}$")
        self.assertEqual(head["head"], self.verify()["head"])

    def test_5_kill_9_keeps_what_was_recorded(self):
        rec = self.wait_segments(lambda r: any(s["live"] and s["bytes"] > 0 for s in r["segments"]),
                                 "no live segment with data")
        live = [s for s in rec["segments"] if s["live"]][0]
        time.sleep(2.5)  # a fragment or two of it on disk
        self.dbx.kill9_daemon()
        self.dbx.start_daemon()
        self.wait_state(self.sid, "running", 120)
        rec = self.wait_segments(
            lambda r: any(s["index"] == live["index"] and not s["live"] for s in r["segments"])
            and any(s["index"] > live["index"] for s in r["segments"]),
            "the interrupted segment is not listed, or recording did not go on")
        cut = [s for s in rec["segments"] if s["index"] == live["index"]][0]
        self.assertTrue(cut["truncated"], cut)
        self.assertGreater(cut["bytes"], 0)
        self.assertEqual(cut["start_ms"], live["start_ms"])
        info, errors, rc = probe(str(self.rec_dir() / cut["file"]))
        self.assertEqual((rc, errors), (0, ""), "the cut segment decodes without an error")
        self.assertGreater(int(info["streams"][0]["nb_read_frames"]), 0)
        v = self.verify()
        self.assertTrue(v["ok"], v)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "all.mp4")
            with open(p, "wb") as f:
                f.write(self.download(f"/v1/sandboxes/{self.sid}/recording.mp4", timeout=120).content)
            _, errors, rc = probe(p)
            self.assertEqual((rc, errors), (0, ""))

    def test_5b_a_pause_ends_the_segment_and_a_resume_starts_the_next(self):
        rec = self.wait_segments(lambda r: any(s["live"] for s in r["segments"]), "no live segment")
        self.expect(self.dbx.post(f"/v1/sandboxes/{self.sid}/pause", timeout=120), 200)
        # The segment being written at the pause is finished and listed (or a new one had just
        # begun: then that one).
        live = max(s["index"] for s in rec["segments"])
        rec = self.wait_segments(lambda r: not any(s["live"] for s in r["segments"])
                                 and max(s["index"] for s in r["segments"]) >= live,
                                 "the segment being written did not end at the pause")
        self.assertEqual(rec["status"], "paused")
        last = max(rec["segments"], key=lambda s: s["index"])
        time.sleep(3)
        self.expect(self.dbx.post(f"/v1/sandboxes/{self.sid}/resume", timeout=120), 200)
        rec = self.wait_segments(lambda r: any(s["live"] and s["index"] > last["index"] for s in r["segments"]),
                                 "recording did not go on after the resume")
        self.assertEqual(rec["status"], "recording")
        nxt = [s for s in rec["segments"] if s["index"] > last["index"]][0]
        self.assertGreaterEqual(nxt["start_ms"] - last["end_ms"], 2500, "the pause is a gap in the video")
        self.assertEqual(nxt["video_offset_ms"], last["video_offset_ms"] + last["end_ms"] - last["start_ms"])

    def test_6_off_per_sandbox_and_kept_after_delete(self):
        off = self.expect(self.dbx.post("/v1/sandboxes", json={"recording": {"enabled": False}}, timeout=300), 201)
        try:
            self.assertEqual(off["recording"]["enabled"], False)
            time.sleep(3)
            rec = self.recording(sid=off["id"])
            self.assertEqual((rec["status"], rec["segments"]), ("disabled", []))
            self.expect_error(self.dbx.get(f"/v1/sandboxes/{off['id']}/recording.mp4"), 404, "not_found")
            self.assertFalse(self.rec_dir(off["id"]).exists())
        finally:
            self.delete_sandbox(off["id"])
        self.replay_token(sid=off["id"], status=409)  # nothing kept to replay
        self.expect_error(self.dbx.post("/v1/sandboxes", json={"recording": {"enabled": "no"}}), 400,
                          "invalid_request", mentions=["enabled"])
        self.expect_error(self.dbx.post("/v1/sandboxes", json={"recording": {"on": True}}), 400,
                          "invalid_request", mentions=["on"])

        # The class's sandbox, deleted: its recording stays readable with a replay token.
        self.delete_sandbox(self.sid)
        rec = self.recording()
        self.assertEqual(rec["status"], "stopped")
        self.assertTrue(rec["segments"] and not any(s["live"] for s in rec["segments"]), rec)
        tok = self.replay_token()["token"]
        r = self.dbx.get(f"/v1/sandboxes/{self.sid}/recording.mp4", key=None, query_token=tok, timeout=120)
        self.assertEqual(r.status_code, 200, describe(r))
        self.assertTrue(self.verify()["ok"])


if __name__ == "__main__":
    unittest.main()
