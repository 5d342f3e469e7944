"""The desktop endpoints against a real guest: actions through the screen mirror reach a real
page in the guest's Chromium (checked through CDP): pointer motion at the right screen point,
clicks of every button, double and shift-clicks, drags that select text, the wheel,
typing any Unicode text (ASCII as keysyms, the rest through GTK's Unicode entry), key combos,
coordinates in a declared display size, screenshots from the mirror, settle results, the
timeline, scopes, bad input, pause and resume, and the Anthropic and OpenAI adapters."""

import base64
import struct
import time
import unittest

from harness import OneSandboxTestCase, describe
from wsclient import CdpPage

PAGE = """<!doctype html><title>desk</title>
<style>
  body { margin: 0; font: 28px sans-serif; }
  #go { position: fixed; left: 0; top: 0; width: 50vw; height: 40vh; font-size: 32px; }
  #field { position: fixed; left: 50vw; top: 0; width: 48vw; height: 60px; font-size: 28px; }
  #sel { position: fixed; left: 10px; top: 45vh; margin: 0; white-space: nowrap; }
  #pad { height: 8000px; }
</style>
<button id="go" onclick="window.clicks = (window.clicks || 0) + 1; window.shift = event.shiftKey; this.textContent = 'clicked ' + window.clicks">go</button>
<input id="field" autocomplete="off">
<p id="sel">alpha bravo charlie delta</p>
<div id="pad"></div>
<script>
  window.clicks = 0;
  addEventListener('mousemove', e => { window.last = {sx: e.screenX, sy: e.screenY, cx: e.clientX, cy: e.clientY}; });
  window.log = [];
  for (const t of ['mousedown', 'mouseup', 'click', 'dblclick', 'contextmenu', 'auxclick'])
    addEventListener(t, e => {
      log.push({t, b: e.button, x: e.screenX, y: e.screenY, shift: e.shiftKey});
      if (t === 'contextmenu') e.preventDefault();  // no menu over the page
    }, true);
</script>"""

TEXT = "héllo wörld — 世界 🙂"


class DesktopTest(OneSandboxTestCase):
    def setUp(self):
        # One sandbox for the class; a fresh page per test.
        self.open_page(PAGE)
        deadline = time.time() + 60
        while self.page.evaluate("document.hasFocus()") is not True:
            self.assertLess(time.time(), deadline, "the test page never got focus")
            time.sleep(0.2)
        self.screen = self.screen_size()
        self.offset = self.calibrate()

    # ---- helpers --------------------------------------------------------------------------------

    def act(self, *actions, status=200, **extra):
        r = self.dbx.post(f"/v1/sandboxes/{self.sid}/actions", json={"actions": list(actions), **extra}, timeout=120)
        if status != 200:
            return r
        return self.expect(r, 200, f"actions {actions}")

    def screen_size(self):
        r = self.dbx.get(f"/v1/sandboxes/{self.sid}/cursor")
        out = self.expect(r, 200)
        return out["screen"]["width"], out["screen"]["height"]

    def calibrate(self):
        """Screen minus page coordinates, from a mousemove the page saw."""
        w, h = self.screen
        # From elsewhere first: a move to where the pointer already is moves nothing.
        out = self.act({"type": "move", "x": w // 2 - 40, "y": h // 2 - 30}, {"type": "move", "x": w // 2 + 3, "y": h // 2 + 7})
        self.assertEqual(out["cursor"], {"x": w // 2 + 3, "y": h // 2 + 7})
        deadline = time.time() + 30
        while True:
            last = self.page.evaluate("window.last || null")
            if last and last["sx"] == w // 2 + 3:
                break
            self.assertLess(time.time(), deadline, f"the page saw no mousemove at the pointer: {last}")
            time.sleep(0.1)
        self.assertEqual((last["sx"], last["sy"]), (w // 2 + 3, h // 2 + 7), "page screen coordinates = pointer")
        return last["sx"] - last["cx"], last["sy"] - last["cy"]

    def focus(self, selector):
        self.page.evaluate(f"document.querySelector('{selector}').focus()")
        self.assertEqual(self.wait_for("document.activeElement.id", selector[1:]), selector[1:])

    def field(self):
        return self.page.evaluate("document.getElementById('field').value")

    def centre_of(self, selector):
        r = self.page.evaluate(f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();"
                               "return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        return int(r[0] + self.offset[0]), int(r[1] + self.offset[1])

    def wait_for(self, expression, expected, timeout=20):
        deadline = time.time() + timeout
        while True:
            value = self.page.evaluate(expression)
            if value == expected or time.time() > deadline:
                return value
            time.sleep(0.1)

    # ---- tests ------------------------------------------------------------------------------------

    def test_pointer_moves_land_where_asked_and_the_answer_says_it_settled(self):
        w, h = self.screen
        before = self.dbx.get(f"/v1/sandboxes/{self.sid}/screenshot")
        self.assertEqual(before.status_code, 200, describe(before))
        seq0 = int(before.headers["X-Frame-Seq"])
        x, y = self.centre_of("#go")
        out = self.act({"type": "move", "x": x, "y": y}, screenshot={"format": "jpeg", "quality": 70})
        last = self.wait_for("window.last && [window.last.sx, window.last.sy]", [x, y])
        self.assertEqual(last, [x, y], "the page saw the pointer at the screen point asked for")
        self.assertEqual(out["cursor"], {"x": x, "y": y})
        self.assertTrue(out["changed"], out)   # the pointer is drawn into the framebuffer
        self.assertTrue(out["settled"], out)
        self.assertGreater(out["frame_seq"], seq0)
        self.assertIsNotNone(out["first_change_ms"])
        self.assertGreaterEqual(out["waited_ms"], 200, "settling includes the quiet period")
        jpeg = base64.b64decode(out["screenshot"]["data"])
        self.assertEqual(jpeg[:2], b"\xff\xd8")
        self.assertEqual((out["screenshot"]["width"], out["screenshot"]["height"]), self.screen)
        # Nothing changes: the screen settles unchanged after no_change_ms.
        out = self.act({"type": "wait", "duration_ms": 10}, settle={"no_change_ms": 300, "quiet_ms": 100})
        self.assertTrue(out["settled"], out)
        self.assertLess(out["waited_ms"], 3000)

    def test_clicks_drags_and_scrolls_reach_the_page(self):
        x, y = self.centre_of("#go")
        seen = "window.log.map(e => [e.t, e.b, e.x, e.y])"
        out = self.act({"type": "click", "x": x, "y": y})
        self.assertEqual(self.wait_for("window.clicks", 1), 1, "a left click reached the button")
        self.assertEqual(self.wait_for(seen, [["mousedown", 0, x, y], ["mouseup", 0, x, y], ["click", 0, x, y]]),
                         [["mousedown", 0, x, y], ["mouseup", 0, x, y], ["click", 0, x, y]])
        self.assertTrue(out["changed"], out)   # the button's label changed on screen
        self.assertEqual(out["cursor"], {"x": x, "y": y})
        # A double click is one dblclick; a shift-click carries the modifier. The double click
        # waits out the desktop's double-click time (500 ms) after the single click above:
        # sooner, Chromium counts that click as the first of three, as it would a person's.
        time.sleep(1.0)
        self.page.evaluate("window.log = []")
        self.act({"type": "click", "x": x, "y": y, "count": 2})
        self.assertEqual(self.wait_for("window.log.filter(e => e.t === 'dblclick').length", 1), 1)
        self.act({"type": "click", "x": x, "y": y, "modifiers": "shift"})
        self.assertEqual(self.wait_for("window.clicks", 4), 4)
        self.assertIs(self.page.evaluate("window.shift"), True)
        # Right and middle buttons.
        self.page.evaluate("window.log = []")
        self.act({"type": "click", "x": x + 5, "y": y + 5, "button": "right"},
                 {"type": "click", "x": x + 5, "y": y + 5, "button": "middle"})
        self.assertEqual(self.wait_for("window.log.filter(e => e.t === 'mousedown').map(e => e.b)", [2, 1]), [2, 1])
        self.assertIn("contextmenu", self.page.evaluate("window.log.map(e => e.t)"))
        # A drag across a line of text selects it; mouse_down and mouse_up make one by hand.
        left, right, mid = self.page.evaluate(
            "(() => { const r = document.createRange(); r.selectNodeContents(document.getElementById('sel'));"
            " const b = r.getBoundingClientRect(); return [b.left, b.right, (b.top + b.bottom) / 2]; })()")
        ox, oy = self.offset
        y_text = int(mid + oy)
        self.act({"type": "drag", "path": [[int(left + ox) + 1, y_text], [int(right + ox) - 1, y_text]]})
        selected = self.wait_for("window.getSelection().toString()", "alpha bravo charlie delta")
        self.assertTrue(selected.startswith("alpha bravo charlie delt"), selected)
        self.act({"type": "click", "x": x, "y": y})  # clears the selection
        self.act({"type": "mouse_down", "x": int(left + ox) + 1, "y": y_text},
                 {"type": "move", "x": int(left + ox) + 120, "y": y_text},
                 {"type": "mouse_up"})
        selected = self.wait_for("window.getSelection().toString().length > 3", True)
        self.assertTrue(selected, self.page.evaluate("window.getSelection().toString()"))
        self.assertTrue(self.page.evaluate("window.getSelection().toString()").startswith("alpha"))
        # The wheel scrolls the page under the pointer, down and back up.
        self.assertEqual(self.page.evaluate("window.scrollY"), 0)
        self.act({"type": "scroll", "x": x, "y": y, "dy": 3})
        self.assertIs(self.wait_for("window.scrollY > 0", True), True, "the page scrolled down")
        self.act({"type": "scroll", "dy": -10})
        self.assertEqual(self.wait_for("window.scrollY", 0), 0, "the page scrolled back up")
        # The adapters click too.
        clicks = self.page.evaluate("window.clicks")
        out = self.anthropic({"action": "left_click", "coordinate": [x, y]})
        self.assertFalse(out["is_error"], out)
        self.assertEqual(self.wait_for("window.clicks", clicks + 1), clicks + 1)
        self.expect(self.dbx.post(f"/v1/sandboxes/{self.sid}/computer/openai",
                                  json={"type": "double_click", "x": x, "y": y}), 200)
        self.assertEqual(self.wait_for("window.clicks", clicks + 3), clicks + 3)

    def test_typing_any_unicode_text_and_key_combos(self):
        self.focus("#field")
        before = self.dbx.get(f"/v1/sandboxes/{self.sid}/screenshot", params={"format": "png"})
        out = self.act({"type": "type", "text": TEXT})
        self.assertTrue(out["changed"], out)
        self.assertEqual(self.wait_for("document.getElementById('field').value", TEXT), TEXT)
        after = self.dbx.get(f"/v1/sandboxes/{self.sid}/screenshot", params={"format": "png"})
        self.assertNotEqual(before.content, after.content, "the typed text is on the mirrored screen")
        self.act({"type": "key", "keys": "ctrl+a"}, {"type": "key", "keys": "Delete"})
        self.assertEqual(self.wait_for("document.getElementById('field').value", ""), "")
        # A long text in a script the keyboard map lacks, far more distinct characters than the
        # guest has spare keycodes: entered one by one; the field gets exactly the text.
        cjk = "".join(chr(0x4E00 + 7 * i) for i in range(90)) + " end"
        self.act({"type": "type", "text": cjk})
        self.assertEqual(self.wait_for("document.getElementById('field').value", cjk), cjk)
        self.act({"type": "key", "keys": "ctrl+a Delete"})
        # Several combos in one key action, and shifted characters.
        self.act({"type": "type", "text": "Ab"}, {"type": "key", "keys": "BackSpace Left shift+x"})
        self.assertEqual(self.wait_for("document.getElementById('field').value", "XA"), "XA")
        self.act({"type": "hold_key", "keys": "shift", "duration_ms": 100}, {"type": "type", "text": "z"})
        self.assertEqual(self.wait_for("document.getElementById('field').value", "XzA"), "XzA")

    def test_characters_beyond_ascii_are_entered_in_order_with_the_keys_around_them(self):
        # ASCII arrives as key presses; a character beyond it through GTK's Unicode entry (one
        # composition per character), never as a keysym the guest's keyboard map lacks (the
        # browser dropped those) and never pasted. Twice, so that the second time is no
        # different; Return still goes as a key between two entered characters.
        self.focus("#field")
        self.page.evaluate("window.keys = []; window.composed = []; const f = document.getElementById('field');"
                           "f.addEventListener('keydown', e => window.keys.push(e.key));"
                           "f.addEventListener('compositionend', e => window.composed.push(e.data))")
        for expected in ("aßb", "aßbaßb"):
            self.page.evaluate("window.keys = []; window.composed = []")
            self.act({"type": "type", "text": "aßb"})
            self.assertEqual(self.wait_for("document.getElementById('field').value", expected), expected)
            keys = self.page.evaluate("window.keys")
            self.assertNotIn("ß", keys, "ß is entered, not a key press")
            self.assertNotIn("v", keys, "nothing is pasted")
            self.assertEqual((keys[0], keys[-1]), ("a", "b"), keys)
            self.assertEqual(self.page.evaluate("window.composed"), ["ß"])
        self.page.evaluate("window.keys = []")
        self.act({"type": "type", "text": "é\tü"})
        self.assertIn("Tab", self.page.evaluate("window.keys"), "Tab is a key press between two entered characters")

    def test_a_key_that_is_a_character_beyond_ascii_is_entered_between_the_other_keys(self):
        # A key action of "é" alone would be a keysym the guest's keyboard map lacks; it is
        # entered like typed text, in order with the keys around it, each time alike.
        self.focus("#field")
        self.act({"type": "key", "keys": "ctrl+a Delete"})
        self.assertEqual(self.wait_for("document.getElementById('field').value", ""), "")
        self.page.evaluate("window.keys = []; document.getElementById('field')"
                           ".addEventListener('keydown', e => window.keys.push(e.key))")
        for expected in ("xéy世", "xéy世" * 2, "xéy世" * 3):
            self.act({"type": "key", "keys": "x é y U+4E16"})
            self.assertEqual(self.wait_for("document.getElementById('field').value", expected), expected)
        keys = self.page.evaluate("window.keys")
        self.assertNotIn("é", keys, "é is entered, not a key press")
        self.assertEqual(keys[0], "x", keys)

    def test_coordinates_in_a_declared_display_are_mapped_to_the_screen(self):
        w, h = self.screen
        dw, dh = w // 2, h // 2
        out = self.act({"type": "move", "x": 100, "y": 60}, display=f"{dw}x{dh}", screenshot=True)
        sx, sy = int((100 + 0.5) * w / dw), int((60 + 0.5) * h / dh)
        self.assertEqual(self.wait_for("window.last && [window.last.sx, window.last.sy]", [sx, sy]), [sx, sy],
                         "a display point lands on the centre of the screen pixels it covers")
        self.assertEqual(out["display"], {"width": dw, "height": dh, "scale_x": w / dw, "scale_y": h / dh})
        self.assertEqual(out["cursor"], {"x": 100, "y": 60})
        png = base64.b64decode(out["screenshot"]["data"])
        self.assertEqual(struct.unpack(">II", png[16:24]), (dw, dh), "the screenshot is in the display's size")
        cur = self.dbx.get(f"/v1/sandboxes/{self.sid}/cursor", params={"display": f"{dw}x{dh}"}).json()
        self.assertEqual((cur["x"], cur["y"]), (100, 60))
        self.assertEqual(self.dbx.get(f"/v1/sandboxes/{self.sid}/cursor").json()["x"], sx)
        shot = self.dbx.get(f"/v1/sandboxes/{self.sid}/screenshot", params={"display": f"{dw}x{dh}"})
        self.assertEqual((int(shot.headers["X-Image-Width"]), int(shot.headers["X-Image-Height"])), (dw, dh))
        self.assertEqual((int(shot.headers["X-Screen-Width"]), int(shot.headers["X-Screen-Height"])), (w, h))
        shot = self.dbx.get(f"/v1/sandboxes/{self.sid}/screenshot", params={"width": "320", "format": "jpeg"})
        self.assertEqual((int(shot.headers["X-Image-Width"]), int(shot.headers["X-Image-Height"])), (320, 320 * h // w))
        # A point outside the declared display is refused, not clamped.
        self.expect_error(self.act({"type": "move", "x": dw, "y": 1}, display=f"{dw}x{dh}", status=400),
                          400, "invalid_request", [f"between 0 and {dw - 1}"])
        # A click in display coordinates hits the element under the point it maps to.
        bx, by = self.centre_of("#go")
        clicks = self.page.evaluate("window.clicks")
        self.act({"type": "click", "x": bx * dw // w, "y": by * dh // h}, display=f"{dw}x{dh}")
        self.assertEqual(self.wait_for("window.clicks", clicks + 1), clicks + 1, "the scaled click hit the button")

    def test_a_display_declared_for_the_sandbox_is_every_call_s_default(self):
        w, h = self.screen
        dw, dh = w // 2, h // 2
        url = f"/v1/sandboxes/{self.sid}"
        sb = self.expect(self.dbx.request("PATCH", url, json={"display": {"width": dw, "height": dh}}), 200)
        try:
            self.assertEqual(sb["display"], {"width": dw, "height": dh})
            self.assertEqual(self.expect(self.dbx.get(url), 200)["display"], {"width": dw, "height": dh})
            shot = self.dbx.get(f"{url}/screenshot")
            self.assertEqual((int(shot.headers["X-Image-Width"]), int(shot.headers["X-Image-Height"])), (dw, dh))
            out = self.act({"type": "move", "x": 100, "y": 60})
            sx, sy = int((100 + 0.5) * w / dw), int((60 + 0.5) * h / dh)
            self.assertEqual(self.wait_for("window.last && [window.last.sx, window.last.sy]", [sx, sy]), [sx, sy])
            self.assertEqual(out["display"]["width"], dw)
            self.assertEqual(self.expect(self.dbx.get(f"{url}/cursor"), 200)["x"], 100)
            self.assert_image(self.anthropic({"action": "screenshot"}), (dw, dh))
            # A call's own display wins over the sandbox's.
            cur = self.expect(self.dbx.get(f"{url}/cursor", params={"display": f"{w}x{h}"}), 200)
            self.assertEqual((cur["x"], cur["y"]), (sx, sy))
            self.expect_error(self.act({"type": "move", "x": dw, "y": 1}, status=400), 400, "invalid_request",
                              [f"between 0 and {dw - 1}"])
            for bad in ("0x5", "12", {"width": 5}, 7):
                self.expect_error(self.dbx.request("PATCH", url, json={"display": bad}), 400, "invalid_request",
                                  ["display"])
        finally:
            sb = self.expect(self.dbx.request("PATCH", url, json={"display": None}), 200)
        self.assertIsNone(sb["display"])
        shot = self.dbx.get(f"{url}/screenshot")
        self.assertEqual((int(shot.headers["X-Image-Width"]), int(shot.headers["X-Image-Height"])), (w, h))

    def test_actions_are_on_the_timeline_with_who_sent_them(self):
        self.focus("#field")
        control = self.expect(self.dbx.post(f"/v1/sandboxes/{self.sid}/tokens", json={"scope": "control"}), 201)
        r = self.dbx.post(f"/v1/sandboxes/{self.sid}/actions", key=None, token=control["token"],
                          json={"actions": [{"type": "type", "text": "x"}, {"type": "wait", "duration_ms": 10}]})
        out = self.expect(r, 200)
        events = [e for e in self.all_events(self.sid) if e["kind"] == "action"]
        mine = [e for e in events if e["actor"]["id"] == control["id"]]
        self.assertEqual([e["action"]["type"] for e in mine], ["type", "wait"], events)
        self.assertEqual(mine[0]["actor"]["kind"], "token")
        self.assertEqual(mine[0]["action"]["params"], {"type": "type", "text": "x"})
        self.assertEqual(mine[1]["action"]["frame_seq"], out["frame_seq"])
        self.assertEqual(mine[1]["action"]["settled"], out["settled"])
        by_key = [e for e in events if e["actor"]["kind"] == "api_key"]
        self.assertTrue(by_key, "the calibration move was recorded as the API key's")

    def test_scopes_and_bad_input(self):
        dbx, sid = self.dbx, self.sid
        view = self.expect(dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": "view"}), 201)["token"]
        self.focus("#field")
        self.expect_error(dbx.post(f"/v1/sandboxes/{sid}/actions", key=None, token=view,
                                   json={"actions": [{"type": "type", "text": "no"}]}), 403, "forbidden")
        for path in ("computer/anthropic", "computer/openai"):
            self.expect_error(dbx.post(f"/v1/sandboxes/{sid}/{path}", key=None, token=view,
                                       json={"action": "type", "text": "no", "type": "type"}), 403, "forbidden")
        self.assertEqual(dbx.get(f"/v1/sandboxes/{sid}/cursor", key=None, token=view).status_code, 200)
        self.assertEqual(dbx.get(f"/v1/sandboxes/{sid}/screenshot", key=None, token=view).status_code, 200)
        w, h = self.screen
        cases = [
            ({}, "actions is required"),
            ({"actions": []}, "1 to 100"),
            ({"actions": [{"type": "wait", "duration_ms": 1}] * 101}, "1 to 100"),
            ({"actions": [{"type": "teleport"}]}, "type"),
            ({"actions": [{"x": 1}]}, "type is required"),
            ({"actions": [{"type": "move"}]}, "required"),
            ({"actions": [{"type": "move", "x": 1}]}, "together"),
            ({"actions": [{"type": "move", "x": w, "y": 0}]}, "actions[0].x"),
            ({"actions": [{"type": "click", "count": 11}]}, "count"),
            ({"actions": [{"type": "click", "button": "forward"}]}, "button"),
            ({"actions": [{"type": "key", "keys": "ctrl+nonsense"}]}, "unknown key"),
            ({"actions": [{"type": "key"}]}, "keys is required"),
            ({"actions": [{"type": "type"}]}, "text is required"),
            ({"actions": [{"type": "type", "text": "x" * 10001}]}, "10000"),
            ({"actions": [{"type": "type", "text": "bell\u0007"}]}, "U+0007"),
            ({"actions": [{"type": "scroll", "dy": 0}]}, "non-zero"),
            ({"actions": [{"type": "scroll", "dy": 101}]}, "dy"),
            ({"actions": [{"type": "drag", "path": [[1, 1]]}]}, "2 to 1000"),
            ({"actions": [{"type": "drag", "path": [[1, 1], {"x": 1}]}]}, "path[1]"),
            ({"actions": [{"type": "wait", "duration_ms": 30001}]}, "duration_ms"),
            ({"actions": [{"type": "hold_key", "keys": "a b"}]}, "keys"),
            ({"actions": [{"type": "move", "x": 1, "y": 1, "speed": 3}]}, "speed"),
            ({"actions": [{"type": "move", "x": 1, "y": 1}], "display": "0x10"}, "display"),
            ({"actions": [{"type": "move", "x": 1, "y": 1}], "settle": {"quiet_ms": -1}}, "quiet_ms"),
            ({"actions": [{"type": "move", "x": 1, "y": 1}], "screenshot": {"format": "gif"}}, "format"),
        ]
        for body, mentions in cases:
            with self.subTest(body=str(body)[:80]):
                self.expect_error(dbx.post(f"/v1/sandboxes/{sid}/actions", json=body), 400, "invalid_request",
                                  [mentions])
        for q, mentions in [({"display": "12"}, "WIDTHxHEIGHT"), ({"width": "0"}, "width"), ({"format": "bmp"}, "format"),
                            ({"zoom": "2"}, "zoom")]:
            self.expect_error(dbx.get(f"/v1/sandboxes/{sid}/screenshot", params=q), 400, "invalid_request", [mentions])
        self.expect_error(dbx.get(f"/v1/sandboxes/{sid}/cursor", params={"display": "axb"}), 400, "invalid_request")
        self.expect_error(dbx.post("/v1/sandboxes/sb-0000000000000000/actions",
                                   json={"actions": [{"type": "wait"}]}), 404, "not_found")
        # Nothing was performed by any refused call.
        self.assertEqual(self.field(), "")

    def anthropic(self, tool_input, display=None, status=200):
        params = {"display": display} if display else {}
        r = self.dbx.post(f"/v1/sandboxes/{self.sid}/computer/anthropic", json=tool_input, params=params, timeout=120)
        return self.expect(r, status, f"anthropic {tool_input}") if status == 200 else r

    def assert_image(self, result, size):
        self.assertFalse(result["is_error"], result)
        block = result["content"][0]
        self.assertEqual(block["type"], "image")
        self.assertEqual(block["source"]["media_type"], "image/png")
        png = base64.b64decode(block["source"]["data"])
        self.assertEqual(struct.unpack(">II", png[16:24]), size)

    def test_anthropic_tool_calls_as_the_model_emits_them(self):
        w, h = self.screen
        dw, dh = w // 2, h // 2  # the tool was declared with half the screen
        disp = f"{dw}x{dh}"
        self.assert_image(self.anthropic({"action": "screenshot"}, disp), (dw, dh))
        self.assert_image(self.anthropic({"action": "mouse_move", "coordinate": [200, 150]}, disp), (dw, dh))
        sx, sy = int(200.5 * w / dw), int(150.5 * h / dh)
        self.assertEqual(self.wait_for("window.last && [window.last.sx, window.last.sy]", [sx, sy]), [sx, sy])
        out = self.anthropic({"action": "cursor_position"}, disp)
        self.assertEqual(out["content"], [{"type": "text", "text": "X=200,Y=150"}])
        self.focus("#field")
        self.assert_image(self.anthropic({"action": "type", "text": TEXT}, disp), (dw, dh))
        self.assertEqual(self.wait_for("document.getElementById('field').value", TEXT), TEXT)
        self.anthropic({"action": "key", "text": "ctrl+a"}, disp)
        self.anthropic({"action": "key", "text": "Delete"}, disp)
        self.assertEqual(self.wait_for("document.getElementById('field').value", ""), "")
        self.anthropic({"action": "hold_key", "text": "shift", "duration": 0.2}, disp)
        self.assert_image(self.anthropic({"action": "zoom", "region": [0, 0, dw // 4, dh // 4]}, disp), (w // 4, h // 4))
        self.assert_image(self.anthropic({"action": "wait", "duration": 0.1}, disp), (dw, dh))
        # A tool_use block comes back as its tool_result.
        out = self.anthropic({"type": "tool_use", "id": "toolu_01", "name": "computer",
                              "input": {"action": "screenshot"}}, disp)
        self.assertEqual(out["tool_use_id"], "toolu_01")
        # The model's mistakes are tool errors for the model to read; nothing is performed.
        for bad, mentions in [({"action": "teleport"}, "unknown action"),
                              ({"action": "left_click", "coordinate": [dw, 0]}, "outside"),
                              ({"action": "left_click", "coordinate": [1]}, "[x, y]"),
                              ({"action": "left_click_drag", "coordinate": [1, 1]}, "start_coordinate"),
                              ({"action": "key"}, "needs text"),
                              ({"action": "key", "text": "ctrl+nope"}, "unknown key"),
                              ({"action": "type", "text": "x", "colour": "red"}, "unknown parameter"),
                              ({"action": "scroll", "scroll_direction": "sideways"}, "scroll_direction"),
                              ({"action": "scroll", "scroll_direction": "up", "scroll_amount": 0}, "scroll_amount"),
                              ({"action": "zoom", "region": [10, 10, 5, 5]}, "region"),
                              ({"action": "wait", "duration": 1000}, "duration")]:
            out = self.anthropic(bad, disp)
            self.assertTrue(out["is_error"], out)
            self.assertIn(mentions, out["content"][0]["text"])
        self.expect_error(self.anthropic([1, 2], disp, status=400), 400, "invalid_request")
        self.expect_error(self.dbx.post(f"/v1/sandboxes/{self.sid}/computer/anthropic", params={"display": "9"},
                                        json={"action": "screenshot"}), 400, "invalid_request", ["display"])
        kinds = [e["action"]["type"] for e in self.all_events(self.sid) if e["kind"] == "action"]
        for k in ("move", "type", "key", "hold_key", "wait"):
            self.assertIn(k, kinds)

    def test_openai_computer_calls_as_the_model_emits_them(self):
        dbx, sid = self.dbx, self.sid
        url = f"/v1/sandboxes/{sid}/computer/openai"
        out = self.expect(dbx.post(url, json={"type": "computer_call", "call_id": "call_1",
                                              "action": {"type": "move", "x": 210, "y": 170},
                                              "pending_safety_checks": []}), 200)
        self.assertEqual(out["type"], "computer_call_output")
        self.assertEqual(out["call_id"], "call_1")
        self.assertTrue(out["output"]["image_url"].startswith("data:image/png;base64,"))
        self.assertEqual(self.wait_for("window.last && [window.last.sx, window.last.sy]", [210, 170]), [210, 170])
        self.focus("#field")
        self.expect(dbx.post(url, json={"type": "computer_call", "call_id": "call_2", "actions": [
            {"type": "type", "text": TEXT}, {"type": "screenshot"}]}), 200)
        self.assertEqual(self.wait_for("document.getElementById('field').value", TEXT), TEXT)
        self.expect(dbx.post(url, json={"type": "computer_call", "call_id": "call_3", "actions": [
            {"type": "keypress", "keys": ["CTRL", "A"]}, {"type": "keypress", "keys": ["BACKSPACE"]}]}), 200)
        self.assertEqual(self.wait_for("document.getElementById('field').value", ""), "")
        out = self.expect(dbx.post(url, json={"type": "screenshot"}, params={"format": "jpeg", "quality": "60"}), 200)
        self.assertTrue(out["output"]["image_url"].startswith("data:image/jpeg;base64,"))
        self.expect(dbx.post(url, json={"type": "wait", "duration_ms": 50}), 200)
        for bad, mentions in [({"type": "click", "x": 1, "y": 1, "button": "forward"}, "forward"),
                              ({"type": "click", "x": 1}, "y is required"),
                              ({"type": "click", "x": 1, "y": 99999}, "outside"),
                              ({"type": "keypress", "keys": ["NOPE"]}, "unknown key"),
                              ({"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": 0}, "non-zero"),
                              ({"type": "drag", "path": [{"x": 1, "y": 1}]}, "path"),
                              ({"type": "fly"}, "unknown action"),
                              ({"type": "computer_call", "call_id": "x"}, "action or actions")]:
            self.expect_error(dbx.post(url, json=bad), 400, "invalid_request", [mentions])
        self.assertEqual(self.field(), "")

    def test_paused_sandbox_refuses_and_resumed_one_reconnects(self):
        dbx, sid = self.dbx, self.sid
        self.expect(dbx.post(f"/v1/sandboxes/{sid}/pause", timeout=120), 200)
        self.expect_error(self.act({"type": "move", "x": 1, "y": 1}, status=409), 409, "invalid_state")
        self.expect_error(dbx.get(f"/v1/sandboxes/{sid}/screenshot"), 409, "invalid_state")
        self.expect(dbx.post(f"/v1/sandboxes/{sid}/resume", timeout=120), 200)
        self.page.close()  # pausing ended the CDP session
        self.page = CdpPage(dbx.port, sid, self.target, dbx.key)
        self.focus("#field")
        out = self.act({"type": "type", "text": "back"})
        self.assertEqual(self.wait_for("document.getElementById('field').value", "back"), "back", describe_out(out))

def describe_out(out):
    return {k: v for k, v in out.items() if k != "screenshot"}


if __name__ == "__main__":
    unittest.main()
