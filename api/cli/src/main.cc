// deskbox: command-line client for deskboxd's REST API. See README.md and `deskbox --help`.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/output.h"
#include "commands.h"
#include "common/files.h"

namespace {

// The first line of a key file, without surrounding whitespace.
std::string FirstLine(std::string_view text) {
  text = text.substr(0, text.find('\n'));
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  return std::string(text);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace deskbox::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto invocation = ParseArgs(args, [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  });
  if (!invocation) {
    const ParseFailure& f = invocation.error();
    if (f.kind == ParseFailure::Kind::kHelp) {
      std::fputs(f.usage.c_str(), stdout);
      return std::fflush(stdout) == 0 ? 0 : 1;
    }
    std::fprintf(stderr, "deskbox: %s\n\n%s", f.message.c_str(), f.usage.c_str());
    return 2;
  }
  GlobalOptions& global = invocation->global;
  if (global.credential_file) {
    auto text = deskbox::ReadFile(*global.credential_file, 64 * 1024);
    if (!text) {
      std::fprintf(stderr, "deskbox: reading the key file %s: %s\n",
                   global.credential_file->c_str(), deskbox::ErrnoString(text.error()).c_str());
      return 1;
    }
    global.credential = FirstLine(*text);
    if (global.credential->empty()) {
      std::fprintf(stderr, "deskbox: the key file %s is empty\n", global.credential_file->c_str());
      return 1;
    }
  }
  if (global.credential && !IsValidCredential(*global.credential)) {
    // Name where it came from, never the value.
    std::fprintf(stderr,
                 "deskbox: the key from %s is not usable: it must be printable ASCII without "
                 "spaces\n",
                 global.credential_source.c_str());
    return 2;
  }
  return RunCommand(*invocation);
}
