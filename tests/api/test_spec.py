"""Every operation of api/openapi.yaml against a live deskboxd: authentication and authorization
failures for each one (401 without, with a wrong, revoked or expired credential, or with a token
in the query where the route is header-only; 403 for another sandbox's token or a scope outside
the route's x-scopes), then a successful call per credential the route allows, whose status must
be listed in the spec and whose JSON body must validate against the spec's schema.

Routes marked `x-token-in-query: true` (CDP) also take the credential as ?token=: there a valid
one must get through, a wrong one is 401 and a token of the wrong scope or sandbox 403, just as
in the header. Operations whose spec lists a 101 are WebSockets: their successful calls are real
handshakes (a small RFC 6455 client below), and a handshake must not get around authentication.

Requests for the successful calls are written by hand per operationId in CASES; an operation in
the spec that CASES does not know fails the test, so a new route cannot go untested.
"""

import base64
import copy
import hashlib
import json
import queue
import re
import secrets
import socket
import struct
import time
import unittest
import urllib.parse
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Optional

import jsonschema
import yaml
from requests.structures import CaseInsensitiveDict

from harness import ApiTestCase, CREATE_TIMEOUT_S, describe, source_dir
from wsclient import WS_BINARY, WS_CLOSE, WS_TEXT, close_reason, ws_connect

SPEC_PATH = source_dir() / "api" / "openapi.yaml"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
SCOPES = ("view", "control", "cdp", "replay")
SPEC_FILE_PATH = "/tmp/spec-test.txt"
SPEC_FILE_BODY = b"spec test \x00\x01\xfe\xff\n"


class SpecError(Exception):
    pass


class Spec:
    """api/openapi.yaml with $refs resolved by hand and schemas turned into JSON Schema:
    OpenAPI 3.0 → Draft 4 (`nullable: true` becomes a type list with "null"; OpenAPI-only
    keywords dropped), OpenAPI 3.1 → Draft 2020-12. `format` stays an annotation."""

    _ANNOTATIONS = {"nullable", "discriminator", "readOnly", "writeOnly", "xml", "externalDocs",
                    "example", "examples", "deprecated"}

    def __init__(self, doc):
        if not isinstance(doc, dict) or not isinstance(doc.get("paths"), dict):
            raise SpecError("api/openapi.yaml has no paths")
        self.doc = doc
        self.version = str(doc.get("openapi", ""))
        if not self.version.startswith("3."):
            raise SpecError(f"openapi version {self.version!r}: expected 3.x")
        self.is_31 = self.version.startswith("3.1")
        self.validator_class = jsonschema.Draft202012Validator if self.is_31 else jsonschema.Draft4Validator

    def lookup(self, ref):
        if not ref.startswith("#/"):
            raise SpecError(f"only local $refs are supported: {ref}")
        node = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise SpecError(f"unresolvable $ref {ref}")
            node = node[part]
        return node

    def deref(self, node, seen=()):
        """Follows a chain of $refs (responses, parameters, request bodies)."""
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise SpecError(f"$ref cycle at {ref}")
            seen += (ref,)
            node = self.lookup(ref)
        return node

    def json_schema(self, node, stack=()):
        if isinstance(node, list):
            return [self.json_schema(x, stack) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            ref = node["$ref"]
            if ref in stack:
                raise SpecError(f"recursive schema at {ref} is not supported by this test")
            return self.json_schema(self.lookup(ref), stack + (ref,))
        out = {}
        for k, v in node.items():
            if k in ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas"):
                out[k] = {name: self.json_schema(s, stack) for name, s in v.items()}
            elif k in ("items", "additionalProperties", "not", "contains", "propertyNames",
                       "if", "then", "else", "additionalItems", "unevaluatedProperties"):
                out[k] = self.json_schema(v, stack)
            elif k in ("allOf", "anyOf", "oneOf", "prefixItems"):
                out[k] = [self.json_schema(s, stack) for s in v]
            elif k.startswith("x-") or (not self.is_31 and k in self._ANNOTATIONS):
                continue
            else:
                out[k] = copy.deepcopy(v)
        if not self.is_31 and node.get("nullable") is True:
            if "type" in out:
                t = out["type"]
                out["type"] = (t if isinstance(t, list) else [t]) + ["null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = out["enum"] + [None]
            if "type" not in out:
                out = {"anyOf": [out, {"type": "null"}]}
        return out

    def validator(self, schema_node):
        schema = self.json_schema(schema_node)
        self.validator_class.check_schema(schema)
        return self.validator_class(schema)

    def operations(self):
        ops = []
        for path, item in self.doc["paths"].items():
            item = self.deref(item)
            for method in METHODS:
                if method in item:
                    ops.append(Operation(self, method.upper(), path, self.deref(item[method]), item))
        return ops


class Operation:
    def __init__(self, spec, method, path, op, path_item):
        self.spec = spec
        self.method = method
        self.path = path
        self.op = op
        self.id = op.get("operationId")
        self.scopes = op.get("x-scopes", path_item.get("x-scopes"))
        self.token_in_query = op.get("x-token-in-query", path_item.get("x-token-in-query"))

    def __repr__(self):
        return f"{self.id} ({self.method} {self.path})"

    @property
    def shape(self):
        return (self.method, normalize(self.path))

    @property
    def is_healthz(self):
        return self.path == "/healthz"

    @property
    def effective_scopes(self):
        return list(self.scopes or [])

    @property
    def is_websocket(self):
        return "101" in (self.op.get("responses") or {})

    def response_spec(self, status):
        responses = self.op.get("responses") or {}
        for key in (str(status), f"{status // 100}XX", f"{status // 100}xx", "default"):
            if key in responses:
                return key, self.spec.deref(responses[key])
        return None, None

    def request_schema(self, media="application/json"):
        body = self.spec.deref(self.op.get("requestBody")) or {}
        content = body.get("content") or {}
        return (content.get(media) or {}).get("schema")


def normalize(path):
    return re.sub(r"\{[^}]+\}", "{}", path)


# ---- what each operation needs ----------------------------------------------------------------

@dataclass
class Case:
    method: str
    path: str                       # as in the contract; parameter names do not matter
    scopes: list                    # x-scopes the contract gives the route
    target: Optional[str]           # what the (first) path parameter names: sandbox, token, key
    probe: Callable                 # ctx → request pieces for the authentication checks
    run: Callable                   # (ctx, credential) → responses to check against the spec
    token_in_query: bool = False
    second: Optional[str] = None    # a second path parameter (a CDP target) when a call gives none


class Ctx:
    """What the cases share: the test, the deployment, sandboxes A and B and credentials."""

    def __init__(self, test, spec):
        self.test = test
        self.dbx = test.dbx
        self.spec = spec
        self.ops = {op.id: op for op in spec.operations()}
        self.a = self.b = None
        self.tok_a = {}
        self.tok_b = {}
        self.spare_token_id = None
        self.spare_key_id = None
        self.created = None
        self.sent_bodies = []  # (operation id, body) of JSON bodies sent in successful calls

    def path_for(self, op_id, arg=None, target=None):
        """The operation's path, its first parameter filled with `arg` (default: what
        Case.target names) and a second one with `target` (default: Case.second)."""
        op = self.ops[op_id]
        case = CASES[op_id]
        if arg is None:
            arg = {"sandbox": self.a, "token": self.spare_token_id, "key": self.spare_key_id}.get(case.target)
        values = iter((arg, target if target is not None else case.second))

        def fill(m):
            value = next(values, None)
            return m.group(0) if value is None else value

        return re.sub(r"\{[^}]+\}", fill, op.path)

    def call(self, op_id, cred, arg=None, json_body=None, record=False, target=None, suffix="", **kw):
        op = self.ops[op_id]
        if json_body is not None:
            kw["json"] = json_body
            if record:
                self.sent_bodies.append((op_id, json_body))
        kw.setdefault("timeout", CREATE_TIMEOUT_S)
        return self.dbx.request(op.method, self.path_for(op_id, arg, target) + suffix, **cred, **kw)

    def as_key(self, op_id, arg=None, **kw):
        return self.call(op_id, {}, arg=arg, **kw)

    def ws(self, op_id, cred, arg=None, target=None, path=None):
        """A WebSocket handshake on the operation's path (or on `path`, which carries its own
        query), with the credential sent the way call() sends it."""
        if path is None:
            path = self.path_for(op_id, arg, target)
            if cred.get("query_token") is not None:
                path += "?" + urllib.parse.urlencode({"token": cred["query_token"]})
        if "token" in cred:
            secret = cred["token"]
        elif "key" in cred:
            secret = cred["key"]
        else:
            secret = self.dbx.key
        return ws_connect(self.dbx.port, path, secret)


def _key_ok(ctx, resp, status, what):
    ctx.test.assertEqual(resp.status_code, status, f"{what}: {describe(resp)}")
    return resp


# Positive runs. Each returns the responses to check against the spec; setup and cleanup calls
# use the API key.

def run_healthz(ctx, cred):
    r = ctx.dbx.get("/healthz", key=None)
    ctx.test.assertEqual(ctx.test.json_of(r), {"status": "ok"}, describe(r))
    return [r]


def run_metrics(ctx, cred):
    r = ctx.call("getMetrics", cred)
    ctx.test.assertIn("deskbox_", r.text, describe(r))
    return [r]


def run_list_templates(ctx, cred):
    r = ctx.call("listTemplates", cred)
    if r.status_code == 200:
        names = [t.get("name") for t in ctx.test.json_of(r).get("templates", [])]
        ctx.test.assertIn(ctx.dbx.template, names, describe(r))
    return [r]


def run_create_sandbox(ctx, cred):
    body = {"timeout_s": 900, "on_timeout": "pause", "metadata": {"suite": "spec"}, "display": "1024x640"}
    r = ctx.call("createSandbox", cred, json_body=body, record=True)
    if r.status_code == 201:
        ctx.created = ctx.test.json_of(r)["id"]
        ctx.test.assertEqual(ctx.test.json_of(r)["display"], {"width": 1024, "height": 640})
    return [r]


def run_list_sandboxes(ctx, cred):
    r1 = ctx.call("listSandboxes", cred)
    r2 = ctx.call("listSandboxes", cred, params={"state": "running"})
    if r2.status_code == 200:
        ids = {s["id"] for s in ctx.test.json_of(r2)["sandboxes"]}
        ctx.test.assertTrue({ctx.a, ctx.b} <= ids, f"A and B should be listed as running: {describe(r2)}")
    return [r1, r2]


def run_get_sandbox(ctx, cred):
    r = ctx.call("getSandbox", cred)
    if r.status_code == 200:
        ctx.test.assertEqual(ctx.test.json_of(r)["id"], ctx.a, describe(r))
    return [r]


def run_update_sandbox(ctx, cred):
    return [ctx.call("updateSandbox", cred, json_body={"timeout_s": 3600, "metadata": {"patched": "yes"}},
                     record=True)]


def run_pause(ctx, cred):
    r = ctx.call("pauseSandbox", cred)
    if r.status_code == 200:
        _key_ok(ctx, ctx.as_key("resumeSandbox"), 200, "resume after the pause check")
    return [r]


def run_resume(ctx, cred):
    _key_ok(ctx, ctx.as_key("pauseSandbox"), 200, "pause before the resume check")
    r = ctx.call("resumeSandbox", cred)
    if r.status_code != 200:
        ctx.as_key("resumeSandbox")
    return [r]


def run_exec(ctx, cred):
    r = ctx.call("execInSandbox", cred, json_body={"argv": ["echo", "spec"]}, record=True)
    if r.status_code == 200:
        ctx.test.assertEqual(ctx.test.json_of(r).get("stdout"), "spec\n", describe(r))
    return [r]


def run_write_file(ctx, cred):
    r = ctx.call("writeFile", cred, params={"path": SPEC_FILE_PATH}, data=SPEC_FILE_BODY,
                 headers={"Content-Type": "application/octet-stream"})
    if r.status_code == 200:
        ctx.test.assertEqual(ctx.test.json_of(r).get("bytes"), len(SPEC_FILE_BODY), describe(r))
    return [r]


def run_read_file(ctx, cred):
    _key_ok(ctx, ctx.as_key("writeFile", params={"path": SPEC_FILE_PATH}, data=SPEC_FILE_BODY), 200,
            "put before the get check")
    r = ctx.call("readFile", cred, params={"path": SPEC_FILE_PATH})
    if r.status_code == 200:
        ctx.test.assertEqual(r.content, SPEC_FILE_BODY, describe(r))
    return [r]


def run_screenshot(ctx, cred):
    out = []
    for fmt, magic, ctype in (("png", b"\x89PNG\r\n\x1a\n", "image/png"), ("jpeg", b"\xff\xd8", "image/jpeg")):
        r = ctx.call("getScreenshot", cred, params={"format": fmt})
        if r.status_code == 200:
            ctx.test.assertTrue(r.content.startswith(magic), f"getScreenshot {fmt}: not a {fmt} image")
            ctx.test.assertEqual(r.headers.get("Content-Type"), ctype)
            if fmt == "png":
                w, h = struct.unpack(">II", r.content[16:24])
                ctx.test.assertEqual((w, h), (int(r.headers["X-Screen-Width"]), int(r.headers["X-Screen-Height"])))
        out.append(r)
    return out


def run_actions(ctx, cred):
    body = {"actions": [{"type": "move", "x": 10, "y": 20}], "display": "640x400", "screenshot": True}
    r = ctx.call("performActions", cred, json_body=body, record=True)
    if r.status_code == 200:
        out = r.json()
        ctx.test.assertEqual(out["cursor"], {"x": 10, "y": 20}, describe(r))
        ctx.test.assertEqual((out["display"]["width"], out["display"]["height"]), (640, 400), describe(r))
        png = base64.b64decode(out["screenshot"]["data"])
        ctx.test.assertTrue(png.startswith(b"\x89PNG\r\n\x1a\n"), "performActions: screenshot is not a PNG")
        ctx.test.assertEqual(struct.unpack(">II", png[16:24]), (640, 400), "screenshot scaled to the display")
    return [r]


def run_computer_anthropic(ctx, cred):
    r = ctx.call("computerAnthropic", cred, json_body={"action": "cursor_position"}, record=True,
                 params={"display": "640x400"})
    if r.status_code == 200:
        out = r.json()
        ctx.test.assertFalse(out["is_error"], describe(r))
        ctx.test.assertRegex(out["content"][0]["text"], r"^X=\d+,Y=\d+$")
    return [r]


def run_computer_openai(ctx, cred):
    body = {"type": "computer_call", "call_id": "call_spec", "action": {"type": "screenshot"},
            "pending_safety_checks": []}
    r = ctx.call("computerOpenAi", cred, json_body=body, record=True)
    if r.status_code == 200:
        out = r.json()
        ctx.test.assertEqual(out["call_id"], "call_spec", describe(r))
        png = base64.b64decode(out["output"]["image_url"].split(",", 1)[1])
        ctx.test.assertTrue(png.startswith(b"\x89PNG"), "computerOpenAi: not a PNG")
    return [r]


def run_cursor(ctx, cred):
    r = ctx.call("getCursor", cred, params={"display": "640x400"})
    if r.status_code == 200:
        out = r.json()
        ctx.test.assertTrue(0 <= out["x"] < 640 and 0 <= out["y"] < 400, describe(r))
    return [r]


def run_set_clipboard(ctx, cred):
    return [ctx.call("setClipboard", cred, json_body={"text": "spec clipboard"}, record=True)]


def run_set_egress(ctx, cred):
    body = {"default": "deny", "allow": ["example.com", "*.example.com:443", "203.0.113.0/24"], "deny": []}
    r = ctx.call("setEgress", cred, json_body=body, record=True)
    if r.status_code == 200:
        ctx.test.assertEqual(r.json(), body, "setEgress answers the policy in force")
    return [r]


def run_get_egress(ctx, cred):
    return [ctx.call("getEgress", cred)]


def run_get_clipboard(ctx, cred):
    return [ctx.call("getClipboard", cred)]


def run_list_events(ctx, cred):
    r = ctx.call("listEvents", cred, params={"since": 0, "limit": 10})
    ctx.test.check_follow(ctx, cred)
    return [r]


def run_events_head(ctx, cred):
    r = ctx.call("getEventsHead", cred)
    if r.status_code == 200:
        ctx.test.assertRegex(ctx.test.json_of(r)["head"], r"^[0-9a-f]{64}$")
    return [r]


def run_verify_events(ctx, cred):
    r = ctx.call("verifyEvents", cred)
    if r.status_code == 200:
        ctx.test.assertTrue(ctx.test.json_of(r)["ok"], describe(r))
    return [r]


def run_get_recording(ctx, cred):
    r = ctx.call("getRecording", cred)
    if r.status_code == 200:
        ctx.test.assertEqual(ctx.test.json_of(r)["status"], "recording", describe(r))
    return [r]


def wait_recorded_video(ctx):
    """The name of a segment of A with a whole fragment on disk (waits for the first)."""
    deadline = time.monotonic() + 120
    while True:
        segs = ctx.test.json_of(_key_ok(ctx, ctx.as_key("getRecording"), 200, "recording of A"))["segments"]
        if segs and segs[0]["bytes"] > 0:
            r = ctx.as_key("getRecordingSegment", target=segs[0]["file"], headers={"Range": "bytes=0-0"})
            if r.status_code == 206:
                return segs[0]["file"]
        ctx.test.assertLess(time.monotonic(), deadline, "A's recording has no video after 120 s")
        time.sleep(1)


def run_get_recording_video(ctx, cred):
    wait_recorded_video(ctx)
    whole = ctx.call("getRecordingVideo", cred)
    part = ctx.call("getRecordingVideo", cred, headers={"Range": "bytes=0-99"})
    if part.status_code == 206:
        ctx.test.assertEqual(len(part.content), 100)
    return [whole, part]


def run_get_recording_segment(ctx, cred):
    name = wait_recorded_video(ctx)
    return [ctx.call("getRecordingSegment", cred, target=name),
            ctx.call("getRecordingSegment", cred, target=name, headers={"Range": "bytes=4-11"})]


def run_replay_page(ctx, cred):
    r = ctx.call("getReplayPage", cred)
    if r.status_code == 200:
        ctx.test.assertIn("deskboxReplay", r.text)
    return [r]


def run_delete_recording(ctx, cred):
    return [ctx.call("deleteRecording", cred)]


def run_create_token(ctx, cred):
    return [ctx.call("createToken", cred, json_body={"scope": "view", "ttl_s": 120}, record=True)]


def run_list_tokens(ctx, cred):
    r = ctx.call("listTokens", cred)
    if r.status_code == 200:
        for secret in list(ctx.tok_a.values()) + list(ctx.tok_b.values()):
            ctx.test.assertNotIn(secret, r.text, "token list must not contain secrets")
    return [r]


def run_revoke_token(ctx, cred):
    created = _key_ok(ctx, ctx.as_key("createToken", json_body={"scope": "view", "ttl_s": 120}), 201,
                      "token to revoke")
    return [ctx.call("revokeToken", cred, arg=ctx.test.json_of(created)["id"])]


def run_create_key(ctx, cred):
    r = ctx.call("createKey", cred, json_body={"name": "spec-created"}, record=True)
    if r.status_code == 201:
        _key_ok(ctx, ctx.as_key("revokeKey", arg=ctx.test.json_of(r)["id"]), 204, "revoke the created key")
    return [r]


def run_list_keys(ctx, cred):
    r = ctx.call("listKeys", cred)
    if r.status_code == 200:
        ctx.test.assertNotIn(ctx.dbx.key, r.text, "key list must not contain secrets")
    return [r]


def run_revoke_key(ctx, cred):
    created = _key_ok(ctx, ctx.as_key("createKey", json_body={"name": "spec-revoke"}), 201, "key to revoke")
    return [ctx.call("revokeKey", cred, arg=ctx.test.json_of(created)["id"])]


def run_delete_sandbox(ctx, cred):
    if ctx.created is None:
        created = _key_ok(ctx, ctx.as_key("createSandbox", json_body={}), 201, "sandbox to delete")
        ctx.created = ctx.test.json_of(created)["id"]
    sid, ctx.created = ctx.created, None
    r1 = ctx.call("deleteSandbox", cred, arg=sid)
    r2 = ctx.call("deleteSandbox", cred, arg=sid)  # deleting again is not an error
    return [r1, r2]


# CDP. Target ids come from the browser: a page made with json/new for the case (and closed
# again), never the browser's own page, whose closing could end the browser.

UUID = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
UNKNOWN_TARGET = "0" * 32  # well-formed; no browser has it
UNKNOWN_BROWSER = "00000000-0000-0000-0000-000000000000"


def url_token(cred):
    """The secret deskboxd repeats in the URLs of its CDP answers: the ?token= one, when the
    request had no Authorization header."""
    has_header = "token" in cred or cred.get("key", "default") is not None
    return None if has_header else cred.get("query_token")


def cdp_public(ctx):
    """host/path of sandbox A's CDP routes as this test reaches them."""
    return f"127.0.0.1:{ctx.dbx.port}/v1/sandboxes/{ctx.a}/cdp"


def check_browser_url(ctx, cred, url):
    """json/version's webSocketDebuggerUrl points at deskboxd and repeats a query token, only
    that; returns the browser id."""
    token = url_token(cred)
    m = re.fullmatch(re.escape(f"ws://{cdp_public(ctx)}/devtools/browser/") + f"({UUID})"
                     + re.escape(f"?token={token}" if token else ""), url)
    ctx.test.assertIsNotNone(m, f"webSocketDebuggerUrl {url!r}: expected ws://{cdp_public(ctx)}/devtools/browser/"
                                f"<uuid>{' with ?token=<the query token>' if token else ' without a token'}")
    return m.group(1)


def check_target_urls(ctx, cred, target):
    """A target's socket and front-end URLs point at deskboxd (both or neither) and repeat a
    query token, only that."""
    if "webSocketDebuggerUrl" not in target and "devtoolsFrontendUrl" not in target:
        return
    kind = "browser" if target.get("type") == "browser" else "page"
    where = f"{cdp_public(ctx)}/devtools/{kind}/{target.get('id')}"
    token = url_token(cred)
    ctx.test.assertEqual(target.get("webSocketDebuggerUrl"), f"ws://{where}" + (f"?token={token}" if token else ""),
                         f"target {target}")
    ctx.test.assertEqual(target.get("devtoolsFrontendUrl"),
                         f"devtools://devtools/bundled/inspector.html?ws={where}" + (f"&token={token}" if token else ""),
                         f"target {target}")


def cdp_targets(ctx):
    return ctx.test.json_of(_key_ok(ctx, ctx.as_key("listCdpTargets"), 200, "json/list"))


def cdp_new_page(ctx):
    r = _key_ok(ctx, ctx.as_key("newCdpTarget", params={"url": "about:blank"}), 200, "a page to work on (json/new)")
    return ctx.test.json_of(r)


def cdp_exchange(ctx, answer):
    """One command through an open session and its answer back, then a clean close."""
    try:
        reply = answer.ws.call(1, "Browser.getVersion")
        ctx.test.assertTrue("result" in reply or "error" in reply, f"not a CDP answer: {reply}")
    finally:
        closed = answer.ws.close()
    ctx.test.assertIsNotNone(closed, f"{describe(answer)}: no close frame in answer to the client's")
    counted = ctx.dbx.metric_value("deskbox_cdp_messages_total", method="Browser.getVersion")
    ctx.test.assertGreater(counted or 0, 0, "client→browser messages are counted by method in /metrics")


def run_cdp_browser_socket(ctx, cred):
    hs = ctx.ws("cdpBrowserSocket", cred)
    if hs.status_code == 101:
        cdp_exchange(ctx, hs)
    plain = ctx.call("cdpBrowserSocket", cred)  # no Upgrade: the json/version answer
    if plain.status_code == 200:
        check_browser_url(ctx, cred, ctx.test.json_of(plain).get("webSocketDebuggerUrl", ""))
    return [hs, plain]


def run_cdp_version(ctx, cred):
    r1 = ctx.call("getCdpVersion", cred)
    r2 = ctx.call("getCdpVersion", cred, suffix="/")  # Playwright asks for json/version/
    for r in (r1, r2):
        if r.status_code == 200:
            check_browser_url(ctx, cred, ctx.test.json_of(r).get("webSocketDebuggerUrl", ""))
    return [r1, r2]


def run_cdp_list(op_id):
    def run(ctx, cred):
        r = ctx.call(op_id, cred)
        if r.status_code == 200:
            targets = ctx.test.json_of(r)
            ctx.test.assertIsInstance(targets, list, describe(r))
            ctx.test.assertTrue(any(t.get("type") == "page" for t in targets), f"no page target: {describe(r)}")
            for t in targets:
                check_target_urls(ctx, cred, t)
            for guest in ("10.88.0.2", ":9222"):
                ctx.test.assertNotIn(guest, r.text, "the guest's DevTools address must not reach clients")
        return [r]
    return run


def run_cdp_new(ctx, cred):
    out = []
    for params in (None, {"url": "data:text/html,spec"}):  # the default (about:blank), then a URL
        r = ctx.call("newCdpTarget", cred, params=params)
        out.append(r)
        if r.status_code != 200:
            continue
        target = ctx.test.json_of(r)
        try:
            ctx.test.assertEqual(target.get("type"), "page", describe(r))
            check_target_urls(ctx, cred, target)
            ctx.test.assertIn(target.get("id"), [t.get("id") for t in cdp_targets(ctx)], "json/list lists the new tab")
        finally:
            _key_ok(ctx, ctx.as_key("closeCdpTarget", target=target.get("id")), 200, "close the new tab")
    return out


def run_cdp_activate(ctx, cred):
    page = cdp_new_page(ctx)["id"]
    try:
        r = ctx.call("activateCdpTarget", cred, target=page)
        if r.status_code == 200:
            ctx.test.assertEqual(r.text, "Target activated", describe(r))
    finally:
        ctx.as_key("closeCdpTarget", target=page)
    return [r]


def run_cdp_close(ctx, cred):
    page = cdp_new_page(ctx)["id"]
    r = ctx.call("closeCdpTarget", cred, target=page)
    if r.status_code != 200:
        ctx.as_key("closeCdpTarget", target=page)
        return [r]
    ctx.test.assertEqual(r.text, "Target is closing", describe(r))
    deadline = time.monotonic() + 15
    while page in [t.get("id") for t in cdp_targets(ctx)]:
        ctx.test.assertLess(time.monotonic(), deadline, f"target {page} still listed 15 s after json/close")
        time.sleep(0.2)
    return [r]


def run_cdp_browser_socket_by_id(ctx, cred):
    # The URL json/version gives this caller, used as it is (with its ?token= if it has one).
    version = _key_ok(ctx, ctx.call("getCdpVersion", cred), 200, "json/version for the browser's socket URL")
    url = ctx.test.json_of(version).get("webSocketDebuggerUrl", "")
    browser = check_browser_url(ctx, cred, url)
    parts = urllib.parse.urlsplit(url)
    ctx.test.assertEqual(parts.path, ctx.path_for("cdpBrowserSocketById", target=browser))
    hs = ctx.ws("cdpBrowserSocketById", cred, path=parts.path + (f"?{parts.query}" if parts.query else ""))
    if hs.status_code == 101:
        cdp_exchange(ctx, hs)
    return [hs]


def run_viewer_socket(ctx, cred):
    hs = ctx.ws("viewerSocket", cred)
    if hs.status_code == 101:
        opcode, payload = hs.ws.read_message()
        ctx.test.assertEqual(opcode, WS_BINARY, "RFB comes in binary messages")
        ctx.test.assertTrue(payload.startswith(b"RFB 003."), payload[:20])
        hs.ws.close()
    return [hs]


def run_viewer_page(ctx, cred):
    r = ctx.call("viewerPage", cred)
    if r.status_code == 200:
        ctx.test.assertIn("core/rfb.js", r.text)
    return [r]


def run_viewer_asset(ctx, cred):
    r = ctx.call("viewerAsset", cred)
    if r.status_code == 200:
        ctx.test.assertIn("export default class RFB", r.text)
    return [r]


def run_cdp_page_socket(ctx, cred):
    page = cdp_new_page(ctx)["id"]
    try:
        hs = ctx.ws("cdpPageSocket", cred, target=page)
        if hs.status_code == 101:
            cdp_exchange(ctx, hs)
    finally:
        ctx.as_key("closeCdpTarget", target=page)
    return [hs]


def probe_none(ctx):
    return {}


CASES = {
    "getHealth": Case("GET", "/healthz", [], None, probe_none, run_healthz),
    "getMetrics": Case("GET", "/metrics", [], None, probe_none, run_metrics),
    "listTemplates": Case("GET", "/v1/templates", [], None, probe_none, run_list_templates),
    "createSandbox": Case("POST", "/v1/sandboxes", [], None,
                          lambda c: {"json_body": {"metadata": {"probe": "auth"}}}, run_create_sandbox),
    "listSandboxes": Case("GET", "/v1/sandboxes", [], None, probe_none, run_list_sandboxes),
    "getSandbox": Case("GET", "/v1/sandboxes/{id}", ["view", "control"], "sandbox", probe_none, run_get_sandbox),
    "updateSandbox": Case("PATCH", "/v1/sandboxes/{id}", ["control"], "sandbox",
                          lambda c: {"json_body": {"metadata": {"probe": "auth"}}}, run_update_sandbox),
    "deleteSandbox": Case("DELETE", "/v1/sandboxes/{id}", [], "sandbox", probe_none, run_delete_sandbox),
    "pauseSandbox": Case("POST", "/v1/sandboxes/{id}/pause", ["control"], "sandbox", probe_none, run_pause),
    "resumeSandbox": Case("POST", "/v1/sandboxes/{id}/resume", ["control"], "sandbox", probe_none, run_resume),
    "execInSandbox": Case("POST", "/v1/sandboxes/{id}/exec", ["control"], "sandbox",
                          lambda c: {"json_body": {"argv": ["true"]}}, run_exec),
    "writeFile": Case("PUT", "/v1/sandboxes/{id}/files", ["control"], "sandbox",
                      lambda c: {"params": {"path": "/tmp/probe.txt"}, "data": b"probe"}, run_write_file),
    "readFile": Case("GET", "/v1/sandboxes/{id}/files", ["control"], "sandbox",
                     lambda c: {"params": {"path": SPEC_FILE_PATH}}, run_read_file),
    "getClipboard": Case("GET", "/v1/sandboxes/{id}/clipboard", ["control"], "sandbox", probe_none,
                         run_get_clipboard),
    "getScreenshot": Case("GET", "/v1/sandboxes/{id}/screenshot", ["view", "control"], "sandbox", probe_none,
                          run_screenshot),
    "performActions": Case("POST", "/v1/sandboxes/{id}/actions", ["control"], "sandbox",
                           lambda c: {"json_body": {"actions": [{"type": "move", "x": 1, "y": 1}], "settle": False}},
                           run_actions),
    "computerAnthropic": Case("POST", "/v1/sandboxes/{id}/computer/anthropic", ["control"], "sandbox",
                              lambda c: {"json_body": {"action": "cursor_position"}}, run_computer_anthropic),
    "computerOpenAi": Case("POST", "/v1/sandboxes/{id}/computer/openai", ["control"], "sandbox",
                           lambda c: {"json_body": {"type": "screenshot"}}, run_computer_openai),
    "getCursor": Case("GET", "/v1/sandboxes/{id}/cursor", ["view", "control"], "sandbox", probe_none, run_cursor),
    "viewerSocket": Case("GET", "/v1/sandboxes/{id}/vnc", ["view", "control"], "sandbox", probe_none,
                         run_viewer_socket, True),
    "viewerPage": Case("GET", "/v1/sandboxes/{id}/view", ["view", "control"], "sandbox", probe_none,
                       run_viewer_page, True),
    "viewerAsset": Case("GET", "/v1/sandboxes/{id}/view/novnc/{path}", ["view", "control"], "sandbox", probe_none,
                        run_viewer_asset, second="core/rfb.js"),
    "setClipboard": Case("PUT", "/v1/sandboxes/{id}/clipboard", ["control"], "sandbox",
                         lambda c: {"json_body": {"text": "probe"}}, run_set_clipboard),
    "setEgress": Case("PUT", "/v1/sandboxes/{id}/egress", [], "sandbox",
                      lambda c: {"json_body": {"allow": ["example.com"]}}, run_set_egress),
    "getEgress": Case("GET", "/v1/sandboxes/{id}/egress", ["control"], "sandbox", probe_none, run_get_egress),
    "listEvents": Case("GET", "/v1/sandboxes/{id}/events", ["view", "control", "replay"], "sandbox", probe_none,
                       run_list_events, True),
    "getEventsHead": Case("GET", "/v1/sandboxes/{id}/events/head", ["view", "control", "replay"], "sandbox",
                          probe_none, run_events_head, True),
    "verifyEvents": Case("GET", "/v1/sandboxes/{id}/events/verify", ["replay"], "sandbox", probe_none,
                         run_verify_events, True),
    "getRecording": Case("GET", "/v1/sandboxes/{id}/recording", ["replay"], "sandbox", probe_none,
                         run_get_recording, True),
    "getRecordingVideo": Case("GET", "/v1/sandboxes/{id}/recording.mp4", ["replay"], "sandbox", probe_none,
                              run_get_recording_video, True),
    "getRecordingSegment": Case("GET", "/v1/sandboxes/{id}/recording/segments/{file}", ["replay"], "sandbox",
                                probe_none, run_get_recording_segment, True, second="000000.mp4"),
    "getReplayPage": Case("GET", "/v1/sandboxes/{id}/replay", ["replay"], "sandbox", probe_none,
                          run_replay_page, True),
    "deleteRecording": Case("DELETE", "/v1/sandboxes/{id}/recording", [], "sandbox", probe_none,
                            run_delete_recording),
    "createToken": Case("POST", "/v1/sandboxes/{id}/tokens", [], "sandbox",
                        lambda c: {"json_body": {"scope": "view"}}, run_create_token),
    "listTokens": Case("GET", "/v1/sandboxes/{id}/tokens", [], "sandbox", probe_none, run_list_tokens),
    "revokeToken": Case("DELETE", "/v1/tokens/{id}", [], "token", probe_none, run_revoke_token),
    "createKey": Case("POST", "/v1/keys", [], None, lambda c: {"json_body": {"name": "probe"}}, run_create_key),
    "listKeys": Case("GET", "/v1/keys", [], None, probe_none, run_list_keys),
    "revokeKey": Case("DELETE", "/v1/keys/{id}", [], "key", probe_none, run_revoke_key),
    "cdpBrowserSocket": Case("GET", "/v1/sandboxes/{id}/cdp", ["cdp"], "sandbox", probe_none,
                             run_cdp_browser_socket, True),
    "getCdpVersion": Case("GET", "/v1/sandboxes/{id}/cdp/json/version", ["cdp"], "sandbox", probe_none,
                          run_cdp_version, True),
    "listCdpTargets": Case("GET", "/v1/sandboxes/{id}/cdp/json/list", ["cdp"], "sandbox", probe_none,
                           run_cdp_list("listCdpTargets"), True),
    "listCdpTargetsShort": Case("GET", "/v1/sandboxes/{id}/cdp/json", ["cdp"], "sandbox", probe_none,
                                run_cdp_list("listCdpTargetsShort"), True),
    # Probes that get past authentication must not open tabs: an unknown parameter makes it a 400.
    "newCdpTarget": Case("PUT", "/v1/sandboxes/{id}/cdp/json/new", ["cdp"], "sandbox",
                         lambda c: {"params": {"probe": "auth"}}, run_cdp_new, True),
    "activateCdpTarget": Case("GET", "/v1/sandboxes/{id}/cdp/json/activate/{target}", ["cdp"], "sandbox",
                              probe_none, run_cdp_activate, True, second=UNKNOWN_TARGET),
    "closeCdpTarget": Case("GET", "/v1/sandboxes/{id}/cdp/json/close/{target}", ["cdp"], "sandbox",
                           probe_none, run_cdp_close, True, second=UNKNOWN_TARGET),
    "cdpBrowserSocketById": Case("GET", "/v1/sandboxes/{id}/cdp/devtools/browser/{browser}", ["cdp"], "sandbox",
                                 probe_none, run_cdp_browser_socket_by_id, True, second=UNKNOWN_BROWSER),
    "cdpPageSocket": Case("GET", "/v1/sandboxes/{id}/cdp/devtools/page/{target}", ["cdp"], "sandbox",
                          probe_none, run_cdp_page_socket, True, second=UNKNOWN_TARGET),
}
# Positive calls run in this order: deleteSandbox last (it deletes the sandbox createSandbox made).
POSITIVE_ORDER = [k for k in CASES if k != "deleteSandbox"] + ["deleteSandbox"]


def load_spec():
    if not SPEC_PATH.is_file():
        raise SpecError(f"{SPEC_PATH} does not exist")
    with open(SPEC_PATH, encoding="utf-8") as f:
        return Spec(yaml.safe_load(f))


class SpecTest(ApiTestCase):
    @classmethod
    def setUpClass(cls):
        cls.spec = load_spec()
        cls.start_deployment(warm_pool=0)
        try:
            cls._prepare()
        except BaseException:
            cls._failed = True
            cls.stop_deployment()
            raise

    @classmethod
    def _prepare(cls):
        t = cls("test_1_spec_covers_the_contract")
        ctx = cls.ctx = Ctx(t, cls.spec)
        dbx = cls.dbx

        def must(resp, status, what):
            if resp.status_code != status:
                raise AssertionError(f"setup: {what}: {describe(resp)}")
            return t.json_of(resp)

        ctx.a = must(dbx.post("/v1/sandboxes", json={}, timeout=CREATE_TIMEOUT_S), 201, "create A")["id"]
        ctx.b = must(dbx.post("/v1/sandboxes", json={}, timeout=CREATE_TIMEOUT_S), 201, "create B")["id"]
        for sid, store in ((ctx.a, ctx.tok_a), (ctx.b, ctx.tok_b)):
            for scope in SCOPES:
                tok = must(dbx.post(f"/v1/sandboxes/{sid}/tokens", json={"scope": scope, "ttl_s": 3600}), 201,
                           f"{scope} token for {sid}")
                store[scope] = tok["token"]
        ctx.spare_token_id = must(dbx.post(f"/v1/sandboxes/{ctx.a}/tokens", json={"scope": "view"}), 201,
                                  "spare token")["id"]
        ctx.spare_key_id = must(dbx.post("/v1/keys", json={"name": "spec-spare"}), 201, "spare key")["id"]

        # A key that worked, then revoked.
        revoked = must(dbx.post("/v1/keys", json={"name": "spec-revoked"}), 201, "key to revoke")
        must(dbx.get("/v1/templates", key=revoked["key"]), 200, "the new key works before it is revoked")
        r = dbx.request("DELETE", f"/v1/keys/{revoked['id']}")
        if r.status_code != 204:
            raise AssertionError(f"setup: revoke key: {describe(r)}")
        cls.revoked_key = revoked["key"]

        # A token that worked, then expired.
        t0 = time.monotonic()
        expiring = must(dbx.post(f"/v1/sandboxes/{ctx.a}/tokens", json={"scope": "control", "ttl_s": 1}), 201,
                        "1 s token")
        r = dbx.get(f"/v1/sandboxes/{ctx.a}", token=expiring["token"])
        if r.status_code != 200 and time.monotonic() - t0 < 0.8:
            raise AssertionError(f"setup: a fresh 1 s token does not work: {describe(r)}")
        cls.expired_token = expiring["token"]
        time.sleep(max(0.0, 2.0 - (time.monotonic() - t0)))

    # ---- helpers ----------------------------------------------------------------------------

    def validate(self, op, schema_node, instance, what):
        try:
            validator = self.spec.validator(schema_node)
        except jsonschema.SchemaError as e:
            self.fail(f"{op}: the spec's schema for {what} is not a valid JSON Schema: {e.message}")
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        if errors:
            lines = [f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:8]]
            self.fail(f"{op}: {what} does not match the spec:\n" + "\n".join(lines)
                      + f"\ninstance: {str(instance)[:1500]}")

    def check_response(self, op, resp):
        """The status is listed for the operation; the headers it declares are there and match
        their schemas; the content type is one the spec gives for it; a JSON body validates
        against its schema."""
        key, rspec = op.response_spec(resp.status_code)
        self.assertIsNotNone(rspec, f"{op}: status {resp.status_code} is not in the spec's responses "
                                    f"{sorted((op.op.get('responses') or {}).keys())}: {describe(resp)}")
        for name, header in (rspec.get("headers") or {}).items():
            header = self.spec.deref(header)
            value = resp.headers.get(name)
            self.assertIsNotNone(value, f"{op}: the spec declares header {name} for {key}: {describe(resp)} "
                                        f"headers {dict(resp.headers)}")
            schema = header.get("schema")
            if schema is not None:
                if self.spec.json_schema(schema).get("type") == "integer":
                    self.assertRegex(value, r"^-?[0-9]+$", f"{op}: header {name}")
                    value = int(value)
                self.validate(op, schema, value, f"header {name}")
        content = rspec.get("content") or {}
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip()
        if not content:
            self.assertEqual(resp.content, b"", f"{op}: the spec gives no body for {key}: {describe(resp)}")
            return
        self.assertIn(ctype, content, f"{op}: Content-Type {ctype!r} is not among the spec's "
                                      f"{sorted(content)} for {key}: {describe(resp)}")
        if ctype == "application/json":
            self.assert_json_headers(resp)
            schema = (content[ctype] or {}).get("schema")
            self.assertIsNotNone(schema, f"{op}: no schema for application/json in {key}")
            self.validate(op, schema, self.json_of(resp), f"the {resp.status_code} body")

    def check_denied(self, op, resp, status, code, what):
        if getattr(resp, "ws", None) is not None:
            resp.ws.close()  # a handshake that should have been refused: do not leave the session open
        self.assertEqual(resp.status_code, status, f"{op} {what}: {describe(resp)}")
        self.check_response(op, resp)
        err = self.expect_error(resp, status, code)
        self.assertTrue(err["message"].strip())

    def check_follow(self, ctx, cred):
        """GET events?follow=1 answers application/x-ndjson, chunked, beginning with the backlog."""
        op = ctx.ops["listEvents"]
        path = ctx.path_for("listEvents") + "?follow=1&since=0"
        stream = ctx.dbx.follow(path, token=cred.get("token")) if "token" in cred else ctx.dbx.follow(path)
        try:
            if stream.status != 200:
                self.fail(f"{op} follow=1: {stream.status} {stream.read_all_text()}")
            ctype = stream.headers.get("content-type", "").split(";")[0].strip()
            self.assertEqual(ctype, "application/x-ndjson", f"{op} follow=1: Content-Type")
            self.assertTrue(stream.chunked, f"{op} follow=1: the stream should use chunked transfer encoding")
            _, rspec = op.response_spec(200)
            content = (rspec or {}).get("content") or {}
            self.assertIn("application/x-ndjson", content,
                          f"{op}: the spec does not list application/x-ndjson for 200 (follow=1)")
            for name, header in (rspec.get("headers") or {}).items():
                value = stream.headers.get(name.lower())
                self.assertIsNotNone(value, f"{op} follow=1: the spec declares header {name}: {stream.headers}")
                schema = self.spec.deref(header).get("schema")
                if schema is not None and self.spec.json_schema(schema).get("type") == "string":
                    self.validate(op, schema, value, f"header {name} (follow=1)")
            try:
                line = stream.next_line(timeout=10)
            except queue.Empty:
                self.fail(f"{op} follow=1&since=0: no backlog event within 10 s")
            self.assertIsNotNone(line, f"{op} follow=1: the stream ended without an event ({stream.error})")
            schema = (content["application/x-ndjson"] or {}).get("schema")
            if schema is not None:
                self.validate(op, schema, self.json_of_bytes(line), "a follow=1 line")
        finally:
            stream.close()

    def json_of_bytes(self, data):
        try:
            return json.loads(data)
        except ValueError as e:
            self.fail(f"not JSON ({e}): {data[:300]!r}")

    def auth_ops(self):
        return [op for op in self.spec.operations() if not op.is_healthz and op.id in CASES]

    def probe(self, op, cred, headers=None):
        kw = dict(CASES[op.id].probe(self.ctx))
        if headers:
            kw["headers"] = headers
        return self.ctx.call(op.id, cred, **kw)

    # ---- tests ------------------------------------------------------------------------------

    def test_1_spec_covers_the_contract(self):
        ops = self.spec.operations()
        ids = [op.id for op in ops]
        self.assertTrue(all(ids), f"operations without an operationId: {[op for op in ops if not op.id]}")
        self.assertEqual(len(ids), len(set(ids)), f"duplicate operationIds: {ids}")
        unknown = [op for op in ops if op.id not in CASES]
        self.assertEqual(unknown, [], "operations in the spec this test has no case for (add one to CASES "
                                      f"in tests/api/test_spec.py): {unknown}")
        by_id = {op.id: op for op in ops}
        missing = [f"{k} ({c.method} {c.path})" for k, c in CASES.items() if k not in by_id]
        self.assertEqual(missing, [], "operations of the contract missing from the spec")
        for op in ops:
            case = CASES[op.id]
            with self.subTest(op=op.id):
                self.assertEqual(op.shape, (case.method, normalize(case.path)),
                                 f"{op}: the contract has this operation as {case.method} {case.path}")
                if op.path.startswith("/v1/"):
                    self.assertIsInstance(op.scopes, list, f"{op}: x-scopes missing or not a list")
                    self.assertIsInstance(op.token_in_query, bool, f"{op}: x-token-in-query missing or not a bool")
                if op.scopes is not None:
                    self.assertTrue(set(op.scopes) <= set(SCOPES), f"{op}: unknown scopes in {op.scopes}")
                    if "view" in op.scopes:
                        self.assertIn("control", op.scopes, f"{op}: control includes view")
                    if not op.is_healthz:
                        self.assertEqual(sorted(op.scopes), sorted(case.scopes),
                                         f"{op}: x-scopes differ from the contract")
                if op.token_in_query is not None:
                    self.assertEqual(op.token_in_query, case.token_in_query,
                                     f"{op}: x-token-in-query differs from the contract")
                if op.token_in_query:
                    schemes = (self.spec.doc.get("components") or {}).get("securitySchemes") or {}
                    security = op.op.get("security", self.spec.doc.get("security") or [])
                    in_query = [name for requirement in security for name in requirement
                                if (schemes.get(name) or {}).get("type") == "apiKey"
                                and schemes[name].get("in") == "query" and schemes[name].get("name") == "token"]
                    self.assertTrue(in_query, f"{op}: x-token-in-query is true, but its security names no "
                                              "apiKey scheme for the query parameter token")
                if not op.is_healthz:
                    # Every route can refuse a credential (401) and a token (403: another
                    # sandbox's, a scope outside x-scopes, or any token on an API-key route).
                    self.assertIsNotNone(op.response_spec(401)[1], f"{op}: 401 is not documented")
                    self.assertIsNotNone(op.response_spec(403)[1], f"{op}: 403 is not documented")

    def test_2_unauthenticated_is_401(self):
        ctx = self.ctx
        ctx.test = self
        bad_headers = {
            "no Authorization": None,
            "Basic scheme": {"Authorization": "Basic ZGVza2JveDpkZXNrYm94"},
            "Bearer without secret": {"Authorization": "Bearer"},
            "secret without scheme": {"Authorization": self.dbx.key},
            "truncated key": {"Authorization": "Bearer " + self.dbx.key[:-1]},
        }
        for op in self.auth_ops():
            for what, headers in bad_headers.items():
                with self.subTest(op=op.id, credential=what):
                    self.check_denied(op, self.probe(op, {"key": None}, headers), 401, "unauthorized", what)
            credentials = {
                "unknown API key": {"key": "dbk_" + secrets.token_hex(32)},
                "unknown token": {"token": "dbt_" + secrets.token_hex(32)},
                "revoked API key": {"key": self.revoked_key},
                "expired token": {"token": self.expired_token},
            }
            for what, cred in credentials.items():
                with self.subTest(op=op.id, credential=what):
                    self.check_denied(op, self.probe(op, cred), 401, "unauthorized", what)
            if op.token_in_query is False:
                in_query = {"API key in ?token=": self.dbx.key}
                for scope in op.effective_scopes:
                    in_query[f"{scope} token in ?token="] = ctx.tok_a[scope]
                for what, secret in in_query.items():
                    with self.subTest(op=op.id, credential=what):
                        self.check_denied(op, self.probe(op, {"key": None, "query_token": secret}), 401,
                                          "unauthorized", what)
                with self.subTest(op=op.id, credential="valid header and ?token="):
                    self.check_denied(op, self.probe(op, {"query_token": self.dbx.key}), 401, "unauthorized",
                                      "a token query parameter on a header-only route")
            elif op.token_in_query:
                # ?token= is checked like the header: a wrong secret is refused, a valid one gets
                # through (the probe's answer is whatever the route says next, never 401/403).
                refused = {
                    "unknown token in ?token=": "dbt_" + secrets.token_hex(32),
                    "unknown API key in ?token=": "dbk_" + secrets.token_hex(32),
                    "revoked API key in ?token=": self.revoked_key,
                    "expired token in ?token=": self.expired_token,
                    "empty ?token=": "",
                }
                for what, secret in refused.items():
                    with self.subTest(op=op.id, credential=what):
                        self.check_denied(op, self.probe(op, {"key": None, "query_token": secret}), 401,
                                          "unauthorized", what)
                accepted = {
                    "API key in ?token=": {"key": None, "query_token": self.dbx.key},
                    # With both, the header is the credential and ?token= is ignored.
                    "valid header and an unknown ?token=": {"query_token": "dbt_" + secrets.token_hex(32)},
                }
                for scope in op.effective_scopes:
                    accepted[f"{scope} token in ?token="] = {"key": None, "query_token": ctx.tok_a[scope]}
                for what, cred in accepted.items():
                    with self.subTest(op=op.id, credential=what):
                        resp = self.probe(op, cred)
                        self.assertNotIn(resp.status_code, (401, 403),
                                         f"{op} with {what}: the route takes its credential from ?token= "
                                         f"(x-token-in-query): {describe(resp)}")
                        self.check_response(op, resp)
            if op.is_websocket:
                # A WebSocket handshake goes through the same checks: no 101 without a credential.
                handshakes = {
                    "no credential": {"key": None},
                    "unknown token in ?token=": {"key": None, "query_token": "dbt_" + secrets.token_hex(32)},
                    "unknown token in the header": {"token": "dbt_" + secrets.token_hex(32)},
                }
                for what, cred in handshakes.items():
                    with self.subTest(op=op.id, credential=f"WebSocket handshake, {what}"):
                        self.check_denied(op, ctx.ws(op.id, cred), 401, "unauthorized", f"WebSocket handshake, {what}")

    def test_3_wrong_sandbox_or_scope_is_403(self):
        ctx = self.ctx
        ctx.test = self
        for op in self.auth_ops():
            case = CASES[op.id]
            if case.target == "sandbox":
                scope = op.effective_scopes[0] if op.effective_scopes else "control"
                with self.subTest(op=op.id, credential=f"{scope} token of sandbox B"):
                    self.check_denied(op, self.probe(op, {"token": ctx.tok_b[scope]}), 403, "forbidden",
                                      "with a token of another sandbox")
            for scope in SCOPES:
                if scope in op.effective_scopes:
                    continue
                with self.subTest(op=op.id, credential=f"{scope} token"):
                    self.check_denied(op, self.probe(op, {"token": ctx.tok_a[scope]}), 403, "forbidden",
                                      f"with a {scope} token (x-scopes {op.effective_scopes})")
                if op.token_in_query:
                    with self.subTest(op=op.id, credential=f"{scope} token in ?token="):
                        self.check_denied(op, self.probe(op, {"key": None, "query_token": ctx.tok_a[scope]}), 403,
                                          "forbidden", f"with a {scope} token in ?token= (x-scopes {op.effective_scopes})")
                if op.is_websocket:
                    with self.subTest(op=op.id, credential=f"WebSocket handshake, {scope} token"):
                        self.check_denied(op, ctx.ws(op.id, {"token": ctx.tok_a[scope]}), 403, "forbidden",
                                          f"WebSocket handshake with a {scope} token")
            if case.target == "sandbox" and op.token_in_query and op.effective_scopes:
                scope = op.effective_scopes[0]
                with self.subTest(op=op.id, credential=f"{scope} token of sandbox B in ?token="):
                    self.check_denied(op, self.probe(op, {"key": None, "query_token": ctx.tok_b[scope]}), 403,
                                      "forbidden", "with a token of another sandbox in ?token=")
                if op.is_websocket:
                    with self.subTest(op=op.id, credential=f"WebSocket handshake, {scope} token of sandbox B"):
                        self.check_denied(op, ctx.ws(op.id, {"key": None, "query_token": ctx.tok_b[scope]}), 403,
                                          "forbidden", "WebSocket handshake with a token of another sandbox")

    def test_4_every_operation_succeeds(self):
        ctx = self.ctx
        ctx.test = self
        ctx.sent_bodies.clear()
        for op_id in POSITIVE_ORDER:
            op = ctx.ops.get(op_id)
            if op is None:
                continue  # test_1 reports it
            creds = [("no credential", {"key": None})] if op.is_healthz else [("API key", {})]
            if op.token_in_query:
                creds.append(("API key in ?token=", {"key": None, "query_token": ctx.dbx.key}))
            for scope in op.effective_scopes:
                creds.append((f"{scope} token", {"token": ctx.tok_a[scope]}))
                if op.token_in_query:
                    creds.append((f"{scope} token in ?token=", {"key": None, "query_token": ctx.tok_a[scope]}))
            for what, cred in creds:
                with self.subTest(op=op_id, credential=what):
                    for resp in CASES[op_id].run(ctx, cred):
                        self.assertLess(resp.status_code, 300, f"{op} with {what}: {describe(resp)}")
                        self.check_response(op, resp)
        for op_id, body in ctx.sent_bodies:
            schema = ctx.ops[op_id].request_schema()
            with self.subTest(op=op_id, request_body=body):
                self.assertIsNotNone(schema, f"{ctx.ops[op_id]}: no application/json requestBody schema")
                self.validate(ctx.ops[op_id], schema, body, "a request body the contract allows")

    def test_5_errors_match_the_spec(self):
        """A few failures every route family can produce, checked against the spec's schemas."""
        ctx = self.ctx
        ctx.test = self
        cases = [
            ("getSandbox", dict(arg="sb-0000000000000000"), 404, "not_found"),
            ("createSandbox", dict(data=b"{not json", headers={"Content-Type": "application/json"}), 400,
             "invalid_json"),
            ("createSandbox", dict(json_body={"timeout_s": "10"}), 400, "invalid_request"),
            ("execInSandbox", dict(json_body={"argv": ["true"], "shell": "true"}), 400, "invalid_request"),
            ("readFile", dict(params={"path": "relative/path"}), 400, "invalid_path"),
            ("readFile", dict(params={"path": "/nonexistent/spec-missing"}), 404, "file_not_found"),
            ("resumeSandbox", {}, 409, "invalid_state"),
            ("revokeToken", dict(arg="tok_0000000000000000"), 404, "not_found"),
            ("revokeKey", dict(arg="key_0000000000000000"), 404, "not_found"),
            ("getCdpVersion", dict(arg="sb-0000000000000000"), 404, "not_found"),
            ("newCdpTarget", dict(params={"url": "about:blank", "foreground": "1"}), 400, "invalid_request"),
            ("activateCdpTarget", dict(target="not..valid"), 404, "not_found"),
            ("closeCdpTarget", dict(target=UNKNOWN_TARGET), 404, "not_found"),
            ("cdpPageSocket", {}, 400, "invalid_request"),  # without Upgrade: websocket
            ("cdpBrowserSocketById", {}, 400, "invalid_request"),
        ]
        for op_id, kw, status, code in cases:
            op = ctx.ops.get(op_id)
            if op is None:
                continue
            with self.subTest(op=op_id, expect=code):
                resp = ctx.call(op_id, {}, **kw)
                self.check_denied(op, resp, status, code, f"({code})")

        # A sandbox that is not running has no browser to reach: 409 for discovery and for
        # WebSocket handshakes alike.
        cdp = [("getCdpVersion", False), ("listCdpTargets", False), ("cdpBrowserSocket", True),
               ("cdpBrowserSocketById", True), ("cdpPageSocket", True)]
        cdp = [(ctx.ops[op_id], websocket) for op_id, websocket in cdp if op_id in ctx.ops]
        if cdp:
            _key_ok(ctx, ctx.as_key("pauseSandbox"), 200, "pause A for the CDP checks")
            try:
                for op, websocket in cdp:
                    with self.subTest(op=op.id, expect="invalid_state (paused)"):
                        resp = ctx.ws(op.id, {}) if websocket else ctx.call(op.id, {})
                        self.check_denied(op, resp, 409, "invalid_state", "(paused sandbox)")
            finally:
                _key_ok(ctx, ctx.as_key("resumeSandbox"), 200, "resume A after the CDP checks")


if __name__ == "__main__":
    unittest.main()
