#pragma once
// A private deskbox-jailer and its client for tests and benchmarks that run as root, on the
// template named by DESKBOX_TEMPLATE (or the newest one) in DESKBOX_CACHE_DIR. Unique netns
// prefix, cgroup name, socket and state directory per process; everything removed on exit.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <expected>
#include <memory>
#include <optional>
#include <string>

#include "vmhost/jailer_client.h"
#include "vmhost/jailer_process.h"
#include "vmhost/sandbox_manager.h"

namespace deskbox::testing {

struct GuestEnv {
  std::string cache_dir;
  std::string template_name;
  std::string run_dir;    // jailer socket lives here
  std::string state_dir;  // slot directories
  std::string netns_prefix;
  std::string cgroup_name;
  uint32_t uid_base = 300000;
};

GuestEnv MakeGuestEnv();

class TestHost {
 public:
  TestHost() = default;
  ~TestHost();
  // Starts the jailer and connects to it.
  std::expected<void, std::string> Start();
  vmhost::VmHostConfig BaseConfig() const;  // nothing pooled

  // Runs a coroutine to completion on io(); aborts if it takes longer than `timeout`.
  template <typename T>
  std::optional<T> Run(boost::asio::awaitable<T> aw, std::chrono::seconds timeout) {
    std::optional<T> result;
    bool done = false;
    boost::asio::co_spawn(io_, std::move(aw), [&](std::exception_ptr e, T r) {
      if (e) std::rethrow_exception(e);
      result.emplace(std::move(r));
      done = true;
    });
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done && std::chrono::steady_clock::now() < deadline)
      io_.run_one_for(std::chrono::milliseconds(100));
    return result;
  }

  boost::asio::io_context& io() { return io_; }
  // For a test about to abort: kills the jailer (SIGKILL), which must not outlive the test
  // process holding ctest's output pipe open.
  void KillJailer();
  vmhost::JailerClient& jailer() { return *jailer_; }
  const GuestEnv& env() const { return env_; }

 private:
  GuestEnv env_ = MakeGuestEnv();
  boost::asio::io_context io_;
  std::optional<vmhost::JailerProcess> jailer_process_;
  std::unique_ptr<vmhost::JailerClient> jailer_;
};

}  // namespace deskbox::testing
