#include "agent/file_transfer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "agent/log.h"
#include "agent/unique_fd.h"

namespace deskbox::agent {
namespace {

constexpr size_t kMaxFailedIds = 256;

// Reads until `want` bytes or EOF.
std::expected<std::string, AgentError> ReadUpTo(int fd, size_t want, const std::string& path) {
  std::string data(want, '\0');
  size_t got = 0;
  while (got < want) {
    const ssize_t n = ::read(fd, data.data() + got, want - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      return std::unexpected(ErrnoError(errno, "read " + path));
    }
  }
  data.resize(got);
  return data;
}

std::expected<void, AgentError> WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return std::unexpected(ErrnoError(n < 0 ? errno : EIO, "write " + path));
    }
  }
  return {};
}

std::expected<void, AgentError> MakeDirectories(const std::string& dir) {
  // Walk down from the root, creating what is missing.
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return std::unexpected(ErrnoError(errno, "mkdir " + prefix));
    }
  }
  return {};
}

}  // namespace

std::expected<void, AgentError> ValidateAbsolutePath(std::string_view path, size_t max_bytes) {
  if (path.empty() || path.front() != '/') {
    return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, "path must be absolute"));
  }
  if (path.find('\0') != std::string_view::npos) {
    return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, "path contains NUL"));
  }
  if (path.size() > max_bytes) {
    return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, "path too long"));
  }
  return {};
}

uint64_t StreamFile(uint64_t id, const pb::FileReadRequest& request, const FileLimits& limits,
                    const Reply& reply) {
  auto fail = [&](const AgentError& error) { reply(ErrorResponse(id, error)); };
  const std::string& path = request.path();
  if (auto valid = ValidateAbsolutePath(path, limits.max_path_bytes); !valid) {
    fail(valid.error());
    return 0;
  }
  const uint32_t chunk_bytes =
      request.chunk_bytes() == 0 ? limits.default_chunk_bytes : request.chunk_bytes();
  if (chunk_bytes > limits.max_chunk_bytes) {
    fail(MakeError(pb::Error::INVALID_ARGUMENT,
                   "chunk_bytes over " + std::to_string(limits.max_chunk_bytes)));
    return 0;
  }
  // O_NONBLOCK so that opening a FIFO does not wait for a writer; it is rejected just below.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) {
    fail(ErrnoError(errno, "open " + path));
    return 0;
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) {
    fail(ErrnoError(errno, "stat " + path));
    return 0;
  }
  if (!S_ISREG(st.st_mode)) {
    fail(MakeError(pb::Error::INVALID_ARGUMENT, "not a regular file: " + path));
    return 0;
  }
  const uint64_t total_size = static_cast<uint64_t>(st.st_size);
  if (total_size > limits.max_file_bytes) {
    fail(MakeError(pb::Error::TOO_LARGE,
                   "file is " + std::to_string(total_size) + " bytes, limit " +
                       std::to_string(limits.max_file_bytes)));
    return 0;
  }
  ::fcntl(fd.get(), F_SETFL, O_RDONLY);  // back to blocking reads

  auto send = [&](uint64_t offset, std::string data, bool final) {
    pb::Response response;
    response.set_id(id);
    auto* chunk = response.mutable_file_chunk();
    chunk->set_offset(offset);
    chunk->set_data(std::move(data));
    chunk->set_final(final);
    chunk->set_total_size(total_size);
    return reply(std::move(response));
  };

  // Read one chunk ahead so the last data chunk can carry `final` (files in /proc have size 0
  // but content, so EOF, not st_size, ends the stream).
  uint64_t offset = 0;
  auto current = ReadUpTo(fd.get(), chunk_bytes, path);
  for (;;) {
    if (!current) {
      fail(current.error());
      return offset;
    }
    if (offset + current->size() > limits.max_file_bytes) {
      fail(MakeError(pb::Error::TOO_LARGE,
                     "file grew past the limit of " + std::to_string(limits.max_file_bytes)));
      return offset;
    }
    if (current->size() < chunk_bytes) {
      const uint64_t n = current->size();
      send(offset, std::move(*current), true);
      return offset + n;
    }
    auto next = ReadUpTo(fd.get(), chunk_bytes, path);
    const bool final = next && next->empty();
    const uint64_t n = current->size();
    if (!send(offset, std::move(*current), final)) return offset;  // host went away
    offset += n;
    if (final) return offset;
    current = std::move(next);
  }
}

struct FileWriter::Session {
  std::string path;
  std::string temp_path;  // cleared once renamed over `path`
  UniqueFd fd;
  uint64_t received = 0;
  mode_t mode = 0644;
  int64_t last_activity_ns = 0;
  Reply reply;  // of the latest chunk: expiry answers through it

  ~Session() {
    if (!temp_path.empty()) ::unlink(temp_path.c_str());
  }

  std::expected<void, AgentError> Commit() {
    if (::fsync(fd.get()) != 0) return std::unexpected(ErrnoError(errno, "fsync " + temp_path));
    if (::fchmod(fd.get(), mode) != 0) {
      return std::unexpected(ErrnoError(errno, "chmod " + temp_path));
    }
    if (::close(fd.release()) != 0) {
      return std::unexpected(ErrnoError(errno, "close " + temp_path));
    }
    if (::rename(temp_path.c_str(), path.c_str()) != 0) {
      return std::unexpected(ErrnoError(errno, "rename over " + path));
    }
    temp_path.clear();
    // Make the rename itself durable.
    const size_t slash = path.rfind('/');
    const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
    UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir_fd) ::fsync(dir_fd.get());
    return {};
  }
};

FileWriter::FileWriter(Clock& clock, TaskRunner& tasks, FileLimits limits)
    : clock_(clock), tasks_(tasks), limits_(limits) {}

FileWriter::~FileWriter() = default;

std::expected<std::unique_ptr<FileWriter::Session>, AgentError> FileWriter::Begin(
    const pb::FileWriteChunk& chunk) {
  const std::string& path = chunk.path();
  if (auto valid = ValidateAbsolutePath(path, limits_.max_path_bytes); !valid) {
    return std::unexpected(valid.error());
  }
  const size_t slash = path.rfind('/');
  const std::string base = path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, "path names no file: " + path));
  }
  if ((chunk.mode() & ~07777u) != 0) {
    return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, "mode has bits beyond 07777"));
  }
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  if (chunk.create_parents()) {
    if (auto made = MakeDirectories(dir); !made) return std::unexpected(made.error());
  }
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return std::unexpected(ErrnoError(errno, "directory " + dir));
  if (!S_ISDIR(st.st_mode)) {
    return std::unexpected(MakeError(pb::Error::NOT_FOUND, "not a directory: " + dir));
  }
  auto session = std::make_unique<Session>();
  session->path = path;
  session->mode = static_cast<mode_t>(chunk.mode());
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, "is a directory: " + path));
    }
    // A replaced file keeps its permissions unless the request sets them.
    if (session->mode == 0) session->mode = st.st_mode & 07777;
  }
  if (session->mode == 0) session->mode = 0644;
  // Hidden, in the same directory (rename(2) cannot cross filesystems), short enough for
  // NAME_MAX whatever the target's name length.
  std::string temp = dir == "/" ? "/" : dir + "/";
  temp += "." + base.substr(0, 200) + ".deskbox-XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return std::unexpected(ErrnoError(errno, "create temp file in " + dir));
  session->fd.reset(fd);
  session->temp_path = std::move(temp);
  return session;
}

void FileWriter::RememberFailed(uint64_t id) {
  if (!failed_ids_.insert(id).second) return;
  failed_order_.push_back(id);
  while (failed_order_.size() > kMaxFailedIds) {
    failed_ids_.erase(failed_order_.front());
    failed_order_.pop_front();
  }
}

void FileWriter::Fail(uint64_t id, const AgentError& error, bool last, const Reply& reply) {
  if (auto it = sessions_.find(id); it != sessions_.end()) {
    Log("file_write id=", id, " ", it->second->path, " failed: ", error.message);
    sessions_.erase(it);  // the Session destructor removes the temp file
  } else {
    Log("file_write id=", id, " rejected: ", error.message);
  }
  // One answer per id: the rest of its chunks are dropped quietly.
  if (!last) RememberFailed(id);
  reply(ErrorResponse(id, error));
}

void FileWriter::HandleChunk(uint64_t id, const pb::FileWriteChunk& chunk, Reply reply) {
  if (failed_ids_.contains(id)) {
    if (chunk.last()) {
      failed_ids_.erase(id);
      std::erase(failed_order_, id);
    }
    return;
  }
  if (chunk.data().size() > limits_.max_chunk_bytes) {
    Fail(id, MakeError(pb::Error::TOO_LARGE,
                       "chunk over " + std::to_string(limits_.max_chunk_bytes) + " bytes"),
         chunk.last(), reply);
    return;
  }
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    if (chunk.offset() != 0) {
      Fail(id, MakeError(pb::Error::INVALID_ARGUMENT,
                         "offset " + std::to_string(chunk.offset()) +
                             " but no write in progress for this id (expired or never started)"),
           chunk.last(), reply);
      return;
    }
    if (sessions_.size() >= limits_.max_write_sessions) {
      Fail(id, MakeError(pb::Error::INTERNAL, "too many file writes in progress"), chunk.last(),
           reply);
      return;
    }
    auto session = Begin(chunk);
    if (!session) {
      Fail(id, session.error(), chunk.last(), reply);
      return;
    }
    Log("file_write id=", id, " started ", chunk.path());
    it = sessions_.emplace(id, std::move(*session)).first;
  }
  Session& session = *it->second;
  if (chunk.path() != session.path) {
    Fail(id, MakeError(pb::Error::INVALID_ARGUMENT, "path changed within one write"), chunk.last(),
         reply);
    return;
  }
  if (chunk.offset() != session.received) {
    Fail(id, MakeError(pb::Error::INVALID_ARGUMENT,
                       "offset " + std::to_string(chunk.offset()) + ", expected " +
                           std::to_string(session.received)),
         chunk.last(), reply);
    return;
  }
  if (chunk.data().size() > limits_.max_file_bytes - session.received) {
    Fail(id, MakeError(pb::Error::TOO_LARGE,
                       "file over the limit of " + std::to_string(limits_.max_file_bytes)),
         chunk.last(), reply);
    return;
  }
  if (auto written = WriteAll(session.fd.get(), chunk.data(), session.temp_path); !written) {
    Fail(id, written.error(), chunk.last(), reply);
    return;
  }
  session.received += chunk.data().size();
  session.last_activity_ns = clock_.MonotonicNs();
  session.reply = reply;
  if (!chunk.last()) return;

  // fsync can take long on a busy guest disk: do it off the I/O thread.
  std::shared_ptr<Session> done(std::move(it->second));
  sessions_.erase(it);
  auto commit = [id, done, reply = std::move(reply)] {
    auto committed = done->Commit();
    if (!committed) {
      Log("file_write id=", id, " ", done->path, " failed: ", committed.error().message);
      reply(ErrorResponse(id, committed.error()));
      return;
    }
    Log("file_write id=", id, " wrote ", done->received, " bytes to ", done->path);
    pb::Response response;
    response.set_id(id);
    response.mutable_ack();
    reply(std::move(response));
  };
  if (!tasks_.TrySpawn(commit)) commit();
}

void FileWriter::ExpireIdle() {
  const int64_t now = clock_.MonotonicNs();
  const int64_t limit = std::chrono::nanoseconds(limits_.write_idle_timeout).count();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (now - it->second->last_activity_ns < limit) {
      ++it;
      continue;
    }
    const uint64_t id = it->first;
    Reply reply = it->second->reply;
    Log("file_write id=", id, " ", it->second->path, " abandoned after ",
        it->second->received, " bytes");
    it = sessions_.erase(it);
    RememberFailed(id);
    reply(ErrorResponse(id, MakeError(pb::Error::TIMEOUT, "no chunk for too long; write discarded")));
  }
}

void FileWriter::DiscardAll() {
  if (!sessions_.empty()) Log("file_write: discarding ", sessions_.size(), " unfinished writes");
  sessions_.clear();
  failed_ids_.clear();
  failed_order_.clear();
}

}  // namespace deskbox::agent
