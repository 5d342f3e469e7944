// deskboxd: the deskbox daemon. Runs unprivileged next to deskbox-jailer (root), serves the REST
// API (api/openapi.yaml) on one io_context thread, keeps its state in <state-dir>/deskbox.db and
// the sandboxes' event logs in <state-dir>/events. SIGTERM/SIGINT stop it; sandboxes keep running
// for the next start to re-adopt, unless --destroy-on-exit. `deskboxd backup` copies the database.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <sys/resource.h>

#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <iostream>

#include "api/config.h"
#include "api/service.h"
#include "api/store.h"
#include "common/log.h"
#include "recorder/log_event_sink.h"
#include "vmhost/jailer_client.h"
#include "vmhost/sandbox_manager.h"
#include "vmhost/template.h"

namespace asio = boost::asio;
using namespace deskbox;

namespace {

// The newest complete template in the cache, or "".
std::string NewestTemplate(const std::string& cache_dir) {
  std::string best;
  std::filesystem::file_time_type newest{};
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(cache_dir + "/templates", ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(".")) continue;
    if (!vmhost::OpenTemplate(e.path().string(), vmhost::VerifyMode::kQuick)) continue;
    auto t = std::filesystem::last_write_time(e.path(), ec);
    if (best.empty() || t > newest) {
      newest = t;
      best = name;
    }
  }
  return best;
}

int Fail(const std::string& m) {
  std::cerr << "deskboxd: " << m << "\n";
  return 1;
}

// `deskboxd backup`: a consistent, checked copy of the state database, while deskboxd runs or not.
int Backup(const std::vector<std::string>& args) {
  auto command = api::ParseBackupCommand(args, api::EnvironmentMap());
  if (!command) {
    std::cerr << "deskboxd: " << command.error() << "\n";
    return 2;
  }
  // As root it could leave the database's -wal/-shm files owned by root, which deskboxd (the
  // user deskbox) then cannot open.
  if (::geteuid() == 0)
    return Fail("backup: refusing to run as root; run it as the user deskboxd runs as (sudo -u deskbox deskboxd "
                "backup ...)");
  std::string db = command->state_dir + "/" + api::kStateDatabase;
  auto r = api::Store::Backup(db, command->to);
  if (!r) return Fail("backup: " + r.error());
  std::printf("%s: a copy of %s (schema version %d, %llu bytes; %llu sandboxes, %llu API keys, %llu tokens; "
              "integrity_check ok)\n",
              command->to.c_str(), db.c_str(), r->schema_version, static_cast<unsigned long long>(r->bytes),
              static_cast<unsigned long long>(r->sandboxes), static_cast<unsigned long long>(r->keys),
              static_cast<unsigned long long>(r->tokens));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "backup") return Backup({args.begin() + 1, args.end()});
  auto parsed = api::ParseConfig(args, api::EnvironmentMap());
  if (!parsed) {
    std::cerr << "deskboxd: " << parsed.error() << "\n";
    return 2;
  }
  if (parsed->help) {
    std::cout << api::Usage();
    return 0;
  }
  api::DaemonConfig config = parsed->config;
  log::SetFormat(config.log_format);
  if (::geteuid() == 0)
    return Fail("refusing to run as root: it parses bytes from guests; run it as an unprivileged user "
                "(scripts/up uses the 'deskbox' user)");
  // Every proxied egress connection holds two descriptors: use all the process may have.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  std::error_code ec;
  std::filesystem::create_directories(config.state_dir + "/events", ec);
  if (ec) return Fail("state dir " + config.state_dir + ": " + ec.message());
  ::chmod(config.state_dir.c_str(), 0700);
  if (config.template_name.empty()) config.template_name = NewestTemplate(config.cache_dir);
  if (config.template_name.empty())
    return Fail("no template in " + config.cache_dir + "/templates: build one with scripts/build-artifacts");

  auto store = api::Store::Open(config.state_dir + "/" + api::kStateDatabase);
  if (!store) return Fail(store.error());
  recorder::LogEventSinkOptions sink_options;
  sink_options.dir = config.state_dir + "/events";
  auto sink = recorder::LogEventSink::Create(sink_options);
  if (!sink) return Fail("event logs: " + sink.error().message);

  asio::io_context io;
  // The jailer may not listen yet, and a socket file may be left from one that was killed:
  // what counts is that it accepts a connection.
  auto jailer = vmhost::JailerClient::Connect(io.get_executor(), config.jailer_socket);
  auto jailer_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(config.jailer_wait_s);
  if (!jailer && config.jailer_wait_s > 0)
    log::Info("deskboxd", "waiting up to {} s for the jailer ({})", config.jailer_wait_s, jailer.error());
  while (!jailer && std::chrono::steady_clock::now() < jailer_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    jailer = vmhost::JailerClient::Connect(io.get_executor(), config.jailer_socket);
  }
  if (!jailer) return Fail(jailer.error());
  vmhost::VmHostConfig vm;
  vm.cache_dir = config.cache_dir;
  vm.template_name = config.template_name;
  vm.accelerator = config.accelerator;
  vm.tb_size_mib = config.tb_size_mib;
  vm.max_concurrent_refreshes = config.browser_refreshes;
  vm.trim_idle_after = std::chrono::seconds(config.trim_idle_after_s);
  vm.trim_regrown_mib = config.trim_regrown_mib;
  vm.max_slots = config.max_sandboxes + config.warm_pool + config.prestart_pool + config.netns_pool;
  vm.warm_pool = config.warm_pool;
  vm.prestart_pool = config.prestart_pool;
  vm.netns_pool = config.netns_pool;
  vmhost::SandboxManager manager(io.get_executor(), **jailer, vm);
  if (auto l = manager.Load(); !l) return Fail(l.error().message);

  api::ApiService service(io.get_executor(), manager, **store, **sink, config);
  auto key = service.Load();
  if (!key) return Fail(key.error());
  api::HttpServer server(io.get_executor(), [&service](api::Exchange& ex) { return service.Handle(ex); });
  auto bound = server.Listen(config.listen_host, config.listen_port);
  if (!bound) return Fail(bound.error());

  int exit_code = 0;
  bool stopping = false;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code e, int sig) {
    if (e || stopping) return;
    stopping = true;
    log::Info("deskboxd", "signal {}: stopping ({})", sig,
              config.destroy_on_exit ? "destroying sandboxes" : "sandboxes keep running for the next start");
    server.Stop();
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      co_await service.Shutdown();
      io.stop();
    }, asio::detached);
  });
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    co_await service.Recover();
    server.Start();
    std::string url = fmt::format("http://{}:{}", bound->address().is_v6() ? "[" + bound->address().to_string() + "]"
                                                                           : bound->address().to_string(),
                                  bound->port());
    log::Info("deskboxd", "listening on {} (template {}, accelerator {})", url, config.template_name,
              manager.accelerator());
    if (*key) {
      std::printf("\nA new API key was generated (shown once; also in %s/api-key, mode 0600):\n\n  %s\n\n",
                  config.state_dir.c_str(), (*key)->c_str());
    }
    std::printf("deskboxd is listening on %s\n", url.c_str());
    std::fflush(stdout);
  }, asio::detached);
  io.run();
  return exit_code;
}
