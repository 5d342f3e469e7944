// The desktop endpoints (vnc-bridge): screenshots from the sandbox's screen mirror, actions with
// settle detection, the pointer position. The coordinate contract: a call may declare the
// display size its model works in (`display`); screenshots are scaled to it and every
// coordinate the call gives is mapped back to the screen.
#include "desktop_routes.h"

#include <fmt/format.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "api/json_input.h"
#include "common/base64.h"
#include "common/log.h"
#include "common/slot_network.h"
#include "computer_use/actions.h"
#include "computer_use/anthropic.h"
#include "computer_use/openai.h"
#include "computer_use/query.h"
#include "computer_use/typing.h"
#include "vnc_bridge/image.h"
#include "vnc_bridge/input.h"
#include "vnc_bridge/keys.h"

namespace deskbox::api {

namespace asio = boost::asio;
using nlohmann::json;
using namespace std::chrono_literals;
using vmhost::SandboxState;
namespace vb = vnc_bridge;
namespace cu = computer_use;

namespace {

constexpr auto kMirrorReadyTimeout = 20s;
// How long a paste's text stays on the guest's clipboard before the next paste may replace it.
constexpr auto kPasteHold = 600ms;

// The declared display (or the screen's own size) over the mirror's screen as it is now. The
// screen size is copied: the framebuffer is replaced if the connection is re-made meanwhile.
cu::Display DisplayOf(const std::optional<cu::DisplaySize>& display, const vb::Framebuffer& fb) {
  return cu::DisplayOver(display, fb.width, fb.height);
}

// The mirror still shows the screen `d` was made for (not lost or resized during the actions).
bool SameScreen(const vb::FrameMirror& m, const cu::Display& d) {
  return m.ready() && m.framebuffer().width == d.screen_w && m.framebuffer().height == d.screen_h;
}

HttpResponse BadRequest(const cu::Error& e) { return Error(400, "invalid_request", e.message); }

}  // namespace

std::optional<std::pair<uint32_t, uint32_t>> ReadDisplayMember(ObjectReader& in) {
  const json* d = in.Any("display");
  if (!d) return std::nullopt;
  auto size = cu::ParseDisplay(*d);
  if (!size) {
    in.Fail(size.error().message);
    return std::nullopt;
  }
  return std::pair{size->width, size->height};
}

std::optional<cu::DisplaySize> DesktopRoutes::EffectiveDisplay(
    const std::string& id, const std::optional<cu::DisplaySize>& asked) const {
  if (asked) return asked;
  const SandboxRecord* r = ctx_.sandboxes.Find(id);
  if (!r || !r->display_w || !r->display_h) return std::nullopt;
  return cu::DisplaySize{r->display_w, r->display_h};
}

namespace {

// The screen in the image asked for: its size (ImageSize) and format.
struct EncodedImage {
  std::string bytes;
  cu::DisplaySize size;
};
std::expected<EncodedImage, vb::Error> Encode(const vb::Framebuffer& fb,
                                              const cu::ImageRequest& req, const cu::Display& d) {
  auto want = cu::ImageSize(req, d);
  auto img = vb::Render(fb, {}, want.width, want.height);
  if (!img) return std::unexpected(std::move(img.error()));
  auto bytes = req.format == cu::ImageFormat::kPng ? vb::EncodePng(*img)
                                                   : vb::EncodeJpeg(*img, req.quality);
  if (!bytes) return std::unexpected(std::move(bytes.error()));
  return EncodedImage{std::move(*bytes), {img->width, img->height}};
}

// vb::Perform with its error as the message deskboxd answers: the steps of typing and pasting
// below report their own failures as such messages too.
asio::awaitable<std::expected<void, std::string>> PerformAction(vb::FrameMirror& m,
                                                                const vb::Action& a) {
  auto r = co_await vb::Perform(m, a);
  if (!r) co_return std::unexpected(std::move(r.error().message));
  co_return std::expected<void, std::string>{};
}

}  // namespace

void DesktopRoutes::Register(Router& router) {
  using S = Scope;
  auto add = [&](boost::beast::http::verb m, const char* pattern, std::vector<Scope> scopes,
                 Reply (DesktopRoutes::*h)(Call&)) {
    router.Add({.method = m,
                .pattern = pattern,
                .access = Access::Tokens(std::move(scopes)),
                .handler = [this, h](Call& c) { return (this->*h)(c); }});
  };
  using boost::beast::http::verb;
  add(verb::get, "/v1/sandboxes/{id}/screenshot", {S::kView, S::kControl},
      &DesktopRoutes::Screenshot);
  add(verb::post, "/v1/sandboxes/{id}/actions", {S::kControl}, &DesktopRoutes::Actions);
  add(verb::get, "/v1/sandboxes/{id}/cursor", {S::kView, S::kControl}, &DesktopRoutes::Cursor);
  add(verb::post, "/v1/sandboxes/{id}/computer/anthropic", {S::kControl},
      &DesktopRoutes::ComputerAnthropic);
  add(verb::post, "/v1/sandboxes/{id}/computer/openai", {S::kControl},
      &DesktopRoutes::ComputerOpenAi);
}

void DesktopRoutes::OnSandboxState(const SandboxRecord& r, SandboxState) {
  if (r.state != SandboxState::kRunning) last_paste_.erase(r.id);
}

asio::awaitable<std::expected<std::shared_ptr<vb::FrameMirror>, HttpResponse>>
DesktopRoutes::ReadyMirror(const std::string& id) {
  using R = std::expected<std::shared_ptr<vb::FrameMirror>, HttpResponse>;
  if (auto op = ctx_.sandboxes.BeginGuestOperation(id, "screen"); !op)
    co_return R(std::unexpected(op.error()));
  auto sb = ctx_.manager.Find(id);
  if (!sb || sb->state() != SandboxState::kRunning)
    co_return R(
        std::unexpected(Error(409, "invalid_state", fmt::format("sandbox {} is not running", id))));
  auto mirror = mirrors_.Get(id, sb->slot());
  // The screen of a sandbox whose pages still reload after its restore is not what the caller
  // asked for; the mirror connects meanwhile.
  if (auto fresh = co_await ctx_.manager.WaitBrowserFresh(sb, kBrowserFreshTimeout); !fresh) {
    if (sb->state() != SandboxState::kRunning)
      co_return R(
          std::unexpected(Error(409, "invalid_state",
                                fmt::format("sandbox {} is {}: {}", id, vmhost::ToString(sb->state()),
                                            fresh.error().message))));
    co_return R(std::unexpected(Error(504, "guest_timeout", fresh.error().message)));
  }
  auto ready = co_await mirror->WaitReady(kMirrorReadyTimeout);
  if (!ready) {
    if (mirror->stopped())
      co_return R(std::unexpected(
          Error(409, "invalid_state", fmt::format("sandbox {} stopped running", id))));
    co_return R(std::unexpected(
        Error(504, "guest_timeout", "the sandbox's screen: " + ready.error().message)));
  }
  co_return R(std::move(mirror));
}

Reply DesktopRoutes::Screenshot(Call& c) {
  auto query = cu::ParseScreenshotQuery(c.ex.query());
  if (!query) co_return BadRequest(query.error());
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "screenshot");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  const auto& fb = (*mirror)->framebuffer();
  cu::Display d = DisplayOf(EffectiveDisplay(c.id, query->display), fb);
  auto image = Encode(fb, query->image, d);
  if (!image) co_return Error(500, "internal", "encoding the screenshot: " + image.error().message);
  HttpResponse r;
  r.content_type = std::string(cu::MediaType(query->image.format));
  r.body = std::move(image->bytes);
  r.headers.emplace_back("X-Screen-Width", std::to_string(fb.width));
  r.headers.emplace_back("X-Screen-Height", std::to_string(fb.height));
  r.headers.emplace_back("X-Image-Width", std::to_string(image->size.width));
  r.headers.emplace_back("X-Image-Height", std::to_string(image->size.height));
  r.headers.emplace_back("X-Frame-Seq", std::to_string((*mirror)->seq()));
  co_return r;
}

Reply DesktopRoutes::Cursor(Call& c) {
  auto display = cu::ParseCursorQuery(c.ex.query());
  if (!display) co_return BadRequest(display.error());
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "cursor read");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  const auto& fb = (*mirror)->framebuffer();
  cu::Display d = DisplayOf(EffectiveDisplay(c.id, *display), fb);
  auto p = d.ToDisplay((*mirror)->pointer());
  co_return Json(200, json{{"x", p.x},
                           {"y", p.y},
                           {"screen", {{"width", fb.width}, {"height", fb.height}}},
                           {"display", d.ToJson()}});
}

asio::awaitable<std::expected<void, std::string>> DesktopRoutes::TypeText(
    const std::string& id, vb::FrameMirror& m, const std::u32string& text) {
  // Runs of keysyms and of pasted text (computer_use/typing.h says which and why).
  for (const auto& run : cu::SplitForTyping(text)) {
    std::expected<void, std::string> r;
    if (run.route == cu::TypingRun::Route::kKeysyms) {
      vb::Action a;
      a.type = vb::Action::Type::kType;
      a.text = run.text;
      r = co_await PerformAction(m, a);
    } else {
      r = co_await Paste(id, m, cu::EncodeUtf8(run.text));
    }
    if (!r) co_return r;
  }
  co_return std::expected<void, std::string>{};
}

asio::awaitable<std::expected<void, std::string>> DesktopRoutes::Paste(const std::string& id,
                                                                         vb::FrameMirror& m,
                                                                         const std::string& utf8) {
  auto agent = ctx_.manager.Agent(id);
  if (!agent)
    co_return std::unexpected(
        std::string("pasting text: the sandbox has no guest agent connection"));
  // Chromium reads the clipboard after a ctrl+v when its event loop gets to it, and reads it
  // twice. A next paste that replaces the clipboard before then made the earlier one insert
  // nothing ("x é y 世" typed as "xy世" in CI runs with Chromium 156.0.8078.114): give the
  // previous paste of this sandbox time to be read first.
  if (auto last = last_paste_.find(id); last != last_paste_.end()) {
    auto ready = last->second + kPasteHold;
    if (ready > vb::FrameMirror::Clock::now()) {
      asio::steady_timer hold(co_await asio::this_coro::executor, ready);
      boost::system::error_code ec;
      co_await hold.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }
  // Where the screen stood before the clipboard changes, for the wait before ctrl+v below.
  const uint64_t seq_before_clipboard = m.seq();
  const auto clipboard_time = vb::FrameMirror::Clock::now();
  if (auto set = co_await agent->SetClipboard(utf8); !set)
    co_return std::unexpected("pasting text: setting the clipboard: " + set.error().message);
  // xclip returns before its background process owns the selection: until then ctrl+v gets
  // the previous owner's text, or nothing while that owner is giving it up (a CI run lost a
  // pasted "ß" so). Paste once the clipboard reads back as this text.
  auto clipboard_holds_text = [&]() -> asio::awaitable<std::expected<void, std::string>> {
    for (int attempt = 0;; ++attempt) {
      auto now = co_await agent->GetClipboard();
      if (now && *now == utf8) break;
      if (attempt >= 50)
        co_return std::unexpected(
            std::string("pasting text: the guest's clipboard did not take the text"));
      asio::steady_timer pause(co_await asio::this_coro::executor, 20ms);
      boost::system::error_code ec;
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return std::expected<void, std::string>{};
  };
  // The next paste must not replace the clipboard before the application has read it, and
  // Chromium reads it twice: for the paste event, then again to insert the text. So ctrl+v
  // waits until what was typed before it has been drawn, and after ctrl+v the screen must
  // change and then be still for 150 ms, every update counting, even a single glyph. Before,
  // the late drawing of the key typed just before ctrl+v passed for the paste's own, the
  // next run replaced the clipboard between Chromium's two reads, and the paste event fired
  // with the text but nothing was inserted (one run in two of "x é y U+4E16" lost the "é").
  auto every_update_counts = [](std::chrono::milliseconds quiet,
                                std::chrono::milliseconds no_change,
                                std::chrono::milliseconds timeout) {
    vb::SettleOptions o;
    o.quiet = quiet;
    o.no_change = no_change;
    o.timeout = timeout;
    o.small_area = 0;
    o.small_side = 0;
    return o;
  };
  co_await m.Settle(seq_before_clipboard, clipboard_time, every_update_counts(120ms, 250ms, 2s));
  const vb::SettleOptions o = every_update_counts(150ms, 3s, 3s);
  // A ctrl+v after which nothing at all changed on the screen for 3 s is taken to have pasted
  // nothing, and is pressed once more; twice nothing means the focused window takes no text.
  // (This second press is a safeguard only: the lost "é" above was the clipboard changing
  // between Chromium's two reads, which the wait before ctrl+v ends.)
  for (int press = 0; press < 2; ++press) {
    if (auto h = co_await clipboard_holds_text(); !h) co_return h;
    uint64_t before = m.seq();
    auto t0 = vb::FrameMirror::Clock::now();
    vb::Action paste_key;
    paste_key.type = vb::Action::Type::kKey;
    paste_key.keys = {{vb::kKeysymControlL, 'v'}};
    if (auto k = co_await PerformAction(m, paste_key); !k) co_return k;
    last_paste_[id] = vb::FrameMirror::Clock::now();
    auto settled = co_await m.Settle(before, t0, o);
    if (settled.changed) break;
    if (press == 0)
      log::Warn("api",
                "sandbox {}: nothing changed on the screen 3 s after pasting {} bytes of text; "
                "pasting again",
                id, utf8.size());
  }
  co_return std::expected<void, std::string>{};
}

asio::awaitable<std::expected<void, std::string>> DesktopRoutes::PressKeys(
    const std::string& id, vb::FrameMirror& m, const vb::Action& action) {
  // Combos in order; a lone character beyond ASCII is typed (computer_use/typing.h).
  for (const auto& step : cu::SplitKeyCombos(action.keys)) {
    std::expected<void, std::string> r;
    if (step.route == cu::KeyStep::Route::kPress) {
      vb::Action batch = action;
      batch.keys = step.combos;
      r = co_await PerformAction(m, batch);
    } else {
      r = co_await TypeText(id, m, std::u32string(1, step.character));
    }
    if (!r) co_return r;
  }
  co_return std::expected<void, std::string>{};
}

asio::awaitable<DesktopRoutes::StepOutcome> DesktopRoutes::PerformStep(
    Call& c, vb::FrameMirror& m, const std::vector<vb::Action>& actions, const json& params,
    const std::optional<vb::SettleOptions>& settle) {
  // Perform in order; settle once, after the last.
  StepOutcome out;
  auto start = vb::FrameMirror::Clock::now();
  struct Done {
    size_t index;
    uint64_t seq;
    std::chrono::milliseconds took;
  };
  std::vector<Done> done;
  uint64_t before_last = m.seq();
  vb::FrameMirror::Clock::time_point last_input = start;
  for (size_t i = 0; i < actions.size(); ++i) {
    auto t0 = vb::FrameMirror::Clock::now();
    before_last = m.seq();
    last_input = t0;
    // No co_await inside a conditional expression: GCC 12 ran both of a nested one's operands.
    std::expected<void, std::string> r;
    if (actions[i].type == vb::Action::Type::kType)
      r = co_await TypeText(c.id, m, actions[i].text);
    else if (actions[i].type == vb::Action::Type::kKey)
      r = co_await PressKeys(c.id, m, actions[i]);
    else
      r = co_await PerformAction(m, actions[i]);
    if (!r) {
      out.failure =
          fmt::format("actions[{}] ({}): {}", i, vb::ToString(actions[i].type), r.error());
      break;
    }
    done.push_back({i, m.seq(),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        vb::FrameMirror::Clock::now() - t0)});
  }
  out.performed = done.size();
  if (out.failure.empty() && settle) {
    // The quiet period starts after the last action (a trailing wait is part of the step).
    out.settled = co_await m.Settle(before_last, last_input, *settle);
  } else {
    out.settled.seq = m.seq();
  }
  // Timeline: one event per action performed, with the frame it led to. `params` holds what the
  // caller sent for each action (one entry per action, or one object for all).
  for (const auto& a : done) {
    auto e = c.NewEvent(c.id);
    auto* ev = e.mutable_action();
    ev->set_type(vb::ToString(actions[a.index].type));
    ev->set_params_json(
        Dump(params.is_array() && a.index < params.size() ? params[a.index] : params));
    bool last = a.index + 1 == actions.size();
    ev->set_frame_seq(last ? out.settled.seq : a.seq);
    // The last action's event is dated when the frame it led to arrived, so that it lines up
    // with that frame in the screen recording (whose frames are dated on arrival too).
    if (last && out.settled.changed)
      if (auto at = m.UpdateTime(out.settled.seq)) {
        auto ago = vb::FrameMirror::Clock::now() - *at;
        e.set_time_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               (std::chrono::system_clock::now() - ago).time_since_epoch())
                               .count());
      }
    ev->set_settled(last && out.settled.settled);
    ev->set_duration_ms(
        static_cast<uint32_t>((last ? out.settled.waited + a.took : a.took).count()));
    ctx_.events.Emit(std::move(e));
  }
  co_return out;
}

Reply DesktopRoutes::Actions(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  // The screen size is needed to map coordinates: the envelope first, then connect.
  auto request = cu::ParseActionsRequest(*body);
  if (!request) co_return BadRequest(request.error());
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "actions");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  auto m = *mirror;
  cu::Display d = DisplayOf(EffectiveDisplay(c.id, request->display), m->framebuffer());
  auto actions = cu::ParseActions(request->actions, d);
  if (!actions) co_return BadRequest(actions.error());
  const auto& settle = request->settle;
  auto step = co_await PerformStep(c, *m, *actions, request->actions, settle);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!step.failure.empty()) {
    auto code = m->ready() ? 500 : 502;
    co_return Error(code, code == 502 ? "guest_error" : "internal",
                    fmt::format("{} ({} of {} actions were performed)", step.failure,
                                step.performed, actions->size()));
  }
  const auto& settled = step.settled;
  json out = {
      {"performed", step.performed},
      {"frame_seq", settled.seq},
      {"settled", settle ? settled.settled : false},
      {"changed", settled.changed},
      {"waited_ms", settled.waited.count()},
      {"first_change_ms",
       settled.first_change.count() >= 0 ? json(settled.first_change.count()) : json(nullptr)},
      {"screen", {{"width", d.screen_w}, {"height", d.screen_h}}},
      {"display", d.ToJson()},
  };
  auto p = d.ToDisplay(m->pointer());
  out["cursor"] = {{"x", p.x}, {"y", p.y}};
  if (const auto& shot = request->screenshot) {
    if (!SameScreen(*m, d))
      co_return Error(502, "guest_error",
                      "the sandbox's screen was lost or resized during the actions");
    auto image = Encode(m->framebuffer(), *shot, d);
    if (!image)
      co_return Error(500, "internal", "encoding the screenshot: " + image.error().message);
    out["screenshot"] = {{"format", cu::ToString(shot->format)},
                         {"width", image->size.width},
                         {"height", image->size.height},
                         {"data", Base64Encode(image->bytes)}};
  }
  co_return Json(200, out);
}

// Model tool adapters: the tool calls computer-use models emit, as they come (computer_use/
// anthropic.h and openai.h read them).

Reply DesktopRoutes::ComputerAnthropic(Call& c) {
  auto query = cu::ParseAdapterQuery(c.ex.query());
  if (!query) co_return BadRequest(query.error());
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  auto call = cu::ParseAnthropicCall(*body);
  if (!call) co_return BadRequest(call.error());
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "computer action");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  auto m = *mirror;
  cu::Display d = DisplayOf(EffectiveDisplay(c.id, query->display), m->framebuffer());
  // A call the model got wrong is answered as a tool_result with is_error, for the loop to hand
  // back to the model, not as an HTTP error of the loop's own.
  auto step = cu::ParseAnthropic(call->input, d);
  if (!step)
    co_return Json(200, cu::AnthropicTextResult(step.error().message, true, call->tool_use_id));
  if (step->cursor_position)
    co_return Json(200, cu::AnthropicCursorResult(d.ToDisplay(m->pointer()), call->tool_use_id));
  if (!step->actions.empty()) {
    std::optional<vb::SettleOptions> settle;
    if (step->actions.back().type != vb::Action::Type::kWait) settle = vb::SettleOptions{};
    auto out = co_await PerformStep(c, *m, step->actions, call->input, settle);
    if (auto gone = op->Interrupted()) co_return *gone;
    if (!out.failure.empty())
      co_return Json(200, cu::AnthropicTextResult(out.failure, true, call->tool_use_id));
  }
  if (!SameScreen(*m, d))
    co_return Error(502, "guest_error",
                    "the sandbox's screen was lost or resized during the action");
  // The screen after the action (or the zoomed region at the screen's own resolution).
  auto image = step->zoom ? vb::Render(m->framebuffer(), *step->zoom, 0, 0)
                          : vb::Render(m->framebuffer(), {}, d.w(), d.h());
  if (!image)
    co_return Error(500, "internal", "rendering the screenshot: " + image.error().message);
  const auto& img = query->image;
  auto bytes = img.format == cu::ImageFormat::kPng ? vb::EncodePng(*image)
                                                   : vb::EncodeJpeg(*image, img.quality);
  if (!bytes) co_return Error(500, "internal", "encoding the screenshot: " + bytes.error().message);
  co_return Json(200,
                 cu::AnthropicImageResult(img.format, Base64Encode(*bytes), call->tool_use_id));
}

Reply DesktopRoutes::ComputerOpenAi(Call& c) {
  auto query = cu::ParseAdapterQuery(c.ex.query());
  if (!query) co_return BadRequest(query.error());
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  auto call = cu::ParseOpenAiCall(*body);
  if (!call) co_return BadRequest(call.error());
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "computer action");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  auto m = *mirror;
  cu::Display d = DisplayOf(EffectiveDisplay(c.id, query->display), m->framebuffer());
  auto step = cu::ParseOpenAiActions(*call, d);
  if (!step) co_return BadRequest(step.error());
  if (!step->actions.empty()) {
    // After a trailing wait the screen is taken as it is: the model asked to wait, not to settle.
    std::optional<vb::SettleOptions> settle;
    if (step->actions.back().type != vb::Action::Type::kWait) settle = vb::SettleOptions{};
    auto out = co_await PerformStep(c, *m, step->actions, step->params, settle);
    if (auto gone = op->Interrupted()) co_return *gone;
    if (!out.failure.empty())
      co_return Error(m->ready() ? 500 : 502, m->ready() ? "internal" : "guest_error",
                      fmt::format("{} ({} of {} actions were performed)", out.failure,
                                  out.performed, step->actions.size()));
  }
  if (!SameScreen(*m, d))
    co_return Error(502, "guest_error",
                    "the sandbox's screen was lost or resized during the actions");
  auto image = Encode(m->framebuffer(), query->image, d);
  if (!image) co_return Error(500, "internal", "encoding the screenshot: " + image.error().message);
  co_return Json(200, cu::OpenAiCallOutput(query->image.format, Base64Encode(image->bytes),
                                           call->call_id));
}

}  // namespace deskbox::api
