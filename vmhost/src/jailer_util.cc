#include "jailer_util.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/files.h"
#include "common/process.h"

namespace deskbox::vmhost::jailer_util {

JailerServer::Reply Fail(int code, std::string message) {
  JailerServer::Reply r;
  r.response.set_ok(false);
  r.response.set_error_code(static_cast<uint32_t>(code));
  r.response.set_error(std::move(message));
  return r;
}
JailerServer::Reply Ok() {
  JailerServer::Reply r;
  r.response.set_ok(true);
  return r;
}

std::expected<void, std::string> RunTool(const std::vector<std::string>& argv,
                                         const std::string& input) {
  auto r = RunCommand(argv, input, std::chrono::seconds(20));
  if (!r) return std::unexpected(fmt::format("{}: {}", argv[0], ErrnoString(r.error())));
  if (!r->ok())
    return std::unexpected(fmt::format("{} failed ({}): {}", JoinArgv(argv), r->exit_code,
                                       r->output.substr(0, 400)));
  return {};
}

std::expected<void, std::string> MkdirOwned(const std::string& path, uid_t uid, gid_t gid,
                                            mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    return std::unexpected(fmt::format("mkdir {}: {}", path, ErrnoString(errno)));
  if (::chown(path.c_str(), uid, gid) != 0 || ::chmod(path.c_str(), mode) != 0)
    return std::unexpected(fmt::format("chown {}: {}", path, ErrnoString(errno)));
  return {};
}

bool ProcessAlive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

UniqueFd ConnectUnix(const std::string& path) {
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (!s || ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return UniqueFd();
  return s;
}

std::string TailOf(const std::string& path, size_t bytes) {
  auto s = ReadFile(path, 16 << 20);
  if (!s) return {};
  std::string t = s->size() > bytes ? s->substr(s->size() - bytes) : *s;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t;
}

}  // namespace deskbox::vmhost::jailer_util
