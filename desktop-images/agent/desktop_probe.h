// What the readiness check looks at, behind an interface so it can be tested without a desktop.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "agent/http_client.h"
#include "agent/process.h"

namespace deskbox::agent {

class DesktopProbe {
 public:
  virtual ~DesktopProbe() = default;
  // A connect() to the X server's unix socket succeeds.
  virtual bool XServerAnswers() = 0;
  // GET on Chromium's DevTools HTTP endpoint (guest loopback), e.g. "/json/version".
  virtual std::expected<HttpResponse, std::string> DevToolsGet(std::string_view path) = 0;
  // The beginning of /proc/stat (the aggregate "cpu" line is the first line).
  virtual std::expected<std::string, std::string> ReadProcStat() = 0;
  // stdout of `xwininfo <args>` on DISPLAY=:0, or an error if it did not exit 0.
  virtual std::expected<std::string, std::string> Xwininfo(const std::vector<std::string>& args) = 0;
};

struct LinuxDesktopProbeOptions {
  std::string x_socket = "/tmp/.X11-unix/X0";
  std::string devtools_address = "127.0.0.1";
  uint16_t devtools_port = 9223;
  std::string display = ":0";
  std::string proc_stat = "/proc/stat";
};

class LinuxDesktopProbe final : public DesktopProbe {
 public:
  LinuxDesktopProbe(ProcessRunner& runner, LinuxDesktopProbeOptions options = {})
      : runner_(runner), options_(std::move(options)) {}
  bool XServerAnswers() override;
  std::expected<HttpResponse, std::string> DevToolsGet(std::string_view path) override;
  std::expected<std::string, std::string> ReadProcStat() override;
  std::expected<std::string, std::string> Xwininfo(const std::vector<std::string>& args) override;

 private:
  ProcessRunner& runner_;
  LinuxDesktopProbeOptions options_;
};

}  // namespace deskbox::agent
