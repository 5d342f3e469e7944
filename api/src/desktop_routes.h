#pragma once
// DesktopRoutes: the screen (vnc-bridge) — screenshots from the sandbox's screen mirror, actions
// with settle detection, the pointer position, and the model tool adapters (Anthropic, OpenAI
// computer-use calls as they come). The mirrors are ScreenMirrors': one per running sandbox,
// shared with the screen recorder.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "api_context.h"
#include "screen_mirrors.h"
#include "computer_use/display.h"
#include "vnc_bridge/input.h"
#include "vnc_bridge/mirror.h"

namespace deskbox::api {

class DesktopRoutes final {
 public:
  DesktopRoutes(ApiContext& ctx, ScreenMirrors& mirrors) : ctx_(ctx), mirrors_(mirrors) {}
  void Register(Router& router);

 private:
  Reply Screenshot(Call& c);
  Reply Actions(Call& c);
  Reply Cursor(Call& c);
  Reply ComputerAnthropic(Call& c);
  Reply ComputerOpenAi(Call& c);

  // The sandbox's screen mirror, started on first use.
  boost::asio::awaitable<std::expected<std::shared_ptr<vnc_bridge::FrameMirror>, HttpResponse>>
  ReadyMirror(const std::string& id);
  // The display a call works in: its own `display` (`asked`), else the one declared for the
  // sandbox (create or PATCH), else none (the screen's size).
  std::optional<computer_use::DisplaySize> EffectiveDisplay(
      const std::string& id, const std::optional<computer_use::DisplaySize>& asked) const;
  // Types text in sandbox `id`: keysyms, and for the characters beyond them the focused
  // window's text entry (computer_use/typing.h says which and why).
  boost::asio::awaitable<std::expected<void, std::string>> TypeText(
      const std::string& id, vnc_bridge::FrameMirror& m, const std::u32string& text);
  // Runs the guest's deskbox-x11 with `args` (its stdin `stdin_data`) through the agent: its
  // stdout, or why not, starting with `what`.
  boost::asio::awaitable<std::expected<std::string, std::string>> RunX11Helper(
      const std::string& id, std::string_view what, std::vector<std::string> args,
      std::string stdin_data, std::chrono::seconds timeout);
  // The WM_CLASS class of the guest's focused window ("" when none has the focus).
  boost::asio::awaitable<std::expected<std::string, std::string>> FocusedWindowClass(
      const std::string& id);
  // Pastes `utf8` into the focused window through PRIMARY and Shift+Insert; returns once the
  // window has read it (the guest's deskbox-x11), PRIMARY holding again what it held before.
  boost::asio::awaitable<std::expected<void, std::string>> PastePrimary(const std::string& id,
                                                                        vnc_bridge::FrameMirror& m,
                                                                        const std::string& utf8);
  // A key action: its combos in order, a lone character beyond ASCII typed instead.
  boost::asio::awaitable<std::expected<void, std::string>> PressKeys(
      const std::string& id, vnc_bridge::FrameMirror& m, const vnc_bridge::Action& action);
  struct StepOutcome {
    size_t performed = 0;
    vnc_bridge::SettleResult settled;
    std::string failure;  // why an action could not be performed (the rest were not)
  };
  // Performs `actions` on the mirror in order, settles once after the last, writes one action
  // event per performed action (with `params[i]`, or `params` itself when not a list).
  boost::asio::awaitable<StepOutcome> PerformStep(
      Call& c, vnc_bridge::FrameMirror& m, const std::vector<vnc_bridge::Action>& actions,
      const nlohmann::json& params, const std::optional<vnc_bridge::SettleOptions>& settle);

  ApiContext& ctx_;
  ScreenMirrors& mirrors_;
};

}  // namespace deskbox::api
