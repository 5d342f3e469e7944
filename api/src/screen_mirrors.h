#pragma once
// ScreenMirrors: the one screen mirror (vnc_bridge::FrameMirror) of each running sandbox, shared
// by the desktop routes (screenshots, actions) and the screen recorder. A mirror is started by
// its first user and stopped when the sandbox leaves the running state.
//
// Threads: the io_context's.
#include <map>
#include <memory>
#include <string>

#include "api_context.h"
#include "vnc_bridge/mirror.h"

namespace deskbox::api {

class ScreenMirrors final : public SandboxStateListener {
 public:
  explicit ScreenMirrors(ApiContext& ctx) : ctx_(ctx) {}
  ~ScreenMirrors() { StopAll(); }

  // The mirror of sandbox `id`, which runs in `slot`, started if it has none. The caller has
  // checked that the sandbox is running; the mirror's connector checks it again at every
  // (re)connect.
  std::shared_ptr<vnc_bridge::FrameMirror> Get(const std::string& id, uint32_t slot);
  std::shared_ptr<vnc_bridge::FrameMirror> Find(const std::string& id) const;
  void Stop(const std::string& id);
  void StopAll();

  void OnSandboxState(const SandboxRecord& r, vmhost::SandboxState from) override;

 private:
  ApiContext& ctx_;
  std::map<std::string, std::shared_ptr<vnc_bridge::FrameMirror>> mirrors_;
};

}  // namespace deskbox::api
