#pragma once
// FakeGuestAgent: a GuestAgent with no guest, for tests of the code that calls one (the API's
// routes). By default it behaves as an in-memory guest: commands exit 0 with no output, the
// clipboard holds what was set, files are a map by path. A test scripts other answers through
// the public members and reads what was asked from the records, and can hold calls in flight
// (`hold`) to see what happens meanwhile. Single-threaded, like the io_context it is called on;
// it must outlive the FileWriters and FileReaders it makes.
#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vmhost/guest_agent.h"

namespace deskbox::vmhost::testing {

class FakeGuestAgent final : public GuestAgent {
 public:
  // ---- Scripted answers ----
  // The answer to every Exec; unset: exit 0, no output.
  std::function<std::expected<ExecResult, AgentError>(const ExecSpec&)> on_exec;
  std::string clipboard;                      // what GetClipboard returns, what SetClipboard sets
  std::optional<AgentError> clipboard_error;  // every clipboard call fails with it
  std::optional<AgentError> resize_error;     // every ResizeDisplay fails with it
  std::map<std::string, std::string> files;   // the guest's files by path
  std::optional<AgentError> write_error;      // Finish fails with it; the file is not stored
  std::optional<AgentError> read_error;       // Open fails with it
  std::optional<AgentError> limits_error;     // every SetLimits fails with it
  size_t read_chunk_bytes = AgentGuest::kFileChunkBytes;
  // While set, Exec, the clipboard calls, a file write's Finish and a file read's Open wait in
  // flight until Release().
  bool hold = false;
  size_t held() const { return held_.size(); }
  void Release() {
    hold = false;
    for (auto& t : held_) t->cancel();
  }

  // ---- Records, in call order ----
  std::vector<std::string> calls;  // "exec", "get_clipboard", "set_clipboard", "resize",
                                   // "write_file <path>", "read_file <path>"
  std::vector<ExecSpec> execs;
  std::vector<std::string> clipboard_sets;
  std::vector<std::pair<uint32_t, uint32_t>> resizes;
  std::vector<GuestLimits> limits;  // SetLimits calls, failed ones too
  struct Write {
    FileWriteSpec spec;
    std::string data;       // everything written so far
    bool last = false;      // Write(..., true) was called
    bool finished = false;  // Finish succeeded
  };
  std::vector<Write> writes;

  boost::asio::awaitable<std::expected<ExecResult, AgentError>> Exec(ExecSpec spec) override {
    calls.push_back("exec");
    execs.push_back(spec);
    co_await Held();
    if (on_exec) co_return on_exec(execs.back());
    co_return ExecResult{};
  }

  boost::asio::awaitable<std::expected<std::string, AgentError>> GetClipboard() override {
    calls.push_back("get_clipboard");
    co_await Held();
    if (clipboard_error) co_return std::unexpected(*clipboard_error);
    co_return clipboard;
  }

  boost::asio::awaitable<std::expected<void, AgentError>> SetClipboard(std::string text) override {
    calls.push_back("set_clipboard");
    clipboard_sets.push_back(text);
    co_await Held();
    if (clipboard_error) co_return std::unexpected(*clipboard_error);
    clipboard = std::move(text);
    co_return std::expected<void, AgentError>{};
  }

  boost::asio::awaitable<std::expected<void, AgentError>> ResizeDisplay(uint32_t width,
                                                                        uint32_t height) override {
    calls.push_back("resize");
    resizes.emplace_back(width, height);
    if (resize_error) co_return std::unexpected(*resize_error);
    co_return std::expected<void, AgentError>{};
  }

  boost::asio::awaitable<std::expected<void, AgentError>> SetLimits(GuestLimits l) override {
    calls.push_back("set_limits");
    limits.push_back(l);
    if (limits_error) co_return std::unexpected(*limits_error);
    co_return std::expected<void, AgentError>{};
  }

  std::unique_ptr<FileWriter> WriteFile(FileWriteSpec spec) override {
    calls.push_back("write_file " + spec.path);
    writes.push_back({.spec = std::move(spec)});
    return std::make_unique<Writer>(*this, writes.size() - 1);
  }

  std::unique_ptr<FileReader> ReadFile(std::string path) override {
    calls.push_back("read_file " + path);
    return std::make_unique<Reader>(*this, std::move(path));
  }

 private:
  boost::asio::awaitable<void> Held() {
    if (!hold) co_return;
    auto t = std::make_shared<boost::asio::steady_timer>(co_await boost::asio::this_coro::executor,
                                                         boost::asio::steady_timer::time_point::max());
    held_.push_back(t);
    boost::system::error_code ec;
    co_await t->async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    std::erase(held_, t);
  }
  std::vector<std::shared_ptr<boost::asio::steady_timer>> held_;

  class Writer final : public FileWriter {
   public:
    Writer(FakeGuestAgent& fake, size_t index) : fake_(fake), index_(index) {}
    boost::asio::awaitable<std::expected<void, AgentError>> Write(std::string_view data,
                                                                  bool last) override {
      auto& w = fake_.writes[index_];
      w.data.append(data);
      w.last = last;
      co_return std::expected<void, AgentError>{};
    }
    boost::asio::awaitable<std::expected<void, AgentError>> Finish() override {
      co_await fake_.Held();
      if (fake_.write_error) co_return std::unexpected(*fake_.write_error);
      auto& w = fake_.writes[index_];
      w.finished = true;
      fake_.files[w.spec.path] = w.data;
      co_return std::expected<void, AgentError>{};
    }
    uint64_t bytes_sent() const override { return fake_.writes[index_].data.size(); }

   private:
    FakeGuestAgent& fake_;
    size_t index_;
  };

  class Reader final : public FileReader {
   public:
    Reader(FakeGuestAgent& fake, std::string path) : fake_(fake), path_(std::move(path)) {}
    boost::asio::awaitable<std::expected<FileChunk, AgentError>> Open() override {
      co_await fake_.Held();
      if (fake_.read_error) co_return std::unexpected(*fake_.read_error);
      auto it = fake_.files.find(path_);
      if (it == fake_.files.end())
        co_return std::unexpected(AgentError{AgentError::Code::kGuest,
                                             "guest agent: " + path_ + ": No such file",
                                             agent::v1::Error::NOT_FOUND});
      content_ = it->second;  // as the guest does, reads what was there when opened
      co_return Chunk();
    }
    boost::asio::awaitable<std::expected<FileChunk, AgentError>> Next() override {
      co_return Chunk();
    }

   private:
    FileChunk Chunk() {
      size_t take = std::min(fake_.read_chunk_bytes, content_.size() - offset_);
      FileChunk c{.offset = offset_,
                  .data = content_.substr(offset_, take),
                  .final = offset_ + take == content_.size(),
                  .total_size = content_.size()};
      offset_ += take;
      return c;
    }
    FakeGuestAgent& fake_;
    std::string path_;
    std::string content_;
    size_t offset_ = 0;
  };
};

}  // namespace deskbox::vmhost::testing
