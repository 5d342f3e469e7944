#include "guest_routes.h"

#include <fmt/format.h>

#include <set>

#include "api/json_input.h"
#include "common/base64.h"

namespace deskbox::api {

namespace asio = boost::asio;
using boost::beast::http::verb;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Guest paths: absolute, no NUL, no "." or ".." component, bounded.
std::optional<std::string> CheckGuestPath(const std::string& p) {
  if (p.empty()) return "path is required (files?path=/absolute/path)";
  if (p.size() > kMaxPathBytes) return fmt::format("path is longer than {} bytes", kMaxPathBytes);
  if (p[0] != '/') return "path must be absolute";
  if (p.find('\0') != std::string::npos) return "path must not contain NUL";
  size_t start = 1;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    std::string_view part(p.data() + start, end - start);
    if (part == ".." || part == ".") return "path must not contain '.' or '..' components";
    start = end + 1;
  }
  if (p.back() == '/') return "path names a directory";
  return std::nullopt;
}

std::optional<std::string> FileQuery(const Exchange& ex, std::string* path,
                                     std::set<std::string> allowed) {
  for (const auto& [k, v] : ex.query())
    if (!allowed.count(k)) return fmt::format("unknown query parameter '{}'", k);
  auto it = ex.query().find("path");
  *path = it == ex.query().end() ? "" : it->second;
  return CheckGuestPath(*path);
}

// Which 400 a bad files query gets: a missing path is an incomplete request, a bad one a bad path.
HttpResponse FileQueryError(const Exchange& ex, const std::string& message) {
  bool has_path = ex.query().count("path") && !ex.query().at("path").empty();
  bool unknown = message.starts_with("unknown query parameter");
  return Error(400, has_path && !unknown ? "invalid_path" : "invalid_request", message);
}

}  // namespace

void GuestRoutes::Register(Router& router) {
  auto add = [&](verb m, const char* pattern, Reply (GuestRoutes::*h)(Call&)) {
    router.Add({.method = m,
                .pattern = pattern,
                .access = Access::Tokens({Scope::kControl}),
                .handler = [this, h](Call& c) { return (this->*h)(c); }});
  };
  add(verb::post, "/v1/sandboxes/{id}/exec", &GuestRoutes::Exec);
  add(verb::put, "/v1/sandboxes/{id}/files", &GuestRoutes::PutFile);
  add(verb::get, "/v1/sandboxes/{id}/files", &GuestRoutes::GetFile);
  add(verb::get, "/v1/sandboxes/{id}/clipboard", &GuestRoutes::GetClipboard);
  add(verb::put, "/v1/sandboxes/{id}/clipboard", &GuestRoutes::PutClipboard);
}

std::expected<GuestRoutes::AgentCall, HttpResponse> GuestRoutes::BeginAgentCall(
    const std::string& id, std::string what) const {
  auto op = ctx_.sandboxes.BeginGuestOperation(id, std::move(what));
  if (!op) return std::unexpected(op.error());
  auto agent = ctx_.manager.Agent(id);
  if (!agent)
    return std::unexpected(
        Error(502, "guest_error", fmt::format("sandbox {} has no guest agent connection", id)));
  return AgentCall{std::move(*op), std::move(agent)};
}

Reply GuestRoutes::Exec(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  vmhost::ExecSpec spec;
  auto ev = c.NewEvent(c.id);
  if (const json* argv = in.Array("argv")) {
    if (argv->empty() || argv->size() > 4096) in.Fail("argv must have 1 to 4096 elements");
    for (const auto& a : *argv) {
      if (!a.is_string()) {
        in.Fail("argv elements must be strings");
        break;
      }
      spec.argv.push_back(a.get<std::string>());
      ev.mutable_exec()->add_argv(a.get<std::string>());
    }
  }
  auto shell = in.String("shell", 1, 256 * 1024);
  if (shell) {
    spec.shell = *shell;
    ev.mutable_exec()->set_shell(*shell);
  }
  if (in.ok() && !spec.argv.empty() && shell) in.Fail("give either argv or shell, not both");
  if (in.ok() && spec.argv.empty() && !shell) in.Fail("argv or shell is required");
  if (const json* env = in.Object("env")) {
    for (auto it = env->begin(); it != env->end() && in.ok(); ++it) {
      if (!it->is_string())
        in.Fail(fmt::format("env.{} must be a string", it.key()));
      else if (it.key().empty() || it.key().find('=') != std::string::npos ||
               it.key().find('\0') != std::string::npos)
        in.Fail(fmt::format("env name '{}' is not valid", it.key()));
      else
        spec.env[it.key()] = it->get<std::string>();
    }
  }
  if (auto cwd = in.String("cwd", 1, kMaxPathBytes)) {
    if ((*cwd)[0] != '/') in.Fail("cwd must be an absolute path");
    spec.cwd = *cwd;
  }
  if (auto in_b64 = in.String("stdin_b64", 0, kMaxJsonBody)) {
    if (auto decoded = Base64Decode(*in_b64))
      spec.stdin_data = std::move(*decoded);
    else
      in.Fail("stdin_b64 is not valid base64");
  }
  auto timeout = in.Integer("timeout_s", 1, 3600);
  spec.timeout = std::chrono::seconds(timeout.value_or(60));
  auto encoding = in.Enum("encoding", {"utf8", "base64"}).value_or("utf8");
  if (auto m = in.Integer("max_output_bytes", 1, 6 << 20))
    spec.max_output_bytes = static_cast<uint64_t>(*m);
  if (auto err = in.Finish()) co_return Error(400, "invalid_request", *err);
  auto call = BeginAgentCall(c.id, "exec");
  if (!call) co_return call.error();
  auto r = co_await call->agent->Exec(std::move(spec));
  if (auto gone = call->op.Interrupted()) co_return *gone;
  if (!r) co_return FromAgentError(r.error());
  const auto& x = *r;
  auto* xe = ev.mutable_exec();
  xe->set_exit_code(x.exit_code);
  xe->set_signal(x.signal);
  xe->set_duration_ms(static_cast<uint32_t>(x.duration.count()));
  xe->set_timed_out(x.timed_out);
  xe->set_stdout_bytes(x.stdout_data.size());
  xe->set_stderr_bytes(x.stderr_data.size());
  ctx_.events.Emit(std::move(ev));
  auto text = [&](const std::string& s) -> json {
    if (encoding == "utf8") return s;  // Dump() replaces invalid UTF-8
    return Base64Encode(s);
  };
  co_return Json(200, {{"exit_code", x.exit_code},
                       {"signal", x.signal},
                       {"stdout", text(x.stdout_data)},
                       {"stderr", text(x.stderr_data)},
                       {"encoding", encoding},
                       {"truncated", x.truncated},
                       {"timed_out", x.timed_out},
                       {"duration_ms", x.duration.count()}});
}

Reply GuestRoutes::PutFile(Call& c) {
  std::string path;
  if (auto bad = FileQuery(c.ex, &path, {"path", "mode", "parents"}))
    co_return FileQueryError(c.ex, *bad);
  uint32_t mode = 0644;
  if (auto m = c.ex.query().find("mode"); m != c.ex.query().end()) {
    const std::string& v = m->second;
    if (v.size() < 3 || v.size() > 4 || v.find_first_not_of("01234567") != std::string::npos)
      co_return Error(400, "invalid_request", "mode must be octal permission bits such as 0644");
    mode = static_cast<uint32_t>(std::stoul(v, nullptr, 8));
  }
  bool parents = false;
  if (auto p = c.ex.query().find("parents"); p != c.ex.query().end()) {
    if (p->second != "1" && p->second != "0" && p->second != "true" && p->second != "false")
      co_return Error(400, "invalid_request", "parents must be 1 or 0");
    parents = p->second == "1" || p->second == "true";
  }
  if (auto cl = c.ex.content_length(); cl && *cl > kMaxFileBytes)
    co_return Error(413, "payload_too_large",
                    fmt::format("files are limited to {} bytes", kMaxFileBytes));
  auto call = BeginAgentCall(c.id, "file upload");
  if (!call) co_return call.error();
  auto writer = call->agent->WriteFile({.path = path, .mode = mode, .create_parents = parents});
  std::string buf(vmhost::AgentGuest::kFileChunkBytes, '\0');
  std::optional<HttpResponse> failed;
  for (bool ended = false; !ended;) {
    auto n = co_await c.ex.ReadSome(std::span<char>(buf.data(), buf.size()), kMaxFileBytes);
    if (!n) {
      failed = n.error().code == BodyError::Code::kTooLarge
                   ? Error(413, "payload_too_large",
                           fmt::format("files are limited to {} bytes", kMaxFileBytes))
                   : FromBodyError(n.error());
      break;
    }
    ended = *n == 0;
    if (auto w = co_await writer->Write(std::string_view(buf.data(), *n), ended); !w) {
      failed = FromAgentError(w.error(), true);
      break;
    }
  }
  if (!failed)
    if (auto done = co_await writer->Finish(); !done) failed = FromAgentError(done.error(), true);
  if (auto gone = call->op.Interrupted()) failed = *gone;
  auto ev = c.NewEvent(c.id);
  auto* f = ev.mutable_file();
  f->set_direction("upload");
  f->set_path(path);
  f->set_bytes(writer->bytes_sent());
  f->set_ok(!failed);
  if (failed)
    f->set_error(ParseJson(failed->body).value_or(json::object())["error"].value("message", ""));
  ctx_.events.Emit(std::move(ev));
  if (failed) co_return *failed;
  co_return Json(200, {{"path", path}, {"bytes", writer->bytes_sent()}});
}

Reply GuestRoutes::GetFile(Call& c) {
  std::string path;
  if (auto bad = FileQuery(c.ex, &path, {"path"})) co_return FileQueryError(c.ex, *bad);
  auto call = BeginAgentCall(c.id, "file download");
  if (!call) co_return call.error();
  std::shared_ptr<vmhost::FileReader> reader = call->agent->ReadFile(path);
  auto ev = c.NewEvent(c.id);
  ev.mutable_file()->set_direction("download");
  ev.mutable_file()->set_path(path);
  auto fail_event = [&](const std::string& why) {
    auto e = ev;
    e.mutable_file()->set_error(why);
    ctx_.events.Emit(std::move(e));
  };
  auto first = co_await reader->Open();
  if (auto gone = call->op.Interrupted()) {
    fail_event("the sandbox went away");
    co_return *gone;
  }
  if (!first) {
    fail_event(first.error().message);
    co_return FromAgentError(first.error(), true);
  }
  if (first->total_size > kMaxFileBytes) {
    fail_event("file too large");
    co_return Error(413, "payload_too_large",
                    fmt::format("files are limited to {} bytes", kMaxFileBytes));
  }
  HttpResponse res;
  res.content_type = "application/octet-stream";
  res.headers.emplace_back("X-File-Size", std::to_string(first->total_size));
  // The agent (and through it the sandbox) lives as long as the body is being sent.
  auto chunk = std::make_shared<vmhost::FileChunk>(std::move(*first));
  res.stream = [this, agent = call->agent, reader, chunk,
                ev](ChunkWriter& w) mutable -> asio::awaitable<void> {
    uint64_t bytes = 0;
    std::string error;
    vmhost::FileChunk cur = std::move(*chunk);
    for (;;) {
      bytes += cur.data.size();
      if (!(co_await w.Write(cur.data))) {
        error = "client went away";
        break;
      }
      if (cur.final) break;
      auto next = co_await reader->Next();
      if (!next) {
        error = next.error().message;
        break;
      }
      cur = std::move(*next);
    }
    auto* f = ev.mutable_file();
    f->set_bytes(bytes);
    f->set_ok(error.empty());
    f->set_error(error);
    ctx_.events.Emit(std::move(ev));
    // A failure after the head was sent can only be told by ending the body early: the
    // chunked stream then lacks its last chunk, which the client sees as an error.
    if (!error.empty()) w.Abort();
  };
  co_return res;
}

Reply GuestRoutes::GetClipboard(Call& c) {
  auto call = BeginAgentCall(c.id, "clipboard read");
  if (!call) co_return call.error();
  auto text = co_await call->agent->GetClipboard();
  if (auto gone = call->op.Interrupted()) co_return *gone;
  if (!text) co_return FromAgentError(text.error());
  co_return Json(200, {{"text", *text}});
}

Reply GuestRoutes::PutClipboard(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto text = in.String("text", 0, 1 << 20);
  if (in.ok() && !text) in.Fail("text is required");
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  auto call = BeginAgentCall(c.id, "clipboard write");
  if (!call) co_return call.error();
  auto set = co_await call->agent->SetClipboard(std::move(*text));
  if (auto gone = call->op.Interrupted()) co_return *gone;
  if (!set) co_return FromAgentError(set.error());
  co_return NoContent();
}

}  // namespace deskbox::api
