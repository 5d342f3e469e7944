// CDP clients for deskbox's end-to-end tests: each subcommand drives a sandbox's Chromium
// through deskboxd's CDP proxy with a real client library and prints one JSON line with what it
// saw. Exit status 0 when the scenario ran (the JSON says how it went), 1 on a failure.
//
//   node cdp_client.mjs playwright <endpoint> [authorization]   connectOverCDP, page, form, screenshot
//   node cdp_client.mjs playwright-context <endpoint> [authorization]   the same in a new context
//   node cdp_client.mjs puppeteer <browserWSEndpoint>            puppeteer.connect, page, evaluate
//   node cdp_client.mjs hold <wsURL> [authorization]             raw WebSocket: waits for the close frame
//   node cdp_client.mjs proxy-context <endpoint> <proxyServer> [authorization]
//   node cdp_client.mjs bench <wsURL> <calls>                     Runtime.evaluate("1") round trips
//   node cdp_client.mjs existing-pages <endpoint> [authorization] what the browser's open pages say
import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';
import WebSocket from 'ws';

const [cmd, endpoint, ...rest] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const GUEST_TIMEOUT_MS = 120000;
const headersFrom = (auth) => (auth ? { Authorization: auth } : {});

async function playwrightScenario(url, auth, ownContext) {
  const t0 = performance.now();
  const browser = await chromium.connectOverCDP(url, { headers: headersFrom(auth), timeout: 60000 });
  const connectMs = performance.now() - t0;
  // Scripts sharing one browser each take their own context (a window of its own), as Playwright
  // scripts usually do; a lone script may use the default one.
  const context = ownContext ? await browser.newContext() : (browser.contexts()[0] ?? (await browser.newContext()));
  // Guests are emulated here (no hardware virtualisation): a page load can take longer than
  // Playwright's 30 s default while another guest restores beside it.
  context.setDefaultTimeout(GUEST_TIMEOUT_MS);
  const page = await context.newPage();
  await page.setContent(
    '<title>deskbox form</title><form><input id="name"><input id="n" type="number"><button id="go" type="button" onclick="document.title=document.getElementById(\'name\').value">go</button></form>');
  await page.fill('#name', 'héllo from playwright');
  await page.fill('#n', '42');
  await page.click('#go');
  const title = await page.title();
  const value = await page.evaluate(() => Number(document.getElementById('n').value) * 2);
  const png = await page.screenshot({ fullPage: true });
  await page.goto('data:text/html,<title>data url</title><p>ok</p>');
  const dataTitle = await page.title();
  await page.close();
  if (ownContext) await context.close();
  await browser.close();  // for a CDP-connected browser this disconnects, the browser stays
  return {
    ok: title === 'héllo from playwright' && value === 84 && dataTitle === 'data url' &&
      png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])),
    title, value, dataTitle, screenshotBytes: png.length, connectMs: Math.round(connectMs),
  };
}

// The pages a connecting script finds open: when each document began (performance.timeOrigin,
// ms since the epoch), random bytes from it, and whether it answers after a navigation.
async function existingPagesScenario(url, auth) {
  const t0 = performance.now();
  const browser = await chromium.connectOverCDP(url, { headers: headersFrom(auth), timeout: 120000 });
  const connectMs = performance.now() - t0;
  const pages = [];
  for (const context of browser.contexts()) {
    for (const page of context.pages()) {
      const seen = await page.evaluate(() => ({
        origin: performance.timeOrigin,
        random: Array.from(crypto.getRandomValues(new Uint8Array(16))).join(','),
        math: String(Math.random()),
      }));
      await page.goto('data:text/html,<title>still here</title>');
      pages.push({ ...seen, title: await page.title() });
    }
  }
  await browser.close();
  return { ok: pages.length > 0 && pages.every((p) => p.title === 'still here'), pages, connectMs: Math.round(connectMs) };
}

async function puppeteerScenario(wsEndpoint) {
  const browser = await puppeteer.connect({ browserWSEndpoint: wsEndpoint, defaultViewport: null, protocolTimeout: 60000 });
  const version = await browser.version();
  const page = await browser.newPage();
  await page.setContent('<title>puppeteer</title><div id="x">21</div>');
  const doubled = await page.$eval('#x', (el) => Number(el.textContent) * 2);
  const title = await page.title();
  await page.close();
  await browser.disconnect();
  return { ok: doubled === 42 && title === 'puppeteer', version, doubled, title };
}

function holdScenario(url, auth) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { headers: headersFrom(auth), maxPayload: 256 * 1024 * 1024 });
    let opened = false;
    const timer = setTimeout(() => resolve({ ok: false, opened, error: 'no close frame within 120 s' }), 120000);
    ws.on('open', () => {
      opened = true;
      ws.send(JSON.stringify({ id: 1, method: 'Browser.getVersion' }));
    });
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString());
      if (m.id === 1) process.stdout.write(JSON.stringify({ ready: true, product: m.result?.product }) + '\n');
    });
    ws.on('unexpected-response', (_req, res) => {
      clearTimeout(timer);
      resolve({ ok: false, opened, status: res.statusCode });
    });
    ws.on('error', (e) => { if (!opened) { clearTimeout(timer); resolve({ ok: false, opened, error: String(e) }); } });
    ws.on('close', (code, reason) => {
      clearTimeout(timer);
      resolve({ ok: true, opened, code, reason: reason.toString() });
    });
  });
}

async function proxyContextScenario(url, proxyServer, auth) {
  const browser = await chromium.connectOverCDP(url, { headers: headersFrom(auth), timeout: 60000 });
  const context = await browser.newContext({ proxy: { server: proxyServer } });
  const page = await context.newPage();
  let loaded = false, error = '';
  try {
    const res = await page.goto('http://deskbox-test.invalid/', { timeout: 20000 });
    loaded = !!res && res.ok();
  } catch (e) {
    error = String(e).split('\n')[0];
  }
  await context.close();
  await browser.close();
  return { ok: true, loaded, error };
}

function benchScenario(url, calls) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { maxPayload: 64 * 1024 * 1024 });
    const times = [];
    let id = 0, sessionId = null, t0 = 0;
    const send = (m) => ws.send(JSON.stringify(m));
    const next = () => {
      t0 = performance.now();
      send({ id: ++id, method: 'Runtime.evaluate', params: { expression: '1', returnByValue: true }, sessionId });
    };
    ws.on('open', () => send({ id: ++id, method: 'Target.createTarget', params: { url: 'about:blank' } }));
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString());
      if (m.id === undefined) return;
      if (m.result?.targetId) return send({ id: ++id, method: 'Target.attachToTarget', params: { targetId: m.result.targetId, flatten: true } });
      if (m.result?.sessionId) { sessionId = m.result.sessionId; return next(); }
      if (m.error) return reject(new Error(JSON.stringify(m.error)));
      times.push(performance.now() - t0);
      if (times.length < calls) return next();
      ws.close();
      times.sort((a, b) => a - b);
      const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
      resolve({ ok: true, calls: times.length, p50: q(0.5), p90: q(0.9), p99: q(0.99) });
    });
    ws.on('error', reject);
  });
}

try {
  let r;
  if (cmd === 'playwright') r = await playwrightScenario(endpoint, rest[0], false);
  else if (cmd === 'playwright-context') r = await playwrightScenario(endpoint, rest[0], true);
  else if (cmd === 'puppeteer') r = await puppeteerScenario(endpoint);
  else if (cmd === 'hold') r = await holdScenario(endpoint, rest[0]);
  else if (cmd === 'proxy-context') r = await proxyContextScenario(endpoint, rest[0], rest[1]);
  else if (cmd === 'existing-pages') r = await existingPagesScenario(endpoint, rest[0]);
  else if (cmd === 'bench') r = await benchScenario(endpoint, Number(rest[0] ?? 1000));
  else throw new Error(`unknown command ${cmd}`);
  out(r);
  process.exit(0);
} catch (e) {
  out({ ok: false, error: String(e && e.stack || e) });
  process.exit(1);
}
