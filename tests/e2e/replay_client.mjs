// The replay page in a real browser: headless Chromium (Debian's, driven by playwright-core) opens
// deskboxd's /replay page, lets the video play, then seeks to events and reads the frames shown.
//
//   node replay_client.mjs URL '{"seeks": [{"seq": 12, "points": [[x, y], ...]}, ...]}'
//
// Prints one JSON line:
//   {"status": 200, "events": [seq, ...], "rows": [seq, ...], "verify_ok": true,
//    "video": {"width": w, "height": h, "advanced": seconds, "duration": d},
//    "seeks": [{"seq": 12, "time": t, "current_row": 12, "pixels": [[r, g, b], ...]}], "errors": []}
// or {"status": 403, "body": "..."} when the page itself is refused.
import { chromium } from 'playwright-core';

const [url, planText] = process.argv.slice(2);
const plan = JSON.parse(planText || '{}');
const STEP_MS = 60000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--autoplay-policy=no-user-gesture-required'],
  timeout: STEP_MS,
});
const out = { errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on('pageerror', (e) => out.errors.push(String(e)));
  const resp = await page.goto(url, { timeout: STEP_MS });
  out.status = resp.status();
  if (out.status !== 200) {
    out.body = (await resp.text()).slice(0, 500);
  } else {
    await page.waitForFunction(() => window.deskboxReplay && window.deskboxReplay.ready, null, { timeout: STEP_MS });
    await page.evaluate(() => window.deskboxReplay.ready);
    out.events = await page.evaluate(() => window.deskboxReplay.events.map((e) => e.seq));
    out.rows = await page.evaluate(() => [...document.querySelectorAll('.event[data-seq]')].map((r) => Number(r.dataset.seq)));
    out.verify_ok = await page.evaluate(() => document.getElementById('verify')?.dataset.ok);
    // Play: the video's clock advances and it has the screen's size.
    out.video = await page.evaluate(async () => {
      const v = document.querySelector('video');
      await new Promise((resolve) => {
        if (v.readyState >= 2) resolve();
        else v.addEventListener('loadeddata', resolve, { once: true });
      });
      v.muted = true;
      const t0 = v.currentTime;
      await v.play();
      await new Promise((r) => setTimeout(r, 2500));
      v.pause();
      return { width: v.videoWidth, height: v.videoHeight, advanced: v.currentTime - t0, duration: v.duration,
               error: v.error ? v.error.message : null };
    });
    out.seeks = [];
    for (const s of plan.seeks || []) {
      const r = await page.evaluate(async ({ seq, points }) => {
        const v = document.querySelector('video');
        const seeked = new Promise((resolve) => v.addEventListener('seeked', resolve, { once: true }));
        window.deskboxReplay.seekToEvent(seq);
        await Promise.race([seeked, new Promise((r) => setTimeout(r, 20000))]);
        // The frame for the new position is decoded and presented.
        await new Promise((resolve) => {
          if (v.requestVideoFrameCallback) v.requestVideoFrameCallback(() => resolve());
          setTimeout(resolve, 1500);
        });
        const c = document.createElement('canvas');
        c.width = v.videoWidth;
        c.height = v.videoHeight;
        const g = c.getContext('2d');
        g.drawImage(v, 0, 0);
        const pixels = points.map(([x, y]) => Array.from(g.getImageData(x, y, 1, 1).data.slice(0, 3)));
        const cur = document.querySelector('.event.current');
        return { seq, time: v.currentTime, current_row: cur ? Number(cur.dataset.seq) : null, pixels };
      }, s);
      out.seeks.push(r);
    }
  }
} catch (e) {
  out.error = String(e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
