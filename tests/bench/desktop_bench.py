#!/usr/bin/env python3
"""Desktop benchmarks on one real sandbox, each against a baseline measured in the same run:

  - screenshot 1280x800 (the sandbox's screen) from the mirror, JPEG and PNG, through the API,
    against CDP Page.captureScreenshot of the same page (through deskboxd's CDP proxy);
  - input → changed pixels: a typed character appearing in a focused text field, from the input
    leaving deskboxd to the first update the mirror receives (the actions answer's
    first_change_ms), beside a pointer move of a few pixels (the pointer is drawn into the
    framebuffer), the cheapest change the guest can show, and a click on a button whose label
    changes; then the same click after the sandbox idled, with no client connected, until its
    translation cache was trimmed;
  - the agent's screenshots while N live viewers (/vnc, as noVNC uses it) watch a changing
    screen, against the same screenshots with no viewer;
  - a full-screen update from the guest's Xvnc in Raw (what the mirror asks for) against ZRLE
    (what a compressing client would ask for), from inside the sandbox's netns.

Targets checked in CI, same-run ratios and correctness: CDP / mirror screenshot >= 10x (PNG and
JPEG), agent screenshots with viewers / without <= 1.20x and no viewer failed, every typed
character in the field and every click counted by the page. With --long-run also the absolute
times on a quiet host: typed character and click -> pixels p50 <= 100 ms, mirror JPEG p50 <= 8 ms,
PNG p50 <= 20 ms. Raw against ZRLE has no target: both are figures, measured in rounds that
alternate (Raw, ZRLE, ZRLE, Raw, ...) so that neither always goes first.

  desktop_bench.py [--shots N] [--clicks N] [--frames N] [--rfb-rounds N] [--viewers N]
                   [--idle-clicks N] [--rfb-only] [--out FILE] [--long-run]
      --rfb-only: only Raw against ZRLE (the page loaded, nothing else measured)
      --out: figures and targets as JSON
"""

import argparse
import base64
import multiprocessing
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import zlib

from benchlib import LONG_RUN_HELP, Deskbox, Results, pct, wait_quiet, wait_warm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from wsclient import CdpPage, ws_connect  # noqa: E402

PAGE = """<!doctype html><title>bench</title>
<style>body{margin:0;font:24px sans-serif;background:#fff} p{margin:20px}
#f{position:fixed;left:20px;top:40vh;width:60vw;font-size:32px}</style>
<p>deskbox desktop benchmark: the quick brown fox jumps over the lazy dog 0123456789</p>
<input id="f" autocomplete="off">
<button id="b" style="position:fixed;left:20px;top:60vh;width:320px;height:80px;font-size:28px"
 onclick="this.textContent = 'clicked ' + (++window.n)">click me</button>
<script>window.n = 0;
addEventListener('mousemove', e => { window.off = [e.screenX - e.clientX, e.screenY - e.clientY]; });</script>"""

# Runs in the sandbox's netns: one full-screen update in the given encoding, timed.
RFB_PROBE = r"""
import socket, struct, sys, time
enc, n = int(sys.argv[1]), int(sys.argv[2])
def rd(s, k):
    b = b""
    while len(b) < k:
        c = s.recv(k - len(b))
        if not c: raise EOFError
        b += c
    return b
s = socket.create_connection(("10.88.0.2", 5900), timeout=30)
rd(s, 12); s.sendall(b"RFB 003.008\n")
k = rd(s, 1)[0]; rd(s, k); s.sendall(b"\x01"); rd(s, 4); s.sendall(b"\x01")
init = rd(s, 24); w, h = struct.unpack(">HH", init[:4]); rd(s, struct.unpack(">I", init[20:24])[0])
s.sendall(b"\x00\x00\x00\x00" + bytes([32, 24, 0, 1]) + struct.pack(">HHHBBB", 255, 255, 255, 16, 8, 0) + b"\x00\x00\x00")
s.sendall(struct.pack(">BBHi", 2, 0, 1, enc))
times = []
for i in range(n):
    t0 = time.perf_counter()
    s.sendall(struct.pack(">BBHHHH", 3, 0, 0, 0, w, h))
    while True:
        t = rd(s, 1)[0]
        if t == 0: break
        if t == 2: continue
        if t == 3: rd(s, 3); rd(s, struct.unpack(">I", rd(s, 4))[0]); continue
        raise SystemExit("unexpected message %d" % t)
    count = struct.unpack(">xH", rd(s, 3))[0]
    for _ in range(count):
        x, y, rw, rh, e = struct.unpack(">HHHHi", rd(s, 12))
        if e == 0: rd(s, rw * rh * 4)
        elif e == 16: rd(s, struct.unpack(">I", rd(s, 4))[0])
        else: raise SystemExit("encoding %d" % e)
    times.append((time.perf_counter() - t0) * 1000)
print(" ".join("%.2f" % t for t in times))
"""


class Viewer(threading.Thread):
    """A live-view client on /vnc: asks for incremental updates as fast as it reads them (ZRLE,
    as noVNC would), skipping the pixels. Counts updates and bytes until stopped."""

    def __init__(self, port, path):
        super().__init__(daemon=True)
        self.port, self.path = port, path
        self.updates = self.bytes = 0
        self.error = None
        self.stop = threading.Event()

    def run(self):
        try:
            ans = ws_connect(self.port, self.path, None, timeout=30)
            if ans.status_code != 101:
                raise RuntimeError(f"/vnc answered {ans.status_code}")
            ws, buf = ans.ws, [b""]

            def rd(n):
                while len(buf[0]) < n:
                    op, payload = ws.read_message()
                    if op == 0x8:
                        raise EOFError("closed")
                    buf[0] += payload
                    self.bytes += len(payload)
                out, buf[0] = buf[0][:n], buf[0][n:]
                return out

            def send(b):
                ws.send(0x2, b)

            rd(12); send(b"RFB 003.008\n")
            n = rd(1)[0]
            if n == 0:  # refused; the reason follows
                raise RuntimeError("refused: " + rd(struct.unpack(">I", rd(4))[0]).decode(errors="replace"))
            rd(n); send(b"\x01"); rd(4); send(b"\x01")
            init = rd(24); w, h = struct.unpack(">HH", init[:4]); rd(struct.unpack(">I", init[20:24])[0])
            send(struct.pack(">BxH", 2, 3) + struct.pack(">iii", 16, 1, 0))
            incremental = 0
            while not self.stop.is_set():
                send(struct.pack(">BBHHHH", 3, incremental, 0, 0, w, h))
                incremental = 1
                while True:
                    t = rd(1)[0]
                    if t == 0:
                        break
                    if t == 2:
                        continue
                    if t == 3:
                        rd(3); rd(struct.unpack(">I", rd(4))[0]); continue
                    raise RuntimeError(f"message type {t}")
                for _ in range(struct.unpack(">xH", rd(3))[0]):
                    x, y, rw, rh, e = struct.unpack(">HHHHi", rd(12))
                    if e == 0: rd(rw * rh * 4)
                    elif e == 1: rd(4)
                    elif e == 16: rd(struct.unpack(">I", rd(4))[0])
                    else: raise RuntimeError(f"encoding {e}")
                self.updates += 1
            ws.close()
        except Exception as e:  # noqa: BLE001 - reported by the bench
            self.error = str(e)


def viewer_group(port, path, n, conn):
    """Runs in a child process: n Viewer threads, answering the parent's "count" with the updates
    so far and its "stop" with (updates, bytes, errors) once every viewer has ended."""
    viewers = [Viewer(port, path) for _ in range(n)]
    for v in viewers:
        v.start()
    while True:
        cmd = conn.recv()
        if cmd == "count":
            conn.send(sum(v.updates for v in viewers))
            continue
        for v in viewers:
            v.stop.set()
        for v in viewers:
            v.join(timeout=30)
        conn.send((sum(v.updates for v in viewers), sum(v.bytes for v in viewers),
                   [v.error or "did not end" for v in viewers if v.error or v.is_alive()]))
        return


def stats(values):
    return f"p50 {pct(values, 0.5):8.2f} ms  p90 {pct(values, 0.9):8.2f} ms"


def measure_rfb(dbx, args, owned, w, h, res):
    """One full-screen update from the guest's Xvnc in Raw and in ZRLE, read from inside the
    sandbox's netns (`owned`), in alternating rounds of --frames each."""
    rows = {"Raw": [], "ZRLE": []}
    order = [("Raw", 0), ("ZRLE", 16)]
    for rnd in range(max(1, args.rfb_rounds)):
        for name, enc in (order if rnd % 2 == 0 else order[::-1]):
            out = subprocess.run(["ip", "netns", "exec", owned, "python3", "-c", RFB_PROBE, str(enc), str(args.frames)],
                                 capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                print(f"full-screen update in {name}: the probe failed: {out.stderr[-300:]}")
                res.figure("rfb_error", f"{name}: {out.stderr[-300:]}")
                return
            rows[name] += [float(x) for x in out.stdout.split()]
    raw, zrle = pct(rows["Raw"], 0.5), pct(rows["ZRLE"], 0.5)
    print(f"full-screen update {w}x{h} from the guest's Xvnc, {len(rows['Raw'])} each "
          f"({args.rfb_rounds} alternating rounds of {args.frames})")
    print(f"  Raw (the mirror's encoding)      {stats(rows['Raw'])}")
    print(f"  ZRLE (baseline)                  {stats(rows['ZRLE'])}")
    print(f"  ratio ZRLE / Raw  {zrle / raw:6.2f}x")
    res.figure("rfb_raw_ms", [round(x, 2) for x in rows["Raw"]])
    res.figure("rfb_zrle_ms", [round(x, 2) for x in rows["ZRLE"]])
    res.figure("rfb_raw_p50_ms", raw)
    res.figure("rfb_raw_p90_ms", pct(rows["Raw"], 0.9))
    res.figure("rfb_zrle_p50_ms", zrle)
    res.figure("rfb_zrle_p90_ms", pct(rows["ZRLE"], 0.9))
    res.figure("rfb_zrle_over_raw", zrle / raw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shots", type=int, default=30)
    ap.add_argument("--clicks", type=int, default=15, help="typed characters, pointer moves and clicks")
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--viewers", type=int, default=20)
    ap.add_argument("--idle-clicks", type=int, default=3, help="clicks each after an idle trim (about 70 s each)")
    ap.add_argument("--rfb-rounds", type=int, default=2, help="alternating Raw/ZRLE rounds of --frames each")
    ap.add_argument("--rfb-only", action="store_true", help="measure only Raw against ZRLE")
    ap.add_argument("--out", help="figures and targets as JSON")
    ap.add_argument("--long-run", action="store_true", help=LONG_RUN_HELP)
    args = ap.parse_args()
    res = Results("desktop_bench", args, args.long_run)
    with Deskbox(warm_pool=1) as dbx:
        res.template = dbx.template
        sid = dbx.post("/v1/sandboxes", json={}, timeout=300).json()["id"]
        # The sandbox's QEMU is the one started first (the pool's refill starts after the hand-out):
        # Raw against ZRLE is read from its netns, so from the screen the benchmark drew.
        qemus = dbx.qemu_processes()
        owned = f"{dbx.netns_prefix}{qemus[min(qemus, key=dbx.process_start_ticks)]}"
        # The pool refills after the create: measure on a quiet host.
        wait_warm(dbx, 1)
        wait_quiet(0.7, timeout=120)
        base = f"/v1/sandboxes/{sid}/cdp"
        target = dbx.request("PUT", base + "/json/new", params={"url": "data:text/html," + urllib.parse.quote(PAGE)}).json()
        dbx.get(f"{base}/json/activate/{target['id']}")
        page = CdpPage(dbx.port, sid, target["id"], dbx.key)
        while page.evaluate("document.readyState") != "complete":
            time.sleep(0.2)
        wait_quiet(0.7, timeout=60)
        shot = dbx.get(f"/v1/sandboxes/{sid}/screenshot")  # connects the mirror
        w, h = int(shot.headers["X-Screen-Width"]), int(shot.headers["X-Screen-Height"])
        res.figure("screen", f"{w}x{h}")
        if args.rfb_only:
            measure_rfb(dbx, args, owned, w, h, res)
            page.close()
            dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
            raise SystemExit(res.finish(args.out))

        # Screenshots.
        shot_ms = {}
        for fmt in ("jpeg", "png"):
            t = []
            for _ in range(args.shots):
                t0 = time.perf_counter()
                r = dbx.get(f"/v1/sandboxes/{sid}/screenshot", params={"format": fmt})
                t.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
            shot_ms[fmt] = t
        cdp = []
        for _ in range(max(5, args.shots // 3)):
            t0 = time.perf_counter()
            data = page.command("Page.captureScreenshot", {"format": "png"})["data"]
            cdp.append((time.perf_counter() - t0) * 1000)
            assert base64.b64decode(data)[:4] == b"\x89PNG"
        print(f"screenshot {w}x{h}, {args.shots} per format through the API (client to client)")
        print(f"  mirror JPEG q80                 {stats(shot_ms['jpeg'])}")
        print(f"  mirror PNG                      {stats(shot_ms['png'])}")
        print(f"  CDP Page.captureScreenshot PNG  {stats(cdp)}   (baseline)")
        print(f"  ratio CDP / mirror PNG  {pct(cdp, 0.5) / pct(shot_ms['png'], 0.5):7.1f}x   "
              f"CDP / mirror JPEG {pct(cdp, 0.5) / pct(shot_ms['jpeg'], 0.5):7.1f}x   (target: >= 10x)")
        for fmt, t in (("jpeg", shot_ms["jpeg"]), ("png", shot_ms["png"]), ("cdp_png", cdp)):
            res.figure(f"screenshot_{fmt}_p50_ms", pct(t, 0.5))
            res.figure(f"screenshot_{fmt}_p90_ms", pct(t, 0.9))
        res.target("cdp_over_mirror_png", pct(cdp, 0.5) / pct(shot_ms["png"], 0.5), ">=", 10, unit="x")
        res.target("cdp_over_mirror_jpeg", pct(cdp, 0.5) / pct(shot_ms["jpeg"], 0.5), ">=", 10, unit="x")
        res.target("screenshot_jpeg_p50_ms", pct(shot_ms["jpeg"], 0.5), "<=", 8, kind="absolute", unit=" ms")
        res.target("screenshot_png_p50_ms", pct(shot_ms["png"], 0.5), "<=", 20, kind="absolute", unit=" ms")

        # Input → changed pixels.
        page.evaluate("document.getElementById('f').focus()")
        keys, moves = [], []
        for i in range(args.clicks):
            r = dbx.post(f"/v1/sandboxes/{sid}/actions", json={
                "actions": [{"type": "type", "text": "abcdefghij"[i % 10]}], "settle": {"quiet_ms": 100}}).json()
            if r.get("first_change_ms") is not None:
                keys.append(r["first_change_ms"])
            r = dbx.post(f"/v1/sandboxes/{sid}/actions", json={
                "actions": [{"type": "move", "x": w // 2 + 8 * (i % 2), "y": h // 2}],
                "settle": {"quiet_ms": 50, "no_change_ms": 1000}}).json()
            if r.get("first_change_ms") is not None:
                moves.append(r["first_change_ms"])
        # Clicks on a button whose label changes, the pointer already on it (one click first
        # brings it there, so the cursor's move is not what is measured).
        off = page.evaluate("window.off")
        b = page.evaluate("(() => { const r = document.getElementById('b').getBoundingClientRect();"
                          " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        bx, by = int(b[0] + off[0]), int(b[1] + off[1])
        dbx.post(f"/v1/sandboxes/{sid}/actions", json={"actions": [{"type": "click", "x": bx, "y": by}]})
        clicks = []
        for i in range(args.clicks):
            r = dbx.post(f"/v1/sandboxes/{sid}/actions", json={
                "actions": [{"type": "click", "x": bx, "y": by}], "settle": {"quiet_ms": 100}}).json()
            if r.get("first_change_ms") is not None:
                clicks.append(r["first_change_ms"])
        clicked = page.evaluate("window.n")
        typed = page.evaluate("document.getElementById('f').value")
        print(f"input -> first changed pixels in the mirror, {args.clicks} of each")
        print(f"  typed character in a text field  p50 {pct(keys, 0.5):6.0f} ms  p90 {pct(keys, 0.9):6.0f} ms"
              f"   (target: p50 <= 100 ms)   {len(keys)}/{args.clicks} changed, field has {len(typed)} characters")
        print(f"  pointer move                     p50 {pct(moves, 0.5):6.0f} ms  p90 {pct(moves, 0.9):6.0f} ms"
              f"   {len(moves)}/{args.clicks} changed")
        print(f"  click on a button                p50 {pct(clicks, 0.5):6.0f} ms  p90 {pct(clicks, 0.9):6.0f} ms"
              f"   {len(clicks)}/{args.clicks} changed, the page counted {clicked} of {args.clicks + 1} clicks")
        for name, t in (("typed", keys), ("pointer_move", moves), ("click", clicks)):
            res.figure(f"{name}_to_pixels_p50_ms", pct(t, 0.5))
            res.figure(f"{name}_to_pixels_p90_ms", pct(t, 0.9))
            res.figure(f"{name}_changed", len(t))
        res.figure("inputs_each", args.clicks)
        res.target("typed_characters_in_field", len(typed), "==", args.clicks, kind="correctness")
        res.target("clicks_counted_by_page", clicked, "==", args.clicks + 1, kind="correctness")
        res.target("typed_to_pixels_p50_ms", pct(keys, 0.5), "<=", 100, kind="absolute", unit=" ms")
        res.target("click_to_pixels_p50_ms", pct(clicks, 0.5), "<=", 100, kind="absolute", unit=" ms")

        # The same click once the sandbox has idled long enough to have its translation cache
        # handed back (deskboxd --trim-idle-after, 60 s by default): the guest translates again
        # what the click runs. What a user pays, once per idle spell, for the memory.
        # No client may stay connected meanwhile (a sandbox with a CDP session is not trimmed):
        # the page's session closes, and opens again afterwards.
        idle_clicks = []
        if args.idle_clicks > 0:
            page.close()
        for i in range(args.idle_clicks):
            if i > 0:
                # Work for 6 s first: a busy spell makes the next trim a full one (a sandbox
                # that stayed idle is trimmed again only once its cache passes the mark).
                dbx.post(f"/v1/sandboxes/{sid}/exec", json={
                    "shell": "timeout 6 sh -c 'while :; do :; done' || true", "timeout_s": 30}, timeout=60)
            before = dbx.metric_value("deskbox_translation_cache_trims_total") or 0
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and (dbx.metric_value("deskbox_translation_cache_trims_total") or 0) <= before:
                time.sleep(1)
            if (dbx.metric_value("deskbox_translation_cache_trims_total") or 0) <= before:
                print("  click after an idle trim: the sandbox was not trimmed within 150 s")
                res.figure("idle_trim_error", "the sandbox was not trimmed within 150 s")
                break
            time.sleep(2)  # the trim itself happens when a vCPU next idles
            r = dbx.post(f"/v1/sandboxes/{sid}/actions", json={
                "actions": [{"type": "click", "x": bx, "y": by}], "settle": {"quiet_ms": 100}}).json()
            if r.get("first_change_ms") is not None:
                idle_clicks.append(r["first_change_ms"])
        if args.idle_clicks > 0:
            page = CdpPage(dbx.port, sid, target["id"], dbx.key)
        if idle_clicks:
            print(f"  click after an idle trim         p50 {pct(idle_clicks, 0.5):6.0f} ms  max {max(idle_clicks):6.0f} ms"
                  f"   {len(idle_clicks)}/{args.idle_clicks} changed; ratio to the click above "
                  f"{pct(idle_clicks, 0.5) / pct(clicks, 0.5):.1f}x")
            res.figure("idle_click_to_pixels_p50_ms", pct(idle_clicks, 0.5))
            res.figure("idle_click_to_pixels_max_ms", max(idle_clicks))
            res.figure("idle_click_changed", len(idle_clicks))
            res.figure("idle_click_over_click", pct(idle_clicks, 0.5) / pct(clicks, 0.5))

        # Live viewers: the agent's screenshots with none, then with --viewers watching a screen
        # that changes (a moving box) and asking for every update.
        page.evaluate("(() => { const b = document.createElement('div'); b.id = 'mv';"
                      " b.style.cssText = 'position:fixed;left:0;top:75vh;width:80px;height:40px;background:#36c';"
                      " document.body.append(b); let x = 0;"
                      " setInterval(() => { x = (x + 16) % 1000; b.style.left = x + 'px'; }, 100); })()")
        time.sleep(2)

        def shots(n):
            t = []
            for _ in range(n):
                t0 = time.perf_counter()
                r = dbx.get(f"/v1/sandboxes/{sid}/screenshot", params={"format": "jpeg"})
                t.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
            return t
        # Alone and watched in alternating rounds (alone first, then watched first), a few
        # screenshots each, so that a change in the host's load during the run weighs on both
        # sides: measured one after the other, 20 and 20, the ratio read 0.63x, 0.90x and 1.41x
        # in three CI runs of the same code.
        view = dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": "view"}).json()["token"]
        rounds = 4
        per_round = max(5, args.shots // 2)
        alone, watched, failed = [], [], []
        updates, watch_secs, mib = 0, 0.0, 0.0

        # The viewers read in a process of their own: as threads of this one they held the
        # interpreter's lock for up to its 5 ms switch interval while a screenshot's answer
        # waited, which timed the client, not deskboxd (ratios of 1.27x and 1.41x in CI).
        ctx = multiprocessing.get_context("fork")

        def watch(n):
            nonlocal updates, watch_secs, mib
            here, there = ctx.Pipe()
            proc = ctx.Process(target=viewer_group, daemon=True,
                               args=(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={view}", args.viewers, there))
            proc.start()
            try:
                # The update rate is counted over 3 s of watching and the screenshots after them
                # (the screenshots alone can take less than one update interval).
                time.sleep(2)
                here.send("count")
                u0 = here.recv()
                t0 = time.perf_counter()
                time.sleep(3)
                watched.extend(shots(n))
                watch_secs += time.perf_counter() - t0
                here.send("stop")
                if not here.poll(60):
                    raise RuntimeError("the viewers did not stop within 60 s")
                total, nbytes, errors = here.recv()
            finally:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            updates += total - u0
            mib += nbytes / 2**20
            failed.extend(errors)

        for i in range(rounds):
            if i % 2 == 0:
                alone.extend(shots(per_round))
                watch(per_round)
            else:
                watch(per_round)
                alone.extend(shots(per_round))
        rate = updates / watch_secs / max(1, args.viewers)
        print(f"agent screenshots (JPEG) while {args.viewers} viewers watch a changing screen"
              f" ({rounds} alternating rounds of {per_round})")
        print(f"  no viewers (baseline)            {stats(alone)}")
        print(f"  {args.viewers} viewers                      {stats(watched)}")
        print(f"  ratio with / without  {pct(watched, 0.5) / pct(alone, 0.5):6.2f}x   (target: <= 1.20x)   "
              f"{rate:.1f} updates/s per viewer, {mib:.1f} MiB relayed, {len(failed)} viewers failed"
              + (f" ({failed[0]})" if failed else ""))
        res.figure("viewers", args.viewers)
        res.figure("agent_shot_alone_p50_ms", pct(alone, 0.5))
        res.figure("agent_shot_alone_p90_ms", pct(alone, 0.9))
        res.figure("agent_shot_watched_p50_ms", pct(watched, 0.5))
        res.figure("agent_shot_watched_p90_ms", pct(watched, 0.9))
        res.figure("viewer_updates_per_s", rate)
        res.figure("viewer_mib_relayed", mib)
        res.target("watched_over_alone", pct(watched, 0.5) / pct(alone, 0.5), "<=", 1.2, unit="x")
        res.target("viewers_failed", len(failed), "==", 0, kind="correctness")

        # Raw against ZRLE from the guest's Xvnc.
        measure_rfb(dbx, args, owned, w, h, res)
        page.close()
        dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
    raise SystemExit(res.finish(args.out))


if __name__ == "__main__":
    main()
