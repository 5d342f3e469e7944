// The live view in a real browser: headless Chromium (Debian's, driven by playwright-core) opens
// deskboxd's /view page, which loads noVNC and connects to /vnc.
//
//   node viewer_client.mjs URL [TEXT]
//
// Opens URL and waits until the page says it is connected and noVNC's canvas shows the desktop
// (more than a handful of colours). With TEXT, the viewer then types it into the canvas, with
// noVNC's view-only switch turned off first, as a viewer who edits the page would: whether the
// guest sees the keys is then up to deskboxd. Prints one JSON line:
//   {"status": 200, "state": "connected", "colours": 57, "size": [w, h], "typed": true}
// or {"status": 401, "body": "..."} when the page itself is refused.
import { chromium } from 'playwright-core';

const [url, text] = process.argv.slice(2);
const STEP_MS = 120000;  // an emulated guest's first full update can take tens of seconds

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu'],
  timeout: STEP_MS,
});
const out = {};
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const resp = await page.goto(url, { timeout: STEP_MS });
  out.status = resp.status();
  if (out.status !== 200) {
    out.body = (await resp.text()).slice(0, 500);
  } else {
    await page.waitForSelector('#state[data-state="connected"]', { timeout: STEP_MS });
    out.state = 'connected';
    // The canvas shows the desktop: count distinct colours over a grid of samples.
    const deadline = Date.now() + STEP_MS;
    for (;;) {
      const shot = await page.evaluate(() => {
        const c = document.querySelector('#screen canvas');
        if (!c || !c.width || !c.height) return { colours: 0, size: [0, 0] };
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let y = 0; y < c.height; y += 7)
          for (let x = 0; x < c.width; x += 7) {
            const i = (y * c.width + x) * 4;
            seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
          }
        return { colours: seen.size, size: [c.width, c.height] };
      });
      out.colours = shot.colours;
      out.size = shot.size;
      if (shot.colours > 8 || Date.now() > deadline) break;
      await page.waitForTimeout(500);
    }
    if (text) {
      await page.evaluate(() => { window.deskboxViewer.viewOnly = false; window.deskboxViewer.focus(); });
      await page.keyboard.type(text, { delay: 60 });
      await page.waitForTimeout(1000);
      out.typed = true;
    }
    out.state = await page.getAttribute('#state', 'data-state');
  }
  out.errors = errors;
} catch (e) {
  out.error = String(e).slice(0, 1000);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
