"""An idle sandbox under TCG hands its translation cache back to the host (deskboxd
--trim-idle-after, docs/design.md), not while a client is connected to it, and works on as
before: act-and-observe, screenshots, CDP. The deployment trims after 5 s of idleness instead of
60."""

import base64
import re
import time
import unittest

from harness import OneSandboxTestCase

PAGE = """<!doctype html><title>trim</title><style>body{margin:0;font:24px sans-serif;background:#fff}
button{position:fixed;left:100px;top:100px;width:300px;height:120px;font-size:32px}</style>
<button id="b" onclick="this.textContent = 'clicked ' + (++window.n)">click me</button>
<script>window.n = 0; window.off = [window.screenX + (window.outerWidth - window.innerWidth),
  window.screenY + (window.outerHeight - window.innerHeight)];</script>"""


def cache_resident_kib(pid):
    """KiB in memory of a QEMU's translation cache: its anonymous rwx mappings."""
    kib, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ (\d+)\s*(.*)$", line)
            if m:
                inside = m.group(1) == "rwxp" and m.group(2) == "0" and not m.group(3)
            elif inside and line.startswith("Rss:"):
                kib += int(line.split()[1])
    return kib


class TrimTest(OneSandboxTestCase):
    deployment = {"extra_args": ["--trim-idle-after", "5"]}

    def qemu_pid(self):
        pids = list(self.dbx.qemu_processes())
        self.assertEqual(len(pids), 1, f"one QEMU in a deployment without pools: {pids}")
        return pids[0]

    def trims(self):
        return self.dbx.metric_value("deskbox_translation_cache_trims_total")

    def test_idle_sandbox_is_trimmed_once_no_client_is_connected_and_still_acts_and_sees(self):
        from wsclient import CdpPage
        self.open_page(PAGE)
        pid = self.qemu_pid()
        before = cache_resident_kib(pid)
        trims0 = self.trims()
        self.assertIsNotNone(trims0, "deskbox_translation_cache_trims_total in /metrics")
        off = self.page.evaluate("window.off")
        b = self.page.evaluate("(() => { const r = document.getElementById('b').getBoundingClientRect();"
                               " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        x, y = int(b[0] + off[0]), int(b[1] + off[1])

        # A CDP session is open: however idle, the sandbox keeps its cache (three delays and the
        # manager's looks).
        time.sleep(20)
        self.assertEqual(self.trims(), trims0, "a sandbox with an open CDP session was trimmed")
        self.assertEqual(self.dbx.metric_value("deskbox_sandboxes_trimmed"), 0)

        # The client leaves: trimmed within the 5 s delay plus the manager's 5 s look.
        self.page.close()
        self.page = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.trims() > trims0 and self.dbx.metric_value("deskbox_sandboxes_trimmed") == 1:
                break
            time.sleep(1)
        else:
            self.fail(f"the idle sandbox was not trimmed within 90 s: {self.dbx.metrics()}")
        deadline, after = time.monotonic() + 10, None
        while time.monotonic() < deadline:
            after = cache_resident_kib(pid)
            if after < before / 2:
                break
            time.sleep(0.5)
        self.assertLess(after, before / 2, f"translation cache {before} KiB before the trim, {after} KiB after")

        # It acts and sees as before: a click changes the page, and the answer shows it.
        r = self.expect(self.dbx.post(f"/v1/sandboxes/{self.sid}/actions", json={
            "actions": [{"type": "click", "x": x, "y": y}], "screenshot": {"format": "png"}}), 200)
        self.assertIsNotNone(r.get("first_change_ms"), f"the click changed nothing on screen: {r}")
        self.assertEqual(base64.b64decode(r["screenshot"]["data"])[:4], b"\x89PNG", "the answer's screenshot")
        self.page = CdpPage(self.dbx.port, self.sid, self.target, self.dbx.key)
        self.assertEqual(self.page.evaluate("window.n"), 1)
        self.assertEqual(self.page.evaluate("document.getElementById('b').textContent"), "clicked 1")
        shot = self.dbx.get(f"/v1/sandboxes/{self.sid}/screenshot", params={"format": "png"})
        self.assertEqual(shot.status_code, 200)
        self.assertEqual(shot.content[:4], b"\x89PNG")


if __name__ == "__main__":
    unittest.main()
