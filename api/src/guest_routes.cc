#include "guest_routes.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <set>

#include "api/json_input.h"

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

std::expected<std::shared_ptr<vmhost::Sandbox>, HttpResponse> GuestRoutes::AgentOf(
    const std::string& id) const {
  auto sb = ctx_.manager.Find(id);
  if (!sb || !sb->agent || sb->agent->closed())
    return std::unexpected(
        Error(502, "guest_error", fmt::format("sandbox {} has no guest agent connection", id)));
  return sb;
}

Reply GuestRoutes::Exec(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  agent::v1::Request req;
  auto* e = req.mutable_exec();
  auto ev = c.NewEvent(c.id);
  if (const json* argv = in.Array("argv")) {
    if (argv->empty() || argv->size() > 4096) in.Fail("argv must have 1 to 4096 elements");
    for (const auto& a : *argv) {
      if (!a.is_string()) {
        in.Fail("argv elements must be strings");
        break;
      }
      e->add_argv(a.get<std::string>());
      ev.mutable_exec()->add_argv(a.get<std::string>());
    }
  }
  auto shell = in.String("shell", 1, 256 * 1024);
  if (shell) {
    e->set_shell(*shell);
    ev.mutable_exec()->set_shell(*shell);
  }
  if (in.ok() && e->argv_size() > 0 && shell) in.Fail("give either argv or shell, not both");
  if (in.ok() && e->argv_size() == 0 && !shell) in.Fail("argv or shell is required");
  if (const json* env = in.Object("env")) {
    for (auto it = env->begin(); it != env->end() && in.ok(); ++it) {
      if (!it->is_string())
        in.Fail(fmt::format("env.{} must be a string", it.key()));
      else if (it.key().empty() || it.key().find('=') != std::string::npos ||
               it.key().find('\0') != std::string::npos)
        in.Fail(fmt::format("env name '{}' is not valid", it.key()));
      else
        (*e->mutable_env())[it.key()] = it->get<std::string>();
    }
  }
  if (auto cwd = in.String("cwd", 1, kMaxPathBytes)) {
    if ((*cwd)[0] != '/') in.Fail("cwd must be an absolute path");
    e->set_cwd(*cwd);
  }
  if (auto in_b64 = in.String("stdin_b64", 0, kMaxJsonBody)) {
    std::string decoded;
    decoded.resize(in_b64->size() / 4 * 3 + 3);
    int n = in_b64->empty()
                ? 0
                : EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                  reinterpret_cast<const unsigned char*>(in_b64->data()),
                                  static_cast<int>(in_b64->size()));
    if (n < 0 || in_b64->size() % 4 != 0) {
      in.Fail("stdin_b64 is not valid base64");
    } else {
      size_t pad = 0;
      if (!in_b64->empty() && in_b64->back() == '=') ++pad;
      if (in_b64->size() > 1 && (*in_b64)[in_b64->size() - 2] == '=') ++pad;
      decoded.resize(static_cast<size_t>(n) - pad);
      e->set_stdin(decoded);
    }
  }
  auto timeout = in.Integer("timeout_s", 1, 3600);
  e->set_timeout_s(static_cast<uint32_t>(timeout.value_or(60)));
  auto encoding = in.Enum("encoding", {"utf8", "base64"}).value_or("utf8");
  if (auto m = in.Integer("max_output_bytes", 1, 6 << 20))
    e->set_max_output_bytes(static_cast<uint64_t>(*m));
  if (auto err = in.Finish()) co_return Error(400, "invalid_request", *err);
  auto r =
      co_await CallAgent(c.id, "exec", std::move(req), std::chrono::seconds(e->timeout_s() + 15));
  if (!r) co_return r.error();
  const auto& x = r->exec();
  auto* xe = ev.mutable_exec();
  xe->set_exit_code(x.exit_code());
  xe->set_signal(x.signal());
  xe->set_duration_ms(static_cast<uint32_t>(x.duration_ms()));
  xe->set_timed_out(x.timed_out());
  xe->set_stdout_bytes(x.stdout().size());
  xe->set_stderr_bytes(x.stderr().size());
  ctx_.events.Emit(std::move(ev));
  auto text = [&](const std::string& s) -> json {
    if (encoding == "utf8") return s;  // Dump() replaces invalid UTF-8
    std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(s.data()),
                            static_cast<int>(s.size()));
    out.resize(static_cast<size_t>(n));
    return out;
  };
  co_return Json(200, {{"exit_code", x.exit_code()},
                       {"signal", x.signal()},
                       {"stdout", text(x.stdout())},
                       {"stderr", text(x.stderr())},
                       {"encoding", encoding},
                       {"truncated", x.truncated()},
                       {"timed_out", x.timed_out()},
                       {"duration_ms", x.duration_ms()}});
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
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "file upload");
  if (!op) co_return op.error();
  auto sb = AgentOf(c.id);
  if (!sb) co_return sb.error();
  auto keep = *sb;
  auto stream = keep->agent->OpenStream();
  constexpr size_t kChunk = 256 * 1024;
  std::string buf(kChunk, '\0');
  uint64_t offset = 0;
  std::optional<HttpResponse> failed;
  std::string pending;  // one chunk held back so the last one can be marked
  bool ended = false;
  while (!ended) {
    auto n = co_await c.ex.ReadSome(std::span<char>(buf.data(), buf.size()), kMaxFileBytes);
    if (!n) {
      failed = n.error().code == BodyError::Code::kTooLarge
                   ? Error(413, "payload_too_large",
                           fmt::format("files are limited to {} bytes", kMaxFileBytes))
                   : FromBodyError(n.error());
      break;
    }
    ended = *n == 0;
    pending.append(buf.data(), *n);
    // Full chunks as they come; at the end, the rest (an empty file is one empty last chunk).
    while (pending.size() >= kChunk || ended) {
      size_t take = std::min(pending.size(), kChunk);
      bool last = ended && take == pending.size();
      agent::v1::Request req;
      auto* w = req.mutable_file_write();
      w->set_path(path);
      w->set_offset(offset);
      w->set_data(pending.substr(0, take));
      w->set_last(last);
      w->set_mode(mode);
      w->set_create_parents(parents);
      auto s = co_await stream->Send(std::move(req));
      if (!s) {
        failed = FromAgentError(s.error(), true);
        break;
      }
      offset += take;
      pending.erase(0, take);
      if (last) break;
    }
    if (failed) break;
  }
  auto ev = c.NewEvent(c.id);
  auto* f = ev.mutable_file();
  f->set_direction("upload");
  f->set_path(path);
  if (!failed) {
    auto ack = co_await stream->Next(120s);
    if (!ack)
      failed = Error(502, "guest_error", "the guest agent ended the write without an answer");
    else if (!*ack)
      failed = FromAgentError(ack->error(), true);
  }
  if (auto gone = op->Interrupted()) failed = *gone;
  f->set_bytes(offset);
  f->set_ok(!failed);
  if (failed)
    f->set_error(ParseJson(failed->body).value_or(json::object())["error"].value("message", ""));
  ctx_.events.Emit(std::move(ev));
  if (failed) co_return *failed;
  co_return Json(200, {{"path", path}, {"bytes", offset}});
}

Reply GuestRoutes::GetFile(Call& c) {
  std::string path;
  if (auto bad = FileQuery(c.ex, &path, {"path"})) co_return FileQueryError(c.ex, *bad);
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "file download");
  if (!op) co_return op.error();
  auto sb = AgentOf(c.id);
  if (!sb) co_return sb.error();
  auto keep = *sb;
  std::shared_ptr<vmhost::AgentClient::Stream> stream = keep->agent->OpenStream();
  agent::v1::Request req;
  req.mutable_file_read()->set_path(path);
  req.mutable_file_read()->set_chunk_bytes(256 * 1024);
  auto ev = c.NewEvent(c.id);
  ev.mutable_file()->set_direction("download");
  ev.mutable_file()->set_path(path);
  auto fail_event = [&](const std::string& why) {
    auto e = ev;
    e.mutable_file()->set_error(why);
    ctx_.events.Emit(std::move(e));
  };
  if (auto s = co_await stream->Send(std::move(req)); !s) co_return FromAgentError(s.error(), true);
  auto first = co_await stream->Next(60s);
  if (auto gone = op->Interrupted()) {
    fail_event("the sandbox went away");
    co_return *gone;
  }
  if (!first || !*first) {
    auto err = !first ? vmhost::AgentError{vmhost::AgentError::Code::kClosed,
                                           "no answer from the guest agent"}
                      : first->error();
    fail_event(err.message);
    co_return FromAgentError(err, true);
  }
  if ((*first)->file_chunk().total_size() > kMaxFileBytes) {
    fail_event("file too large");
    co_return Error(413, "payload_too_large",
                    fmt::format("files are limited to {} bytes", kMaxFileBytes));
  }
  HttpResponse res;
  res.content_type = "application/octet-stream";
  res.headers.emplace_back("X-File-Size", std::to_string((*first)->file_chunk().total_size()));
  auto chunk = std::make_shared<agent::v1::Response>(std::move(**first));
  res.stream = [this, keep, stream, chunk, ev](ChunkWriter& w) mutable -> asio::awaitable<void> {
    uint64_t bytes = 0;
    std::string error;
    agent::v1::Response cur = std::move(*chunk);
    for (;;) {
      const auto& fc = cur.file_chunk();
      bytes += fc.data().size();
      if (!(co_await w.Write(fc.data()))) {
        error = "client went away";
        break;
      }
      if (fc.final()) break;
      auto next = co_await stream->Next(60s);
      if (!next || !*next) {
        error = !next ? "the guest agent ended the read early" : next->error().message;
        break;
      }
      cur = std::move(**next);
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
  agent::v1::Request req;
  req.mutable_clipboard_get();
  auto r = co_await CallAgent(c.id, "clipboard read", std::move(req), 15s);
  if (!r) co_return r.error();
  co_return Json(200, {{"text", r->clipboard().text()}});
}

Reply GuestRoutes::PutClipboard(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto text = in.String("text", 0, 1 << 20);
  if (in.ok() && !text) in.Fail("text is required");
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  agent::v1::Request req;
  req.mutable_clipboard_set()->set_text(*text);
  auto r = co_await CallAgent(c.id, "clipboard write", std::move(req), 15s);
  if (!r) co_return r.error();
  co_return NoContent();
}

asio::awaitable<std::expected<agent::v1::Response, HttpResponse>> GuestRoutes::CallAgent(
    const std::string& id, std::string what, agent::v1::Request request,
    std::chrono::milliseconds timeout) {
  using R = std::expected<agent::v1::Response, HttpResponse>;
  auto op = ctx_.sandboxes.BeginGuestOperation(id, std::move(what));
  if (!op) co_return R(std::unexpected(op.error()));
  auto sb = AgentOf(id);
  if (!sb) co_return R(std::unexpected(sb.error()));
  auto keep = *sb;  // the agent client lives as long as this call
  auto r = co_await keep->agent->Call(std::move(request), timeout);
  if (auto gone = op->Interrupted()) co_return R(std::unexpected(*gone));
  if (!r) co_return R(std::unexpected(FromAgentError(r.error())));
  co_return R(std::move(*r));
}

}  // namespace deskbox::api
