#pragma once
// GuestAgent: what deskboxd asks of a guest's agent — run a command, write or read a file, get
// or set the clipboard, resize the display — as typed calls. Only AgentGuest knows the agent's
// protobufs (desktop-images/proto/agent.proto), so the API builds none, and the API's route tests
// can run against a fake (tests/api_unit/fake_guest_agent.h).
//
// Failures are AgentError (agent_client.h): kIo, kProtocol (also: an answer of the wrong kind),
// kTimeout, kClosed, or kGuest with the agent's Error.Code in guest_code (file calls: NOT_FOUND,
// TOO_LARGE, INVALID_ARGUMENT, TIMEOUT are about the path or the transfer).
//
// Every call, FileWriter and FileReader runs on the io_context of the AgentClient behind it.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vmhost/agent_client.h"

namespace deskbox::vmhost {

class Sandbox;

// What the agent's refusal (AgentError kGuest) says, for callers that answer differently by it.
enum class GuestRefusal { kOther, kInvalidArgument, kNotFound, kTooLarge, kTimeout };
// kOther for any error that is not kGuest or carries another code.
GuestRefusal RefusalOf(const AgentError& e);

// A command to run in the guest: argv, or a /bin/sh -c command line (not both; the agent
// refuses that with INVALID_ARGUMENT).
struct ExecSpec {
  std::vector<std::string> argv;
  std::string shell;
  std::map<std::string, std::string> env;  // overlaid on the agent's minimal environment
  std::string cwd;                         // absolute; empty: the agent's default (/root)
  std::string stdin_data;                  // written to the command, whose stdin is then closed
  std::chrono::seconds timeout{60};  // the guest kills the process group then (at most 3600 s)
  std::optional<uint64_t> max_output_bytes;  // per stream; unset: the agent's default (4 MiB)
};

struct ExecResult {
  int exit_code = 0;  // -1 if killed by a signal
  int signal = 0;     // 0 if it exited
  std::string stdout_data;
  std::string stderr_data;
  bool truncated = false;  // output beyond max_output_bytes was dropped
  bool timed_out = false;  // killed at ExecSpec::timeout
  std::chrono::milliseconds duration{0};
};

// The limits of the guest's exec commands (docs/limits.md): their cgroup's pids and memory, and
// how much root's files may grow on the guest's disk; 0 leaves one as it is.
struct GuestLimits {
  uint32_t exec_pids_max = 0;
  uint64_t exec_memory_bytes = 0;
  uint64_t exec_disk_bytes = 0;
};

struct FileWriteSpec {
  std::string path;  // absolute
  uint32_t mode = 0644;  // permission bits of a new file (0: keep an existing file's)
  bool create_parents = false;
};

// An upload, as the agent takes it: chunks of one request id, the last one marked. The guest
// writes a temporary file and renames it over the path only after the last chunk, so an upload
// abandoned before then (the writer destroyed) leaves the path as it was.
class FileWriter {
 public:
  virtual ~FileWriter() = default;
  // Appends `data`; `last` says the file ends with it (an empty file is one Write("", true)).
  // Full chunks go to the guest as they fill; the rest waits for more data or for `last`.
  // Call no more after `last`, nor after a failure.
  virtual boost::asio::awaitable<std::expected<void, AgentError>> Write(std::string_view data,
                                                                        bool last) = 0;
  // After Write(..., true): waits for the guest's answer, which comes once the file is in place.
  // The guest may have refused the write at any earlier chunk; that answer comes here.
  virtual boost::asio::awaitable<std::expected<void, AgentError>> Finish() = 0;
  // Bytes handed to the guest so far.
  virtual uint64_t bytes_sent() const = 0;
};

struct FileChunk {
  uint64_t offset = 0;
  std::string data;
  bool final = false;       // the file ends with this chunk (which may be empty)
  uint64_t total_size = 0;  // the file's size when the guest opened it (0 for /proc files)
};

// A download: Open() asks for the file and returns its first chunk, Next() the following ones
// until a final chunk. The guest sends ahead at most AgentClient::kStreamWindow chunks: a slow
// reader pauses the agent channel rather than growing memory.
class FileReader {
 public:
  virtual ~FileReader() = default;
  virtual boost::asio::awaitable<std::expected<FileChunk, AgentError>> Open() = 0;
  // Only after a chunk that was not final.
  virtual boost::asio::awaitable<std::expected<FileChunk, AgentError>> Next() = 0;
};

class GuestAgent {
 public:
  virtual ~GuestAgent() = default;

  // Runs a command and waits for it: an ExecResult whatever its exit status.
  virtual boost::asio::awaitable<std::expected<ExecResult, AgentError>> Exec(ExecSpec spec) = 0;
  // The CLIPBOARD selection's text (empty when nothing owns it); the agent has no other
  // selection.
  virtual boost::asio::awaitable<std::expected<std::string, AgentError>> GetClipboard() = 0;
  // Makes `text` (UTF-8, at most 1 MiB) the CLIPBOARD selection. The agent answers once xclip
  // has started, which can be before it owns the selection: read it back to know.
  virtual boost::asio::awaitable<std::expected<void, AgentError>> SetClipboard(
      std::string text) = 0;
  // Sets the X screen (Xvnc's RANDR output) to width x height, adding the mode if it is new.
  // A size the display does not take is kGuest with guest_code INVALID_ARGUMENT and the
  // script's stderr in the message.
  virtual boost::asio::awaitable<std::expected<void, AgentError>> ResizeDisplay(
      uint32_t width, uint32_t height) = 0;
  virtual std::unique_ptr<FileWriter> WriteFile(FileWriteSpec spec) = 0;
  virtual std::unique_ptr<FileReader> ReadFile(std::string path) = 0;
  virtual boost::asio::awaitable<std::expected<void, AgentError>> SetLimits(GuestLimits limits) = 0;
};

// How long AgentGuest waits for each answer.
struct AgentGuestTimeouts {
  // Beyond the command's own timeout, for the agent to kill it and answer.
  std::chrono::milliseconds exec_grace{15000};
  std::chrono::milliseconds clipboard{15000};  // xclip itself is given 5 s
  std::chrono::milliseconds resize{20000};     // the script is given 15 s
  // The answer after the last chunk of an upload: the guest fsyncs up to 1 GiB first.
  std::chrono::milliseconds file_written{120000};
  std::chrono::milliseconds file_chunk{60000};  // each chunk of a download
};

// GuestAgent over the agent channel. It, and every FileWriter and FileReader it makes, share
// ownership of the AgentClient, which therefore outlives them.
class AgentGuest final : public GuestAgent {
 public:
  explicit AgentGuest(std::shared_ptr<AgentClient> client, AgentGuestTimeouts timeouts = {});

  boost::asio::awaitable<std::expected<ExecResult, AgentError>> Exec(ExecSpec spec) override;
  boost::asio::awaitable<std::expected<std::string, AgentError>> GetClipboard() override;
  boost::asio::awaitable<std::expected<void, AgentError>> SetClipboard(std::string text) override;
  boost::asio::awaitable<std::expected<void, AgentError>> ResizeDisplay(uint32_t width,
                                                                        uint32_t height) override;
  std::unique_ptr<FileWriter> WriteFile(FileWriteSpec spec) override;
  std::unique_ptr<FileReader> ReadFile(std::string path) override;
  boost::asio::awaitable<std::expected<void, AgentError>> SetLimits(GuestLimits limits) override;

  // Upload chunk size, and the chunk size asked of the guest for downloads.
  static constexpr size_t kFileChunkBytes = 256 * 1024;

 private:
  std::shared_ptr<AgentClient> client_;
  AgentGuestTimeouts timeouts_;
};

// The agent of a sandbox, or nullptr when it has no agent channel or the channel has closed.
// The AgentGuest keeps the sandbox alive (the sandbox owns the AgentClient) for as long as it,
// or a FileWriter or FileReader it made, exists: a delete meanwhile closes the channel, and the
// calls then fail with kClosed instead of touching a freed client.
std::shared_ptr<GuestAgent> AgentGuestOf(std::shared_ptr<Sandbox> sandbox);

}  // namespace deskbox::vmhost
