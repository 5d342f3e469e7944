#pragma once
// Shared fixture for tests that need real guests: a private deskbox-jailer (the tests run as
// root), a SandboxManager on the template named by DESKBOX_TEMPLATE in DESKBOX_CACHE_DIR, and
// helpers to run coroutines and to talk to a guest. Every test restores from the same template;
// scripts/test builds it once per cache key.
#include <gtest/gtest.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "test_host.h"

namespace deskbox::testing {

class GuestTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Pool sizes for this test's manager (default: nothing pooled, so each create restores).
  virtual vmhost::VmHostConfig Config();

  // Runs a coroutine on the io_context until it finishes (aborts after `timeout`: the
  // coroutine holds references into the caller's frame).
  template <typename T>
  T Run(boost::asio::awaitable<T> aw, std::chrono::seconds timeout = std::chrono::seconds(180)) {
    auto r = host_->Run(std::move(aw), timeout);
    if (!r) {
      ADD_FAILURE() << "coroutine did not finish within " << timeout.count() << " s";
      AbandonGuests();
      std::abort();
    }
    return std::move(*r);
  }
  void RunVoid(boost::asio::awaitable<void> aw,
               std::chrono::seconds timeout = std::chrono::seconds(180));
  // Runs the io_context until `done()` holds (checked every 50 ms) or `timeout` passes; returns
  // whether it held. For state the manager changes in the background.
  bool WaitUntil(std::function<bool()> done, std::chrono::milliseconds timeout);

  // Creates a sandbox and, unless told not to, waits until its browser's pages are fresh
  // (SandboxManager::WaitBrowserFresh), as every client that reaches a page does.
  std::shared_ptr<vmhost::Sandbox> CreateOrDie(bool wait_browser = true);
  // Before an abort: kills this test's QEMU processes and its jailer, so that nothing keeps
  // ctest's output pipe open (ctest would then wait for its timeout) or runs on.
  void AbandonGuests();

  // Guest helpers.
  // Exec through the agent: returns stdout; fails the test on error or non-zero exit.
  std::string Exec(vmhost::Sandbox& sb, const std::string& shell);
  // The first 12 bytes the guest's RFB server sends (its version banner), or why there are none.
  std::string RfbBanner(vmhost::Sandbox& sb);
  // HTTP request to the guest's CDP endpoint (through the netns); returns the body.
  std::string CdpHttp(vmhost::Sandbox& sb, const std::string& method, const std::string& path);
  // Evaluates a JavaScript expression in the first page target; returns the JSON "result".
  std::string CdpEvaluate(vmhost::Sandbox& sb, const std::string& expression,
                          const std::string& target_id = "");
  std::expected<std::string, std::string> CdpEvaluateOnce(vmhost::Sandbox& sb,
                                                          const std::string& expression,
                                                          const std::string& target_id);

  std::unique_ptr<TestHost> host_;
  GuestEnv env_;
  boost::asio::io_context* io_ = nullptr;
  vmhost::JailerClient* jailer_ = nullptr;
  std::unique_ptr<vmhost::SandboxManager> manager_;
};

}  // namespace deskbox::testing
