#!/usr/bin/env python3
"""Runtime.evaluate("1") round trips on one page session: through deskboxd's CDP proxy, and
directly to the guest's Chromium from inside the sandbox's network namespace (the baseline), in
the same run, alternating; and connectOverCDP from call to ready, both ways, alternating.

Target: proxy / direct <= 1.1x for the round trips' median, a same-run ratio (CI checks it).
connectOverCDP has no target: its ratio is printed beside.

  cdp_bench.py [--calls N] [--rounds N] [--connects N] [--out FILE] [--long-run]
      (default 1000 calls, 3 rounds and 5 connectOverCDP runs per side; --out: figures and
      targets as JSON; --long-run: no absolute target here, accepted for a uniform command line)
"""

import argparse
import json
import os
import subprocess

from benchlib import LONG_RUN_HELP, Deskbox, Results, pct, wait_quiet

E2E = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e")


def node(args, netns=None):
    cmd = ["node", os.path.join(E2E, "cdp_client.mjs"), *args]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    p = subprocess.run(cmd, cwd=E2E, capture_output=True, text=True, timeout=900)
    line = [l for l in p.stdout.splitlines() if l.strip()][-1]
    r = json.loads(line)
    if not r.get("ok"):
        raise SystemExit(f"{args[0]}: {r} {p.stderr[-1000:]}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connects", type=int, default=5, help="connectOverCDP runs per side")
    ap.add_argument("--busy-host", action="store_true",
                    help="do not wait for an idle host between runs (the sides still alternate)")
    ap.add_argument("--out", help="figures and targets as JSON")
    ap.add_argument("--long-run", action="store_true", help=LONG_RUN_HELP)
    args = ap.parse_args()
    res = Results("cdp_bench", args, args.long_run)
    quiet = (lambda: None) if args.busy_host else wait_quiet
    with Deskbox(warm_pool=0) as dbx:
        res.template = dbx.template
        sb = dbx.post("/v1/sandboxes", json={"timeout_s": 3600}, timeout=300).json()
        sid = sb["id"]
        (slot,) = set(dbx.qemu_processes().values())
        netns = f"{dbx.netns_prefix}{slot}"
        token = dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": "cdp"}).json()["token"]
        version = dbx.get(f"/v1/sandboxes/{sid}/cdp/json/version", key=None, query_token=token).json()
        browser_id = version["webSocketDebuggerUrl"].split("/devtools/browser/")[1].split("?")[0]
        proxied = version["webSocketDebuggerUrl"]
        direct = f"ws://10.88.0.2:9222/devtools/browser/{browser_id}"
        proxy_p50, direct_p50, proxy_p90, direct_p90 = [], [], [], []
        for rnd in range(args.rounds):
            quiet()
            d = node(["bench", direct, str(args.calls)], netns=netns)
            quiet()
            p = node(["bench", proxied, str(args.calls)])
            direct_p50.append(d["p50"])
            proxy_p50.append(p["p50"])
            direct_p90.append(d["p90"])
            proxy_p90.append(p["p90"])
            print(f"round {rnd + 1}: direct p50 {d['p50']:.3f} ms p90 {d['p90']:.3f} | "
                  f"proxy p50 {p['p50']:.3f} ms p90 {p['p90']:.3f}", flush=True)
        # connectOverCDP, alternating: straight to the guest from inside the netns (the
        # baseline), then through deskboxd.
        connects, direct_connects = [], []
        for _ in range(args.connects):
            quiet()
            r = node(["playwright", "http://10.88.0.2:9222"], netns=netns)
            direct_connects.append(r["connectMs"])
            quiet()
            r = node(["playwright", f"{dbx.url}/v1/sandboxes/{sid}/cdp", f"Bearer {token}"])
            connects.append(r["connectMs"])
        dp, pp = pct(direct_p50, 0.5), pct(proxy_p50, 0.5)
        print()
        print(f"Runtime.evaluate(\"1\"), {args.calls} calls per run, {args.rounds} runs per side")
        print(f"  direct from the netns (baseline) p50 {dp:.3f} ms")
        print(f"  through deskboxd                 p50 {pp:.3f} ms")
        print(f"  ratio proxy / direct             {pp / dp:.3f}x   (target: <= 1.1x)")
        cd, cp = pct(direct_connects, 0.5), pct(connects, 0.5)
        print(f"connectOverCDP, call to ready, {args.connects} runs per side")
        print(f"  direct from the netns (baseline) p50 {cd:.0f} ms ({direct_connects})")
        print(f"  through deskboxd                 p50 {cp:.0f} ms ({connects})")
        print(f"  ratio proxy / direct             {cp / cd:.3f}x")
        res.figure("calls_per_round", args.calls)
        res.figure("rounds", args.rounds)
        res.figure("direct_round_p50_ms", [round(x, 3) for x in direct_p50])
        res.figure("direct_round_p90_ms", [round(x, 3) for x in direct_p90])
        res.figure("proxy_round_p50_ms", [round(x, 3) for x in proxy_p50])
        res.figure("proxy_round_p90_ms", [round(x, 3) for x in proxy_p90])
        res.figure("direct_p50_ms", dp)
        res.figure("proxy_p50_ms", pp)
        res.figure("proxy_over_direct", pp / dp)
        res.figure("connect_direct_ms", [round(x) for x in direct_connects])
        res.figure("connect_proxy_ms", [round(x) for x in connects])
        res.figure("connect_direct_p50_ms", cd)
        res.figure("connect_proxy_p50_ms", cp)
        res.figure("connect_proxy_over_direct", cp / cd)
        res.target("proxy_over_direct", pp / dp, "<=", 1.1, unit="x")
        dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
    raise SystemExit(res.finish(args.out))


if __name__ == "__main__":
    main()
