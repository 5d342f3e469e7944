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

  desktop_bench.py [--shots N] [--clicks N] [--frames N] [--viewers N] [--idle-clicks N]
"""

import argparse
import base64
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import zlib

from benchlib import Deskbox, pct, wait_quiet, wait_warm

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


def stats(values):
    return f"p50 {pct(values, 0.5):8.2f} ms  p90 {pct(values, 0.9):8.2f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shots", type=int, default=30)
    ap.add_argument("--clicks", type=int, default=15, help="typed characters, pointer moves and clicks")
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--viewers", type=int, default=20)
    ap.add_argument("--idle-clicks", type=int, default=3, help="clicks each after an idle trim (about 70 s each)")
    args = ap.parse_args()
    with Deskbox(warm_pool=1) as dbx:
        sid = dbx.post("/v1/sandboxes", json={}, timeout=300).json()["id"]
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

        # Screenshots.
        res = {}
        for fmt in ("jpeg", "png"):
            t = []
            for _ in range(args.shots):
                t0 = time.perf_counter()
                r = dbx.get(f"/v1/sandboxes/{sid}/screenshot", params={"format": fmt})
                t.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
            res[fmt] = t
        cdp = []
        for _ in range(max(5, args.shots // 3)):
            t0 = time.perf_counter()
            data = page.command("Page.captureScreenshot", {"format": "png"})["data"]
            cdp.append((time.perf_counter() - t0) * 1000)
            assert base64.b64decode(data)[:4] == b"\x89PNG"
        print(f"screenshot {w}x{h}, {args.shots} per format through the API (client to client)")
        print(f"  mirror JPEG q80                 {stats(res['jpeg'])}")
        print(f"  mirror PNG                      {stats(res['png'])}")
        print(f"  CDP Page.captureScreenshot PNG  {stats(cdp)}   (baseline)")
        print(f"  ratio CDP / mirror PNG  {pct(cdp, 0.5) / pct(res['png'], 0.5):7.1f}x   "
              f"CDP / mirror JPEG {pct(cdp, 0.5) / pct(res['jpeg'], 0.5):7.1f}x   (target: >= 10x)")

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
        alone = shots(args.shots)
        view = dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": "view"}).json()["token"]
        viewers = [Viewer(dbx.port, f"/v1/sandboxes/{sid}/vnc?token={view}") for _ in range(args.viewers)]
        for v in viewers:
            v.start()
        # The update rate is counted over the last 8 s of watching and the screenshots after them
        # (the screenshots alone can take less than one update interval).
        time.sleep(2)
        u0 = sum(v.updates for v in viewers)
        t0 = time.perf_counter()
        time.sleep(8)
        watched = shots(args.shots)
        secs = time.perf_counter() - t0
        rate = (sum(v.updates for v in viewers) - u0) / secs / max(1, len(viewers))
        mib = sum(v.bytes for v in viewers) / 2**20
        for v in viewers:
            v.stop.set()
        for v in viewers:
            v.join(timeout=30)
        failed = [v.error for v in viewers if v.error]
        print(f"agent screenshots (JPEG) while {args.viewers} viewers watch a changing screen")
        print(f"  no viewers (baseline)            {stats(alone)}")
        print(f"  {args.viewers} viewers                      {stats(watched)}")
        print(f"  ratio with / without  {pct(watched, 0.5) / pct(alone, 0.5):6.2f}x   (target: <= 1.20x)   "
              f"{rate:.1f} updates/s per viewer, {mib:.1f} MiB relayed, {len(failed)} viewers failed"
              + (f" ({failed[0]})" if failed else ""))

        # Raw against ZRLE from the guest's Xvnc.
        netns = [n for n in dbx.netns_names() if dbx.netns_slot(n) is not None]
        owned = None
        for n in netns:
            try:
                out = subprocess.run(["ip", "netns", "exec", n, "python3", "-c", RFB_PROBE, "0", "1"],
                                     capture_output=True, text=True, timeout=60)
                if out.returncode == 0:
                    owned = n
                    break
            except subprocess.TimeoutExpired:
                pass
        if owned:
            rows = {}
            for name, enc in (("Raw", 0), ("ZRLE", 16)):
                out = subprocess.run(["ip", "netns", "exec", owned, "python3", "-c", RFB_PROBE, str(enc), str(args.frames)],
                                     capture_output=True, text=True, timeout=300)
                rows[name] = [float(x) for x in out.stdout.split()] if out.returncode == 0 else []
            if rows["Raw"] and rows["ZRLE"]:
                print(f"full-screen update {w}x{h} from the guest's Xvnc, {args.frames} each")
                print(f"  Raw (the mirror's encoding)      {stats(rows['Raw'])}")
                print(f"  ZRLE (baseline)                  {stats(rows['ZRLE'])}")
                print(f"  ratio ZRLE / Raw  {pct(rows['ZRLE'], 0.5) / pct(rows['Raw'], 0.5):6.2f}x")
        page.close()
        dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)


if __name__ == "__main__":
    main()
