#!/usr/bin/env python3
"""POST /v1/sandboxes with the warm pool full: what the client waits for, beside what the
sandbox manager itself spent on the same creates (the `create_ms` the API reports, measured
around SandboxManager::Create() — the restore benchmark's warm-path figure), in the same run.
The difference is what the API adds: HTTP, JSON, SQLite write, event.

  api_bench.py [--runs N]      (default 10; needs root, a built tree and a template)
"""

import argparse
import time

from benchlib import Deskbox, pct, wait_quiet, wait_warm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    with Deskbox(warm_pool=1) as dbx:
        client, server = [], []
        for i in range(args.runs):
            if not wait_warm(dbx, 1):
                raise SystemExit("the warm pool did not fill")
            wait_quiet()
            t0 = time.perf_counter()
            r = dbx.post("/v1/sandboxes", json={"timeout_s": 600}, timeout=300)
            ms = (time.perf_counter() - t0) * 1000
            body = r.json()
            if r.status_code != 201 or body["create_path"] != "warm":
                raise SystemExit(f"create {i}: {r.status_code} {body}")
            client.append(ms)
            server.append(body["create_ms"])
            dbx.request("DELETE", f"/v1/sandboxes/{body['id']}", timeout=120)
            print(f"run {i + 1}: client {ms:.1f} ms, manager {body['create_ms']:.1f} ms", flush=True)
        c50, s50 = pct(client, 0.5), pct(server, 0.5)
        print()
        print(f"POST /v1/sandboxes, warm pool, {args.runs} runs")
        print(f"  client sees        p50 {c50:8.1f} ms   p95 {pct(client, 0.95):8.1f} ms")
        print(f"  manager (baseline) p50 {s50:8.1f} ms   p95 {pct(server, 0.95):8.1f} ms")
        print(f"  API adds           p50 {c50 - s50:8.1f} ms   ratio {c50 / s50:.2f}x   (target: within 10 ms)")


if __name__ == "__main__":
    main()
