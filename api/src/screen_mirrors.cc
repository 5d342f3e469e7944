#include "screen_mirrors.h"

#include "common/slot_network.h"

namespace deskbox::api {

namespace asio = boost::asio;
namespace vb = vnc_bridge;
using namespace std::chrono_literals;
using vmhost::SandboxState;

std::shared_ptr<vb::FrameMirror> ScreenMirrors::Get(const std::string& id, uint32_t slot) {
  if (auto it = mirrors_.find(id); it != mirrors_.end()) return it->second;
  // The connector checks, at every (re)connect, that the slot still holds this sandbox: a mirror
  // must never reach the next sandbox to use the slot.
  auto connect = [this, id, slot]() -> asio::awaitable<std::expected<asio::ip::tcp::socket, vb::Error>> {
    auto now = ctx_.manager.Find(id);
    if (!now || now->slot() != slot || now->state() != SandboxState::kRunning)
      co_return std::unexpected(vb::Error{vb::ErrorCode::kClosed, "the sandbox is no longer running"});
    auto s = co_await ctx_.manager.ConnectGuest(slot, slot_network::kGuestRfbPort, 5s);
    if (!s) co_return std::unexpected(ToScreenError(std::move(s.error())));
    co_return std::move(*s);
  };
  auto m = std::make_shared<vb::FrameMirror>(ctx_.executor, std::move(connect), id);
  m->Start();
  return mirrors_.emplace(id, std::move(m)).first->second;
}

std::shared_ptr<vb::FrameMirror> ScreenMirrors::Find(const std::string& id) const {
  auto it = mirrors_.find(id);
  return it == mirrors_.end() ? nullptr : it->second;
}

void ScreenMirrors::Stop(const std::string& id) {
  auto it = mirrors_.find(id);
  if (it == mirrors_.end()) return;
  it->second->SetOnUpdate(nullptr);
  it->second->Stop();
  mirrors_.erase(it);
}

void ScreenMirrors::StopAll() {
  while (!mirrors_.empty()) Stop(mirrors_.begin()->first);
}

void ScreenMirrors::OnSandboxState(const SandboxRecord& r, SandboxState) {
  if (r.state != SandboxState::kRunning) Stop(r.id);
}

}  // namespace deskbox::api
