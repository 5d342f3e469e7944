#pragma once
// FakeSandboxHost: vmhost's face to the API (SandboxHost) without QEMU, a jailer or a guest, for
// the API's route tests. Sandboxes are records that change state as asked; egress sockets are
// real sockets on 127.0.0.1; a guest's services (its screen, its browser) are whatever listens
// on the loopback port a test maps the guest port to; a test can fail the next call of a kind,
// hold a pause or resume in flight, or make a VM "exit".
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <mutex>
#include <set>

#include "fake_guest_agent.h"
#include "vmhost/sandbox_host.h"

namespace deskbox::api {

// A sandbox record as the fake host keeps it: vmhost's Sandbox, which only its host changes.
class FakeSandbox final : public vmhost::Sandbox {
 public:
  FakeSandbox(std::string id, uint32_t slot, int qemu_pid, vmhost::SandboxState state) {
    id_ = std::move(id);
    slot_ = slot;
    qemu_pid_ = qemu_pid;
    state_ = state;
    path_ = vmhost::CreatePath::kWarm;
  }
  void SetState(vmhost::SandboxState state) { state_ = state; }
  void SetFailure(std::string why) { failure_ = std::move(why); }
};

class FakeSandboxHost final : public vmhost::SandboxHost {
 public:
  using VmError = vmhost::VmError;
  using Sandbox = vmhost::Sandbox;
  using State = vmhost::SandboxState;

  FakeSandboxHost() {
    manifest_.set_screen_width(1280);
    manifest_.set_screen_height(800);
    manifest_.set_memory_mib(2048);
    manifest_.set_smp(2);
    manifest_.set_qemu_version("10.0.0");
    manifest_.set_chromium_version("Chrome/156.0.0.0");
    manifest_.set_created_unix_s(1'700'000'000);
  }

  // Test controls; call them on the server's thread.
  std::optional<VmError> fail_next_create, fail_next_pause, fail_next_resume, fail_next_egress, fail_next_limits;
  std::map<std::string, vmhost::CpuLimits> cpu_limits;  // what SetCpuLimits last set, by id
  std::set<std::string> adopt;  // ids Recover adopts (running); the rest are lost
  std::vector<std::string> calls;
  // Each sandbox's guest agent, made with it; erase one to take the sandbox's agent away.
  std::map<std::string, std::shared_ptr<vmhost::testing::FakeGuestAgent>> agents;
  // Scripts each agent as it is made.
  std::function<void(vmhost::testing::FakeGuestAgent&)> on_agent;
  // The guest's services: guest port (slot_network::kGuestRfbPort, kGuestCdpPort) → the port on
  // 127.0.0.1 where a fake of it listens. ConnectGuest to a port not mapped fails as a guest
  // with nothing listening does; `fail_connect` fails every ConnectGuest with its error.
  std::map<uint16_t, uint16_t> guest_ports;
  std::optional<VmError> fail_connect;
  // Every WaitBrowserFresh fails with it (the pages of a restored sandbox still reloading).
  std::optional<VmError> fail_browser_fresh;
  // The next Pause / Resume waits in flight until ReleaseHeld() (a delete may come meanwhile).
  bool hold_next_pause = false, hold_next_resume = false;
  bool holding() const { return held_ != nullptr; }
  void ReleaseHeld() {
    if (held_) held_->cancel();
  }
  // Whether the API holds live connections (CDP sessions, viewers) to the sandbox (SetInUse).
  bool InUse(const std::string& id) const { return in_use_ && in_use_(id); }
  // The VM of `id` exits: failed, as vmhost reports it.
  void Exit(const std::string& id, std::string why) {
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return;
    auto sb = it->second;
    State from = sb->state();
    sb->SetState(State::kFailed);
    sb->SetFailure(std::move(why));
    sandboxes_.erase(id);
    if (observer_) observer_(*sb, from);
  }
  size_t alive() const { return sandboxes_.size(); }

  void SetObserver(vmhost::TransitionObserver o) override { observer_ = std::move(o); }
  void SetBrowserObserver(vmhost::BrowserObserver o) override { browser_observer_ = std::move(o); }
  void SetInUse(vmhost::InUse in_use) override { in_use_ = std::move(in_use); }

  boost::asio::awaitable<std::vector<vmhost::AdoptResult>> Recover(
      std::vector<vmhost::AdoptRequest> wanted) override {
    calls.push_back("recover");
    std::vector<vmhost::AdoptResult> out;
    for (const auto& w : wanted) {
      if (!adopt.count(w.id)) {
        out.push_back({w.id, false, State::kFailed, "its QEMU is gone"});
        continue;
      }
      sandboxes_[w.id] = std::make_shared<FakeSandbox>(w.id, w.slot, w.qemu_pid, State::kRunning);
      MakeAgent(w.id);
      out.push_back({w.id, true, State::kRunning, ""});
    }
    co_return out;
  }

  boost::asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> Create() override {
    calls.push_back("create");
    if (fail_next_create) co_return std::unexpected(*std::exchange(fail_next_create, std::nullopt));
    ++next_;
    auto sb = std::make_shared<FakeSandbox>(fmt::format("sb-{:016x}", next_),
                                            static_cast<uint32_t>(next_),
                                            10000 + static_cast<int>(next_), State::kRunning);
    sandboxes_[sb->id()] = sb;
    MakeAgent(sb->id());
    co_return std::shared_ptr<Sandbox>(sb);
  }
  boost::asio::awaitable<std::expected<void, VmError>> WaitBrowserFresh(std::shared_ptr<Sandbox>,
                                                                        std::chrono::milliseconds) override {
    if (fail_browser_fresh) co_return std::unexpected(*fail_browser_fresh);
    co_return std::expected<void, VmError>{};
  }
  boost::asio::awaitable<std::expected<void, VmError>> Destroy(const std::string& id) override {
    calls.push_back("destroy " + id);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end())
      co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
    auto sb = it->second;
    State from = sb->state();
    sb->SetState(State::kStopped);
    sandboxes_.erase(id);
    if (observer_) observer_(*sb, from);
    co_return std::expected<void, VmError>{};
  }
  boost::asio::awaitable<std::expected<void, VmError>> Pause(const std::string& id) override {
    calls.push_back("pause " + id);
    if (std::exchange(hold_next_pause, false)) co_await Hold();
    co_return Move(id, State::kRunning, State::kPaused, fail_next_pause);
  }
  boost::asio::awaitable<std::expected<void, VmError>> Resume(const std::string& id) override {
    calls.push_back("resume " + id);
    if (std::exchange(hold_next_resume, false)) co_await Hold();
    co_return Move(id, State::kPaused, State::kRunning, fail_next_resume);
  }
  boost::asio::awaitable<std::expected<void, VmError>> SetCpuLimits(const std::string& id,
                                                                    vmhost::CpuLimits limits) override {
    calls.push_back(fmt::format("cpu {} {} {}", id, limits.weight, limits.max_millis));
    if (fail_next_limits) co_return std::unexpected(*std::exchange(fail_next_limits, std::nullopt));
    if (!Find(id)) co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
    cpu_limits[id] = limits;
    co_return std::expected<void, VmError>{};
  }
  std::shared_ptr<Sandbox> Find(const std::string& id) const override {
    auto it = sandboxes_.find(id);
    return it == sandboxes_.end() ? nullptr : it->second;
  }
  std::shared_ptr<vmhost::GuestAgent> Agent(const std::string& id) const override {
    auto it = agents.find(id);
    return Find(id) && it != agents.end() ? it->second : nullptr;
  }
  vmhost::PoolStats Stats() const override {
    vmhost::PoolStats s;
    s.sandboxes = sandboxes_.size();
    return s;
  }
  boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, VmError>> ConnectGuest(
      uint32_t, uint16_t port, std::chrono::milliseconds) override {
    if (fail_connect) co_return std::unexpected(*fail_connect);
    auto it = guest_ports.find(port);
    if (it == guest_ports.end())
      co_return std::unexpected(VmError{VmError::Code::kGuest, fmt::format("no guest listens on {} here", port)});
    boost::asio::ip::tcp::socket s(co_await boost::asio::this_coro::executor);
    boost::system::error_code ec;
    co_await s.async_connect({boost::asio::ip::make_address("127.0.0.1"), it->second},
                             boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    if (ec)
      co_return std::unexpected(
          VmError{VmError::Code::kGuest, fmt::format("guest port {}: {}", port, ec.message())});
    co_return std::move(s);
  }
  boost::asio::awaitable<std::expected<std::map<std::string, UniqueFd>, VmError>> OpenEgressSockets(
      uint32_t) override {
    if (fail_next_egress) co_return std::unexpected(*std::exchange(fail_next_egress, std::nullopt));
    std::map<std::string, UniqueFd> fds;
    fds["tcp4"] = Loopback(SOCK_STREAM);
    fds["udp4"] = Loopback(SOCK_DGRAM);
    co_return fds;
  }
  boost::asio::awaitable<std::expected<std::vector<UniqueFd>, VmError>> OpenUplinkSockets(bool ipv6, bool udp,
                                                                                          unsigned count) override {
    std::vector<UniqueFd> out;
    for (unsigned i = 0; i < count; ++i)
      out.emplace_back(::socket(ipv6 ? AF_INET6 : AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0));
    co_return out;
  }
  boost::asio::awaitable<void> Shutdown(bool) override {
    calls.push_back("shutdown");
    co_return;
  }
  const vmhost::v1::TemplateManifest& manifest() const override { return manifest_; }
  const std::string& accelerator() const override { return accelerator_; }

 private:
  void MakeAgent(const std::string& id) {
    auto agent = std::make_shared<vmhost::testing::FakeGuestAgent>();
    if (on_agent) on_agent(*agent);
    agents[id] = std::move(agent);
  }
  boost::asio::awaitable<void> Hold() {
    held_ = std::make_shared<boost::asio::steady_timer>(co_await boost::asio::this_coro::executor,
                                                        boost::asio::steady_timer::time_point::max());
    auto held = held_;
    boost::system::error_code ec;
    co_await held->async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    if (held_ == held) held_.reset();
  }
  std::expected<void, VmError> Move(const std::string& id, State from, State to, std::optional<VmError>& fail) {
    if (fail) return std::unexpected(*std::exchange(fail, std::nullopt));
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end())
      return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
    auto sb = it->second;
    if (sb->state() != from)
      return std::unexpected(VmError{VmError::Code::kInvalidState, fmt::format("sandbox {} is {}", id,
                                                                               vmhost::ToString(sb->state()))});
    sb->SetState(to);
    if (observer_) observer_(*sb, from);
    return {};
  }
  // A socket on 127.0.0.1 (TCP listening), as the egress proxy's would be in a netns.
  static UniqueFd Loopback(int type) {
    UniqueFd fd(::socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (type == SOCK_STREAM) (void)::listen(fd.get(), 16);
    return fd;
  }

  vmhost::v1::TemplateManifest manifest_;
  std::string accelerator_ = "tcg";
  std::map<std::string, std::shared_ptr<FakeSandbox>> sandboxes_;
  uint64_t next_ = 0;
  vmhost::TransitionObserver observer_;
  vmhost::BrowserObserver browser_observer_;
  vmhost::InUse in_use_;
  std::shared_ptr<boost::asio::steady_timer> held_;
};

}  // namespace deskbox::api
