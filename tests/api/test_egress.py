"""Egress policy end to end (docs/egress.md), against real guests and a "fake internet".

The fake internet (fake_internet.py) is a network namespace this test makes, holding only `lo`
and a dummy interface: the allowed and denied web servers, a TLS ClientHello recorder, a fake
cloud-metadata server, "public-looking" servers on documentation addresses, an authoritative test
DNS server (deskboxd's upstream resolver) and a second DNS server. deskbox-jailer gets it as the
uplink netns, so deskboxd dials from it. Before anything is sent the test checks that the
namespace has no route off the machine and that the jailer runs with it as the uplink; and for
the whole run a guard table in this (the host's) netns drops and counts anything addressed to
the fake internet's ranges, so even a deskboxd that dialed from the wrong netns could not send a
packet off the machine (and the test would see it in the guard's counter).

From inside the guest (agent exec with curl/dig/ping/bash, and Chromium through its DevTools
HTTP endpoint) it checks what gets through, what is refused, and that every decision is in the
sandbox's event log.
"""

import json
import os
import re
import subprocess
import time
import unittest

from fake_internet import FakeInternet
from harness import ApiTestCase, Deskbox, describe

GUARD_TABLE = f"dbxguard{os.getpid()}"


def install_host_guard():
    ranges4 = "10.77.0.0/16, 169.254.169.254, 198.51.100.0/24, 203.0.113.0/24"
    ranges6 = "fd77::/16, 2001:db8::/32"
    rules = f"""table inet {GUARD_TABLE} {{
  chain out {{
    type filter hook output priority -300; policy accept;
    ip daddr {{ {ranges4} }} counter drop
    ip6 daddr {{ {ranges6} }} counter drop
  }}
}}
"""
    subprocess.run(["nft", "-f", "-"], input=rules.encode(), check=True)


def host_guard_drops():
    out = subprocess.run(["nft", "-j", "list", "table", "inet", GUARD_TABLE], capture_output=True, text=True,
                         check=True).stdout
    total = 0
    for item in json.loads(out)["nftables"]:
        rule = item.get("rule")
        if not rule:
            continue
        for expr in rule["expr"]:
            if "counter" in expr:
                total += expr["counter"]["packets"]
    return total


def remove_host_guard():
    subprocess.run(["nft", "delete", "table", "inet", GUARD_TABLE], capture_output=True)


class EgressTest(ApiTestCase):
    fi = None

    @classmethod
    def setUpClass(cls):
        install_host_guard()
        try:
            cls.fi = FakeInternet(prefix=f"dbxe{os.getpid()}-")
            cls.fi.__enter__()
            cls.fi.check_no_route_off_machine()
            cls.start_deployment(
                warm_pool=1,
                jailer_args=["--uplink-netns", cls.fi.netns],
                extra_args=["--egress-resolvers", cls.fi.DNS_UPSTREAM,
                            "--egress-reachable", f"{cls.fi.REACHABLE_CIDR},{cls.fi.REACHABLE_CIDR6}"])
            # deskboxd dials through the jailer, and the jailer from the uplink netns it was given.
            cmdline = open(f"/proc/{cls.dbx.jailer.pid}/cmdline", "rb").read().split(b"\0")
            i = cmdline.index(b"--uplink-netns")
            if cmdline[i + 1].decode() != cls.fi.netns:
                raise RuntimeError(f"the jailer's uplink is {cmdline[i + 1]!r}, not {cls.fi.netns}")
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            if getattr(cls, "dbx", None) is not None:
                cls.stop_deployment()
        finally:
            try:
                if cls.fi is not None:
                    cls.fi.__exit__(None, None, None)
                    cls.fi = None
            finally:
                drops = host_guard_drops() if subprocess.run(
                    ["nft", "list", "table", "inet", GUARD_TABLE], capture_output=True).returncode == 0 else 0
                remove_host_guard()
                if drops:
                    raise AssertionError(f"{drops} packets to the fake internet's ranges left the host's own netns")

    # ---- helpers -------------------------------------------------------------------------------

    def setUp(self):
        self.fi.clear_hits()

    def new_sandbox(self, policy):
        sb = self.create_sandbox(egress=policy)
        self.addCleanup(self.delete_sandbox, sb["id"])
        return sb["id"]

    def run_in(self, sid, command, timeout=60):
        """Runs a shell command in the guest; returns (exit code, stdout, stderr)."""
        res = self.exec_in(sid, shell=command, timeout_s=timeout, timeout=timeout + 30)
        return res["exit_code"], res["stdout"], res["stderr"]

    def curl(self, sid, url, *args, timeout=20):
        """curl in the guest: (exit code, body, or on failure what went wrong)."""
        quoted = " ".join(f"'{a}'" for a in (*args, url))
        res = self.exec_in(sid, shell=f"curl -sS -m {timeout} {quoted}", timeout_s=timeout + 60, timeout=timeout + 90)
        return res["exit_code"], res["stdout"] if res["exit_code"] == 0 else f"{res['stderr']} {res}"

    def upload_ca(self, sid):
        r = self.dbx.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/test-ca.pem", data=self.fi.ca_pem_bytes,
                             headers={"Content-Type": "application/octet-stream"}, timeout=60)
        self.assertIn(r.status_code, (200, 201, 204), describe(r))

    def egress_events(self, sid, **match):
        out = []
        for e in self.all_events(sid):
            if e.get("kind") != "egress":
                continue
            x = e["egress"]
            if all(x.get(k) == v for k, v in match.items()):
                out.append(x)
        return out

    def wait_egress_event(self, sid, timeout=30, **match):
        deadline = time.monotonic() + timeout
        while True:
            found = self.egress_events(sid, **match)
            if found:
                return found
            if time.monotonic() > deadline:
                self.fail(f"no egress event {match} in {sid}; egress events: "
                          f"{json.dumps(self.egress_events(sid))[:3000]}")
            time.sleep(0.3)

    def assert_no_hits(self, **match):
        hits = self.fi.hits(**match)
        self.assertEqual(hits, [], f"the fake internet saw {match}: {hits}")

    def dig(self, sid, *args):
        code, out, err = self.run_in(sid, "dig +time=3 +tries=1 " + " ".join(args))
        m = re.search(r"status: (\w+)", out)
        return (m.group(1) if m else f"none (exit {code}: {out[-300:]} {err[-300:]})"), out

    # ---- allowed ----------------------------------------------------------------------------

    def test_allowed_name_over_http_and_https(self):
        sid = self.new_sandbox({"default": "deny", "allow": ["allowed.test", "*.allowed.test"]})
        code, body = self.curl(sid, "http://allowed.test/plain")
        self.assertEqual(code, 0, body)
        self.assertEqual(body.strip(), "allowed allowed.test /plain")
        hit = self.fi.hits(label="allowed", path="/plain")
        self.assertEqual(len(hit), 1, self.fi.hits())
        self.assertIn(hit[0]["client"], self.fi.addresses(), f"deskboxd did not dial from the uplink: {hit}")

        self.upload_ca(sid)
        code, body = self.curl(sid, "https://www.allowed.test/tls", "--cacert", "/tmp/test-ca.pem")
        self.assertEqual(code, 0, body)
        self.assertEqual(body.strip(), "allowed www.allowed.test /tls")
        self.assertEqual(self.fi.hits(label="allowed", path="/tls")[0]["sni"], "www.allowed.test")

        # IPv6: the proxy resolves AAAA itself for a connection the guest made over IPv6.
        code, body = self.curl(sid, "http://allowed.test/six", "-6")
        self.assertEqual(code, 0, body)
        self.assertEqual(self.fi.hits(label="allowed", path="/six")[0]["client"].count(":") > 1, True,
                         self.fi.hits(label="allowed", path="/six"))

        ok = self.wait_egress_event(sid, protocol="http", name="allowed.test", allowed=True, phase="decision")
        self.assertIn(ok[0]["address"], (self.fi.ALLOWED, self.fi.ALLOWED6))
        self.assertEqual(ok[0]["rule"], "allowed.test")
        closed = self.wait_egress_event(sid, protocol="http", name="allowed.test", phase="closed")
        self.assertGreater(closed[0]["bytes_down"], 0)
        self.assertGreater(closed[0]["bytes_up"], 0)
        self.wait_egress_event(sid, protocol="tls", name="www.allowed.test", allowed=True, phase="decision")
        self.wait_egress_event(sid, protocol="dns", name="allowed.test", query_type="A", allowed=True)
        self.assertGreaterEqual(self.dbx.metric_value("deskbox_egress_connections_total", outcome="allowed") or 0, 3)
        self.assertGreaterEqual(self.dbx.metric_value("deskbox_egress_dns_queries_total", outcome="allowed") or 0, 1)
        self.assertGreater(self.dbx.metric_value("deskbox_egress_bytes_total", direction="down") or 0, 0)

    def test_chromium_goes_through_the_policy(self):
        sid = self.new_sandbox({"default": "deny", "allow": ["allowed.test"]})
        # Chromium's DevTools HTTP endpoint in the guest opens a tab on the URL: the browser's own
        # network stack makes the request.
        for url in ("http://allowed.test/chromium", "http://denied.test/chromium"):
            self.run_in(sid, f"curl -sS -m 10 -X PUT 'http://127.0.0.1:9223/json/new?{url}'")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.fi.hits(label="allowed", path="/chromium"):
            time.sleep(0.5)
        self.assertTrue(self.fi.hits(label="allowed", path="/chromium"), self.fi.hits())
        self.assert_no_hits(label="denied")
        self.wait_egress_event(sid, protocol="dns", name="denied.test", allowed=False)

    # ---- refused ----------------------------------------------------------------------------

    def test_denied_names_literals_and_dns_channels(self):
        sid = self.new_sandbox({"default": "deny", "allow": ["allowed.test", "rebind.test", "meta.test"]})
        # A denied name does not resolve...
        status, _ = self.dig(sid, "denied.test", "A")
        self.assertEqual(status, "REFUSED")
        # ...and naming it anyway (Host, or SNI to an allowed address) is refused by the proxy.
        code, _ = self.curl(sid, "http://denied.test/", "--resolve", f"denied.test:80:{self.fi.DENIED}")
        self.assertNotEqual(code, 0)
        self.upload_ca(sid)
        code, _ = self.curl(sid, "https://denied.test/", "--cacert", "/tmp/test-ca.pem",
                            "--resolve", f"denied.test:443:{self.fi.ALLOWED}")
        self.assertNotEqual(code, 0)
        # IP literals, v4 and v6, and the cloud metadata address.
        for url in (f"http://{self.fi.DOC4[1]}/", f"http://[{self.fi.DOC6}]/", f"http://{self.fi.METADATA}/latest/",
                    f"https://{self.fi.DOC4[0]}/"):
            code, _ = self.curl(sid, url, "-k", timeout=10)
            self.assertNotEqual(code, 0, url)
        # TXT (and other types) for a denied name never reach the upstream; nor for an allowed one.
        status, _ = self.dig(sid, "denied.test", "TXT")
        self.assertEqual(status, "REFUSED")
        status, _ = self.dig(sid, "allowed.test", "TXT")
        self.assertEqual(status, "REFUSED")
        # DNS sent to another resolver is answered by the sandbox's own responder.
        status, _ = self.dig(sid, f"@{self.fi.DNS_SECOND}", "denied.test", "A")
        self.assertEqual(status, "REFUSED")
        status, out = self.dig(sid, f"@{self.fi.DNS_SECOND}", "allowed.test", "A", "+short")
        # Rebinding: an allowed name whose answer is a private (or metadata) address.
        status, out = self.dig(sid, "rebind.test", "A")
        self.assertEqual(status, "NOERROR")
        self.assertNotIn(self.fi.PRIVATE, out)
        status, out = self.dig(sid, "meta.test", "A")
        self.assertNotIn(self.fi.METADATA, out)
        code, _ = self.curl(sid, "http://rebind.test/", "--resolve", f"rebind.test:80:{self.fi.ALLOWED}")
        self.assertNotEqual(code, 0)

        self.assert_no_hits(label="denied")
        self.assert_no_hits(label="doc")
        self.assert_no_hits(label="metadata")
        self.assert_no_hits(label="private")
        self.assertEqual([h for h in self.fi.hits(label="allowed") if h.get("sni") == "denied.test"], [])
        self.assertEqual(self.fi.hits(server="second"), [])
        upstream_names = {h.get("name") for h in self.fi.hits(server="upstream")}
        self.assertNotIn("denied.test", upstream_names)

        self.wait_egress_event(sid, protocol="dns", name="denied.test", query_type="A", allowed=False)
        self.wait_egress_event(sid, protocol="dns", name="denied.test", query_type="TXT", allowed=False)
        self.wait_egress_event(sid, protocol="http", name="denied.test", allowed=False)
        self.wait_egress_event(sid, protocol="tls", name="denied.test", allowed=False)
        self.wait_egress_event(sid, address=self.fi.DOC4[1], port=80, allowed=False)
        self.wait_egress_event(sid, address=self.fi.DOC6, port=80, allowed=False)
        meta = self.wait_egress_event(sid, address=self.fi.METADATA, allowed=False)
        self.assertIn("metadata", meta[0]["reason"])
        reb = self.wait_egress_event(sid, protocol="dns", name="rebind.test", allowed=False)
        self.assertIn(self.fi.PRIVATE, reb[0]["reason"])
        self.wait_egress_event(sid, protocol="http", name="rebind.test", allowed=False)

    def test_udp_quic_icmp_and_the_sandbox_side_are_refused(self):
        sid = self.new_sandbox({"default": "allow"})
        doc = self.fi.DOC4[1]
        self.run_in(sid, f"bash -c 'echo probe > /dev/udp/{doc}/9999; echo quic > /dev/udp/{doc}/443'; "
                         f"ping -c 1 -W 2 {doc}; ping -6 -c 1 -W 2 {self.fi.DOC6}; true")
        # The netns side of the tap: other ports, and deskboxd's own API port.
        for url in ("http://10.88.0.1:22/", f"http://10.88.0.1:{self.dbx.port}/healthz",
                    f"http://[fd88:de5b::1]:{self.dbx.port}/healthz", f"http://loop.test:{self.dbx.port}/healthz"):
            code, _ = self.curl(sid, url, timeout=10)
            self.assertNotEqual(code, 0, url)
        time.sleep(1)
        self.assert_no_hits(label="udp")
        self.assert_no_hits(label="icmp")
        self.wait_egress_event(sid, protocol="udp", address=doc, port=9999, allowed=False)
        quic = self.wait_egress_event(sid, protocol="udp", address=doc, port=443, allowed=False)
        self.assertIn("QUIC", quic[0]["reason"])
        self.wait_egress_event(sid, protocol="icmp", address=doc, allowed=False)
        self.wait_egress_event(sid, protocol="icmpv6", address=self.fi.DOC6, allowed=False)
        own = self.wait_egress_event(sid, address="10.88.0.1", port=22, allowed=False)
        self.assertIn("sandbox network", own[0]["reason"])
        self.wait_egress_event(sid, address="10.88.0.1", port=self.dbx.port, allowed=False)
        loop = self.wait_egress_event(sid, name="loop.test", allowed=False)
        self.assertIn("loopback", loop[0]["reason"])
        # Default allow still lets a public-looking address through.
        code, body = self.curl(sid, f"http://{doc}/open")
        self.assertEqual(code, 0, body)
        self.assertTrue(self.fi.hits(label="doc", path="/open"))

    def test_etc_hosts_cannot_redirect_an_allowed_name(self):
        sid = self.new_sandbox({"default": "deny", "allow": ["allowed.test"]})
        self.run_in(sid, f"echo '{self.fi.DENIED} allowed.test' >> /etc/hosts")
        code, body = self.curl(sid, "http://allowed.test/hosts")
        self.assertEqual(code, 0, body)
        self.assertEqual(body.strip(), "allowed allowed.test /hosts")  # the proxy resolved it itself
        self.assert_no_hits(label="denied")
        ev = self.wait_egress_event(sid, protocol="http", name="allowed.test", allowed=True, phase="decision")
        self.assertIn(ev[0]["address"], (self.fi.ALLOWED, self.fi.ALLOWED6))

    # ---- policy changes -------------------------------------------------------------------------

    def test_policy_changes_apply_within_a_second_and_survive_pause_resume_and_restart(self):
        sid = self.new_sandbox({"default": "deny", "allow": ["allowed.test"]})
        r = self.dbx.get(f"/v1/sandboxes/{sid}/egress")
        self.assertEqual(self.expect(r, 200, "get egress"), {"default": "deny", "allow": ["allowed.test"], "deny": []})
        code, _ = self.curl(sid, "http://denied.test/")
        self.assertNotEqual(code, 0)

        # Allow denied.test: the next attempt after the PUT succeeds, within a second.
        r = self.dbx.request("PUT", f"/v1/sandboxes/{sid}/egress",
                             json={"default": "deny", "allow": ["allowed.test", "denied.test:80"]})
        t_put = time.monotonic()
        self.assertEqual(self.expect(r, 200, "put egress")["allow"], ["allowed.test", "denied.test:80"])
        code, body = self.curl(sid, "http://denied.test/now")
        elapsed = time.monotonic() - t_put
        self.assertEqual(code, 0, body)
        self.assertEqual(body.strip(), "denied denied.test /now")
        # The exec round trip itself is most of `elapsed`; the proxy read the new policy at once.
        self.assertLess(elapsed, 5)
        self.wait_egress_event(sid, protocol="policy", phase="policy")

        # Take it back: the next connection is refused again.
        r = self.dbx.request("PUT", f"/v1/sandboxes/{sid}/egress", json={"allow": ["allowed.test"]})
        self.expect(r, 200, "put egress")
        code, _ = self.curl(sid, "http://denied.test/after", "--resolve", f"denied.test:80:{self.fi.DENIED}")
        self.assertNotEqual(code, 0)
        self.assertEqual(self.fi.hits(label="denied", path="/after"), [])

        # Pause and resume: same policy, still enforced.
        self.expect(self.dbx.post(f"/v1/sandboxes/{sid}/pause"), 200, "pause")
        self.expect(self.dbx.post(f"/v1/sandboxes/{sid}/resume"), 200, "resume")
        self.assertEqual(self.expect(self.dbx.get(f"/v1/sandboxes/{sid}/egress"), 200, "egress")["allow"],
                         ["allowed.test"])
        code, body = self.curl(sid, "http://allowed.test/resumed")
        self.assertEqual(code, 0, body)
        code, _ = self.curl(sid, "http://denied.test/resumed", "--resolve", f"denied.test:80:{self.fi.DENIED}")
        self.assertNotEqual(code, 0)

        # deskboxd killed and started again: the adopted sandbox gets its policy back.
        self.dbx.kill9_daemon()
        self.dbx.start_daemon()
        self.wait_state(sid, "running", 60)
        code, body = self.curl(sid, "http://allowed.test/restarted")
        self.assertEqual(code, 0, body)
        code, _ = self.curl(sid, "http://denied.test/restarted", "--resolve", f"denied.test:80:{self.fi.DENIED}")
        self.assertNotEqual(code, 0)
        self.assertEqual(self.fi.hits(label="denied", path="/resumed") + self.fi.hits(label="denied", path="/restarted"), [])

    def test_bad_policies_are_refused(self):
        for body, word in (({"default": "maybe"}, "default"), ({"allow": "x"}, "allow"),
                           ({"allow": ["exa mple.com"]}, "allow[0]"), ({"deny": ["10.0.0.1/8"]}, "host bits"),
                           ({"allow": ["*.com"]}, "top-level"), ({"allow": ["a.test:0"]}, "port"),
                           ({"allow": ["a.test:70000"]}, "port"), ({"proxy": True}, "proxy")):
            r = self.dbx.post("/v1/sandboxes", json={"egress": body})
            self.expect_error(r, 400, "invalid_request", mentions=(word,))
        sid = self.new_sandbox({"allow": ["allowed.test"]})
        r = self.dbx.request("PUT", f"/v1/sandboxes/{sid}/egress", json={"allow": [1]})
        self.expect_error(r, 400, "invalid_request", mentions=("allow[0]",))
        self.assertEqual(self.expect(self.dbx.get(f"/v1/sandboxes/{sid}/egress"), 200, "egress")["allow"],
                         ["allowed.test"])
        r = self.dbx.request("PUT", "/v1/sandboxes/sb-0000000000000000/egress", json={})
        self.expect_error(r, 404, "not_found")

    # ---- random state -----------------------------------------------------------------------

    def test_two_clones_send_different_client_hello_randoms(self):
        randoms = []
        for _ in range(2):
            sid = self.new_sandbox({"default": "deny", "allow": ["hello.test"]})
            self.fi.clear_hits()
            self.run_in(sid, "curl -sS -m 10 -X PUT 'http://127.0.0.1:9223/json/new?https://hello.test/'")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not self.fi.hits(label="hello"):
                time.sleep(0.5)
            hits = self.fi.hits(label="hello")
            self.assertTrue(hits, f"Chromium in {sid} sent no ClientHello")
            self.assertEqual(hits[0]["sni"], "hello.test")
            randoms.append(hits[0]["random"])
            # On an Intel CPU with RDRAND (the guest's CPU model) the ClientHello came from the
            # network service restored from the snapshot: the browser refresh restarts only
            # renderers, so it started before every renderer of this clone (elsewhere the refresh
            # restarts it too, and only the randoms are compared). Start times are in clock ticks since boot; the patterns are written
            # so that they do not match this shell itself.
            # A renderer can be between processes for a moment (the browser refresh after the
            # restore replaces them): look again for a while before concluding there is none.
            deadline = time.monotonic() + 30
            while True:
                code, out, err = self.run_in(sid, "grep -q '^vendor_id.*GenuineIntel' /proc/cpuinfo && "
                                                  "grep -qw rdrand /proc/cpuinfo && echo rdrand; "
                                                  "for p in $(pgrep -f '[n]etwork.mojom.NetworkService'); do "
                                                  "echo n $(cut -d' ' -f22 /proc/$p/stat); done; "
                                                  "for p in $(pgrep -f '[t]ype=renderer'); do "
                                                  "echo r $(cut -d' ' -f22 /proc/$p/stat); done")
                self.assertEqual(code, 0, err)
                lines = [line.split() for line in out.split("\n") if line.strip()]
                # (a process gone between pgrep and cut leaves a line without its start time)
                net = [int(x[1]) for x in lines if x[0] == "n" and len(x) == 2]
                renderers = [int(x[1]) for x in lines if x[0] == "r" and len(x) == 2]
                if renderers or time.monotonic() > deadline:
                    break
                time.sleep(1)
            self.assertEqual(len(net), 1, out)
            self.assertTrue(renderers, out)
            if ["rdrand"] in lines:
                self.assertLess(net[0], min(renderers), f"the network service was restarted: {out}")
        self.assertEqual(len(randoms[0]), 64)
        self.assertNotEqual(randoms[0], randoms[1], "two clones' browsers sent the same ClientHello random")


if __name__ == "__main__":
    unittest.main()
