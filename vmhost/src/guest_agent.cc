#include "vmhost/guest_agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "vmhost/sandbox_host.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;

namespace {

template <typename T>
using Result = std::expected<T, AgentError>;

// A caller that breaks a writer's or reader's sequence has a bug no answer can fix.
[[noreturn]] void Misuse(const char* what) {
  std::fprintf(stderr, "vmhost: GuestAgent misuse: %s\n", what);
  std::abort();
}

AgentError WrongKind(const char* call) {
  return {AgentError::Code::kProtocol,
          fmt::format("guest agent answered {} with another kind of response", call)};
}

ExecResult FromProto(agent::v1::ExecResult&& x) {
  ExecResult r;
  r.exit_code = x.exit_code();
  r.signal = x.signal();
  r.stdout_data = std::move(*x.mutable_stdout());
  r.stderr_data = std::move(*x.mutable_stderr());
  r.truncated = x.truncated();
  r.timed_out = x.timed_out();
  r.duration = std::chrono::milliseconds(x.duration_ms());
  return r;
}

Result<FileChunk> FromProto(Result<agent::v1::Response>&& r) {
  if (!r) return std::unexpected(std::move(r.error()));
  if (!r->has_file_chunk()) return std::unexpected(WrongKind("a file read"));
  auto* c = r->mutable_file_chunk();
  return FileChunk{.offset = c->offset(),
                   .data = std::move(*c->mutable_data()),
                   .final = c->final(),
                   .total_size = c->total_size()};
}

class AgentFileWriter final : public FileWriter {
 public:
  AgentFileWriter(std::shared_ptr<AgentClient> client, FileWriteSpec spec,
                  std::chrono::milliseconds answer_timeout)
      : client_(std::move(client)),
        stream_(client_->OpenStream()),
        spec_(std::move(spec)),
        answer_timeout_(answer_timeout) {}

  asio::awaitable<Result<void>> Write(std::string_view data, bool last) override {
    if (last_sent_) Misuse("FileWriter::Write after the last chunk");
    if (failure_) co_return std::unexpected(*failure_);
    pending_.append(data);
    // Full chunks as they come; at the end, the rest (an empty file is one empty last chunk).
    while (pending_.size() >= AgentGuest::kFileChunkBytes || last) {
      size_t take = std::min(pending_.size(), AgentGuest::kFileChunkBytes);
      bool is_last = last && take == pending_.size();
      agent::v1::Request req;
      auto* w = req.mutable_file_write();
      w->set_path(spec_.path);
      w->set_offset(offset_);
      w->set_data(pending_.substr(0, take));
      w->set_last(is_last);
      w->set_mode(spec_.mode);
      w->set_create_parents(spec_.create_parents);
      auto sent = co_await stream_->Send(std::move(req));
      if (!sent) {
        failure_ = sent.error();
        co_return std::unexpected(sent.error());
      }
      offset_ += take;
      pending_.erase(0, take);
      if (is_last) {
        last_sent_ = true;
        break;
      }
    }
    co_return Result<void>{};
  }

  asio::awaitable<Result<void>> Finish() override {
    if (!last_sent_) Misuse("FileWriter::Finish before the last chunk");
    auto answer = co_await stream_->Next(answer_timeout_);
    if (!answer)
      co_return std::unexpected(AgentError{AgentError::Code::kClosed,
                                           "the guest agent ended the write without an answer"});
    if (!*answer) co_return std::unexpected(answer->error());
    if (!(*answer)->has_ack()) co_return std::unexpected(WrongKind("a file write"));
    co_return Result<void>{};
  }

  uint64_t bytes_sent() const override { return offset_; }

 private:
  // Declared before the stream: the stream refers to the client and is destroyed first.
  std::shared_ptr<AgentClient> client_;
  std::unique_ptr<AgentClient::Stream> stream_;
  FileWriteSpec spec_;
  std::chrono::milliseconds answer_timeout_;
  std::string pending_;  // less than a chunk, held until more data or the last one comes
  uint64_t offset_ = 0;
  bool last_sent_ = false;
  std::optional<AgentError> failure_;
};

class AgentFileReader final : public FileReader {
 public:
  AgentFileReader(std::shared_ptr<AgentClient> client, std::string path,
                  std::chrono::milliseconds chunk_timeout)
      : client_(std::move(client)),
        stream_(client_->OpenStream()),
        path_(std::move(path)),
        chunk_timeout_(chunk_timeout) {}

  asio::awaitable<Result<FileChunk>> Open() override {
    if (opened_) Misuse("FileReader::Open twice");
    opened_ = true;
    agent::v1::Request req;
    req.mutable_file_read()->set_path(path_);
    req.mutable_file_read()->set_chunk_bytes(AgentGuest::kFileChunkBytes);
    if (auto sent = co_await stream_->Send(std::move(req)); !sent)
      co_return std::unexpected(sent.error());
    auto first = co_await stream_->Next(chunk_timeout_);
    if (!first)
      co_return std::unexpected(
          AgentError{AgentError::Code::kClosed, "no answer from the guest agent"});
    co_return FromProto(std::move(*first));
  }

  asio::awaitable<Result<FileChunk>> Next() override {
    if (!opened_) Misuse("FileReader::Next before Open");
    auto next = co_await stream_->Next(chunk_timeout_);
    if (!next)
      co_return std::unexpected(
          AgentError{AgentError::Code::kClosed, "the guest agent ended the read early"});
    co_return FromProto(std::move(*next));
  }

 private:
  std::shared_ptr<AgentClient> client_;  // before the stream, as in AgentFileWriter
  std::unique_ptr<AgentClient::Stream> stream_;
  std::string path_;
  std::chrono::milliseconds chunk_timeout_;
  bool opened_ = false;
};

}  // namespace

GuestRefusal RefusalOf(const AgentError& e) {
  if (e.code != AgentError::Code::kGuest) return GuestRefusal::kOther;
  switch (static_cast<agent::v1::Error::Code>(e.guest_code)) {
    case agent::v1::Error::INVALID_ARGUMENT:
      return GuestRefusal::kInvalidArgument;
    case agent::v1::Error::NOT_FOUND:
      return GuestRefusal::kNotFound;
    case agent::v1::Error::TOO_LARGE:
      return GuestRefusal::kTooLarge;
    case agent::v1::Error::TIMEOUT:
      return GuestRefusal::kTimeout;
    default:
      return GuestRefusal::kOther;
  }
}

AgentGuest::AgentGuest(std::shared_ptr<AgentClient> client, AgentGuestTimeouts timeouts)
    : client_(std::move(client)), timeouts_(timeouts) {}

asio::awaitable<Result<ExecResult>> AgentGuest::Exec(ExecSpec spec) {
  agent::v1::Request req;
  auto* e = req.mutable_exec();
  for (auto& a : spec.argv) e->add_argv(std::move(a));
  if (!spec.shell.empty()) e->set_shell(std::move(spec.shell));
  for (auto& [name, value] : spec.env) (*e->mutable_env())[name] = std::move(value);
  if (!spec.cwd.empty()) e->set_cwd(std::move(spec.cwd));
  if (!spec.stdin_data.empty()) e->set_stdin(std::move(spec.stdin_data));
  auto timeout_s = static_cast<uint32_t>(std::clamp<int64_t>(
      spec.timeout.count(), 0, std::numeric_limits<uint32_t>::max()));
  e->set_timeout_s(timeout_s);
  if (spec.max_output_bytes) e->set_max_output_bytes(*spec.max_output_bytes);
  // The agent reads 0 as its default of 60 s.
  auto runs_for = std::chrono::seconds(timeout_s == 0 ? 60 : timeout_s);
  auto r = co_await client_->Call(std::move(req), runs_for + timeouts_.exec_grace);
  if (!r) co_return std::unexpected(std::move(r.error()));
  if (!r->has_exec()) co_return std::unexpected(WrongKind("exec"));
  co_return FromProto(std::move(*r->mutable_exec()));
}

asio::awaitable<Result<std::string>> AgentGuest::GetClipboard() {
  agent::v1::Request req;
  req.mutable_clipboard_get();
  auto r = co_await client_->Call(std::move(req), timeouts_.clipboard);
  if (!r) co_return std::unexpected(std::move(r.error()));
  if (!r->has_clipboard()) co_return std::unexpected(WrongKind("a clipboard read"));
  co_return std::move(*r->mutable_clipboard()->mutable_text());
}

asio::awaitable<Result<void>> AgentGuest::SetClipboard(std::string text) {
  agent::v1::Request req;
  req.mutable_clipboard_set()->set_text(std::move(text));
  auto r = co_await client_->Call(std::move(req), timeouts_.clipboard);
  if (!r) co_return std::unexpected(std::move(r.error()));
  if (!r->has_ack()) co_return std::unexpected(WrongKind("a clipboard write"));
  co_return Result<void>{};
}

asio::awaitable<Result<void>> AgentGuest::SetLimits(GuestLimits limits) {
  agent::v1::Request req;
  auto* l = req.mutable_set_limits();
  l->set_exec_pids_max(limits.exec_pids_max);
  l->set_exec_memory_bytes(limits.exec_memory_bytes);
  l->set_exec_disk_bytes(limits.exec_disk_bytes);
  auto r = co_await client_->Call(std::move(req), timeouts_.clipboard);
  if (!r) co_return std::unexpected(std::move(r.error()));
  if (!r->has_ack()) co_return std::unexpected(WrongKind("setting limits"));
  co_return Result<void>{};
}

asio::awaitable<Result<void>> AgentGuest::ResizeDisplay(uint32_t width, uint32_t height) {
  // Xvnc resizes its framebuffer through RANDR to any mode of its output; a size not listed
  // yet is added as a mode first (Xvnc ignores the timings). Openbox re-fits maximized windows.
  static constexpr char kScript[] =
      "export DISPLAY=:0; M=\"${1}x${2}\"; "
      "xrandr -q | grep -q \"^ *$M \" || { xrandr --newmode \"$M\" 60 $1 $1 $1 $1 $2 $2 $2 $2 && "
      "xrandr --addmode VNC-0 \"$M\"; } && xrandr --output VNC-0 --mode \"$M\" && "
      "xdpyinfo | grep -q \"dimensions: *$M \"";
  agent::v1::Request req;
  auto* e = req.mutable_exec();
  e->add_argv("/bin/sh");
  e->add_argv("-c");
  e->add_argv(kScript);
  e->add_argv("sh");
  e->add_argv(std::to_string(width));
  e->add_argv(std::to_string(height));
  e->set_timeout_s(15);
  auto r = co_await client_->Call(std::move(req), timeouts_.resize);
  if (!r) co_return std::unexpected(std::move(r.error()));
  if (!r->has_exec()) co_return std::unexpected(WrongKind("exec"));
  if (r->exec().exit_code() != 0)
    co_return std::unexpected(AgentError{
        AgentError::Code::kGuest,
        fmt::format("the display refused {}x{}: {}", width, height,
                    r->exec().stderr().substr(0, 300)),
        agent::v1::Error::INVALID_ARGUMENT});
  co_return Result<void>{};
}

std::unique_ptr<FileWriter> AgentGuest::WriteFile(FileWriteSpec spec) {
  return std::make_unique<AgentFileWriter>(client_, std::move(spec), timeouts_.file_written);
}

std::unique_ptr<FileReader> AgentGuest::ReadFile(std::string path) {
  return std::make_unique<AgentFileReader>(client_, std::move(path), timeouts_.file_chunk);
}

std::shared_ptr<GuestAgent> AgentGuestOf(std::shared_ptr<Sandbox> sandbox) {
  if (!sandbox || !sandbox->agent() || sandbox->agent()->closed()) return nullptr;
  AgentClient* client = sandbox->agent();
  // Shares ownership of the sandbox, which owns the client for its whole life.
  return std::make_shared<AgentGuest>(std::shared_ptr<AgentClient>(std::move(sandbox), client));
}

}  // namespace deskbox::vmhost
