// One line per notable event on stderr (PID 1 redirects it to the console). Never log secrets:
// no file contents, clipboard text, exec stdin, environment values or command lines.
#pragma once

#include <sstream>
#include <string_view>

namespace deskbox::agent {

void LogLine(std::string_view line);
// Tests turn logging off to keep their output readable.
void SetLogEnabled(bool enabled);

template <typename... Args>
void Log(const Args&... args) {
  std::ostringstream line;
  (line << ... << args);
  LogLine(line.str());
}

}  // namespace deskbox::agent
