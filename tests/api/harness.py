"""A private deskbox deployment for the API tests: deskbox-jailer (root) and deskboxd (user
`deskbox`) on their own socket, state directories, netns prefix, cgroup and port, all named
after this process's pid, and removed again by stop() -- also when a test fails, the process is
interrupted (atexit, SIGTERM/SIGINT/SIGHUP handlers) or killed (both children get a
parent-death SIGTERM, and the jailer runs with --sweep-on-exit).

Environment (ctest sets the first one):
  DESKBOX_BIN_DIR    directory with deskbox-jailer, deskboxd, deskbox-events, deskbox
  DESKBOX_CACHE_DIR  template cache (default /var/cache/deskbox)
  DESKBOX_TEMPLATE   template directory name (default: the newest in $CACHE/templates)

Also here: ApiTestCase, the base of the test classes (request helpers and assertions shared by
test_spec, test_sandbox and test_restart), a Prometheus text parser and NdjsonStream, a reader
for `events?follow=1` that decodes the chunked body itself so a test controls when it closes.
"""

import atexit
import base64
import datetime
import glob
import http.cookiejar
import json
import os
import pwd
import queue
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import unittest
from pathlib import Path

import requests

UID_BASE = 320000
SERVICE_USER = "deskbox"
CREATE_TIMEOUT_S = 120

_DEFAULT = object()  # "use the deployment's API key"
_live = []  # deployments not yet stopped, for the atexit and signal handlers
_handlers_installed = False

SANDBOX_ID_RE = re.compile(r"^sb-[0-9a-f]{16}$")
REQUEST_ID_RE = re.compile(r"^req_[0-9a-f]{16}$")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class DeploymentError(RuntimeError):
    pass


def source_dir():
    env = os.environ.get("DESKBOX_SOURCE_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2]


def bin_dir():
    env = os.environ.get("DESKBOX_BIN_DIR")
    return Path(env) if env else source_dir() / "build" / "bin"


def cache_dir():
    return Path(os.environ.get("DESKBOX_CACHE_DIR") or "/var/cache/deskbox")


def template_name(cache):
    name = os.environ.get("DESKBOX_TEMPLATE")
    if name:
        return name
    candidates = [p for p in (cache / "templates").glob("*") if p.is_dir() and not p.name.startswith(".")]
    if not candidates:
        raise DeploymentError(f"no template in {cache}/templates: build one with scripts/build-artifacts "
                              "or set DESKBOX_TEMPLATE")
    return max(candidates, key=lambda p: p.stat().st_mtime).name


def parse_time(text):
    """RFC 3339 UTC with milliseconds and a Z → aware datetime."""
    if not isinstance(text, str) or not TIME_RE.match(text):
        raise ValueError(f"not an RFC 3339 UTC time with milliseconds and Z: {text!r}")
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, lines=60):
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        return f"({path}: {e})"
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def describe(resp, limit=800):
    """One line naming a request and its answer, for failure messages."""
    req = resp.request
    try:
        body = resp.content[:limit].decode("utf-8", "replace")
    except Exception as e:  # a streamed body that cannot be read any more
        body = f"(body not read: {e})"
    return f"{req.method} {req.url} -> {resp.status_code}: {body}"


def parse_metrics(text):
    """Prometheus text format → list of (name, {label: value}, float)."""
    samples = []
    label_re = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$", line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        labels = {}
        rest = m.group(3) or ""
        pos = 0
        while pos < len(rest):
            lm = label_re.match(rest, pos)
            if not lm:
                raise ValueError(f"bad labels in {line!r}")
            labels[lm.group(1)] = bytes(lm.group(2), "utf-8").decode("unicode_escape")
            pos = lm.end()
        samples.append((m.group(1), labels, float(m.group(4))))
    return samples


def _install_handlers():
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_stop_all)

    def on_signal(signum, frame):
        _stop_all()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)


def _stop_all():
    for d in list(_live):
        report = d.stop()
        if report.problems:
            print(f"deskbox test deployment {d.tag}: {report}", file=sys.stderr)


class StopReport:
    def __init__(self):
        self.problems = []  # things a correct deskboxd/jailer would not have left behind

    def __str__(self):
        return "clean" if not self.problems else "; ".join(self.problems)


class Deskbox:
    """One private deployment. Use as a context manager or call start()/stop()."""

    def __init__(self, warm_pool=1, prestart_pool=0, extra_args=(), jailer_args=()):
        self.warm_pool = warm_pool
        self.prestart_pool = prestart_pool
        self.extra_args = list(extra_args)
        self.jailer_args = list(jailer_args)
        self.pid = os.getpid()
        self.tag = f"apitest-{self.pid}"
        self.bin = bin_dir()
        self.cache = cache_dir()
        self.template = None
        self.run_dir = Path(f"/run/deskbox-{self.tag}")
        self.root = Path(f"/var/tmp/deskbox-{self.tag}")
        self.jailer_state = self.root / "jailer"
        self.daemon_state = self.root / "daemon"
        self.jailer_log = self.root / "jailer.log"
        self.daemon_log = self.root / "deskboxd.log"
        self.socket = self.run_dir / "jailer.sock"
        self.netns_prefix = f"dbxa{self.pid}-"
        self.cgroup_name = f"deskbox-{self.tag}"
        self.key = "dbk_" + secrets.token_hex(32)
        self.port = None
        self.jailer = None
        self.daemon = None
        self.daemon_clean_exit_expected = False
        self.session = requests.Session()
        # An API client keeps no cookies (the view page sets one; tests send it by hand).
        self.session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self._stopped = True

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        if os.geteuid() != 0:
            raise DeploymentError("the API tests must run as root (they start deskbox-jailer)")
        for tool in ("deskbox-jailer", "deskboxd", "deskbox-events"):
            if not os.access(self.bin / tool, os.X_OK):
                raise DeploymentError(f"{self.bin / tool} is missing: build first or set DESKBOX_BIN_DIR")
        self.template = template_name(self.cache)
        if not (self.cache / "templates" / self.template).is_dir():
            raise DeploymentError(f"template {self.template} not found in {self.cache}/templates")
        if subprocess.run(["id", SERVICE_USER], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                            SERVICE_USER], check=True)
        user = pwd.getpwnam(SERVICE_USER)
        _install_handlers()
        _live.append(self)
        self._stopped = False
        try:
            self.run_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
            os.chmod(self.root, 0o711)
            self.jailer_state.mkdir(mode=0o755, exist_ok=True)
            self.daemon_state.mkdir(mode=0o700, exist_ok=True)
            os.chown(self.daemon_state, user.pw_uid, user.pw_gid)
            self._start_jailer(user)
            self.start_daemon()
        except BaseException:
            report = self.stop()
            if report.problems:
                print(f"cleanup after failed start: {report}", file=sys.stderr)
            raise

    def _start_jailer(self, user):
        cmd = ["setpriv", "--pdeathsig", "TERM", "--", str(self.bin / "deskbox-jailer"),
               "--socket", str(self.socket), "--cache-dir", str(self.cache),
               "--state-dir", str(self.jailer_state), "--netns-prefix", self.netns_prefix,
               "--cgroup-name", self.cgroup_name, "--uid-base", str(UID_BASE),
               "--client-uid", str(user.pw_uid), "--socket-gid", str(user.pw_gid), "--sweep-on-exit",
               *self.jailer_args]
        log = open(self.jailer_log, "ab")
        self.jailer = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
                                       start_new_session=True)
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.jailer.poll() is not None:
                raise DeploymentError(f"deskbox-jailer exited with {self.jailer.returncode}:\n{tail(self.jailer_log)}")
            if self.socket.is_socket():
                return
            time.sleep(0.05)
        raise DeploymentError(f"deskbox-jailer did not create {self.socket} in 15 s:\n{tail(self.jailer_log)}")

    def start_daemon(self, wait=True):
        """Starts deskboxd (again) against the same state directory and jailer, on a new port;
        with wait=False it returns at once (wait_daemon() then waits for it to answer)."""
        if self.daemon is not None and self.daemon.poll() is None:
            raise DeploymentError("deskboxd is already running")
        self.port = free_port()
        cmd = ["setpriv", "--reuid", SERVICE_USER, "--regid", SERVICE_USER, "--init-groups",
               "--pdeathsig", "TERM", "--", str(self.bin / "deskboxd"),
               "--listen", f"127.0.0.1:{self.port}", "--state-dir", str(self.daemon_state),
               "--cache-dir", str(self.cache), "--template", self.template,
               "--jailer-socket", str(self.socket), "--netns-prefix", self.netns_prefix,
               "--warm-pool", str(self.warm_pool), "--prestart-pool", str(self.prestart_pool),
               "--destroy-on-exit", *self.extra_args]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": str(self.daemon_state),
               "DESKBOX_API_KEY": self.key}
        if os.environ.get("DESKBOX_LOG"):  # e.g. debug, to see the restore path's timings
            env["DESKBOX_LOG"] = os.environ["DESKBOX_LOG"]
        with open(self.daemon_log, "ab") as log:
            log.write(f"==== deskboxd started {time.strftime('%H:%M:%S')} on port {self.port}\n".encode())
            log.flush()
            self.daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           env=env, start_new_session=True)
        self.daemon_clean_exit_expected = True
        self.session.close()
        self.session = requests.Session()
        # An API client keeps no cookies (the view page sets one; tests send it by hand).
        self.session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        if wait:
            self.wait_daemon()

    def wait_daemon(self):
        """Waits until the started deskboxd answers GET /healthz (60 s at most)."""
        deadline = time.monotonic() + 60
        last = "no answer"
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise DeploymentError(f"deskboxd exited with {self.daemon.returncode} while starting:\n"
                                      f"{tail(self.daemon_log)}")
            try:
                r = requests.get(self.url + "/healthz", timeout=2)
                if r.status_code == 200:
                    return
                last = f"{r.status_code} {r.text[:200]}"
            except requests.RequestException as e:
                last = str(e)
            time.sleep(0.2)
        raise DeploymentError(f"deskboxd did not answer GET /healthz with 200 within 60 s (last: {last}):\n"
                              f"{tail(self.daemon_log)}")

    def start_jailer(self):
        """Starts deskbox-jailer (again) on the deployment's socket and state directory."""
        self._start_jailer(pwd.getpwnam(SERVICE_USER))

    def kill9_jailer(self):
        if self.jailer is not None and self.jailer.poll() is None:
            self.jailer.kill()
            self.jailer.wait()

    def kill9_daemon(self):
        self.daemon_clean_exit_expected = False
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.kill()
            self.daemon.wait()
        self.session.close()

    @property
    def daemon_pid(self):
        if self.daemon is None or self.daemon.poll() is not None:
            raise AssertionError("deskboxd is not running")
        return self.daemon.pid

    def stop(self):
        """SIGTERM deskboxd, then the jailer, then remove whatever is still there. Idempotent.
        The report lists what the daemon or jailer should have removed themselves."""
        report = StopReport()
        if self._stopped:
            return report
        self._stopped = True
        self.session.close()
        daemon_exited_cleanly = False
        if self.daemon is not None:
            if self.daemon.poll() is None:
                self.daemon.terminate()
                try:
                    self.daemon.wait(timeout=90)
                    daemon_exited_cleanly = self.daemon_clean_exit_expected
                    if self.daemon.returncode != 0:
                        report.problems.append(f"deskboxd exited with status {self.daemon.returncode} on SIGTERM")
                except subprocess.TimeoutExpired:
                    report.problems.append("deskboxd did not exit within 90 s of SIGTERM")
                    self.daemon.kill()
                    self.daemon.wait()
        if daemon_exited_cleanly:
            # --destroy-on-exit: every sandbox and pooled VM is gone once deskboxd has exited.
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and (self.qemu_processes() or self.slot_dirs()):
                time.sleep(0.2)
            if self.qemu_processes():
                report.problems.append(f"after deskboxd exited (--destroy-on-exit): QEMU still running "
                                       f"(pid: slot) {self.qemu_processes()}")
            if self.slot_dirs():
                report.problems.append(f"after deskboxd exited (--destroy-on-exit): slot directories left "
                                       f"{sorted(self.slot_dirs())}")
        if self.jailer is not None and self.jailer.poll() is None:
            self.jailer.terminate()
            try:
                self.jailer.wait(timeout=90)
                if self.jailer.returncode != 0:
                    report.problems.append(f"deskbox-jailer exited with status {self.jailer.returncode} on SIGTERM")
            except subprocess.TimeoutExpired:
                report.problems.append("deskbox-jailer did not exit within 90 s of SIGTERM")
                self.jailer.kill()
                self.jailer.wait()
        self._safety_net(report)
        if self in _live:
            _live.remove(self)
        return report

    def _safety_net(self, report):
        """Whatever the jailer's sweep left: processes, netns, cgroups, directories."""
        killed = self.kill_processes()
        if killed:
            report.problems.append(f"processes left after the jailer's sweep, killed: {killed}")
        left_ns = self.remove_netns()
        if left_ns:
            report.problems.append(f"netns left after the jailer's sweep, deleted: {left_ns}")
        left_cg = self.remove_cgroups()
        if left_cg:
            report.problems.append(f"cgroups left after the jailer's sweep, removed: {left_cg}")
        shutil.rmtree(self.run_dir, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- ending what the deployment holds, as its own sweep or a reboot would --------------

    def kill_processes(self):
        """SIGKILL to every process of this deployment (jailer, deskboxd, QEMUs, by the paths and
        names on their command lines); waits up to 10 s for them to go. Returns their pids."""
        marks = [str(self.jailer_state).encode(), str(self.run_dir).encode(), self.netns_prefix.encode()]
        killed = []
        for pid in self._pids():
            if pid == os.getpid():
                continue
            cmdline = self._cmdline(pid)
            if cmdline and any(m in cmdline for m in marks):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in killed):
            time.sleep(0.05)
        return killed

    def remove_netns(self):
        """Deletes this deployment's network namespaces; returns their names."""
        left = self.netns_names()
        for ns in left:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        return left

    def remove_cgroups(self):
        """Removes this deployment's cgroup subtrees, killing what is still in them; returns them."""
        left = self.cgroup_dirs()
        for top in left:
            for dirpath, dirnames, _ in os.walk(top, topdown=False):
                procs = Path(dirpath) / "cgroup.procs"
                try:
                    for p in procs.read_text().split():
                        try:
                            os.kill(int(p), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                except OSError:
                    pass
                for _ in range(100):
                    try:
                        os.rmdir(dirpath)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.02)
        return left

    # ---- what the deployment holds, for leak checks ------------------------------------------

    def netns_names(self):
        try:
            return sorted(n for n in os.listdir("/run/netns") if n.startswith(self.netns_prefix))
        except FileNotFoundError:
            return []

    def netns_count(self):
        return len(self.netns_names())

    def netns_slot(self, name):
        return int(name[len(self.netns_prefix):])

    def cgroup_dirs(self):
        found = glob.glob(f"/sys/fs/cgroup/{self.cgroup_name}") + glob.glob(f"/sys/fs/cgroup/*/{self.cgroup_name}")
        return sorted(p for p in found if os.path.isdir(p))

    def slot_cgroup_exists(self, slot):
        name = f"{self.netns_prefix}{slot}"
        return any(os.path.isdir(os.path.join(top, name)) for top in self.cgroup_dirs())

    def slot_dirs(self):
        try:
            return {int(n) for n in os.listdir(self.jailer_state / "slots") if n.isdigit()}
        except FileNotFoundError:
            return set()

    @staticmethod
    def _pids():
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]

    @staticmethod
    def _cmdline(pid):
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    def qemu_processes(self):
        """{pid: slot} of this deployment's QEMUs: named deskbox-slot<N>, running as uid
        UID_BASE+N, with their sockets in this deployment's jailer state directory."""
        found = {}
        mark = (str(self.jailer_state) + "/slots/").encode()
        for pid in self._pids():
            cmdline = self._cmdline(pid)
            m = re.search(rb"deskbox-slot(\d+),", cmdline)
            if not m or mark not in cmdline:
                continue
            try:
                uid_line = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines()
                                if l.startswith("Uid:"))
            except (OSError, StopIteration):
                continue
            slot = int(m.group(1))
            if int(uid_line.split()[1]) == UID_BASE + slot:
                found[pid] = slot
        return found

    @staticmethod
    def process_start_ticks(pid):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])

    def daemon_fd_count(self):
        return len(os.listdir(f"/proc/{self.daemon_pid}/fd"))

    def daemon_fds(self):
        """What deskboxd's open fds point at. deskboxd opens and closes files on its own (it reads
        its QEMUs' /proc/PID/stat every few seconds), so an fd listed may be gone when read."""
        targets = []
        for n in os.listdir(f"/proc/{self.daemon_pid}/fd"):
            try:
                targets.append(os.readlink(f"/proc/{self.daemon_pid}/fd/{n}"))
            except FileNotFoundError:
                pass
        return sorted(targets)

    def daemon_log_bytes(self):
        try:
            return self.daemon_log.read_bytes()
        except OSError:
            return b""

    def event_log_path(self, sandbox_id):
        return self.daemon_state / "events" / f"{sandbox_id}.events"

    def events_tool(self, *args):
        return subprocess.run([str(self.bin / "deskbox-events"), *args], capture_output=True, text=True)

    # ---- HTTP --------------------------------------------------------------------------------

    def request(self, method, path, key=_DEFAULT, token=None, query_token=None, headers=None,
                params=None, timeout=60, **kw):
        """key: the API key to send (default: the deployment's; None: no Authorization header).
        token: a scoped token to send instead. query_token: sent as ?token=. headers override."""
        h = {}
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        elif key is _DEFAULT:
            h["Authorization"] = f"Bearer {self.key}"
        elif key is not None:
            h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        if query_token is not None:
            params = dict(params or {})
            params["token"] = query_token
        return self.session.request(method, self.url + path, headers=h, params=params, timeout=timeout, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def metrics(self):
        r = self.get("/metrics")
        if r.status_code != 200:
            raise AssertionError(f"metrics: {describe(r)}")
        return parse_metrics(r.text)

    def metric_value(self, name, **labels):
        """The sum of the samples of `name` whose labels include `labels`; None if there is none."""
        values = [v for n, l, v in self.metrics() if n == name and all(l.get(k) == x for k, x in labels.items())]
        return sum(values) if values else None

    def follow(self, path, key=_DEFAULT, token=None):
        secret = token if token is not None else (self.key if key is _DEFAULT else key)
        return NdjsonStream("127.0.0.1", self.port, path, secret)


class NdjsonStream:
    """GET of an application/x-ndjson stream on a raw socket: the status and headers are read
    in the constructor, body lines arrive on a queue from a reader thread, close() shuts the
    socket down at once (so the server sees the client go away)."""

    _END = object()

    def __init__(self, host, port, path, secret, timeout=30):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        req = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/x-ndjson\r\n"
               + (f"Authorization: Bearer {secret}\r\n" if secret else "") + "Connection: close\r\n\r\n")
        self.sock.sendall(req.encode())
        self.buf = b""
        head = self._read_until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        self.status = int(parts[1])
        self.headers = {}
        for l in lines[1:]:
            if ":" in l:
                k, v = l.split(":", 1)
                self.headers[k.strip().lower()] = v.strip()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.lines = queue.Queue()
        self.ended = threading.Event()
        self.error = None
        self.sock.settimeout(None)
        self.thread = threading.Thread(target=self._reader, daemon=True)
        self.thread.start()

    def _recv(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def _read_until(self, sep):
        while sep not in self.buf:
            self._recv()
        i = self.buf.index(sep)
        out, self.buf = self.buf[:i], self.buf[i + len(sep):]
        return out

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._recv()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _body_pieces(self):
        if self.chunked:
            while True:
                size = int(self._read_until(b"\r\n").split(b";")[0].strip(), 16)
                if size == 0:
                    return
                yield self._read_exact(size)
                self._read_exact(2)
        elif "content-length" in self.headers:
            yield self._read_exact(int(self.headers["content-length"]))
        else:
            if self.buf:
                yield self.buf
                self.buf = b""
            while True:
                try:
                    self._recv()
                except EOFError:
                    return
                yield self.buf
                self.buf = b""

    def _reader(self):
        pending = b""
        try:
            for piece in self._body_pieces():
                pending += piece
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip():
                        self.lines.put(line)
            if pending.strip():
                self.lines.put(pending)
        except EOFError:
            self.error = "connection closed in the middle of the body"
        except OSError as e:
            self.error = str(e)
        finally:
            self.ended.set()
            self.lines.put(self._END)

    def next_line(self, timeout):
        """The next body line (bytes); None when the stream ended; raises queue.Empty on timeout."""
        item = self.lines.get(timeout=timeout)
        if item is self._END:
            self.lines.put(self._END)
            return None
        return item

    def next_event(self, timeout):
        line = self.next_line(timeout)
        return None if line is None else json.loads(line)

    def read_all_text(self, timeout=10):
        out = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.next_line(max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            out.append(line.decode("utf-8", "replace"))
        return "\n".join(out)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=5)


class ApiTestCase(unittest.TestCase):
    """Base class: subclasses set `dbx` (a started Deskbox) in setUpClass and call
    `cls.stop_deployment()` in tearDownClass, or name the Deskbox's keyword arguments in
    `deployment` and let this class do both; the deployment's logs are printed when a test of
    the class failed."""

    dbx = None
    deployment = None  # e.g. {"warm_pool": 0}: started in setUpClass, stopped in tearDownClass
    _failed = False
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if cls.deployment is not None:
            cls.start_deployment(**cls.deployment)

    @classmethod
    def tearDownClass(cls):
        cls.stop_deployment()
        super().tearDownClass()

    def run(self, result=None):
        before = (len(result.failures), len(result.errors)) if result is not None else None
        out = super().run(result)
        if result is not None and (len(result.failures), len(result.errors)) != before:
            type(self)._failed = True
        return out

    @classmethod
    def start_deployment(cls, **kw):
        cls.dbx = Deskbox(**kw)
        cls.dbx.start()
        return cls.dbx

    @classmethod
    def stop_deployment(cls):
        """Stops the deployment and raises if deskboxd or the jailer left anything behind."""
        if cls.dbx is None:
            return
        dbx, cls.dbx = cls.dbx, None
        if cls._failed:
            print(f"\n---- {dbx.daemon_log} (tail)\n{tail(dbx.daemon_log, 120)}\n"
                  f"---- {dbx.jailer_log} (tail)\n{tail(dbx.jailer_log, 60)}\n", file=sys.stderr)
        report = dbx.stop()
        if report.problems:
            raise AssertionError(f"teardown of the deployment found leaks: {report}")

    # ---- requests ----------------------------------------------------------------------------

    def expect(self, resp, status, what=""):
        """Asserts the status; returns the parsed JSON body for JSON answers, else the response."""
        self.assertEqual(resp.status_code, status, f"{what}: {describe(resp)}" if what else describe(resp))
        ctype = resp.headers.get("Content-Type", "")
        if ctype.split(";")[0].strip() == "application/json":
            self.assert_json_headers(resp)
            return self.json_of(resp)
        return resp

    def json_of(self, resp):
        try:
            return json.loads(resp.content)
        except (ValueError, UnicodeDecodeError) as e:
            self.fail(f"body is not valid UTF-8 JSON ({e}): {describe(resp)}")

    def assert_json_headers(self, resp):
        self.assertEqual(resp.headers.get("Content-Type", "").split(";")[0].strip(), "application/json",
                         f"Content-Type: {describe(resp)}")
        self.assertIn("no-store", resp.headers.get("Cache-Control", ""), f"Cache-Control: {describe(resp)}")
        self.assertRegex(resp.headers.get("X-Request-Id", ""), REQUEST_ID_RE, f"X-Request-Id: {describe(resp)}")

    def expect_error(self, resp, status, code, mentions=()):
        """An Error body {"error": {"code", "message"}} with this status and code, whose message
        contains each of `mentions` (case-insensitive)."""
        self.assertEqual(resp.status_code, status, f"expected {status} {code}: {describe(resp)}")
        self.assert_json_headers(resp)
        body = self.json_of(resp)
        self.assertIsInstance(body, dict, describe(resp))
        self.assertIsInstance(body.get("error"), dict, f"no error object: {describe(resp)}")
        err = body["error"]
        self.assertEqual(err.get("code"), code, describe(resp))
        self.assertIsInstance(err.get("message"), str, describe(resp))
        self.assertTrue(err["message"].strip(), f"empty error message: {describe(resp)}")
        for word in mentions:
            self.assertIn(str(word).lower(), err["message"].lower(),
                          f"the message should name {word!r}: {describe(resp)}")
        return err

    # ---- sandboxes ---------------------------------------------------------------------------

    def create_sandbox(self, **body):
        r = self.dbx.post("/v1/sandboxes", json=body, timeout=CREATE_TIMEOUT_S)
        sb = self.expect(r, 201, "create sandbox")
        self.assertRegex(sb.get("id", ""), SANDBOX_ID_RE, describe(r))
        self.assertEqual(sb.get("state"), "running", describe(r))
        return sb

    def delete_sandbox(self, sid):
        r = self.dbx.request("DELETE", f"/v1/sandboxes/{sid}", timeout=CREATE_TIMEOUT_S)
        self.assertEqual(r.status_code, 204, f"delete {sid}: {describe(r)}")

    def get_sandbox(self, sid):
        return self.expect(self.dbx.get(f"/v1/sandboxes/{sid}"), 200, f"get {sid}")

    def exec_in(self, sid, token=None, timeout=120, **body):
        kw = {"token": token} if token else {}
        r = self.dbx.post(f"/v1/sandboxes/{sid}/exec", json=body, timeout=timeout, **kw)
        return self.expect(r, 200, f"exec {body}")

    def sh(self, sid, command, **body):
        """Runs a shell command in the guest, asserts exit code 0, returns stdout."""
        res = self.exec_in(sid, shell=command, **body)
        self.assertEqual(res.get("exit_code"), 0, f"`{command}` in {sid}: {res}")
        return res["stdout"]

    def wait_state(self, sid, state, timeout):
        deadline = time.monotonic() + timeout
        sb = None
        while time.monotonic() < deadline:
            sb = self.get_sandbox(sid)
            if sb.get("state") == state:
                return sb
            time.sleep(0.5)
        self.fail(f"{sid} did not reach state {state!r} within {timeout} s; last: {sb}")

    def all_sandbox_ids(self):
        ids = set()
        for query in ("", "?state=stopped"):
            body = self.expect(self.dbx.get(f"/v1/sandboxes{query}"), 200, "list sandboxes")
            ids |= {s["id"] for s in body["sandboxes"]}
        return ids

    def events(self, sid, since=0, limit=None):
        q = f"?since={since}" + (f"&limit={limit}" if limit else "")
        return self.expect(self.dbx.get(f"/v1/sandboxes/{sid}/events{q}"), 200, "events")

    def all_events(self, sid):
        out, since = [], 0
        while True:
            page = self.events(sid, since=since)
            if not page["events"]:
                return out
            out += page["events"]
            self.assertGreater(page["next_since"], since, f"next_since does not advance: {page}")
            since = page["next_since"]

    def wait_settled(self, timeout=180):
        """Waits until the warm pool is full and the deployment's netns and QEMUs stop changing
        (pool refills run in the background after every create)."""
        deadline = time.monotonic() + timeout
        stable_since, last = time.monotonic(), None
        while time.monotonic() < deadline:
            warm = self.dbx.metric_value("deskbox_pool_size", pool="warm")
            now = (tuple(self.dbx.netns_names()), tuple(sorted(self.dbx.qemu_processes())), warm)
            if now != last:
                last, stable_since = now, time.monotonic()
            pool_full = warm is None or warm >= self.dbx.warm_pool
            if pool_full and time.monotonic() - stable_since >= 3:
                return
            time.sleep(0.5)
        self.fail(f"the deployment did not settle within {timeout} s (netns, QEMU pids, warm pool): {last}")


def b64(data):
    return base64.b64encode(data).decode()


E2E_DIR = os.path.join(source_dir(), "tests", "e2e")


def require_npm_packages():
    """The browser-side clients' npm packages (scripts/test runs 'npm ci' in tests/e2e)."""
    if not os.path.isdir(os.path.join(E2E_DIR, "node_modules", "playwright-core")):
        raise AssertionError(f"npm packages missing in {E2E_DIR}: scripts/test runs 'npm ci' there")


class OneSandboxTestCase(ApiTestCase):
    """A deployment without pools and one sandbox (cls.sid) for the whole class; each test opens
    its own page in the sandbox's browser with open_page()."""

    deployment = {}  # more arguments for Deskbox(), e.g. extra_args for deskboxd

    @classmethod
    def setUpClass(cls):
        cls.start_deployment(**{"warm_pool": 0, **cls.deployment})
        try:
            r = cls.dbx.post("/v1/sandboxes", json={}, timeout=300)
            if r.status_code != 201:
                raise AssertionError(f"create: {describe(r)}")
            cls.sid = r.json()["id"]
        except BaseException:
            cls.stop_deployment()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.dbx.request("DELETE", f"/v1/sandboxes/{cls.sid}", timeout=120)
        finally:
            cls.stop_deployment()

    def open_page(self, html):
        """Opens `html` as a data: URL in a new tab, brings it to the front and waits until it has
        loaded; sets self.target and self.page (a CdpPage), which tearDown closes."""
        from wsclient import CdpPage  # wsclient is a sibling module of the tests, not of the harness
        base = f"/v1/sandboxes/{self.sid}/cdp"
        url = "data:text/html," + urllib.parse.quote(html)
        self.target = self.expect(self.dbx.request("PUT", base + "/json/new", params={"url": url}), 200)["id"]
        self.expect(self.dbx.get(f"{base}/json/activate/{self.target}"), 200)
        self.page = CdpPage(self.dbx.port, self.sid, self.target, self.dbx.key)
        deadline = time.time() + 60
        while self.page.evaluate("document.readyState") != "complete":
            self.assertLess(time.time(), deadline, "the test page did not load")
            time.sleep(0.2)

    def tearDown(self):
        if getattr(self, "page", None) is not None:
            self.page.close()
            self.dbx.get(f"/v1/sandboxes/{self.sid}/cdp/json/close/{self.target}")
            self.page = None
