#pragma once
// Polls `done` every 5 ms until it holds or `timeout` passes: for tests reading what a fake
// guest service recorded on its own thread.
#include <chrono>
#include <functional>
#include <thread>

namespace deskbox::api {

inline bool PollUntil(const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace deskbox::api
