#include "agent/task_runner.h"

#include <system_error>

namespace deskbox::agent {

void ThreadTaskRunner::JoinAll() {
  std::list<Worker> workers;
  {
    std::lock_guard lock(mu_);
    workers.swap(workers_);
  }
  for (auto& w : workers) w.thread.join();
}

void ThreadTaskRunner::ReapLocked() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

bool ThreadTaskRunner::TrySpawn(std::function<void()> task) {
  std::lock_guard lock(mu_);
  ReapLocked();
  if (workers_.size() >= max_tasks_) return false;
  auto done = std::make_shared<std::atomic<bool>>(false);
  // The thread touches only its own `done` flag at the end, never the runner, so the runner
  // can be destroyed (joining) at any point.
  std::thread thread;
  try {
    thread = std::thread([task = std::move(task), done] {
      task();
      done->store(true);
    });
  } catch (const std::system_error&) {
    return false;  // out of threads: the caller answers "busy"
  }
  workers_.push_back(Worker{std::move(thread), std::move(done)});
  return true;
}

size_t ThreadTaskRunner::active() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& w : workers_) n += w.done->load() ? 0 : 1;
  return n;
}

}  // namespace deskbox::agent
