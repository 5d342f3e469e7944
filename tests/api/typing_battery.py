"""The typing battery (issue: exact typing under load): strings of mixed scripts typed into a real
guest's Chromium textarea and into xterm while two other sandboxes burn CPU, each compared
character by character with what arrived. tests/api/test_typing.py runs it with 40 strings in
CI; the long run (scripts/long-run) runs it standalone with 300:

    DESKBOX_TEMPLATE=... DESKBOX_BIN_DIR=build/bin DESKBOX_SOURCE_DIR=. \\
        python3 tests/api/typing_battery.py --strings 300 --out typing.json

and prints the wrong characters and the characters per second of each target."""

import argparse
import json
import random
import sys
import time

# Pieces the strings are made of: words with diacritics, other scripts, emoji (with ZWJ
# sequences, skin tones and flags), combining marks on Latin letters, ASCII punctuation.
PIECES = [
    # Latin with diacritics, precomposed
    "héllo", "wörld", "façade", "naïve", "ñandú", "Ærøskøbing", "Łódź", "crème brûlée", "São Paulo",
    "Dvořák", "İstanbul", "straße", "ÅÄÖ", "œuvre",
    # combining marks on Latin letters (decomposed)
    "e\u0301te\u0301", "n\u0303", "a\u0300\u0323", "Zu\u0308rich", "o\u0302\u0301",
    # Cyrillic, Greek
    "Привет", "мир", "Ёлка", "Γειά σου", "κόσμε", "ΑΩ",
    # CJK, Japanese kana, Korean
    "世界", "中文输入", "日本語", "ひらがな", "カタカナ", "한국어", "漢字",
    # Arabic and Hebrew (right to left), with marks
    "مرحبا", "بِسْمِ", "العربية", "שלום", "עִבְרִית",
    # Devanagari, Thai
    "नमस्ते", "ภาษาไทย",
    # emoji: plain, skin tone, ZWJ sequences, flags, keycap
    "🙂", "😀", "👍🏽", "👩\u200d💻", "👨\u200d👩\u200d👧", "🏳\ufe0f\u200d🌈", "🇺🇸", "🇯🇵", "🇩🇪", "1\ufe0f\u20e3",
    # typography and symbols
    "—", "–", "‘quoted’", "“double”", "«guillemets»", "…", "€100", "±½", "→", "✓", "\u00a0",
    # ASCII
    "ASCII", "plain text", "a+b=c", "(x)", "[1, 2]", "path/to/file", "user@host", "50%", "#tag",
    "quotes \"' `", "~^|\\", "{}", "<>",
]


def make_strings(n, seed=23):
    """n strings of 3-7 pieces joined by spaces or nothing; the same n always gives the same."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(PIECES) for _ in range(rng.randint(3, 7))]
        text = ""
        for p in parts:
            sep = rng.choice([" ", " ", " ", ""]) if text else ""
            text += sep + p
        out.append(text)
    # The cases a new user hit first, always in the battery.
    out[:2] = ["héllo wörld — 世界 🙂 ñ", "quotes \"‘’“”\" «»"][: min(2, n)]
    return out


def wrong_characters(expected, got):
    """Edit distance in code points: characters lost, added or changed."""
    a, b = list(expected), list(got)
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
        prev = cur
    return prev[-1]


class Battery:
    """Types strings into one sandbox through the API (`dbx`, a harness.Deskbox) and checks them."""

    def __init__(self, dbx, sid, log=print):
        self.dbx, self.sid, self.log = dbx, sid, log

    def act(self, *actions):
        r = self.dbx.post(f"/v1/sandboxes/{self.sid}/actions", json={"actions": list(actions), "settle": False},
                          timeout=300)
        if r.status_code != 200:
            raise AssertionError(f"actions {actions}: {r.status_code} {r.text[:500]}")
        return r.json()

    def anthropic(self, tool_input):
        r = self.dbx.post(f"/v1/sandboxes/{self.sid}/computer/anthropic", json=tool_input, timeout=300)
        if r.status_code != 200 or r.json().get("is_error"):
            raise AssertionError(f"anthropic {tool_input}: {r.status_code} {r.text[:500]}")

    def exec(self, argv, timeout=60):
        body = {"argv": argv, "env": {"DISPLAY": ":0", "LANG": "C.UTF-8"}, "timeout_s": timeout}
        r = self.dbx.post(f"/v1/sandboxes/{self.sid}/exec", json=body, timeout=timeout + 30)
        if r.status_code != 200:
            raise AssertionError(f"exec {argv}: {r.status_code} {r.text[:500]}")
        return r.json()

    def focused_class(self):
        return self.exec(["/usr/lib/deskbox/deskbox-x11", "focus"])["stdout"].rstrip("\n").partition("\t")[2]

    def chromium(self, page, strings):
        """Types each string into the page's focused textarea (alternately by the actions API and
        the Anthropic adapter; cleared in turn by ctrl+a Delete and through CDP), reads it back
        through CDP. Returns (wrong characters, characters, seconds from each call until the page
        held its text, failures)."""
        wrong = chars = 0
        seconds = 0.0
        failures = []
        for i, text in enumerate(strings):
            if i % 2 == 0:
                self.act({"type": "key", "keys": "ctrl+a"}, {"type": "key", "keys": "Delete"})
            else:
                page.evaluate("document.getElementById('area').value = ''")
            deadline = time.time() + 30
            while page.evaluate("document.getElementById('area').value") != "":
                if time.time() > deadline:
                    raise AssertionError("the textarea did not empty")
                time.sleep(0.05)
            t0 = time.time()
            if i % 2 == 0:
                self.act({"type": "type", "text": text})
            else:
                self.anthropic({"action": "type", "text": text})
            # The text is complete once it stops changing; compare then. The time counted is
            # until the page holds the text (Chromium handles the keys after the call returns).
            got, still_since = None, time.time()
            deadline = time.time() + 60
            while time.time() < deadline:
                now = page.evaluate("document.getElementById('area').value")
                if now == text:
                    got = now
                    break
                if now != got:
                    got, still_since = now, time.time()
                elif time.time() - still_since > 3:
                    break
                time.sleep(0.05)
            seconds += (time.time() if got == text else still_since) - t0
            w = wrong_characters(text, got or "")
            wrong += w
            chars += len(text)
            if w:
                failures.append({"expected": text, "got": got})
                self.log(f"  chromium WRONG ({w}): {text!r} -> {got!r}")
        return wrong, chars, seconds, failures

    def xterm(self, strings, out_path="/tmp/typed.txt"):
        """Starts xterm running `cat > out_path`, types each string and Return, and compares the
        file's lines. Returns (wrong characters, characters, seconds typing, failures)."""
        self.exec(["sh", "-c", f"rm -f {out_path}; setsid xterm -u8 -geometry 100x30+40+40 -e sh -c "
                   f"'cat > {out_path}' >/dev/null 2>&1 < /dev/null &"])
        deadline = time.time() + 60
        while self.focused_class() != "XTerm":
            if time.time() > deadline:
                raise AssertionError("xterm did not get the keyboard focus")
            time.sleep(0.2)
        # The time counted runs until cat has exited, i.e. xterm has handled every key.
        t0 = time.time()
        for text in strings:
            self.act({"type": "type", "text": text + "\n"})
        # ctrl+d ends cat; the file then holds everything typed.
        self.act({"type": "key", "keys": "ctrl+d"})
        deadline = time.time() + 60
        while True:
            alive = self.exec(["sh", "-c", "pgrep -x xterm >/dev/null && echo yes || echo no"])["stdout"].strip()
            if alive == "no":
                seconds = time.time() - t0
                break
            if time.time() > deadline:
                raise AssertionError("xterm did not exit after ctrl+d")
            time.sleep(0.3)
        content = self.exec(["cat", out_path])["stdout"]
        lines = content.split("\n")
        wrong = chars = 0
        failures = []
        for i, text in enumerate(strings):
            got = lines[i] if i < len(lines) else ""
            w = wrong_characters(text, got)
            wrong += w
            chars += len(text)
            if w:
                failures.append({"expected": text, "got": got})
                self.log(f"  xterm WRONG ({w}): {text!r} -> {got!r}")
        extra = "\n".join(lines[len(strings):]).strip()
        if extra:
            wrong += len(extra)
            failures.append({"expected": "", "got": extra})
        return wrong, chars, seconds, failures


def main():
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    sys.path.insert(0, os.path.join(here, "..", "bench"))
    import benchlib  # the figures' JSON layout (scripts/bench-report renders it)
    import test_typing  # the deployment and page set-up, shared with the CI test

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strings", type=int, default=300)
    ap.add_argument("--out", help="figures as JSON")
    args = ap.parse_args()
    res = benchlib.Results("typing_battery", args, long_run=True)
    res.template = os.environ.get("DESKBOX_TEMPLATE")
    figures = test_typing.run_battery(args.strings, log=print)
    res.figure("strings", figures["strings"])
    res.figure("busy_sandboxes", figures["busy_sandboxes"])
    for app in ("chromium", "xterm"):
        f = figures[app]
        res.figure(f"{app}_characters", f["characters"])
        res.figure(f"{app}_characters_per_s", f["characters_per_second"])
        res.figure(f"{app}_wrong_characters", f["wrong_characters"])
        res.figure(f"{app}_wrong_strings", len(f["failures"]))
        res.target(f"{app}_wrong_characters", f["wrong_characters"], "==", 0, kind="correctness")
    for app in ("chromium", "xterm"):
        for failure in figures[app]["failures"][:20]:
            print(f"{app} wrong: {failure['expected']!r} -> {failure['got']!r}")
    sys.exit(res.finish(args.out))


if __name__ == "__main__":
    main()
