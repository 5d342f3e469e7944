"""Typing is exact under load (docs/computer-use.md, "Typing"): the typing battery
(typing_battery.py) types 40 strings of mixed scripts into a real guest's Chromium textarea
(after a click, after ctrl+a Delete, by the actions API and the Anthropic adapter) and the
same strings into xterm, while two other sandboxes burn CPU; not one character may be wrong.
Typing leaves the user's CLIPBOARD and PRIMARY as they were, and types through no keysym the
guest's keyboard map lacks (its keymap does not change)."""

import concurrent.futures
import contextlib
import time
import unittest
import urllib.parse

from harness import ApiTestCase, Deskbox, describe
from typing_battery import Battery, make_strings
from wsclient import CdpPage

CI_STRINGS = 40

PAGE = """<!doctype html><title>typing</title>
<style>body { margin: 0 } #area { position: fixed; inset: 0; width: 100vw; height: 100vh; font: 20px sans-serif; }</style>
<textarea id="area" autocomplete="off" spellcheck="false"></textarea>"""


def create(dbx):
    r = dbx.post("/v1/sandboxes", json={}, timeout=300)
    if r.status_code != 201:
        raise AssertionError(f"create: {describe(r)}")
    return r.json()["id"]


def burn_cpu(dbx, sid):
    """A CPU burner in the guest, for as long as the sandbox lives."""
    r = dbx.post(f"/v1/sandboxes/{sid}/exec", json={
        "argv": ["sh", "-c", "setsid sh -c 'while :; do :; done' >/dev/null 2>&1 < /dev/null &"]}, timeout=60)
    if r.status_code != 200:
        raise AssertionError(f"exec: {describe(r)}")


def open_page(dbx, sid):
    """The typing page in a new tab brought to the front; returns (target id, CdpPage)."""
    base = f"/v1/sandboxes/{sid}/cdp"
    url = "data:text/html," + urllib.parse.quote(PAGE)
    r = dbx.request("PUT", base + "/json/new", params={"url": url})
    if r.status_code != 200:
        raise AssertionError(f"new tab: {describe(r)}")
    target = r.json()["id"]
    dbx.get(f"{base}/json/activate/{target}")
    page = CdpPage(dbx.port, sid, target, dbx.key)
    deadline = time.time() + 60
    while page.evaluate("document.readyState") != "complete":
        if time.time() > deadline:
            raise AssertionError("the typing page did not load")
        time.sleep(0.2)
    return target, page


def click_into_page(battery, dbx, sid, page):
    """Clicks the textarea (it fills the page; the screen's centre is on it) until it has focus."""
    cur = dbx.get(f"/v1/sandboxes/{sid}/cursor").json()["screen"]
    deadline = time.time() + 60
    while page.evaluate("document.activeElement && document.activeElement.id") != "area" or \
            page.evaluate("document.hasFocus()") is not True:
        if time.time() > deadline:
            raise AssertionError("the textarea never got the focus")
        battery.act({"type": "click", "x": cur["width"] // 2, "y": cur["height"] // 2 + 60})
        time.sleep(0.3)


@contextlib.contextmanager
def busy_deployment():
    """A deployment with three sandboxes: the one typed into, and two burning CPU. Stopping it
    raises if anything was left behind."""
    dbx = Deskbox(warm_pool=0)
    dbx.start()
    sids = []
    try:
        # Created together: restores of one template, each in its own slot.
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(create, dbx) for _ in range(3)]
            errors = []
            for f in futures:
                try:
                    sids.append(f.result())
                except Exception as e:  # the others are still deleted below
                    errors.append(e)
            if errors:
                raise errors[0]
        for sid in sids[1:]:
            burn_cpu(dbx, sid)
        yield dbx, sids[0]
    finally:
        try:
            for sid in sids:
                dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
        finally:
            report = dbx.stop()
        if report.problems:
            raise AssertionError(f"teardown of the deployment found leaks: {report}")


def type_battery(dbx, sid, strings, log=print):
    """The battery in Chromium, then in xterm; returns the figures."""
    battery = Battery(dbx, sid, log)
    target, page = open_page(dbx, sid)
    try:
        click_into_page(battery, dbx, sid, page)
        c_wrong, c_chars, c_seconds, c_failures = battery.chromium(page, strings)
    finally:
        page.close()
        dbx.get(f"/v1/sandboxes/{sid}/cdp/json/close/{target}")
    x_wrong, x_chars, x_seconds, x_failures = battery.xterm(strings)
    figures = {
        "strings": len(strings),
        "busy_sandboxes": 2,
        "chromium": {"wrong_characters": c_wrong, "characters": c_chars,
                     "characters_per_second": round(c_chars / c_seconds, 2) if c_seconds else None,
                     "failures": c_failures},
        "xterm": {"wrong_characters": x_wrong, "characters": x_chars,
                  "characters_per_second": round(x_chars / x_seconds, 2) if x_seconds else None,
                  "failures": x_failures},
        "wrong_characters": c_wrong + x_wrong,
    }
    log(f"typing battery: {len(strings)} strings; chromium {c_wrong} wrong of {c_chars} "
        f"({figures['chromium']['characters_per_second']} chars/s); xterm {x_wrong} wrong of {x_chars} "
        f"({figures['xterm']['characters_per_second']} chars/s)")
    return figures


def run_battery(n, log=print):
    with busy_deployment() as (dbx, sid):
        return type_battery(dbx, sid, make_strings(n), log)


class TypingTest(ApiTestCase):
    @classmethod
    def setUpClass(cls):
        cls._busy = busy_deployment()
        cls.dbx, cls.sid = cls._busy.__enter__()

    @classmethod
    def tearDownClass(cls):
        busy, cls._busy, cls.dbx = cls._busy, None, None
        busy.__exit__(None, None, None)

    def exec(self, argv):
        return Battery(self.dbx, self.sid).exec(argv)

    def keymap(self):
        return self.exec(["sh", "-c", "xmodmap -pke | md5sum"])["stdout"]

    def selections(self):
        battery = Battery(self.dbx, self.sid)
        clip = battery.exec(["xclip", "-selection", "clipboard", "-o"])["stdout"]
        prim = battery.exec(["xclip", "-selection", "primary", "-o"])["stdout"]
        return clip, prim

    def test_1_battery_is_exact_in_chromium_and_xterm_under_load(self):
        keymap_before = self.keymap()
        figures = type_battery(self.dbx, self.sid, make_strings(CI_STRINGS))
        self.assertEqual(figures["chromium"]["failures"], [])
        self.assertEqual(figures["xterm"]["failures"], [])
        self.assertEqual(figures["wrong_characters"], 0)
        self.assertGreater(figures["chromium"]["characters"], 0)
        self.assertGreater(figures["xterm"]["characters"], 0)
        self.assertEqual(self.keymap(), keymap_before, "typing bound no new keysym in the guest's keymap")

    def test_2_clipboard_and_primary_are_as_they_were(self):
        # (The battery's ctrl+a selects text, which makes Chromium the owner of PRIMARY: that is
        # the user's doing, not typing's. Here nothing is selected.)
        user = ("the user's clipboard ✓", "the user’s primary")
        r = self.dbx.request("PUT", f"/v1/sandboxes/{self.sid}/clipboard", json={"text": user[0]})
        self.assertIn(r.status_code, (200, 204), describe(r))
        self.exec(["sh", "-c", f"printf '{user[1]}' | setsid xclip -selection primary -i >/dev/null 2>&1"])
        deadline = time.time() + 30
        while self.selections() != user:
            self.assertLess(time.time(), deadline, f"the selections were not set: {self.selections()}")
            time.sleep(0.2)
        # Into Chromium (hex entry) and into xterm (a paste through PRIMARY, then given back).
        type_battery(self.dbx, self.sid, ["café — 世界 🙂", "ñ «ok»"])
        self.assertEqual(self.selections(), user)


if __name__ == "__main__":
    unittest.main()
