#!/usr/bin/env python3
"""Screen recording with real guests: what recording costs deskboxd, the agent and the host's
memory. One deployment (no pools, a short --trim-idle-after); sandboxes created one after the
other, first with `{"recording": {"enabled": false}}` (the baseline), then recorded, each put
through the same steps on the same page (a text field, a button, a long article):

  - deskboxd's CPU (/proc/PID/stat utime + stime) over a window of scrolling (scroll actions,
    the motion phase), of typing (`type` actions into the focused field, in a loop) and of a
    still screen, recorded less not recorded, per sandbox; the sandboxes' QEMUs beside it, and
    deskboxd's CPU per screen update the mirror took (the guest's frame rate under emulation
    varies between runs). The recorded sandbox's windows have the other one idle beside it;
  - then, both sandboxes running, taking turns: screenshot latency (GET /screenshot, JPEG) and
    a click action's latency on a button whose label changes (the call, and the actions
    answer's first_change_ms), recorded / not;
  - idle PSS (QEMU's /proc/PID/smaps) of a new pair made at once (same age), after 6 s of work in
    each and then an idle spell past --trim-after, averaged over --pss-seconds once both were
    trimmed (translation cache, guest RAM and the rest shown apart): the recorder must not be
    activity that holds off the idle trimming of the translation cache;
  - from the recording itself (GET /recording, the downloaded recording.mp4's packets through
    ffprobe, each window mapped to video time by its segments): frames and bytes in each
    window, so bytes per hour for a still screen, for typing and for scrolling, and the frame
    rate delivered while scrolling beside the updates the screen mirror received (X-Frame-Seq).

With --sandboxes N (the long run: scripts/long-run) each group is N sandboxes at once, and only
the still and typing CPU and the recordings are measured. Under TCG N guests share 2 cores:
every wait is bounded.

Prints the figures and ratios, writes them as JSON (--out), exits 1 when a target is missed:
recorder CPU per sandbox <= 0.5% of a core (still) and <= 3% (typing); screenshot and click
recorded / not <= 1.1x; idle PSS recorded / not <= 1.1x with both trimmed; every recording's
status `recording`. Exits 2 when the run itself failed (the figures so far are written).

  recording_bench.py [--window S] [--motion S] [--shots N] [--clicks N] [--trim-after S]
                     [--sandboxes N] [--save DIR] [--out FILE]
  --save DIR: two PNG screenshots of the page (for recording_encode_bench --screens) and each
              recorded sandbox's recording.mp4, to look at
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

import requests

from benchlib import Deskbox, pct, wait_quiet

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from wsclient import CdpPage  # noqa: E402

FFPROBE = shutil.which("ffprobe") or "/usr/bin/ffprobe"
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGETS = {"still_cpu": 0.005, "typing_cpu": 0.03, "screenshot_ratio": 1.1, "click_ratio": 1.1, "pss_ratio": 1.1}

# A text field and a button in a fixed bar, over a long article to scroll (made in the page, so
# that the data: URL stays short).
PAGE = """<!doctype html><title>recording bench</title>
<style>body{margin:0;font:18px/1.5 sans-serif;color:#222;background:#fff}
#bar{position:fixed;left:0;top:0;right:0;height:110px;background:#f3f4f6;border-bottom:1px solid #ccc}
#f{position:absolute;left:20px;top:30px;width:58vw;font-size:28px}
#b{position:absolute;right:30px;top:15px;width:260px;height:80px;font-size:24px}
main{padding:130px 60px 40px;max-width:900px} h2{margin:28px 0 8px} p{margin:0 0 12px}</style>
<div id="bar"><input id="f" autocomplete="off"><button id="b"
 onclick="this.textContent = 'clicked ' + (++window.n)">click me</button></div><main id="m"></main>
<script>window.n = 0;
addEventListener('mousemove', e => { window.off = [e.screenX - e.clientX, e.screenY - e.clientY]; });
let s = 7; const r = k => (s = s * 16807 % 2147483647) % k;
const L = 'eeeeeeeeeetttttttaaaaaaoooooiiiiinnnnnsssssshhhhrrrrrddddllllucmwfgypbvk';
const word = () => { let w = ''; for (let i = 2 + r(7); i > 0; --i) w += L[r(L.length)]; return w; };
const m = document.getElementById('m');
for (let i = 0; i < 240; ++i) {
  if (i % 8 == 0) { const h = document.createElement('h2'); h.textContent = word() + ' ' + word(); m.append(h); }
  const p = document.createElement('p'); let t = '';
  for (let k = 40 + r(60); k > 0; --k) t += word() + (r(12) ? ' ' : '. ');
  p.textContent = t; m.append(p);
}</script>"""


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def pss_kib(pid):
    for line in open(f"/proc/{pid}/smaps_rollup"):
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def memory_kib(pid):
    """PSS of a QEMU in KiB by kind: translation cache (anonymous rwx mappings), guest RAM (the
    template's RAM file, mapped privately), the rest."""
    out, kind = {"cache": 0, "guest_ram": 0, "rest": 0}, "rest"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ (\d+)\s*(.*)$", line)
            if m:
                if m.group(1) == "rwxp" and m.group(2) == "0" and not m.group(3):
                    kind = "cache"
                elif m.group(3).endswith("/ram"):
                    kind = "guest_ram"
                else:
                    kind = "rest"
            elif line.startswith("Pss:"):
                out[kind] += int(line.split()[1])
    return out


def bounded_wait(what, timeout, ready, every=1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(every)
    raise RuntimeError(f"{what}: not within {timeout:.0f} s")


class Sandbox:
    """One sandbox of the run, its QEMU, and where its page's field and button are on screen."""

    def __init__(self, dbx, recording):
        self.dbx, self.recording = dbx, recording
        before = set(dbx.qemu_processes())
        body = {"timeout_s": 7200}
        if not recording:
            body["recording"] = {"enabled": False}
        r = dbx.post("/v1/sandboxes", json=body, timeout=300)
        if r.status_code != 201:
            raise RuntimeError(f"create: {r.status_code} {r.text[:500]}")
        self.id = r.json()["id"]
        if r.json().get("recording", {}).get("enabled") != recording:
            raise RuntimeError(f"create: recording is not {recording}: {r.text[:500]}")
        new = sorted(set(dbx.qemu_processes()) - before)
        if not new:
            raise RuntimeError(f"{self.id}: no new QEMU process after the create")
        self.qemu = new[-1]
        self.field = self.button = self.target = None
        self.session = requests.Session()  # one per sandbox: the typing threads run at once

    def call(self, method, path, **kw):
        kw.setdefault("timeout", 120)
        return self.session.request(method, self.dbx.url + f"/v1/sandboxes/{self.id}{path}",
                                    headers={"Authorization": f"Bearer {self.dbx.key}"}, **kw)

    def act(self, actions, settle=None):
        body = {"actions": actions}
        if settle is not None:
            body["settle"] = settle
        t0 = time.perf_counter()
        r = self.call("POST", "/actions", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"{self.id} actions {actions}: {r.status_code} {r.text[:300]}")
        return r.json(), (time.perf_counter() - t0) * 1000

    def browser_ready(self):
        return self.call("GET", "").json().get("browser_ready") is True

    def open_page(self):
        """Opens the page, finds its field and button on screen, and closes the CDP session (a
        sandbox with one open is never trimmed)."""
        base = "/cdp"
        t = self.call("PUT", base + "/json/new", params={"url": "data:text/html," + urllib.parse.quote(PAGE)})
        if t.status_code != 200:
            raise RuntimeError(f"{self.id}: new page: {t.status_code} {t.text[:300]}")
        self.target = target = t.json()["id"]
        self.call("GET", f"{base}/json/activate/{target}")
        page = CdpPage(self.dbx.port, self.id, target, self.dbx.key)
        try:
            bounded_wait("the page to load", 90,
                         lambda: page.evaluate("document.readyState") == "complete", 0.3)
            self.act([{"type": "move", "x": 640, "y": 500}], {"quiet_ms": 100, "no_change_ms": 1000})
            bounded_wait("the pointer's offset", 30, lambda: page.evaluate("window.off") is not None, 0.3)
            off = page.evaluate("window.off")
            for name in ("f", "b"):
                c = page.evaluate(f"(() => {{ const r = document.getElementById('{name}').getBoundingClientRect();"
                                  " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
                xy = (int(c[0] + off[0]), int(c[1] + off[1]))
                if name == "f":
                    self.field = xy
                else:
                    self.button = xy
        finally:
            page.close()

    def field_length(self):
        """How many characters the page's field holds (a CDP session, closed again); a check on
        the typing, not a figure: None when the browser is too busy to answer (many guests)."""
        try:
            page = CdpPage(self.dbx.port, self.id, self.target, self.dbx.key)
        except AssertionError:
            return None
        try:
            return page.evaluate("document.getElementById('f').value.length")
        finally:
            page.close()

    def screenshot(self, fmt="jpeg"):
        t0 = time.perf_counter()
        r = self.call("GET", "/screenshot", params={"format": fmt})
        ms = (time.perf_counter() - t0) * 1000
        if r.status_code != 200:
            raise RuntimeError(f"{self.id} screenshot: {r.status_code} {r.text[:300]}")
        return r, ms

    def frame_seq(self):
        return int(self.screenshot()[0].headers["X-Frame-Seq"])


def create_group(dbx, recording, n, log):
    """n sandboxes, created one after the other, each with the page open, then warmed up."""
    group = []
    for i in range(n):
        t0 = time.monotonic()
        sb = Sandbox(dbx, recording)
        bounded_wait(f"{sb.id}: browser ready", 240 + 30 * n, sb.browser_ready, 1)
        sb.open_page()
        sb.screenshot()  # a mirror for every sandbox, recorded or not (an agent's first look)
        group.append(sb)
        log(f"  {sb.id} ({'recorded' if recording else 'not recorded'}) ready in {time.monotonic() - t0:.0f} s")
    # The windows start from the same state on both sides: a sandbox that idled past
    # --trim-after had its translation cache trimmed, and its browser would scroll and type
    # slower at first while its code is translated again. So each does the work once, all at
    # once, right before the windows.
    threads = [threading.Thread(target=warm_up, args=(sb,), daemon=True) for sb in group]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    wait_quiet(0.7, timeout=10)  # bounded: other work on the host may never let it be
    return group


def warm_up(sb):
    for dy in (3, 3, 3, -3, -3, -3):
        sb.act([{"type": "scroll", "x": 640, "y": 500, "dy": dy}], False)
        time.sleep(0.25)
    sb.act([{"type": "click", "x": sb.field[0], "y": sb.field[1]}], {"quiet_ms": 100})
    sb.act([{"type": "type", "text": "the quick brown fox jumps "}, {"type": "key", "keys": "ctrl+a BackSpace"}],
           {"quiet_ms": 100, "timeout_ms": 5000})


def measure_window(dbx, group, seconds, work=None):
    """deskboxd's and the QEMUs' CPU over `seconds` while `work(sb, stop)` runs for each sandbox
    on a thread of its own (nothing when None). Returns figures and the window's Unix times."""
    stop = threading.Event()
    results, errors = {}, []

    def run(sb):
        try:
            results[sb.id] = work(sb, stop)
        except Exception as e:  # noqa: BLE001 - reported with the figures
            errors.append(f"{sb.id}: {e}")
            stop.set()

    threads = [threading.Thread(target=run, args=(sb,), daemon=True) for sb in group] if work else []
    d0, q0 = cpu_seconds(dbx.daemon_pid), [cpu_seconds(sb.qemu) for sb in group]
    t0, u0 = time.monotonic(), time.time()
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    t1, u1 = time.monotonic(), time.time()
    d1, q1 = cpu_seconds(dbx.daemon_pid), [cpu_seconds(sb.qemu) for sb in group]
    for t in threads:
        t.join(timeout=120)
    secs = t1 - t0
    return {"seconds": secs, "start_unix_ms": int(u0 * 1000), "end_unix_ms": int(u1 * 1000),
            "deskboxd_cores": (d1 - d0) / secs,
            "qemu_cores_per_sandbox": sum(b - a for a, b in zip(q0, q1)) / secs / len(group),
            "work": results, "errors": errors}


def typing(sb, stop):
    """Types into the page's field until stopped: a phrase an action, the field cleared now and
    then. Returns the actions done, how many changed the screen, the characters typed and the
    mirror's frame sequence numbers before and after."""
    sb.act([{"type": "click", "x": sb.field[0], "y": sb.field[1]}], {"quiet_ms": 100})
    seq0, t0 = sb.frame_seq(), time.monotonic()
    done = changed = chars = 0
    text = "the quick brown fox jumps "
    while not stop.is_set():
        acts = [{"type": "type", "text": text}]
        if done % 6 == 5:
            acts.append({"type": "key", "keys": "ctrl+a BackSpace"})
        r, _ = sb.act(acts, {"quiet_ms": 100, "timeout_ms": 5000})
        done += 1
        chars += len(text)
        changed += bool(r.get("changed"))
    return {"actions": done, "changed": changed, "characters": chars, "seq0": seq0, "seq1": sb.frame_seq(),
            "seconds": time.monotonic() - t0}


def scrolling(sb, stop):
    """Scrolls the article with the wheel, 3 steps every 0.25 s, turning every 5 s. Returns the
    mirror's frame sequence numbers before and after."""
    seq0, t0 = sb.frame_seq(), time.monotonic()
    steps = 0
    while not stop.is_set():
        dy = 3 if int((time.monotonic() - t0) / 5) % 2 == 0 else -3
        sb.act([{"type": "scroll", "x": 640, "y": 500, "dy": dy}], False)
        steps += 1
        stop.wait(0.25)
    return {"scroll_actions": steps, "seq0": seq0, "seq1": sb.frame_seq(), "seconds": time.monotonic() - t0}


def latency(pair, shots, clicks):
    """Screenshots (JPEG) and clicks on the button (the call; input to first changed pixels), the
    sandboxes taking turns (which goes first alternates), so that both see the same host."""
    # Not counted: the first screenshots and clicks after an idle spell (a trimmed translation
    # cache, docs/design.md), which also bring the pointer onto the button.
    for _ in range(5):
        for sb in pair:
            sb.screenshot()
            sb.act([{"type": "click", "x": sb.button[0], "y": sb.button[1]}], {"quiet_ms": 100})
    out = {sb.id: {"screenshot_ms": [], "click_call_ms": [], "click_first_change_ms": []} for sb in pair}
    for i in range(shots):
        for sb in pair[::1 if i % 2 else -1]:
            out[sb.id]["screenshot_ms"].append(sb.screenshot()[1])
    for i in range(clicks):
        for sb in pair[::1 if i % 2 else -1]:
            r, ms = sb.act([{"type": "click", "x": sb.button[0], "y": sb.button[1]}], {"quiet_ms": 100})
            out[sb.id]["click_call_ms"].append(ms)
            if r.get("first_change_ms") is not None:
                out[sb.id]["click_first_change_ms"].append(r["first_change_ms"])
    return out


def recording_figures(sb, windows, save=None, keyframe_s=2):
    """Frames, keyframes and bytes of the recording within each window (Unix ms ranges), from
    recording.mp4's packets, with GET /recording's state."""
    time.sleep(keyframe_s + 1.5)  # the last window's fragment on disk
    rec = sb.call("GET", "/recording").json()
    out = {"status": rec.get("status"), "problem": rec.get("problem"), "bytes": rec.get("bytes"),
           "duration_ms": rec.get("duration_ms"), "dropped_frames": rec.get("dropped_frames"),
           "segments": len(rec.get("segments", [])), "windows": {}}
    if not rec.get("segments"):
        out["error"] = "no segments"
        return out
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "recording.mp4")
        r = sb.call("GET", "/recording.mp4", timeout=300, stream=True)
        if r.status_code != 200:
            out["error"] = f"recording.mp4: {r.status_code}"
            return out
        with open(path, "wb") as f:
            for chunk in r.iter_content(1 << 20):
                f.write(chunk)
        out["mp4_bytes"] = os.path.getsize(path)
        if save:
            os.makedirs(save, exist_ok=True)
            shutil.copy(path, os.path.join(save, f"{sb.id}.mp4"))
            with open(os.path.join(save, f"{sb.id}.json"), "w") as f:
                json.dump({"recording": rec, "windows": windows}, f, indent=2)
        p = subprocess.run([FFPROBE, "-v", "error", "-select_streams", "v:0", "-show_entries",
                            "packet=pts_time,size,flags", "-of", "csv=p=0", path],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            out["error"] = f"ffprobe: {p.stderr[-500:]}"
            return out
        packets = []
        for line in p.stdout.split():
            pts, size, flags = line.split(",")[:3]
            packets.append((float(pts) * 1000, int(size), "K" in flags))
        out["packets"] = len(packets)

    def video_ms(unix_ms):
        for s in rec["segments"]:
            if s["start_ms"] <= unix_ms and (s["live"] or unix_ms <= s["end_ms"]):
                return s["video_offset_ms"] + unix_ms - s["start_ms"]
        later = [s for s in rec["segments"] if s["start_ms"] > unix_ms]  # in a gap: the next segment
        return later[0]["video_offset_ms"] if later else None

    for name, (a, b) in windows.items():
        va, vb = video_ms(a), video_ms(b)
        if va is None or vb is None or vb <= va:
            out["windows"][name] = {"error": f"window {a}..{b} is not in the recording"}
            continue
        inside = [p for p in packets if va <= p[0] < vb]
        secs = (vb - va) / 1000
        nbytes = sum(p[1] for p in inside)
        out["windows"][name] = {"video_s": secs, "frames": len(inside), "keyframes": sum(p[2] for p in inside),
                                "bytes": nbytes, "fps": len(inside) / secs, "bytes_per_hour": nbytes / secs * 3600}
    return out


def run_group(dbx, recording, args, log):
    log(f"{'recorded' if recording else 'not recorded'}: {args.sandboxes} sandbox(es)")
    group = create_group(dbx, recording, args.sandboxes, log)
    res = {"sandboxes": [sb.id for sb in group]}
    if args.sandboxes == 1:
        sb = group[0]
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            with open(os.path.join(args.save, "screen-1.png"), "wb") as f:
                f.write(sb.screenshot("png")[0].content)
        res["motion"] = measure_window(dbx, group, args.motion, scrolling)
        log(f"  motion {res['motion']['deskboxd_cores'] * 100:.2f}% deskboxd")
        if args.save:
            with open(os.path.join(args.save, "screen-2.png"), "wb") as f:
                f.write(sb.screenshot("png")[0].content)
    res["typing"] = measure_window(dbx, group, args.window, typing)
    res["typing"]["field_lengths"] = [sb.field_length() for sb in group]  # the typing reached the page
    log(f"  typing {res['typing']['deskboxd_cores'] * 100:.2f}% deskboxd")
    time.sleep(3 + args.sandboxes)  # the last typed characters painted
    res["still"] = measure_window(dbx, group, args.window)
    log(f"  still {res['still']['deskboxd_cores'] * 100:.2f}% deskboxd")
    if recording:
        windows = {k: (res[k]["start_unix_ms"], res[k]["end_unix_ms"]) for k in ("motion", "typing", "still") if k in res}
        res["recordings"] = [recording_figures(sb, windows, args.save) for sb in group]
    return group, res


def idle_pss(dbx, pair, args, log):
    """Both sandboxes busy for 6 s, then idle until both were trimmed; PSS of each QEMU after."""
    base = dbx.metric_value("deskbox_translation_cache_trims_total") or 0
    threads = [threading.Thread(target=lambda sb=sb: sb.call("POST", "/exec", json={
        "shell": "timeout 6 sh -c 'while :; do :; done' || true", "timeout_s": 30}, timeout=60)) for sb in pair]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t0 = time.monotonic()
    trimmed = None
    deadline = t0 + args.trim_after * 3 + 90
    while time.monotonic() < deadline:
        trims = (dbx.metric_value("deskbox_translation_cache_trims_total") or 0) - base
        trimmed = dbx.metric_value("deskbox_sandboxes_trimmed") or 0
        if trims >= len(pair) and trimmed >= len(pair):
            break
        time.sleep(1)
    waited = time.monotonic() - t0
    # An idle guest still wakes now and then and translates a little afresh, and is trimmed
    # again once idle for --trim-after: a sandbox's idle PSS is its average over such cycles,
    # not one moment of one (a single sample differed by up to 60 MiB between like sandboxes).
    samples = {sb.id: [] for sb in pair}
    kinds = {sb.id: [] for sb in pair}
    cpu0, w0 = {sb.id: cpu_seconds(sb.qemu) for sb in pair}, time.monotonic()
    end = time.monotonic() + args.pss_seconds
    while time.monotonic() < end:
        for sb in pair:
            samples[sb.id].append(pss_kib(sb.qemu))
            kinds[sb.id].append(memory_kib(sb.qemu))
        time.sleep(2)
    qemu_cpu = {sb.id: (cpu_seconds(sb.qemu) - cpu0[sb.id]) / (time.monotonic() - w0) for sb in pair}
    res = {"waited_s": waited, "samples": len(samples[pair[0].id]), "qemu_cores": qemu_cpu, "trims": (dbx.metric_value("deskbox_translation_cache_trims_total") or 0) - base,
           "trimmed_now": dbx.metric_value("deskbox_sandboxes_trimmed"),
           "pss_mib": {sb.id: sum(samples[sb.id]) / len(samples[sb.id]) / 1024 for sb in pair},
           "of_it_mib": {sb.id: {k: sum(x[k] for x in kinds[sb.id]) / len(kinds[sb.id]) / 1024
                                 for k in ("cache", "guest_ram", "rest")} for sb in pair}}
    log(f"  idle PSS after {waited:.0f} s: {res}")
    return res


def summarize(off, on, pss, args):
    n = args.sandboxes
    fig = {"cpu": {}, "targets": {}}
    lines = []

    def cpu(kind, target):
        if kind not in off or kind not in on:
            return
        d = (on[kind]["deskboxd_cores"] - off[kind]["deskboxd_cores"]) / n
        q = on[kind]["qemu_cores_per_sandbox"] / max(1e-9, off[kind]["qemu_cores_per_sandbox"])
        fig["cpu"][kind] = {"off_cores": off[kind]["deskboxd_cores"], "on_cores": on[kind]["deskboxd_cores"],
                            "recorder_cores_per_sandbox": d, "qemu_on_over_off": q,
                            "qemu_off_cores": off[kind]["qemu_cores_per_sandbox"],
                            "qemu_on_cores": on[kind]["qemu_cores_per_sandbox"],
                            "work_off": off[kind]["work"], "work_on": on[kind]["work"],
                            "errors": off[kind]["errors"] + on[kind]["errors"]}
        verdict = ""
        if target is not None:
            # A share of a core is an absolute figure: a busy host moves it. It gates the long
            # run (--long-run); CI reports it (the same-run ratios below gate CI).
            ok = d <= target
            fig["targets"][f"{kind}_cpu"] = {"value": d, "target": target, "ok": ok, "kind": "absolute",
                                             "checked": bool(args.long_run)}
            verdict = (f"   (target <= {target * 100:.1f}%) {'ok' if ok else 'MISSED'}"
                       f"{'' if args.long_run else ' (not checked in CI)'}")
        lines.append(f"  {kind:7} deskboxd {off[kind]['deskboxd_cores'] * 100:6.2f}% -> {on[kind]['deskboxd_cores'] * 100:6.2f}%"
                     f"   recorder {d * 100:6.2f}% per sandbox{verdict}"
                     f"   (QEMU {off[kind]['qemu_cores_per_sandbox'] * 100:.1f}% -> {on[kind]['qemu_cores_per_sandbox'] * 100:.1f}%)")

    print(f"\ndeskboxd CPU over each window, not recorded -> recorded, {n} sandbox(es) at once (% of a core)")
    cpu("motion", None)
    cpu("typing", TARGETS["typing_cpu"])
    cpu("still", TARGETS["still_cpu"])
    print("\n".join(lines))
    # What the guests did meanwhile: the same work on both sides, or the comparison means little.
    for kind in ("motion", "typing"):
        if kind not in off or kind not in on:
            continue
        parts = []
        for label, g in (("not recorded", off), ("recorded", on)):
            w = list(g[kind]["work"].values())
            if not w:
                continue
            secs = sum(x["seconds"] for x in w) / len(w)
            upd = sum(x["seq1"] - x["seq0"] for x in w) / len(w) / secs
            # deskboxd's CPU per screen update the mirror took: the guests' frame rates differ
            # from run to run under emulation (other work on the host), this less so.
            per_update = g[kind]["deskboxd_cores"] * 1000 / (upd * len(w)) if upd else float("nan")
            fig["cpu"][kind][f"deskboxd_ms_per_update_{'on' if g is on else 'off'}"] = per_update
            if kind == "typing":
                parts.append(f"{label}: {sum(x['actions'] for x in w) / len(w):.0f} type actions "
                             f"({sum(x['changed'] for x in w) / len(w):.0f} changed the screen), "
                             f"{sum(x['characters'] for x in w) / len(w) / secs:.1f} characters/s, "
                             f"{upd:.1f} screen updates/s, fields hold {g[kind].get('field_lengths')}")
            else:
                parts.append(f"{label}: {sum(x['scroll_actions'] for x in w) / len(w):.0f} scroll actions, "
                             f"{upd:.1f} screen updates/s ({per_update:.1f} ms of deskboxd each)")
            fig["cpu"][kind][f"updates_per_s_{'on' if g is on else 'off'}"] = upd
        c = fig["cpu"][kind]
        # Per update only for scrolling: while typing the screen changes so seldom that the still
        # screen's keep-alive frames are most of the recorder's work.
        if kind == "motion":
            c["recorder_ms_per_update"] = c["deskboxd_ms_per_update_on"] - c["deskboxd_ms_per_update_off"]
            parts.append(f"the recorder {c['recorder_ms_per_update']:.1f} ms of CPU per update")
        print(f"  {kind} per sandbox, " + "; ".join(parts))
    if "latency" in off and "latency" in on:
        lo, ln = off["latency"], on["latency"]
        rows = [("screenshot JPEG", "screenshot_ms", "screenshot_ratio"),
                ("click (the call)", "click_call_ms", "click_ratio"),
                ("click, first change", "click_first_change_ms", None)]
        print("\nlatency p50 (p90), not recorded -> recorded")
        fig["latency"] = {}
        for label, key, target in rows:
            a, b = pct(lo[key], 0.5), pct(ln[key], 0.5)
            ratio = b / a if a else float("nan")
            fig["latency"][key] = {"off_p50": a, "on_p50": b, "off_p90": pct(lo[key], 0.9), "on_p90": pct(ln[key], 0.9),
                                   "ratio": ratio, "n_off": len(lo[key]), "n_on": len(ln[key])}
            verdict = ""
            if target:
                ok = ratio <= TARGETS[target]
                fig["targets"][target] = {"value": ratio, "target": TARGETS[target], "ok": ok}
                verdict = f"   (target <= {TARGETS[target]:.1f}x) {'ok' if ok else 'MISSED'}"
            print(f"  {label:20} {a:8.1f} ({pct(lo[key], 0.9):.1f}) -> {b:8.1f} ({pct(ln[key], 0.9):.1f}) ms"
                  f"   ratio {ratio:5.2f}x{verdict}")
    if pss:
        a, b = pss["pss_mib"][pss["off_id"]], pss["pss_mib"][pss["on_id"]]
        ratio = b / a
        ok = ratio <= TARGETS["pss_ratio"] and pss["trims"] >= 2
        fig["pss"] = {**pss, "off_mib": a, "on_mib": b, "ratio": ratio}
        fig["targets"]["pss_ratio"] = {"value": ratio, "target": TARGETS["pss_ratio"], "ok": ok}
        print(f"\nidle PSS after both were trimmed ({pss['trims']:.0f} trims, {pss['waited_s']:.0f} s idle, "
              f"mean of {pss['samples']} samples): "
              f"{a:.0f} -> {b:.0f} MiB   ratio {ratio:.2f}x   (target <= 1.1x, both trimmed) {'ok' if ok else 'MISSED'}")
        ka, kb = pss["of_it_mib"][pss["off_id"]], pss["of_it_mib"][pss["on_id"]]
        print("  of it: " + ", ".join(f"{k.replace('_', ' ')} {ka[k]:.0f} -> {kb[k]:.0f}" for k in ka) + " MiB; "
              f"QEMU CPU meanwhile {pss['qemu_cores'][pss['off_id']] * 100:.1f}% -> "
              f"{pss['qemu_cores'][pss['on_id']] * 100:.1f}% of a core")
    recs = on.get("recordings", [])
    if recs:
        print("\nthe recording (recording.mp4's packets in each window; bytes extrapolated to an hour)")
        fig["recording"] = {"per_sandbox": recs, "windows": {}}
        for kind in ("motion", "typing", "still"):
            ws = [r["windows"][kind] for r in recs if kind in r.get("windows", {}) and "error" not in r["windows"][kind]]
            if not ws:
                continue
            fps = sum(w["fps"] for w in ws) / len(ws)
            mib_h = sum(w["bytes_per_hour"] for w in ws) / len(ws) / 2**20
            keys = sum(w["keyframes"] for w in ws) / len(ws)
            fig["recording"]["windows"][kind] = {"fps": fps, "mib_per_hour": mib_h, "keyframes": keys,
                                                 "frames": sum(w["frames"] for w in ws) / len(ws),
                                                 "video_s": sum(w["video_s"] for w in ws) / len(ws)}
            extra = ""
            if kind == "motion" and "motion" in on:
                m = on["motion"]["work"].get(on["sandboxes"][0])
                if m:
                    upd = (m["seq1"] - m["seq0"]) / m["seconds"]
                    fig["recording"]["windows"][kind]["mirror_updates_per_s"] = upd
                    fig["recording"]["windows"][kind]["delivered_over_possible"] = fps / min(upd, 15) if upd else None
                    extra = (f"; the mirror received {upd:.1f} updates/s, so {fps / min(upd, 15):.2f}x of what "
                             f"{min(upd, 15):.1f} fps could take")
            print(f"  {kind:7} {fps:5.2f} frames/s ({keys:.0f} keyframes)   {mib_h:8.1f} MiB/hour{extra}")
        dropped = sum(r.get("dropped_frames") or 0 for r in recs)
        problems = [f"{on['sandboxes'][i]}: {r.get('status')} {r.get('problem') or ''} {r.get('error') or ''}".strip()
                    for i, r in enumerate(recs) if r.get("status") != "recording" or r.get("error")]
        fig["recording"]["dropped_frames"] = dropped
        fig["recording"]["problems"] = problems
        print(f"  dropped frames {dropped}; " + ("; ".join(problems) if problems else "every recording's status: recording"))
        if problems:
            fig["targets"]["recording_works"] = {"value": problems, "target": "status recording", "ok": False}
    return fig


def same_age_pair(dbx, log):
    """A sandbox not recorded and a recorded one, created at once, each with the page open and
    warmed up: for the idle PSS. A younger guest works more while idle (its browser is still
    settling after the restore): compared with the groups' sandboxes, made one after the other,
    the second one's QEMU used 7% of a core against 3% while idle, whichever was recorded."""
    pair, errors, creating = [None, None], [], threading.Lock()

    def make(i, recording):
        try:
            with creating:  # one create at a time: each finds its own QEMU as the new one
                sb = Sandbox(dbx, recording)
            bounded_wait(f"{sb.id}: browser ready", 300, sb.browser_ready, 1)
            sb.open_page()
            sb.screenshot()
            warm_up(sb)
            pair[i] = sb
        except Exception as e:  # noqa: BLE001 - raised below
            errors.append(e)
    threads = [threading.Thread(target=make, args=(i, rec), daemon=True) for i, rec in enumerate((False, True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=400)
    if errors or None in pair:
        for sb in pair:
            if sb:
                sb.call("DELETE", "", timeout=120)
        raise RuntimeError(f"the idle PSS pair: {errors or 'not made in time'}")
    log(f"  idle PSS pair: {pair[0].id} (not recorded), {pair[1].id} (recorded), made at once")
    return pair


def run(dbx, args, figures, log):
    """Both groups, then the comparison; `figures` gets each group's raw figures as they come."""
    off_group, off = run_group(dbx, False, args, log)
    figures["off"] = off
    if args.sandboxes > 1:  # 2N guests on 2 cores would starve each other
        for sb in off_group:
            sb.call("DELETE", "", timeout=120)
        off_group = []
    on_group, on = run_group(dbx, True, args, log)
    figures["on"] = on
    pss = None
    if args.sandboxes == 1:
        pair = [off_group[0], on_group[0]]
        lat = latency(pair, args.shots, args.clicks)
        off["latency"], on["latency"] = lat[pair[0].id], lat[pair[1].id]
        for sb in off_group + on_group:
            sb.call("DELETE", "", timeout=120)
        off_group, on_group = [], []
        pair = same_age_pair(dbx, log)
        try:
            pss = idle_pss(dbx, pair, args, log)
        finally:
            for sb in pair:
                sb.call("DELETE", "", timeout=120)
        pss["off_id"], pss["on_id"] = pair[0].id, pair[1].id
    fig = summarize(off, on, pss, args)
    for sb in off_group + on_group:
        sb.call("DELETE", "", timeout=120)
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=30, help="seconds of typing and of still screen (default 30)")
    ap.add_argument("--motion", type=float, default=15, help="seconds of scrolling (default 15)")
    ap.add_argument("--shots", type=int, default=30)
    ap.add_argument("--clicks", type=int, default=15)
    ap.add_argument("--trim-after", type=int, default=20, help="deskboxd --trim-idle-after (default 20)")
    ap.add_argument("--pss-seconds", type=float, default=40,
                    help="idle PSS: seconds of samples (every 2 s) once both sandboxes were trimmed (default 40)")
    ap.add_argument("--sandboxes", type=int, default=1, help="sandboxes per group, at once (default 1)")
    ap.add_argument("--save", help="keep two PNG screenshots and the recordings here")
    ap.add_argument("--out", default="/tmp/recording_bench.json")
    ap.add_argument("--long-run", action="store_true",
                    help="also fail on the absolute CPU targets (the recorder's share of a core while "
                         "typing and on a still screen); without it they are reported only")
    args = ap.parse_args()
    t_start = time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - t_start:5.0f} s] {msg}", file=sys.stderr, flush=True)

    figures = {"bench": "recording_bench", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "args": vars(args),
               "targets_set": TARGETS}
    status = 2
    try:
        with Deskbox(warm_pool=0, extra_args=["--trim-idle-after", str(args.trim_after)]) as dbx:
            figures["template"] = dbx.template
            try:
                figures.update(run(dbx, args, figures, log))
            finally:
                # deskboxd's log beside the figures: the recorder's warnings, if any, are there.
                figures["deskboxd_log"] = os.path.splitext(args.out)[0] + ".deskboxd.log"
                shutil.copy(dbx.daemon_log, figures["deskboxd_log"])
        missed = [k for k, v in figures["targets"].items() if not v["ok"] and v.get("checked", True)]
        figures["ok"] = not missed
        print(f"\ntargets: {'all met' if not missed else 'MISSED ' + ', '.join(missed)}"
              f"   ({time.monotonic() - t_start:.0f} s)")
        status = 0 if not missed else 1
    except Exception as e:  # noqa: BLE001 - the figures so far are written, the run fails
        figures["error"] = f"{e}"
        traceback.print_exc()
    figures["seconds"] = time.monotonic() - t_start
    with open(args.out, "w") as f:
        json.dump(figures, f, indent=2)
    print(f"figures: {args.out}")
    raise SystemExit(status)


if __name__ == "__main__":
    main()
