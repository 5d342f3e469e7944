"""A small WebSocket client (RFC 6455), enough to open, use and close a CDP session through
deskboxd, and a CDP page session on top of it for tests that check a page's state."""

import base64
import hashlib
import json
import secrets
import socket
import struct
from types import SimpleNamespace

from requests.structures import CaseInsensitiveDict

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
WS_TEXT, WS_BINARY, WS_CLOSE, WS_PING, WS_PONG = 0x1, 0x2, 0x8, 0x9, 0xA


class WsAnswer:
    """The answer to a WebSocket upgrade request, shaped like a requests.Response for describe()
    and check_response(). After a 101, `ws` is the open connection."""

    def __init__(self, url, status, headers, content, ws=None):
        self.request = SimpleNamespace(method="GET (Upgrade: websocket)", url=url)
        self.status_code = status
        self.headers = headers
        self.content = content
        self.ws = ws

    @property
    def text(self):
        return self.content.decode("utf-8", "replace")


class WebSocket:
    """The client side of an open WebSocket: masked frames out, unmasked frames in, pings
    answered. The socket's timeout bounds every read."""

    def __init__(self, sock, pending=b""):
        self.sock = sock
        self.buf = pending

    def _read_exact(self, n):
        while len(self.buf) < n:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the server closed the connection")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, opcode, payload):
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = secrets.token_bytes(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _read_frame(self):
        b0, b1 = self._read_exact(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read_exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read_exact(8))[0]
        mask = self._read_exact(4) if b1 & 0x80 else None
        payload = self._read_exact(n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(b0 & 0x80), b0 & 0x0F, payload

    def read_message(self):
        """(opcode, payload) of the next message; (WS_CLOSE, payload) for a close frame."""
        opcode, parts = None, []
        while True:
            fin, op, payload = self._read_frame()
            if op == WS_PING:
                self.send(WS_PONG, payload)
                continue
            if op == WS_PONG:
                continue
            if op == WS_CLOSE:
                return op, payload
            if op != 0:
                opcode = op
            parts.append(payload)
            if fin:
                return opcode, b"".join(parts)

    def call(self, msg_id, method):
        """Sends a CDP command; returns the answer with its id (events before it are skipped)."""
        self.send(WS_TEXT, json.dumps({"id": msg_id, "method": method}).encode())
        while True:
            opcode, payload = self.read_message()
            if opcode == WS_CLOSE:
                raise AssertionError(f"the session was closed instead of answering {method}: {close_reason(payload)}")
            if opcode == WS_TEXT:
                msg = json.loads(payload)
                if msg.get("id") == msg_id:
                    return msg

    def close(self, code=1000):
        """Sends a close frame and waits for the server's; returns its (code, reason), or None
        when the connection ended without one."""
        try:
            self.send(WS_CLOSE, struct.pack("!H", code))
            while True:
                opcode, payload = self.read_message()
                if opcode == WS_CLOSE:
                    return close_reason(payload)
        except (EOFError, OSError):
            return None
        finally:
            self.sock.close()


def close_reason(payload):
    if len(payload) < 2:
        return (1005, "")
    return struct.unpack("!H", payload[:2])[0], payload[2:].decode("utf-8", "replace")


def ws_connect(port, path, secret=None, timeout=30):
    """GET `path` (with its query) from deskboxd asking for a WebSocket, with `Authorization:
    Bearer <secret>` unless secret is None. After a 101 the Sec-WebSocket-Accept is checked and
    the answer's `ws` is the open connection; any other answer is read whole and the socket
    closed."""
    key = base64.b64encode(secrets.token_bytes(16)).decode()
    url = f"http://127.0.0.1:{port}{path}"
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      + (f"Authorization: Bearer {secret}\r\n" if secret is not None else "") + "\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                raise AssertionError(f"GET {url} (Upgrade: websocket): the connection ended before an answer: "
                                     f"{buf[:300]!r}")
            buf += data
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = CaseInsensitiveDict()
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip()] = value.strip()
        if status == 101:
            expected = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
            if headers.get("Sec-WebSocket-Accept") != expected:
                raise AssertionError(f"GET {url}: 101 with Sec-WebSocket-Accept {headers.get('Sec-WebSocket-Accept')!r}, "
                                     f"expected {expected!r}")
            answer = WsAnswer(url, status, headers, b"", WebSocket(sock, rest))
            sock = None  # the WebSocket owns it now
            return answer
        length = int(headers.get("Content-Length", "0"))
        while len(rest) < length:
            data = sock.recv(65536)
            if not data:
                break
            rest += data
        return WsAnswer(url, status, headers, rest[:length])
    finally:
        if sock is not None:
            sock.close()



class CdpPage:
    """One page target's DevTools session through deskboxd's CDP proxy."""

    def __init__(self, port, sandbox_id, target_id, secret, timeout=60):
        answer = ws_connect(port, f"/v1/sandboxes/{sandbox_id}/cdp/devtools/page/{target_id}", secret, timeout)
        if answer.status_code != 101:
            raise AssertionError(f"CDP page session: {answer.status_code} {answer.text[:300]}")
        self.ws = answer.ws
        self.next_id = 1

    def command(self, method, params=None):
        msg_id = self.next_id
        self.next_id += 1
        self.ws.send(WS_TEXT, json.dumps({"id": msg_id, "method": method, "params": params or {}}).encode())
        while True:
            opcode, payload = self.ws.read_message()
            if opcode == WS_CLOSE:
                raise AssertionError(f"the session was closed instead of answering {method}: {close_reason(payload)}")
            msg = json.loads(payload)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression):
        r = self.command("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise AssertionError(f"evaluate {expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self):
        self.ws.close()
