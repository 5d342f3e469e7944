// FileRead (streamed out in FileChunk responses) and FileWrite (chunks in, temp file, rename).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <expected>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "agent.pb.h"
#include "agent/clock.h"
#include "agent/error.h"
#include "agent/reply.h"
#include "agent/task_runner.h"

namespace deskbox::agent {

struct FileLimits {
  uint64_t max_file_bytes = uint64_t{1} << 30;  // 1 GiB, read and write
  uint32_t default_chunk_bytes = 256u << 10;
  uint32_t max_chunk_bytes = 1u << 20;
  std::chrono::milliseconds write_idle_timeout{60'000};  // then an unfinished write is dropped
  size_t max_write_sessions = 16;
  size_t max_path_bytes = 4096;
};

// Absolute, no NUL, at most max_bytes.
std::expected<void, AgentError> ValidateAbsolutePath(std::string_view path, size_t max_bytes);

// Answers a FileReadRequest with FileChunk responses (the last one final; one empty final
// chunk for an empty file) or with one Error, possibly after some chunks. Blocking; run it on
// a worker. Returns the number of bytes sent.
uint64_t StreamFile(uint64_t id, const pb::FileReadRequest& request, const FileLimits& limits,
                    const Reply& reply);

// The FileWrite sessions, keyed by request id. Called from the I/O thread only, in arrival
// order; the final fsync + rename runs on the TaskRunner.
class FileWriter {
 public:
  FileWriter(Clock& clock, TaskRunner& tasks, FileLimits limits);
  ~FileWriter();

  void HandleChunk(uint64_t id, const pb::FileWriteChunk& chunk, Reply reply);
  // Drops sessions that saw no chunk for write_idle_timeout (answering them TIMEOUT).
  void ExpireIdle();
  // Drops every session (the host connection is gone); no answers.
  void DiscardAll();
  size_t active_sessions() const { return sessions_.size(); }

 private:
  struct Session;
  std::expected<std::unique_ptr<Session>, AgentError> Begin(const pb::FileWriteChunk& chunk);
  void Fail(uint64_t id, const AgentError& error, bool last, const Reply& reply);
  void RememberFailed(uint64_t id);

  Clock& clock_;
  TaskRunner& tasks_;
  const FileLimits limits_;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_;
  // Ids whose write failed: their remaining chunks are dropped without more answers.
  std::set<uint64_t> failed_ids_;
  std::deque<uint64_t> failed_order_;
};

}  // namespace deskbox::agent
