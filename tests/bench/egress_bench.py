#!/usr/bin/env python3
"""The egress proxy against direct routing, same run, same guest, same server program.

A fake internet (tests/api/fake_internet.py: a netns with only lo and the test servers, no route
off the machine) is the uplink. One sandbox may reach allowed.test and big.test. Two paths:
  proxy   https://allowed.test/...  the guest's TCP goes to deskboxd's proxy (SNI, policy,
          resolve, dial from the uplink netns, splice);
  direct  https://big.test/...      for big.test's address only, the benchmark adds a veth from
          the sandbox's netns to the uplink netns, a route, and nftables rules that skip the
          proxy: the guest's packets are forwarded by the kernel to the same server program.
Both serve the same bytes from the same process. Measured inside the guest with curl's own
timers (process start-up is not counted), the two paths alternating request by request:
  - connection setup: TCP connect + TLS handshake done (time_appconnect), and plain HTTP time to
    first byte (time_starttransfer), per request;
  - throughput: a 10 MiB HTTPS download.

Targets, checked in CI (same-run, the two paths alternating): TLS setup p50 proxy / direct <= 1.1x,
HTTPS throughput proxy / direct >= 0.8x, and every direct request reached the server from the
guest's own address. With --long-run also the setup time the proxy adds at the median, an
absolute difference: <= 2 ms for TLS setup and for HTTP first byte. Single handshakes spread
from ~38 to over 100 ms under TCG: medians of 20 per path moved by +-6 ms between runs, so CI
takes 100 per path.

  egress_bench.py [--setups N] [--batch N] [--downloads N] [--mib M] [--out FILE] [--long-run]
      (default 100 setups per path in exec calls of 10 pairs, 5 downloads, 10 MiB; --out:
      figures and targets as JSON)
"""

import argparse
import os
import subprocess
import sys

from benchlib import LONG_RUN_HELP, Deskbox, Results, pct, wait_quiet

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from fake_internet import FakeInternet  # noqa: E402

VETH = ("vbd0", "vbd1")
LINK = ("10.99.0.1", "10.99.0.2")


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True)


def slot_netns(dbx):
    pids = list(dbx.qemu_processes())
    if len(pids) != 1:
        raise SystemExit(f"expected one QEMU, found {pids}")
    out = subprocess.run(["ip", "netns", "identify", str(pids[0])], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def route_directly(ns, up, address):
    """Forward the guest's traffic for `address` through a veth to the uplink netns."""
    sh("ip", "-n", ns, "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1], "netns", up)
    sh("ip", "-n", ns, "addr", "add", f"{LINK[0]}/30", "dev", VETH[0])
    sh("ip", "-n", ns, "link", "set", VETH[0], "up")
    sh("ip", "-n", up, "addr", "add", f"{LINK[1]}/30", "dev", VETH[1])
    sh("ip", "-n", up, "link", "set", VETH[1], "up")
    sh("ip", "-n", ns, "route", "add", f"{address}/32", "via", LINK[1])
    sh("ip", "-n", up, "route", "add", "10.88.0.0/24", "via", LINK[0])
    sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    rules = f"""insert rule inet deskbox prerouting iif "tap0" ip daddr {address} accept
insert rule inet deskbox forward iif "tap0" ip daddr {address} accept
insert rule inet deskbox forward ip saddr {address} oif "tap0" accept
"""
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True)


def curl_times(dbx, sid, cmd):
    r = dbx.post(f"/v1/sandboxes/{sid}/exec", json={"shell": cmd, "timeout_s": 600}, timeout=700).json()
    if r.get("exit_code") != 0:
        raise SystemExit(f"`{cmd[:120]}...` failed: {r}")
    return [[float(x) for x in line.split()] for line in r["stdout"].splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--setups", type=int, default=100)
    ap.add_argument("--downloads", type=int, default=5)
    ap.add_argument("--mib", type=int, default=10)
    ap.add_argument("--batch", type=int, default=10, help="pairs of requests per exec call")
    ap.add_argument("--out", help="figures and targets as JSON")
    ap.add_argument("--long-run", action="store_true", help=LONG_RUN_HELP)
    args = ap.parse_args()
    res = Results("egress_bench", args, args.long_run)
    with FakeInternet(prefix=f"dbxb{os.getpid()}-") as fi:
        fi.check_no_route_off_machine()
        with Deskbox(warm_pool=0, jailer_args=["--uplink-netns", fi.netns],
                     extra_args=["--egress-resolvers", fi.DNS_UPSTREAM,
                                 "--egress-reachable", f"{fi.REACHABLE_CIDR},{fi.REACHABLE_CIDR6}"]) as dbx:
            sb = dbx.post("/v1/sandboxes", json={"timeout_s": 3600, "egress": {
                "default": "deny", "allow": ["allowed.test", "big.test"]}}, timeout=300).json()
            sid = sb["id"]
            res.template = dbx.template
            r = dbx.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/ca.pem", data=fi.ca_pem_bytes, timeout=60)
            if r.status_code >= 300:
                raise SystemExit(f"upload CA: {r.status_code} {r.text}")
            route_directly(slot_netns(dbx), fi.netns, fi.BIG)
            paths = {"proxy": ("allowed.test", fi.ALLOWED), "direct": ("big.test", fi.BIG)}
            fmt = "%{time_connect} %{time_appconnect} %{time_starttransfer}\\n"
            # Warm both paths (and the proxy's DNS cache, as a guest that resolved the name has).
            for host, addr in paths.values():
                curl_times(dbx, sid, f"curl -sS -o /dev/null --cacert /tmp/ca.pem --resolve {host}:443:{addr} "
                                     f"-w '{fmt}' https://{host}/warm")
            wait_quiet()
            # The two paths alternate request by request inside one shell loop (their order
            # flips each pair), so a change of the host's load meets both alike; one exec per
            # `batch` pairs keeps the exec round trips out of the samples.
            tls = {k: [] for k in paths}
            http = {k: [] for k in paths}
            batch = max(1, min(args.batch, args.setups))

            def alternate(scheme, port, extra, index):
                cmds = []
                for i in range(batch):
                    for name in (("proxy", "direct") if i % 2 == 0 else ("direct", "proxy")):
                        host, addr = paths[name]
                        cmds.append(f"curl -sS -o /dev/null {extra} --resolve {host}:{port}:{addr} "
                                    f"-w '{name} {fmt}' {scheme}://{host}/x")
                r = dbx.post(f"/v1/sandboxes/{sid}/exec", json={"shell": " && ".join(cmds), "timeout_s": 600},
                             timeout=700).json()
                if r.get("exit_code") != 0:
                    raise SystemExit(f"{scheme} requests failed: {r}")
                out = {k: [] for k in paths}
                for line in r["stdout"].splitlines():
                    name, *times = line.split()
                    out[name].append(float(times[index]))
                return out

            for _ in range(max(1, args.setups // batch)):
                for name, v in alternate("https", 443, "--cacert /tmp/ca.pem", 1).items():
                    tls[name] += v
                for name, v in alternate("http", 80, "", 2).items():
                    http[name] += v
            speed = {k: [] for k in paths}
            size = args.mib << 20
            for _ in range(args.downloads):
                for name, (host, addr) in paths.items():
                    t = curl_times(dbx, sid, f"curl -sS -o /dev/null --cacert /tmp/ca.pem --resolve {host}:443:{addr} "
                                             f"-w '%{{speed_download}} %{{size_download}}\\n' "
                                             f"'https://{host}/big?bytes={size}'")
                    if int(t[0][1]) != size:
                        raise SystemExit(f"{name}: got {t[0][1]} bytes, wanted {size}")
                    speed[name].append(t[0][0])
            hits = [h for h in fi.hits(label="big", path="/x") if h["client"] == "10.88.0.2"]
            print(f"egress proxy vs direct routing, same guest and server program "
                  f"({len(tls['proxy'])} setups per path, {args.downloads} downloads of {args.mib} MiB)")
            print(f"  {'':34} {'proxy':>10} {'direct':>10}")
            res.figure("setups_per_path", len(tls["proxy"]))
            for name in paths:  # the spread, to tell a shift from a few slow requests
                res.figure(f"tls_{name}_quartiles_ms",
                           [round(pct(tls[name], q) * 1000, 2) for q in (0.25, 0.5, 0.75)])
            res.figure("downloads_per_path", args.downloads)
            res.figure("download_mib", args.mib)
            for label, key, data in (("TLS connect+handshake p50 (ms)", "tls", tls),
                                     ("HTTP time to first byte p50 (ms)", "http", http)):
                p, d = pct(data["proxy"], 0.5) * 1000, pct(data["direct"], 0.5) * 1000
                print(f"  {label:34} {p:10.2f} {d:10.2f}   added {p - d:+.2f} ms")
                res.figure(f"{key}_proxy_p50_ms", p)
                res.figure(f"{key}_direct_p50_ms", d)
                res.figure(f"{key}_added_p50_ms", p - d)
                res.figure(f"{key}_proxy_over_direct", p / d)
                res.target(f"{key}_added_p50_ms", p - d, "<=", 2, kind="absolute", unit=" ms")
            for label, key, data in (("TLS p90 (ms)", "tls", tls), ("HTTP p90 (ms)", "http", http)):
                p, d = pct(data["proxy"], 0.9) * 1000, pct(data["direct"], 0.9) * 1000
                print(f"  {label:34} {p:10.2f} {d:10.2f}")
                res.figure(f"{key}_proxy_p90_ms", p)
                res.figure(f"{key}_direct_p90_ms", d)
            ps, ds = pct(speed["proxy"], 0.5) / 2**20, pct(speed["direct"], 0.5) / 2**20
            print(f"  {'HTTPS 10 MiB throughput p50 (MiB/s)':34} {ps:10.2f} {ds:10.2f}   ratio {ps / ds:.2f}x")
            print(f"  direct requests that reached the server from the guest's own address: {len(hits)}")
            res.figure("https_proxy_p50_mib_s", ps)
            res.figure("https_direct_p50_mib_s", ds)
            res.figure("https_proxy_over_direct", ps / ds)
            res.figure("direct_hits_from_guest", len(hits))
            res.target("tls_proxy_over_direct", res.figures["tls_proxy_over_direct"], "<=", 1.1, unit="x")
            res.target("https_proxy_over_direct", ps / ds, ">=", 0.8, unit="x")
            res.target("direct_hits_from_guest", len(hits), ">=", 1, kind="correctness")
    raise SystemExit(res.finish(args.out))


if __name__ == "__main__":
    main()
