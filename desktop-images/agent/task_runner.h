// Where long requests (exec, file read, ready waits, clipboard, file commits) run, so that the
// I/O thread keeps answering Ping. Bounded: at most `max_tasks` at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

namespace deskbox::agent {

class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  // Starts `task`; false (and `task` not run) when the runner is at capacity.
  virtual bool TrySpawn(std::function<void()> task) = 0;
  // Waits until every started task has finished.
  virtual void JoinAll() = 0;
};

// One thread per task, joined when it ends (reaped on the next TrySpawn) or on destruction.
class ThreadTaskRunner final : public TaskRunner {
 public:
  explicit ThreadTaskRunner(size_t max_tasks) : max_tasks_(max_tasks) {}
  ~ThreadTaskRunner() override { JoinAll(); }
  bool TrySpawn(std::function<void()> task) override;
  void JoinAll() override;
  size_t active() const;

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void ReapLocked();

  const size_t max_tasks_;
  mutable std::mutex mu_;
  std::list<Worker> workers_;
};

// Runs the task on the caller's thread; for tests.
class InlineTaskRunner final : public TaskRunner {
 public:
  bool TrySpawn(std::function<void()> task) override {
    task();
    return true;
  }
  void JoinAll() override {}
};

}  // namespace deskbox::agent
