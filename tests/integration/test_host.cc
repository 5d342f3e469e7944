#include "test_host.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "vmhost/template.h"

namespace deskbox::testing {

GuestEnv MakeGuestEnv() {
  GuestEnv env;
  const char* cache = std::getenv("DESKBOX_CACHE_DIR");
  env.cache_dir = cache && *cache ? cache : "/var/cache/deskbox";
  const char* tpl = std::getenv("DESKBOX_TEMPLATE");
  if (tpl && *tpl) {
    env.template_name = tpl;
  } else {
    // The newest complete template in the cache.
    std::filesystem::file_time_type newest{};
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(env.cache_dir + "/templates", ec)) {
      std::string name = e.path().filename().string();
      if (name.starts_with(".")) continue;
      if (!vmhost::OpenTemplate(e.path().string(), vmhost::VerifyMode::kQuick)) continue;
      auto t = std::filesystem::last_write_time(e.path(), ec);
      if (env.template_name.empty() || t > newest) {
        newest = t;
        env.template_name = name;
      }
    }
  }
  std::string id = std::to_string(::getpid());
  env.run_dir = "/run/deskbox-test-" + id;
  env.state_dir = "/var/tmp/deskbox-test-" + id;
  env.netns_prefix = "dbxt" + id + "-";
  env.cgroup_name = "deskbox-test-" + id;
  return env;
}

std::expected<void, std::string> TestHost::Start() {
  if (::geteuid() != 0)
    return std::unexpected("must run as root (it starts the privileged helper)");
  if (env_.template_name.empty())
    return std::unexpected(
        "no template: build one with scripts/build-artifacts or set DESKBOX_TEMPLATE");
  std::filesystem::create_directories(env_.run_dir);
  std::filesystem::create_directories(env_.state_dir);
  std::string socket = env_.run_dir + "/jailer.sock";
  auto j = vmhost::JailerProcess::Start(
      std::string(DESKBOX_BIN_DIR) + "/deskbox-jailer",
      {"--socket", socket, "--cache-dir", env_.cache_dir, "--state-dir", env_.state_dir,
       "--netns-prefix", env_.netns_prefix, "--cgroup-name", env_.cgroup_name, "--uid-base",
       std::to_string(env_.uid_base)},
      socket);
  if (!j) return std::unexpected(j.error());
  jailer_process_.emplace(std::move(*j));
  auto c = vmhost::JailerClient::Connect(io_.get_executor(), socket);
  if (!c) return std::unexpected(c.error());
  jailer_ = std::move(*c);
  return {};
}

vmhost::VmHostConfig TestHost::BaseConfig() const {
  vmhost::VmHostConfig c;
  c.cache_dir = env_.cache_dir;
  c.template_name = env_.template_name;
  c.netns_pool = 0;
  c.prestart_pool = 0;
  c.warm_pool = 0;
  c.max_slots = 8;
  return c;
}

TestHost::~TestHost() {
  // Whatever a failed test or benchmark left running: every slot this helper knows goes down.
  if (jailer_) {
    auto swept = Run(
        [this]() -> boost::asio::awaitable<bool> {
          jailer::v1::Request list;
          list.mutable_list_slots();
          auto r = co_await jailer_->Call(list);
          if (!r || !r->response.ok()) co_return false;
          for (const auto& s : r->response.slots().slots()) {
            jailer::v1::Request destroy;
            destroy.mutable_destroy_slot()->set_slot(s.slot());
            (void)co_await jailer_->Call(destroy);
          }
          co_return true;
        }(),
        std::chrono::seconds(60));
    (void)swept;
  }
  jailer_.reset();
  io_.run_for(std::chrono::milliseconds(10));
  jailer_process_.reset();
  std::error_code ec;
  std::filesystem::remove_all(env_.run_dir, ec);
  std::filesystem::remove_all(env_.state_dir, ec);
}

void TestHost::KillJailer() {
  if (!jailer_process_ || jailer_process_->pid() <= 0) return;
  ::kill(jailer_process_->pid(), SIGKILL);
  ::waitpid(jailer_process_->pid(), nullptr, 0);
}

}  // namespace deskbox::testing
