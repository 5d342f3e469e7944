"""A fake internet in a network namespace of its own, for egress tests that must never reach the
real one.

deskboxd's egress proxy and DNS responder dial from an "uplink" network namespace. FakeInternet
creates that namespace (f"{prefix}up") with nothing in it but `lo` and a dummy interface `fi0`
carrying every server address below, checks that no route leads off the machine, and runs
fake_servers.py inside it: an authoritative DNS server for `.test`, web servers (HTTP and HTTPS
with a test CA), a TLS ClientHello capture server, and UDP/ICMP leak catchers. Everything they
see goes to a hit log that tests query with hits()/wait_hits().

If the kernel has no dummy interface support (CONFIG_DUMMY), the addresses go on `lo` instead:
the namespace then holds nothing but `lo`, which is just as closed. `device` says which was used.

    with FakeInternet(prefix=f"dbxa{os.getpid()}-") as fi:
        fi.run(["curl", "-s", "--resolve", f"allowed.test:80:{fi.ALLOWED}", "http://allowed.test/"])
        fi.wait_hits("allowed", path="/")

Create it from the thread that will also leave it (normally the main one). On a normal exit an
atexit hook cleans up what a missing __exit__ left behind; if the test process is killed, the
servers stop by themselves within seconds, but the namespace stays (`ip netns del NAME`).
"""

import atexit
import datetime
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVERS = Path(__file__).resolve().with_name("fake_servers.py")
READY_TIMEOUT_S = 20
STOP_TIMEOUT_S = 5


class FakeInternetError(RuntimeError):
    pass


class FakeInternet:
    # Server addresses (tests and operator configs refer to these).
    DNS_UPSTREAM = "10.77.0.53"  # authoritative .test server, deskboxd's upstream resolver
    DNS_SECOND = "10.77.0.54"  # the same zone; a guest should never reach it directly
    ALLOWED = "10.77.1.10"
    ALLOWED6 = "fd77:1::10"
    DENIED = "10.77.1.20"
    HELLO = "10.77.1.30"  # TLS ClientHello capture, port 443
    BIG = "10.77.1.40"  # /big?bytes=N, for benchmarks
    PRIVATE = "10.77.2.10"  # private, outside the operator-reachable range (rebinding target)
    METADATA = "169.254.169.254"
    DOC4 = ["198.51.100.10", "203.0.113.10"]  # "public-looking" leak catchers
    DOC6 = "2001:db8::10"
    REACHABLE_CIDR = "10.77.1.0/24"  # what the operator config makes reachable
    REACHABLE_CIDR6 = "fd77:1::/64"

    DEVICE = "fi0"
    DNS_TTL = 30
    CATCH_UDP_PORTS = [53, 443, 9999]
    # Authoritative data for .test (read-only): name → [(type, value)]. The apex SOA goes into
    # negative answers.
    ZONE = {
        "test": [("SOA", "ns.test hostmaster.test 1 3600 600 86400 30")],
        "allowed.test": [("A", ALLOWED), ("AAAA", ALLOWED6), ("TXT", "allowed-txt")],
        "www.allowed.test": [("CNAME", "allowed.test")],
        "other.allowed.test": [("A", ALLOWED)],
        "denied.test": [("A", DENIED), ("TXT", "secret-channel")],
        "hello.test": [("A", HELLO)],
        "big.test": [("A", BIG)],
        "rebind.test": [("A", PRIVATE)],
        "meta.test": [("A", METADATA)],
        "loop.test": [("A", "127.0.0.1")],
        "public.test": [("A", DOC4[1])],
    }
    # Web server label (first word of every response body, "label" of its hits) per address.
    WEB_LABELS = {ALLOWED: "allowed", ALLOWED6: "allowed", DENIED: "denied", BIG: "big", PRIVATE: "private",
                  METADATA: "metadata", DOC4[0]: "doc", DOC4[1]: "doc", DOC6: "doc"}
    CERT_DNS_NAMES = ["allowed.test", "*.allowed.test", "denied.test", "big.test", "hello.test", "rebind.test",
                      "meta.test", "public.test"]
    CERT_IPS = [ALLOWED, BIG, ALLOWED6]

    def __init__(self, prefix):
        self.prefix = prefix
        self.netns = f"{prefix}up"
        self.device = None  # "fi0", or "lo" without kernel dummy support; set by __enter__
        self.tmpdir = None  # Path of the temporary directory (certificates, config, hit log)
        self.hit_log = None  # Path of the hit log
        self.ca_pem = None  # path (str) of the test CA certificate
        self.ca_pem_bytes = None
        self.server_pid = None
        self._proc = None
        self._netns_created = False

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        self.tmpdir = Path(tempfile.mkdtemp(prefix=f"fake-internet-{self.prefix}"))
        # Readable by others (keys stay 0600) so that deskboxd, running as its service user, can
        # be pointed at the CA certificate.
        self.tmpdir.chmod(0o755)
        self.hit_log = self.tmpdir / "hits.jsonl"
        self.hit_log.touch()
        atexit.register(self.close)
        self._make_netns()
        self.check_no_route_off_machine()
        self._make_certificates()
        self._start_servers()

    def close(self):
        """Stop the servers, delete the namespace and the temporary directory. Idempotent."""
        atexit.unregister(self.close)
        problems = []
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc.stdout.close()
            self._proc = None
        if self._netns_created:
            r = subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, text=True)
            if r.returncode != 0 and Path("/run/netns", self.netns).exists():
                problems.append(f"ip netns del {self.netns}: {r.stderr.strip()}")
            self._netns_created = False
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        if problems:
            print(f"FakeInternet: {'; '.join(problems)}", file=sys.stderr)

    # ---- namespace -------------------------------------------------------------------------

    def _ip(self, *args, input=None):
        r = subprocess.run(["ip", "-n", self.netns, *args], input=input, capture_output=True, text=True)
        if r.returncode != 0:
            raise FakeInternetError(f"ip -n {self.netns} {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def _ip_json(self, *args):
        return json.loads(self._ip("-j", *args) or "[]")

    def _make_netns(self):
        # `ip netns add` refuses an existing name, so we never adopt (or later delete) a namespace
        # someone else made.
        r = subprocess.run(["ip", "netns", "add", self.netns], capture_output=True, text=True)
        if r.returncode != 0:
            raise FakeInternetError(f"ip netns add {self.netns}: {r.stderr.strip()}")
        self._netns_created = True
        self._ip("link", "set", "lo", "up")
        try:
            self._ip("link", "add", self.DEVICE, "type", "dummy")
            self._ip("link", "set", self.DEVICE, "up")
            self.device = self.DEVICE
        except FakeInternetError:
            self.device = "lo"  # no CONFIG_DUMMY: lo of a fresh namespace is as closed
        batch = []
        for address in self.addresses():
            if ":" in address:
                # nodad: usable at once instead of "tentative" for a second or two
                batch.append(f"address add {address}/128 dev {self.device} nodad")
            else:
                batch.append(f"address add {address}/32 dev {self.device}")
        self._ip("-batch", "-", input="\n".join(batch) + "\n")

    @classmethod
    def addresses(cls):
        """Every address the fake internet answers on."""
        return [cls.DNS_UPSTREAM, cls.DNS_SECOND, cls.ALLOWED, cls.ALLOWED6, cls.DENIED, cls.HELLO, cls.BIG,
                cls.PRIVATE, cls.METADATA, *cls.DOC4, cls.DOC6]

    def check_no_route_off_machine(self):
        """Raise FakeInternetError unless the namespace holds only lo and dummy links and no route
        (in any table) is a default route, has a gateway or next hop, or uses another device."""
        problems = []
        for link in self._ip_json("-d", "link"):
            name = link.get("ifname")
            kind = (link.get("linkinfo") or {}).get("info_kind")
            if name == "lo" and link.get("link_type") == "loopback":
                continue
            if kind == "dummy":
                continue
            problems.append(f"link {name} (kind {kind or link.get('link_type')}) is neither lo nor dummy")
        for family in ("-4", "-6"):
            for route in self._ip_json(family, "route", "show", "table", "all"):
                desc = f"route {route.get('dst')} table {route.get('table', 'main')}"
                if route.get("dst") == "default":
                    problems.append(f"{desc} is a default route")
                for key in ("gateway", "via", "nexthops", "nhid"):
                    if key in route:
                        problems.append(f"{desc} has a {key}")
                dev = route.get("dev")
                if dev is None:
                    if route.get("type") not in ("blackhole", "unreachable", "prohibit", "throw"):
                        problems.append(f"{desc} has no device")
                elif dev not in ("lo", self.DEVICE):
                    problems.append(f"{desc} uses device {dev}")
        if problems:
            raise FakeInternetError(f"netns {self.netns} may reach off the machine: " + "; ".join(problems))

    # ---- certificates ----------------------------------------------------------------------

    def _make_certificates(self):
        """A test CA and one server certificate, made with the openssl CLI. `openssl ca` rather than
        `req -x509`/`x509 -req` because only it can backdate notBefore (OpenSSL 3.0), so a guest
        whose clock lags a little still accepts them."""
        pki = self.tmpdir / "pki"
        (pki / "new").mkdir(parents=True)
        (pki / "index.txt").write_text("")
        (pki / "serial").write_text("1000\n")
        san = ", ".join([f"DNS:{n}" for n in self.CERT_DNS_NAMES] + [f"IP:{a}" for a in self.CERT_IPS])
        (pki / "ca.cnf").write_text(f"""\
[ca]
default_ca = fake_internet_ca

[fake_internet_ca]
database = {pki}/index.txt
new_certs_dir = {pki}/new
serial = {pki}/serial
default_md = sha256
policy = any_name
unique_subject = no
copy_extensions = none

[any_name]
commonName = supplied

[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = {san}
""")
        now = datetime.datetime.now(datetime.timezone.utc)
        dates = ["-startdate", (now - datetime.timedelta(days=2)).strftime("%Y%m%d%H%M%SZ"),
                 "-enddate", (now + datetime.timedelta(days=30)).strftime("%Y%m%d%H%M%SZ")]
        ca = ["ca", "-batch", "-notext", "-config", pki / "ca.cnf", *dates]
        for name in ("ca", "server"):
            self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                          "-out", pki / f"{name}.key")
        self._openssl("req", "-new", "-key", pki / "ca.key", "-subj", "/CN=deskbox fake internet test CA",
                      "-out", pki / "ca.csr")
        self._openssl(*ca, "-selfsign", "-keyfile", pki / "ca.key", "-extensions", "v3_ca",
                      "-in", pki / "ca.csr", "-out", pki / "ca.pem")
        self._openssl("req", "-new", "-key", pki / "server.key", "-subj", "/CN=allowed.test",
                      "-out", pki / "server.csr")
        self._openssl(*ca, "-cert", pki / "ca.pem", "-keyfile", pki / "ca.key", "-extensions", "v3_server",
                      "-in", pki / "server.csr", "-out", pki / "server.pem")
        for name in ("ca.pem", "server.pem"):
            (pki / name).chmod(0o644)
        pki.chmod(0o755)
        self.ca_pem = str(pki / "ca.pem")
        self.ca_pem_bytes = (pki / "ca.pem").read_bytes()
        self._cert, self._key = pki / "server.pem", pki / "server.key"

    @staticmethod
    def _openssl(*args):
        r = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
        if r.returncode != 0:
            raise FakeInternetError(f"openssl {args[0]}: {r.stderr.strip()}")

    # ---- servers ---------------------------------------------------------------------------

    def _start_servers(self):
        config = {
            "log": str(self.hit_log),
            "cert": str(self._cert),
            "key": str(self._key),
            "zone": self.ZONE,
            "dns_ttl": self.DNS_TTL,
            "dns": {"upstream": self.DNS_UPSTREAM, "second": self.DNS_SECOND},
            "web": self.WEB_LABELS,
            "hello": self.HELLO,
            "catch": [*self.DOC4, self.DOC6, self.METADATA, self.PRIVATE],
            "catch_udp_ports": self.CATCH_UDP_PORTS,
            "parent_pid": os.getpid(),
        }
        config_path = self.tmpdir / "servers.json"
        config_path.write_text(json.dumps(config, indent=1))
        stderr_path = self.tmpdir / "servers.err"
        with open(stderr_path, "wb") as err:
            # stderr to a file, not a pipe: nobody reads it while the servers run.
            self._proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, sys.executable, str(SERVERS), "--config", str(config_path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, close_fds=True)
        self.server_pid = self._proc.pid  # `ip netns exec` execs the program: same process

        def failure(what):
            return FakeInternetError(f"fake_servers.py {what}; stderr:\n{stderr_path.read_text(errors='replace')}")

        fd, line, deadline = self._proc.stdout.fileno(), b"", time.monotonic() + READY_TIMEOUT_S
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise failure(f"not ready after {READY_TIMEOUT_S} s")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 256)
                if not chunk:
                    rc = self._proc.wait(STOP_TIMEOUT_S)
                    raise failure(f"exited with status {rc} before it was ready")
                line += chunk
        if line.strip() != b"ready":
            raise failure(f"said {line!r} instead of ready")

    # ---- using it --------------------------------------------------------------------------

    def run(self, argv, timeout=30, *, input=None, text=True, check=False):
        """Run argv inside the namespace (`ip netns exec`); output captured."""
        return subprocess.run(["ip", "netns", "exec", self.netns, *map(str, argv)], input=input,
                              capture_output=True, text=text, timeout=timeout, check=check)

    def hits(self, label=None, **match):
        """Hit log entries (dicts, oldest first) with this label whose fields equal `match`.

        Every entry has "label" and "time". By label:
          dns:         server ("upstream"/"second"), proto ("udp"/"tcp"), client, client_port, name, type
          allowed, denied, big, private, metadata, doc (web):
                       scheme, sni (None for http), host, path, method, client, client_port, address, port
          hello:       random (64 hex digits), sni ("" if none), alpn (list), client, client_port, address, port
          hello_error: error, client, client_port, address, port (not a readable ClientHello)
          udp:         address, port, client, client_port, size, data (hex, first 512 bytes)
          icmp:        address, client, id, seq (echo requests)
        """
        entries = []
        data = self.hit_log.read_bytes()
        for line in data.split(b"\n")[:-1]:  # the last piece is "" or a line still being written
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if label is not None and entry.get("label") != label:
                continue
            if all(entry.get(k) == v for k, v in match.items()):
                entries.append(entry)
        return entries

    def wait_hits(self, label=None, count=1, timeout=5.0, **match):
        """hits(label, **match) as soon as there are at least `count`, or whatever there is after
        `timeout` seconds (for hits that are logged asynchronously: UDP, ICMP, ClientHello)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.hits(label, **match)
            if len(found) >= count or time.monotonic() >= deadline:
                return found
            time.sleep(0.05)

    def clear_hits(self):
        # The servers append with O_APPEND, so they carry on at the new end.
        os.truncate(self.hit_log, 0)
