// The desktop endpoints (vnc-bridge): screenshots from the sandbox's screen mirror, actions with
// settle detection, the pointer position. The coordinate contract: a call may declare the
// display size its model works in (`display`); screenshots are scaled to it and every
// coordinate the call gives is mapped back to the screen.
#include "desktop_routes.h"

#include <fmt/format.h>

#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "api/json_input.h"
#include "common/base64.h"
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
// The guest's X helper for typing (desktop-images/x11/main.cc).
constexpr std::string_view kX11Helper = "/usr/lib/deskbox/deskbox-x11";
// How long Xvnc may take to confirm that it has handled the keys sent before a paste.
constexpr auto kInputFenceTimeout = 10s;

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
  // Runs of keysyms, and of characters beyond them by the focused window's entry
  // (computer_use/typing.h says which and why).
  cu::TextEntry entry = cu::TextEntry::kHexEntry;
  if (cu::NeedsTextEntry(text)) {
    auto focused = co_await FocusedWindowClass(id);
    if (!focused) co_return std::unexpected(focused.error());
    entry = cu::EntryForWindowClass(*focused);
  }
  for (const auto& run : cu::SplitForTyping(text, entry)) {
    std::expected<void, std::string> r;
    vb::Action a;
    switch (run.route) {
      case cu::TypingRun::Route::kKeysyms:
        a.type = vb::Action::Type::kType;
        a.text = run.text;
        r = co_await PerformAction(m, a);
        break;
      case cu::TypingRun::Route::kHexEntry:
        // All in one key action: nothing waits between the keys, and the application handles
        // them in order (GTK commits each character while handling its space).
        a.type = vb::Action::Type::kKey;
        for (char32_t c : run.text)
          for (auto& combo : cu::HexEntryCombos(c)) a.keys.push_back(std::move(combo));
        r = co_await PerformAction(m, a);
        break;
      case cu::TypingRun::Route::kPaste:
        r = co_await PastePrimary(id, m, cu::EncodeUtf8(run.text));
        break;
    }
    if (!r) co_return r;
  }
  co_return std::expected<void, std::string>{};
}

asio::awaitable<std::expected<std::string, std::string>> DesktopRoutes::RunX11Helper(
    const std::string& id, std::string_view what, std::vector<std::string> args,
    std::string stdin_data, std::chrono::seconds timeout) {
  auto agent = ctx_.manager.Agent(id);
  if (!agent)
    co_return std::unexpected(fmt::format("{}: the sandbox has no guest agent connection", what));
  vmhost::ExecSpec spec;
  spec.argv = {std::string(kX11Helper)};
  spec.argv.insert(spec.argv.end(), std::make_move_iterator(args.begin()),
                   std::make_move_iterator(args.end()));
  spec.env = {{"DISPLAY", ":0"}};
  spec.stdin_data = std::move(stdin_data);
  spec.timeout = timeout;
  spec.max_output_bytes = 4096;
  auto r = co_await agent->Exec(std::move(spec));
  if (!r) co_return std::unexpected(fmt::format("{}: {}", what, r.error().message));
  if (r->exit_code != 0) {
    // The helper says why on one line of stderr.
    std::string why = r->stderr_data.substr(0, 300);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    co_return std::unexpected(fmt::format(
        "{} failed ({})", what, why.empty() ? fmt::format("exit {}", r->exit_code) : why));
  }
  co_return std::move(r->stdout_data);
}

asio::awaitable<std::expected<std::string, std::string>> DesktopRoutes::FocusedWindowClass(
    const std::string& id) {
  // Arguments built before the call: GCC 12 rejects braced string lists inside co_await.
  std::vector<std::string> args{"focus"};
  auto out = co_await RunX11Helper(id, "typing text: asking the guest for the focused window",
                                   std::move(args), std::string(), 10s);
  if (!out) co_return out;
  // "instance\tclass\n", or an empty line when nothing has the focus.
  std::string_view line = *out;
  auto tab = line.find('\t');
  if (tab == std::string_view::npos) co_return std::string();
  auto cls = line.substr(tab + 1);
  if (auto nl = cls.find('\n'); nl != std::string_view::npos) cls = cls.substr(0, nl);
  co_return std::string(cls);
}

asio::awaitable<std::expected<void, std::string>> DesktopRoutes::PastePrimary(
    const std::string& id, vb::FrameMirror& m, const std::string& utf8) {
  // The helper presses Shift+Insert itself (XTEST): the keys sent before must have reached the
  // X server first. A fence answered by Xvnc says every earlier message has been handled.
  if (!co_await m.Sync(kInputFenceTimeout))
    co_return std::unexpected(std::string(
        "pasting text: the guest's screen server did not confirm the keys before the paste"));
  std::vector<std::string> args{"paste-primary", "--timeout-ms", "10000"};
  auto out = co_await RunX11Helper(id, "pasting text into the focused window", std::move(args),
                                   utf8, 20s);
  if (!out) co_return std::unexpected(std::move(out.error()));
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
