#!/usr/bin/env python3
"""Self-test of the fake internet (fake_internet.py + fake_servers.py). Needs root, curl and
openssl; uses dig and ping when installed, else small built-in stand-ins run in the namespace.

    python3 tests/api/fake_internet_selftest.py

Prints one line per check and "N passed, N failed"; exit status 0 only if all passed.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_internet import FakeInternet, FakeInternetError  # noqa: E402

CURL = ["curl", "-sS", "--noproxy", "*", "--max-time", "10"]
HAVE_DIG = shutil.which("dig") is not None
HAVE_PING = shutil.which("ping") is not None

# Stand-in for dig, run inside the namespace: one query, the answer as JSON in dig's terms.
DNS_CLIENT = r"""
import json, os, socket, struct, sys
server, name, qtype, proto = sys.argv[1:5]
TYPES = {"A": 1, "CNAME": 5, "SOA": 6, "TXT": 16, "AAAA": 28}
NAMES = {v: k for k, v in TYPES.items()}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
qid = int.from_bytes(os.urandom(2), "big")
qname = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
query = struct.pack("!6H", qid, 0x0100, 1, 0, 0, 1) + qname + struct.pack("!HH", TYPES[qtype], 1)
query += b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0)  # EDNS, as dig sends it
if proto == "tcp":
    s = socket.create_connection((server, 53), timeout=3)
    s.sendall(struct.pack("!H", len(query)) + query)
    buf = b""
    while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
        chunk = s.recv(65535)
        if not chunk:
            sys.exit("connection closed")
        buf += chunk
    msg = buf[2:]
else:
    s = socket.socket(socket.AF_INET6 if ":" in server else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(query, (server, 53))
    msg = s.recv(65535)
def read_name(off):
    labels, end = [], None
    while msg[off]:
        if msg[off] & 0xC0 == 0xC0:
            end = end or off + 2
            off = ((msg[off] & 0x3F) << 8) | msg[off + 1]
            continue
        labels.append(msg[off + 1:off + 1 + msg[off]].decode())
        off += 1 + msg[off]
    return ".".join(labels), (end or off + 1)
rid, flags, qd, an, ns, ar = struct.unpack("!6H", msg[:12])
assert rid == qid, "wrong id"
off = 12
for _ in range(qd):
    off = read_name(off)[1] + 4
answers = []
for _ in range(an):
    owner, off = read_name(off)
    rtype, _, ttl, rdlen = struct.unpack("!HHIH", msg[off:off + 10])
    off += 10
    rdata = msg[off:off + rdlen]
    if rtype == 1:
        data = socket.inet_ntop(socket.AF_INET, rdata)
    elif rtype == 28:
        data = socket.inet_ntop(socket.AF_INET6, rdata)
    elif rtype == 5:
        data = read_name(off)[0]
    elif rtype == 16:
        data = rdata[1:1 + rdata[0]].decode()
    else:
        data = rdata.hex()
    answers.append([owner, NAMES.get(rtype, str(rtype)), data])
    off += rdlen
bits = [("qr", 0x8000), ("aa", 0x0400), ("tc", 0x0200), ("rd", 0x0100), ("ra", 0x0080)]
print(json.dumps({"status": RCODES.get(flags & 0xF, str(flags & 0xF)),
                  "flags": [n for n, b in bits if flags & b], "answers": answers}))
"""

# Stand-in for `ping -c1 -W2 ADDRESS`: one echo request over a raw socket, wait for the reply.
PING = r"""
import os, select, socket, struct, sys, time
address = sys.argv[1]
v6 = ":" in address
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                  socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
ident = os.getpid() & 0xFFFF
def checksum(data):
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
request_type = 128 if v6 else 8
packet = struct.pack("!BBHHH", request_type, 0, 0, ident, 1) + b"fake-internet"
if not v6:  # the kernel fills in the ICMPv6 checksum itself
    packet = packet[:2] + struct.pack("!H", checksum(packet)) + packet[4:]
s.sendto(packet, (address, 0))
deadline = time.monotonic() + 2
while time.monotonic() < deadline:
    if not select.select([s], [], [], deadline - time.monotonic())[0]:
        break
    data = s.recv(65535)
    if not v6:
        data = data[(data[0] & 0x0F) * 4:]
    if data[0] == (129 if v6 else 0) and struct.unpack("!H", data[4:6])[0] == ident:
        sys.exit(0)
sys.exit("no echo reply")
"""


def dns(fi, server, name, qtype, tcp=False):
    """{"status", "flags", "answers": [[owner, type, data]]} of one query from inside the netns."""
    if HAVE_DIG:
        argv = ["dig", f"@{server}", name, qtype, "+noall", "+comments", "+answer", "+time=2", "+tries=1"]
        r = fi.run(argv + (["+tcp"] if tcp else []))
        if r.returncode != 0:
            raise AssertionError(f"dig: {r.stdout}{r.stderr}")
        status = re.search(r"status: (\w+)", r.stdout)
        flags = re.search(r";; flags: ([a-z ]*);", r.stdout)
        answers = []
        for line in r.stdout.splitlines():
            if line.strip() and not line.startswith(";"):
                owner, _ttl, _class, rtype, data = line.split(None, 4)
                answers.append([owner.rstrip("."), rtype, data.strip('"').rstrip(".")])
        return {"status": status.group(1) if status else None, "flags": flags.group(1).split() if flags else [],
                "answers": answers}
    r = fi.run([sys.executable, "-c", DNS_CLIENT, server, name, qtype, "tcp" if tcp else "udp"])
    if r.returncode != 0:
        raise AssertionError(f"DNS query failed: {r.stderr}")
    return json.loads(r.stdout)


def ping(fi, address):
    if HAVE_PING:
        return fi.run(["ping", "-c1", "-W2", address])
    return fi.run([sys.executable, "-c", PING, address])


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


# ---- checks (each gets the running FakeInternet) -------------------------------------------------


def check_dns_a(fi):
    r = dns(fi, fi.DNS_UPSTREAM, "allowed.test", "A")
    expect(r["status"] == "NOERROR" and "aa" in r["flags"], r)
    expect(r["answers"] == [["allowed.test", "A", "10.77.1.10"]], r)


def check_dns_aaaa(fi):
    r = dns(fi, fi.DNS_UPSTREAM, "allowed.test", "AAAA")
    expect(r["answers"] == [["allowed.test", "AAAA", "fd77:1::10"]], r)


def check_dns_cname_chain(fi):
    r = dns(fi, fi.DNS_UPSTREAM, "www.allowed.test", "A")
    expect(r["answers"] == [["www.allowed.test", "CNAME", "allowed.test"], ["allowed.test", "A", "10.77.1.10"]], r)


def check_dns_txt(fi):
    r = dns(fi, fi.DNS_UPSTREAM, "denied.test", "TXT")
    expect(r["answers"] == [["denied.test", "TXT", "secret-channel"]], r)


def check_dns_nodata(fi):
    r = dns(fi, fi.DNS_UPSTREAM, "denied.test", "AAAA")
    expect(r["status"] == "NOERROR" and r["answers"] == [], r)


def check_dns_nxdomain(fi):
    r = dns(fi, fi.DNS_UPSTREAM, "nope.test", "A")
    expect(r["status"] == "NXDOMAIN" and r["answers"] == [], r)


def check_dns_tcp(fi):
    fi.clear_hits()
    r = dns(fi, fi.DNS_UPSTREAM, "big.test", "A", tcp=True)
    expect(r["answers"] == [["big.test", "A", "10.77.1.40"]], r)
    expect(fi.hits("dns", server="upstream", proto="tcp", name="big.test", type="A"), fi.hits())


def check_dns_second_logs(fi):
    fi.clear_hits()
    r = dns(fi, fi.DNS_SECOND, "meta.test", "A")
    expect(r["answers"] == [["meta.test", "A", "169.254.169.254"]], r)
    expect(len(fi.hits("dns", server="second", proto="udp", name="meta.test", type="A")) == 1, fi.hits())


def check_http(fi):
    fi.clear_hits()
    r = fi.run(CURL + ["--resolve", "allowed.test:80:10.77.1.10", "http://allowed.test/x"])
    expect(r.returncode == 0 and r.stdout == "allowed allowed.test /x\n", (r.stdout, r.stderr))
    expect(fi.hits("allowed", scheme="http", host="allowed.test", path="/x", address="10.77.1.10"), fi.hits())


def check_https_verified(fi):
    fi.clear_hits()
    r = fi.run(CURL + ["--cacert", fi.ca_pem, "--resolve", "allowed.test:443:10.77.1.10", "https://allowed.test/"])
    expect(r.returncode == 0 and r.stdout == "allowed allowed.test /\n", (r.stdout, r.stderr))
    expect(fi.hits("allowed", scheme="https", sni="allowed.test", path="/"), fi.hits())


def check_https_rejects_wrong_name(fi):
    # 10.77.1.20 is not in the certificate: proves verification is really on.
    r = fi.run(CURL + ["--cacert", fi.ca_pem, "https://10.77.1.20/"])
    expect(r.returncode != 0, (r.returncode, r.stdout))


def check_http_ipv6(fi):
    r = fi.run(CURL + ["-g", "http://[fd77:1::10]/six"])
    expect(r.stdout == "allowed [fd77:1::10] /six\n", (r.stdout, r.stderr))


def check_big(fi):
    size = 1048576
    r = fi.run(CURL + [f"http://10.77.1.40/big?bytes={size}"], text=False)
    expect(r.returncode == 0 and len(r.stdout) == size, (r.returncode, len(r.stdout), r.stderr))
    pattern = bytes(range(256)) * (size // 256)
    expect(r.stdout == pattern, "unexpected /big content")
    r = fi.run(CURL + ["-o", "/dev/null", "-w", "%{size_download}", "--cacert", fi.ca_pem,
                       "--resolve", "big.test:443:10.77.1.40", f"https://big.test/big?bytes={size}"])
    expect(r.returncode == 0 and r.stdout == str(size), (r.stdout, r.stderr))


def check_hello_capture(fi):
    fi.clear_hits()
    fi.run(["openssl", "s_client", "-connect", "10.77.1.30:443", "-servername", "hello.test"], input="")
    hits = fi.wait_hits("hello")
    expect(len(hits) == 1 and re.fullmatch(r"[0-9a-f]{64}", hits[0]["random"]) and hits[0]["sni"] == "hello.test",
           fi.hits())


def check_udp_catch(fi):
    fi.clear_hits()
    send = ("import socket, sys\n"
            "for host, port in (('203.0.113.10', 9999), ('2001:db8::10', 53)):\n"
            "    fam = socket.AF_INET6 if ':' in host else socket.AF_INET\n"
            "    socket.socket(fam, socket.SOCK_DGRAM).sendto(b'leak', (host, port))\n")
    r = fi.run([sys.executable, "-c", send])
    expect(r.returncode == 0, r.stderr)
    expect(fi.wait_hits("udp", address="203.0.113.10", port=9999, data=b"leak".hex()), fi.hits())
    expect(fi.wait_hits("udp", address="2001:db8::10", port=53), fi.hits())


def check_icmp_catch(fi):
    fi.clear_hits()
    for address in ("203.0.113.10", "2001:db8::10"):
        r = ping(fi, address)
        expect(r.returncode == 0, (address, r.stdout, r.stderr))
        expect(fi.wait_hits("icmp", address=address), (address, fi.hits()))


def check_routes(fi):
    fi.check_no_route_off_machine()


def check_route_check_catches_default_route(fi):
    with FakeInternet(prefix=f"dbxf{os.getpid()}x-") as scratch:
        r = subprocess.run(["ip", "-n", scratch.netns, "route", "add", "default", "dev", scratch.device],
                           capture_output=True, text=True)
        expect(r.returncode == 0, r.stderr)
        try:
            scratch.check_no_route_off_machine()
        except FakeInternetError as e:
            expect("default route" in str(e), str(e))
        else:
            raise AssertionError("a default route passed the check")


def check_servers_quiet(fi):
    # Runs last: no tracebacks from any of the requests above.
    errors = (fi.tmpdir / "servers.err").read_text(errors="replace")
    expect(errors == "", errors)


CHECKS = [check_dns_a, check_dns_aaaa, check_dns_cname_chain, check_dns_txt, check_dns_nodata, check_dns_nxdomain,
          check_dns_tcp, check_dns_second_logs, check_http, check_https_verified, check_https_rejects_wrong_name,
          check_http_ipv6, check_big, check_hello_capture, check_udp_catch, check_icmp_catch, check_routes,
          check_route_check_catches_default_route, check_servers_quiet]


def leftovers(namespaces, pids, tmpdirs):
    found = []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    found += [f"netns {ns}" for ns in namespaces if ns in listed]
    for pid in pids:
        try:
            os.kill(pid, 0)
            found.append(f"process {pid}")
        except ProcessLookupError:
            pass
    for d in tmpdirs:
        if d.exists():
            found.append(f"directory {d}")
        r = subprocess.run(["pgrep", "-f", f"fake_servers.py --config {d}"], capture_output=True, text=True)
        found += [f"process {p}" for p in r.stdout.split()]
    return found


def main():
    if os.geteuid() != 0:
        print("needs root (network namespaces)")
        return 1
    for tool in ("curl", "openssl"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed")
            return 1
    if not HAVE_DIG:
        print("note: no dig; DNS checks use a built-in client")
    if not HAVE_PING:
        print("note: no ping; ICMP checks use a built-in raw-socket ping")

    passed = failed = 0
    prefix = f"dbxf{os.getpid()}-"
    namespaces = [f"{prefix}up", f"dbxf{os.getpid()}x-up"]
    pids, tmpdirs = [], []
    try:
        with FakeInternet(prefix=prefix) as fi:
            pids.append(fi.server_pid)
            tmpdirs.append(fi.tmpdir)
            print(f"fake internet in netns {fi.netns} on device {fi.device}")
            for check in CHECKS:
                try:
                    check(fi)
                    passed += 1
                    print(f"PASS {check.__name__}")
                except Exception as e:
                    failed += 1
                    detail = str(e) if isinstance(e, AssertionError) else traceback.format_exc()
                    print(f"FAIL {check.__name__}: {detail}")
    except Exception:
        failed += 1
        print(f"FAIL setup: {traceback.format_exc()}")

    left = leftovers(namespaces, pids, tmpdirs)
    if left:
        failed += 1
        print(f"FAIL nothing_left_behind: {', '.join(left)}")
    else:
        passed += 1
        print("PASS nothing_left_behind")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
