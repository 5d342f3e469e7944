#!/usr/bin/env python3
"""The servers of the fake internet (tests/api/fake_internet.py), run inside its network namespace:

    ip netns exec NS python3 fake_servers.py --config CONFIG.json

  * an authoritative DNS server for `.test` (UDP and TCP 53) on the upstream and the second
    DNS address;
  * HTTP (80) and HTTPS (443) servers answering "<label> <host header> <path>", plus
    /big?bytes=N, which streams N bytes;
  * a TLS ClientHello capture server (443) that records the hello's random and SNI and hangs up;
  * leak catchers: UDP listeners (53, 443, 9999) and ICMP echo request observers on the
    addresses nothing should ever reach.

Every request is appended to the hit log as one JSON object per line. Prints "ready" on stdout
once every listener is bound, then runs until SIGTERM/SIGINT/SIGHUP, or until the process that
started it is gone. Only the standard library is used.
"""

import argparse
import ipaddress
import json
import os
import selectors
import signal
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

BIG_MAX = 1 << 30  # largest /big?bytes=N served
BIG_CHUNK = bytes(range(256)) * 256  # 64 KiB of a fixed pattern, so a receiver can verify it
HELLO_LIMIT = 64 * 1024
HELLO_TIMEOUT_S = 10
DNS_TCP_IDLE_S = 10
CATCHER_DATA_MAX = 512  # bytes of a caught datagram kept in the log (hex)
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def family_of(address):
    return socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET


# ---- hit log -------------------------------------------------------------------------------------


class HitLog:
    """Appends one JSON object per line. One write(2) per line on an O_APPEND descriptor, so the
    reader never sees interleaved lines and may truncate the file at any time."""

    def __init__(self, path):
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._lock = threading.Lock()

    def write(self, label, **fields):
        entry = {"label": label, **fields, "time": round(time.time(), 6)}
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


# ---- DNS -----------------------------------------------------------------------------------------

TYPE = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "TXT": 16, "AAAA": 28, "OPT": 41, "ANY": 255}
TYPE_NAME = {v: k for k, v in TYPE.items()}
CLASS_IN, CLASS_ANY = 1, 255
NOERROR, FORMERR, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 3, 4, 5
EDNS_UDP_SIZE = 1232


class DnsFormatError(ValueError):
    pass


def dns_read_name(msg, off):
    """(dotted lower-case name without trailing dot, offset after the name); follows pointers."""
    labels, end, hops = [], None, 0
    while True:
        if off >= len(msg):
            raise DnsFormatError("name runs past the message")
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(msg):
                raise DnsFormatError("truncated pointer")
            hops += 1
            if hops > 32:
                raise DnsFormatError("pointer loop")
            if end is None:
                end = off + 2
            off = ((n & 0x3F) << 8) | msg[off + 1]
        elif n & 0xC0:
            raise DnsFormatError("bad label type")
        elif n == 0:
            name = ".".join(labels).lower()
            return name, (end if end is not None else off + 1)
        else:
            label = msg[off + 1:off + 1 + n]
            if len(label) != n:
                raise DnsFormatError("label runs past the message")
            labels.append(label.decode("ascii", "backslashreplace"))
            off += 1 + n


def dns_name(name):
    out = b""
    for label in name.rstrip(".").split(".") if name.strip(".") else []:
        raw = label.encode("ascii")
        if not 0 < len(raw) < 64:
            raise ValueError(f"bad DNS label in {name!r}")
        out += bytes([len(raw)]) + raw
    return out + b"\0"


def dns_rdata(rtype, value):
    if rtype == "A":
        return socket.inet_pton(socket.AF_INET, value)
    if rtype == "AAAA":
        return socket.inet_pton(socket.AF_INET6, value)
    if rtype in ("CNAME", "NS"):
        return dns_name(value)
    if rtype == "TXT":
        raw = value.encode()
        chunks = [raw[i:i + 255] for i in range(0, len(raw), 255)] or [b""]
        return b"".join(bytes([len(c)]) + c for c in chunks)
    if rtype == "SOA":  # "mname rname serial refresh retry expire minimum"
        mname, rname, *numbers = value.split()
        return dns_name(mname) + dns_name(rname) + struct.pack("!5I", *map(int, numbers))
    raise ValueError(f"unsupported record type {rtype}")


class DnsQuery:
    """The parts of a query the server needs."""

    def __init__(self, msg):
        if len(msg) < 12:
            raise DnsFormatError("short header")
        self.id, self.flags, qd, an, ns, ar = struct.unpack("!6H", msg[:12])
        self.is_response = bool(self.flags & 0x8000)
        self.opcode = (self.flags >> 11) & 0xF
        self.qdcount = qd
        self.name = self.qtype = self.qclass = None
        self.question = b""  # the question section exactly as received (keeps 0x20 casing)
        self.edns_size = None  # UDP payload size from the OPT record, if any
        off = 12
        if qd != 1:
            return
        self.name, off = dns_read_name(msg, off)
        if off + 4 > len(msg):
            raise DnsFormatError("truncated question")
        self.qtype, self.qclass = struct.unpack("!HH", msg[off:off + 4])
        self.question = msg[12:off + 4]
        off += 4
        for i in range(an + ns + ar):  # skip to the additional section, looking for OPT
            _, off = dns_read_name(msg, off)
            if off + 10 > len(msg):
                raise DnsFormatError("truncated record")
            rtype, rclass, _ttl, rdlen = struct.unpack("!HHIH", msg[off:off + 10])
            off += 10 + rdlen
            if off > len(msg):
                raise DnsFormatError("truncated rdata")
            if rtype == TYPE["OPT"] and i >= an + ns:
                self.edns_size = max(rclass, 512)


class Zone:
    """name → [(type, value)]; names lower-case without trailing dot. The apex "test" holds the
    SOA that negative answers carry (so resolvers can cache them the usual way)."""

    def __init__(self, records, ttl):
        self.records = {k.lower().rstrip("."): [tuple(r) for r in v] for k, v in records.items()}
        self.ttl = ttl
        self.apex = "test"
        soa = [v for t, v in self.records.get(self.apex, []) if t == "SOA"]
        self.soa = soa[0] if soa else None

    def exists(self, name):
        # A name with records, or an empty non-terminal above one (NOERROR/no data, not NXDOMAIN).
        return name in self.records or any(k.endswith("." + name) for k in self.records)

    def resolve(self, name, qtype):
        """(rcode, [(owner, type, value)]), following CNAMEs for other query types."""
        answers, current = [], name
        for _ in range(8):  # CNAME chain bound
            records = self.records.get(current)
            if records is None:
                if current == name and not self.exists(name):
                    return NXDOMAIN, []
                break
            cnames = [v for t, v in records if t == "CNAME"]
            if cnames and qtype not in (TYPE["CNAME"], TYPE["ANY"]):
                target = cnames[0].lower().rstrip(".")
                answers.append((current, "CNAME", target))
                current = target
                continue
            answers += [(current, t, v) for t, v in records if qtype == TYPE["ANY"] or TYPE.get(t) == qtype]
            break
        return NOERROR, answers


def dns_answer(zone, msg, max_size):
    """The reply to `msg` (bytes) and the parsed query, or (None, query) for nothing to send."""
    try:
        q = DnsQuery(msg)
    except DnsFormatError:
        if len(msg) < 12 or msg[2] & 0x80:  # nothing to answer, or a response
            return None, None
        q = None
    if q is not None and q.is_response:
        return None, q

    def build(rcode, answers=(), authority=(), truncated=False):
        qid, flags = struct.unpack("!HH", msg[:4])
        # AA: authoritative for .test. RA as well: deskboxd treats this server as its recursive
        # upstream resolver, and stub resolvers look at RA.
        out_flags = 0x8000 | (flags & 0x7800) | 0x0400 | (flags & 0x0100) | 0x0080 | rcode
        if truncated:
            out_flags |= 0x0200
        question = q.question if q is not None else b""
        edns = q is not None and q.edns_size is not None
        body = b""
        for i, (owner, rtype, value, ttl) in enumerate(list(answers) + list(authority)):
            # The first owner is the query name: point at the question so its casing is kept.
            owner_wire = b"\xc0\x0c" if (i == 0 and answers and owner == q.name) else dns_name(owner)
            rdata = dns_rdata(rtype, value)
            body += owner_wire + struct.pack("!HHIH", TYPE[rtype], CLASS_IN, ttl, len(rdata)) + rdata
        if edns:
            body += b"\0" + struct.pack("!HHIH", TYPE["OPT"], EDNS_UDP_SIZE, 0, 0)
        header = struct.pack("!6H", qid, out_flags, 1 if question else 0, len(answers), len(authority),
                             1 if edns else 0)
        return header + question + body

    if q is None or q.qdcount != 1:
        return build(FORMERR), q
    if q.opcode != 0:
        return build(NOTIMP), q
    if q.qclass not in (CLASS_IN, CLASS_ANY):
        return build(REFUSED), q
    rcode, records = zone.resolve(q.name, q.qtype)
    answers = [(o, t, v, zone.ttl) for o, t, v in records]
    authority = []
    if not answers and zone.soa is not None:
        minimum = int(zone.soa.split()[-1])
        authority = [(zone.apex, "SOA", zone.soa, minimum)]
    reply = build(rcode, answers, authority)
    if len(reply) > max_size:
        reply = build(rcode, truncated=True)
    return reply, q


class DnsService:
    def __init__(self, label, zone, hitlog):
        self.label, self.zone, self.hitlog = label, zone, hitlog

    def handle(self, msg, client, proto, max_size):
        reply, q = dns_answer(self.zone, msg, max_size)
        if q is not None and q.name is not None and not q.is_response:
            self.hitlog.write("dns", server=self.label, proto=proto, client=client[0], client_port=client[1],
                              name=q.name, type=TYPE_NAME.get(q.qtype, str(q.qtype)))
        return reply

    def on_udp(self, sock):
        msg, client = sock.recvfrom(65535)
        q_size = 512
        try:
            edns = DnsQuery(msg).edns_size
            if edns:
                q_size = min(edns, EDNS_UDP_SIZE)
        except DnsFormatError:
            pass
        reply = self.handle(msg, client, "udp", q_size)
        if reply:
            sock.sendto(reply, client)


class DnsTcpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, service):
        self.address_family = family_of(address)
        self.service = service
        super().__init__((address, 53), DnsTcpHandler)

    def handle_error(self, request, client_address):
        traceback.print_exc()


class DnsTcpHandler(socketserver.BaseRequestHandler):
    """Length-prefixed queries (RFC 1035 4.2.2), several per connection, until EOF or idle."""

    def handle(self):
        sock = self.request
        sock.settimeout(DNS_TCP_IDLE_S)
        try:
            while True:
                head = recv_exact(sock, 2)
                if head is None:
                    return
                msg = recv_exact(sock, struct.unpack("!H", head)[0])
                if msg is None:
                    return
                reply = self.server.service.handle(msg, self.client_address, "tcp", 65535)
                if reply:
                    sock.sendall(struct.pack("!H", len(reply)) + reply)
        except (TimeoutError, OSError):
            return


def recv_exact(sock, n):
    """n bytes, or None on EOF before that."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


# ---- HTTP and HTTPS ------------------------------------------------------------------------------


class WebServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, port, label, hitlog, tls_context=None):
        self.address_family = family_of(address)
        self.label, self.hitlog, self.tls_context = label, hitlog, tls_context
        self.scheme = "https" if tls_context else "http"
        super().__init__((address, port), WebHandler)

    def server_bind(self):
        # HTTPServer.server_bind would call socket.getfqdn(), a reverse DNS lookup: skip it.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def finish_request(self, request, client_address):
        if self.tls_context is None:
            return super().finish_request(request, client_address)
        # The handshake runs here, in the connection's own thread, not in the accept loop.
        request.settimeout(HELLO_TIMEOUT_S)
        try:
            tls = self.tls_context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return  # a client that gave up or rejected the certificate
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError)):
            traceback.print_exc()


class WebHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-internet"
    sys_version = ""
    timeout = 30  # idle keep-alive connections

    def log_message(self, format, *args):
        pass  # the hit log is the record; stderr stays for real errors

    def do_GET(self):
        self.respond(send_body=True)

    def do_HEAD(self):
        self.respond(send_body=False)

    def do_POST(self):
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or (length and not length.isdigit()):
            self.close_connection = True  # no chunked request bodies: cannot stay in sync
        elif length:
            remaining = int(length)
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 65536))
                if not chunk:
                    break
                remaining -= len(chunk)
        self.respond(send_body=True)

    do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_POST

    def respond(self, send_body):
        srv = self.server
        host = self.headers.get("Host", "")
        sni = getattr(self.connection, "fake_internet_sni", "") if srv.tls_context else None
        srv.hitlog.write(srv.label, scheme=srv.scheme, sni=sni, host=host, path=self.path, method=self.command,
                         client=self.client_address[0], client_port=self.client_address[1],
                         address=srv.server_address[0], port=srv.server_address[1])
        url = urlsplit(self.path)
        if url.path == "/big" and "bytes" in parse_qs(url.query):
            value = parse_qs(url.query)["bytes"][0]
            if not value.isdigit() or int(value) > BIG_MAX:
                return self.send_text(400, f"bytes must be 0..{BIG_MAX}\n", send_body)
            return self.send_big(int(value), send_body)
        self.send_text(200, f"{srv.label} {host} {self.path}\n", send_body)

    def send_text(self, status, text, send_body):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def send_big(self, size, send_body):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if not send_body:
            return
        chunk = memoryview(BIG_CHUNK)
        while size > 0:
            n = min(size, len(chunk))
            self.wfile.write(chunk[:n])  # unbuffered writer: sendall
            size -= n


# ---- TLS ClientHello capture ---------------------------------------------------------------------


class HelloServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, port, hitlog):
        self.address_family = family_of(address)
        self.hitlog = hitlog
        super().__init__((address, port), HelloHandler)

    def handle_error(self, request, client_address):
        traceback.print_exc()


class HelloHandler(socketserver.BaseRequestHandler):
    def handle(self):
        srv = self.server
        where = dict(client=self.client_address[0], client_port=self.client_address[1],
                     address=srv.server_address[0], port=srv.server_address[1])
        try:
            hello = read_client_hello(self.request)
            info = parse_client_hello(hello)
        except (ValueError, OSError) as e:
            srv.hitlog.write("hello_error", error=str(e) or type(e).__name__, **where)
            return
        srv.hitlog.write("hello", random=info["random"], sni=info["sni"], alpn=info["alpn"], **where)


def read_client_hello(sock):
    """The handshake message of the first ClientHello, reassembled from TLS records."""
    deadline = time.monotonic() + HELLO_TIMEOUT_S
    received, handshake = 0, b""

    def read(n):
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ValueError("timed out reading the ClientHello")
            sock.settimeout(left)
            try:
                chunk = sock.recv(n - len(buf))
            except TimeoutError:
                raise ValueError("timed out reading the ClientHello") from None
            if not chunk:
                raise ValueError("connection closed before a complete ClientHello")
            buf += chunk
        return buf

    while True:
        if len(handshake) >= 4:
            if handshake[0] != 1:
                raise ValueError(f"handshake message type {handshake[0]}, not ClientHello")
            total = 4 + int.from_bytes(handshake[1:4], "big")
            if len(handshake) >= total:
                return handshake[:total]
        content_type, _version, length = struct.unpack("!BHH", read(5))
        if content_type != 22:
            raise ValueError(f"TLS record type {content_type}, not handshake")
        received += 5 + length
        if received > HELLO_LIMIT:
            raise ValueError(f"ClientHello larger than {HELLO_LIMIT} bytes")
        handshake += read(length)


def parse_client_hello(msg):
    """{"random": hex, "sni": host name or "", "alpn": [protocols]} of a ClientHello message."""
    pos = 4

    def take(n):
        nonlocal pos
        if pos + n > len(msg):
            raise ValueError("ClientHello truncated")
        pos += n
        return msg[pos - n:pos]

    def take_vector(length_bytes):
        return take(int.from_bytes(take(length_bytes), "big"))

    take(2)  # legacy_version
    random = take(32)
    take_vector(1)  # legacy_session_id
    take_vector(2)  # cipher_suites
    take_vector(1)  # legacy_compression_methods
    sni, alpn = "", []
    if pos < len(msg):
        extensions = take_vector(2)
        i = 0
        while i + 4 <= len(extensions):
            ext_type, ext_len = struct.unpack("!HH", extensions[i:i + 4])
            data = extensions[i + 4:i + 4 + ext_len]
            i += 4 + ext_len
            if ext_type == 0 and len(data) >= 5:  # server_name: list of (type, name)
                j = 2
                while j + 3 <= len(data):
                    name_type, name_len = data[j], int.from_bytes(data[j + 1:j + 3], "big")
                    if name_type == 0:
                        sni = data[j + 3:j + 3 + name_len].decode("ascii", "backslashreplace")
                        break
                    j += 3 + name_len
            elif ext_type == 16 and len(data) >= 2:  # application_layer_protocol_negotiation
                j = 2
                while j < len(data):
                    n = data[j]
                    alpn.append(data[j + 1:j + 1 + n].decode("ascii", "backslashreplace"))
                    j += 1 + n
    return {"random": random.hex(), "sni": sni, "alpn": alpn}


# ---- leak catchers -------------------------------------------------------------------------------


class PacketLoop(threading.Thread):
    """One thread for every datagram socket (DNS over UDP, UDP catchers, ICMP observers)."""

    def __init__(self):
        super().__init__(name="packets", daemon=True)
        self.selector = selectors.DefaultSelector()

    def add(self, sock, callback):
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, callback)

    def run(self):
        while True:
            for key, _ in self.selector.select():
                try:
                    key.data(key.fileobj)
                except (BlockingIOError, InterruptedError):
                    pass
                except Exception:
                    traceback.print_exc()


def udp_catcher(hitlog, address, port):
    def on_datagram(sock):
        data, client = sock.recvfrom(65535)
        hitlog.write("udp", address=address, port=port, client=client[0], client_port=client[1],
                     size=len(data), data=data[:CATCHER_DATA_MAX].hex())
    return on_datagram


def icmp4_observer(hitlog, watched):
    # A raw ICMP socket gets a copy of every ICMP packet the namespace receives, IP header
    # included; the kernel still answers the echo requests itself.
    def on_packet(sock):
        packet = sock.recv(65535)
        ihl = (packet[0] & 0x0F) * 4
        if len(packet) < ihl + 8 or packet[ihl] != 8:  # echo request only
            return
        dst = socket.inet_ntop(socket.AF_INET, packet[16:20])
        if dst in watched:
            ident, seq = struct.unpack("!HH", packet[ihl + 4:ihl + 8])
            hitlog.write("icmp", address=dst, client=socket.inet_ntop(socket.AF_INET, packet[12:16]),
                         id=ident, seq=seq)
    return on_packet


def icmp6_observer(hitlog, watched):
    # IPv6 raw sockets get no IP header: the destination comes from IPV6_PKTINFO.
    def on_packet(sock):
        data, ancillary, _flags, src = sock.recvmsg(65535, socket.CMSG_SPACE(20))
        if len(data) < 8 or data[0] != 128:  # echo request only
            return
        dst = None
        for level, kind, cdata in ancillary:
            if level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO and len(cdata) >= 16:
                dst = socket.inet_ntop(socket.AF_INET6, cdata[:16])
        if dst in watched:
            ident, seq = struct.unpack("!HH", data[4:8])
            hitlog.write("icmp", address=dst, client=src[0], id=ident, seq=seq)
    return on_packet


# ---- main ----------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    with open(args.config) as f:
        config = json.load(f)

    # Every thread inherits this mask, so the stop signals reach only the sigwait below.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    hitlog = HitLog(config["log"])
    zone = Zone(config["zone"], config["dns_ttl"])
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(config["cert"], config["key"])
    tls.set_alpn_protocols(["http/1.1"])

    def remember_sni(tls_socket, server_name, _context):
        tls_socket.fake_internet_sni = server_name or ""
    tls.sni_callback = remember_sni

    packets = PacketLoop()
    stream_servers = []
    for label, address in config["dns"].items():
        service = DnsService(label, zone, hitlog)
        udp = socket.socket(family_of(address), socket.SOCK_DGRAM)
        udp.bind((address, 53))
        packets.add(udp, service.on_udp)
        stream_servers.append(DnsTcpServer(address, service))
    for address, label in config["web"].items():
        stream_servers.append(WebServer(address, 80, label, hitlog))
        stream_servers.append(WebServer(address, 443, label, hitlog, tls))
    stream_servers.append(HelloServer(config["hello"], 443, hitlog))

    watched = config["catch"]
    for address in watched:
        for port in config["catch_udp_ports"]:
            udp = socket.socket(family_of(address), socket.SOCK_DGRAM)
            udp.bind((address, port))
            packets.add(udp, udp_catcher(hitlog, address, port))
    icmp4 = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    packets.add(icmp4, icmp4_observer(hitlog, {a for a in watched if family_of(a) == socket.AF_INET}))
    icmp6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    icmp6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
    packets.add(icmp6, icmp6_observer(hitlog, {a for a in watched if family_of(a) == socket.AF_INET6}))

    packets.start()
    for server in stream_servers:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 1.0},
                         name=f"{type(server).__name__} {server.server_address[:2]}", daemon=True).start()
    print("ready", flush=True)

    # Stop on a signal, or once the process that started us is gone (it died without cleaning up).
    parent = config.get("parent_pid")
    while True:
        if signal.sigtimedwait(STOP_SIGNALS, 1.0) is not None:
            break
        if parent and os.getppid() != parent:
            break
    sys.stdout.flush()
    os._exit(0)  # daemon threads may be mid-response; nothing else to clean up


if __name__ == "__main__":
    main()
