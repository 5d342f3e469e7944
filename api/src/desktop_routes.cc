// The desktop endpoints (vnc-bridge): screenshots from the sandbox's screen mirror, actions with
// settle detection, the pointer position. The coordinate contract: a call may declare the
// display size its model works in (`display`); screenshots are scaled to it and every
// coordinate the call gives is mapped back to the screen.
#include "desktop_routes.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <set>

#include "api/json_input.h"
#include "common/log.h"
#include "vnc_bridge/image.h"
#include "vnc_bridge/input.h"
#include "vnc_bridge/keys.h"
#include "common/slot_network.h"

namespace deskbox::api {

namespace asio = boost::asio;
using nlohmann::json;
using namespace std::chrono_literals;
using vmhost::SandboxState;
namespace vb = vnc_bridge;

namespace {

constexpr size_t kMaxActionsPerCall = 100;

void AppendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}
constexpr auto kMirrorReadyTimeout = 20s;
// How long a paste's text stays on the guest's clipboard before the next paste may replace it.
constexpr auto kPasteHold = 600ms;

// The display a model works in, and how it maps onto the screen.
struct Display {
  uint32_t width = 0, height = 0;  // 0: the screen's own size
  uint32_t screen_w = 0, screen_h = 0;
  double sx() const { return width ? double(screen_w) / width : 1.0; }
  double sy() const { return height ? double(screen_h) / height : 1.0; }
  uint32_t w() const { return width ? width : screen_w; }
  uint32_t h() const { return height ? height : screen_h; }
  // The centre of display pixel (x, y), on the screen.
  vb::Point ToScreen(uint32_t x, uint32_t y) const {
    auto m = [](uint32_t v, double s, uint32_t limit) {
      return std::min(limit - 1, static_cast<uint32_t>(std::floor((v + 0.5) * s)));
    };
    return {m(x, sx(), screen_w), m(y, sy(), screen_h)};
  }
  vb::Point ToDisplay(vb::Point p) const {
    auto m = [](uint32_t v, double s, uint32_t limit) {
      return std::min(limit - 1, static_cast<uint32_t>(std::floor(v / s)));
    };
    return {m(p.x, sx(), w()), m(p.y, sy(), h())};
  }
  json ToJson() const {
    return {{"width", w()}, {"height", h()}, {"scale_x", sx()}, {"scale_y", sy()}};
  }
};

using DisplaySize = std::optional<std::pair<uint32_t, uint32_t>>;

// The declared display (or the screen's own size) over the mirror's screen as it is now. The
// screen size is copied: the framebuffer is replaced if the connection is re-made meanwhile.
Display DisplayOf(const DisplaySize& display, const vb::Framebuffer& fb) {
  return {display ? display->first : 0, display ? display->second : 0, fb.width, fb.height};
}

// The mirror still shows the screen `d` was made for (not lost or resized during the actions).
bool SameScreen(const vb::FrameMirror& m, const Display& d) {
  return m.ready() && m.framebuffer().width == d.screen_w && m.framebuffer().height == d.screen_h;
}

// "1024x640" → size; both sides 1..kMaxScreenSide.
std::expected<std::pair<uint32_t, uint32_t>, std::string> ParseSize(std::string_view s) {
  auto x = s.find('x');
  auto num = [](std::string_view v) -> std::optional<uint32_t> {
    if (v.empty() || v.size() > 5 || v.find_first_not_of("0123456789") != std::string_view::npos)
      return std::nullopt;
    uint32_t n = static_cast<uint32_t>(std::stoul(std::string(v)));
    if (n < 1 || n > vb::kMaxScreenSide) return std::nullopt;
    return n;
  };
  if (x == std::string_view::npos)
    return std::unexpected(fmt::format("display must be WIDTHxHEIGHT (got '{}')", s.substr(0, 32)));
  auto w = num(s.substr(0, x)), h = num(s.substr(x + 1));
  if (!w || !h)
    return std::unexpected(fmt::format("display must be WIDTHxHEIGHT with sides 1 to {} (got '{}')",
                                       vb::kMaxScreenSide, s.substr(0, 32)));
  return std::pair{*w, *h};
}

}  // namespace

std::optional<std::pair<uint32_t, uint32_t>> ReadDisplayMember(ObjectReader& in) {
  const json* d = in.Any("display");
  if (!d) return std::nullopt;
  if (d->is_string()) {
    auto s = ParseSize(d->get<std::string>());
    if (s) return *s;
    in.Fail(s.error());
  } else if (d->is_object()) {
    ObjectReader dr(*d, "display");
    auto w = dr.Integer("width", 1, vb::kMaxScreenSide),
         h = dr.Integer("height", 1, vb::kMaxScreenSide);
    if (auto err = dr.Finish())
      in.Fail(*err);
    else if (!w || !h)
      in.Fail("display needs width and height");
    else
      return std::pair{static_cast<uint32_t>(*w), static_cast<uint32_t>(*h)};
  } else {
    in.Fail("display must be \"WIDTHxHEIGHT\" or {\"width\", \"height\"}");
  }
  return std::nullopt;
}

std::optional<std::pair<uint32_t, uint32_t>> DesktopRoutes::EffectiveDisplay(
    const std::string& id, const std::optional<std::pair<uint32_t, uint32_t>>& asked) const {
  if (asked) return asked;
  const SandboxRecord* r = ctx_.sandboxes.Find(id);
  if (!r || !r->display_w || !r->display_h) return std::nullopt;
  return std::pair{r->display_w, r->display_h};
}

namespace {

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

struct ImageRequest {
  std::string format = "png";
  int quality = 80;
  uint32_t width = 0, height = 0;  // explicit size; else the display's
};

std::expected<std::string, std::string> Encode(const vb::Framebuffer& fb, const ImageRequest& req,
                                               const Display& d, uint32_t* out_w, uint32_t* out_h) {
  uint32_t w = req.width ? req.width : d.w(), h = req.height ? req.height : d.h();
  auto img = vb::Render(fb, {}, w, h);
  if (!img) return std::unexpected(img.error());
  *out_w = img->width;
  *out_h = img->height;
  return req.format == "png" ? vb::EncodePng(*img) : vb::EncodeJpeg(*img, req.quality);
}

// A point given as {"x":…, "y":…} members of `obj` (both or neither), in display pixels.
std::optional<vb::Point> ReadPoint(ObjectReader& in, const Display& d, bool required) {
  bool hx = in.Has("x"), hy = in.Has("y");
  if (!hx && !hy) {
    if (required) in.Fail(in.Name("x") + " and " + in.Name("y") + " are required");
    return std::nullopt;
  }
  if (hx != hy) {
    in.Fail(in.Name("x") + " and " + in.Name("y") + " go together");
    return std::nullopt;
  }
  auto x = in.Integer("x", 0, d.w() - 1);
  auto y = in.Integer("y", 0, d.h() - 1);
  if (!x || !y) return std::nullopt;
  return d.ToScreen(static_cast<uint32_t>(*x), static_cast<uint32_t>(*y));
}

std::optional<vb::Point> PointFromJson(const json& p, const Display& d, const std::string& where,
                                       ObjectReader& in) {
  int64_t x = -1, y = -1;
  if (p.is_array() && p.size() == 2 && p[0].is_number_integer() && p[1].is_number_integer()) {
    x = p[0].get<int64_t>();
    y = p[1].get<int64_t>();
  } else if (p.is_object() && p.size() == 2 && p.contains("x") && p.contains("y") &&
             p["x"].is_number_integer() && p["y"].is_number_integer()) {
    x = p["x"].get<int64_t>();
    y = p["y"].get<int64_t>();
  } else {
    in.Fail(where + " must be {\"x\": int, \"y\": int} or [x, y]");
    return std::nullopt;
  }
  if (x < 0 || y < 0 || x >= d.w() || y >= d.h()) {
    in.Fail(fmt::format("{} ({}, {}) is outside the {}x{} display", where, x, y, d.w(), d.h()));
    return std::nullopt;
  }
  return d.ToScreen(static_cast<uint32_t>(x), static_cast<uint32_t>(y));
}

std::vector<uint32_t> ReadModifiers(ObjectReader& in) {
  const json* m = in.Any("modifiers");
  if (!m) return {};
  std::string combo;
  if (m->is_string()) {
    combo = m->get<std::string>();
  } else if (m->is_array() && m->size() <= 8) {
    for (const auto& k : *m) {
      if (!k.is_string()) {
        in.Fail(in.Name("modifiers") + " must be a string or a list of key names");
        return {};
      }
      combo += (combo.empty() ? "" : "+") + k.get<std::string>();
    }
  } else {
    in.Fail(in.Name("modifiers") +
            " must be a string (\"ctrl+shift\") or a list of at most 8 key names");
    return {};
  }
  if (combo.empty()) return {};
  auto keys = vb::ParseCombo(combo);
  if (!keys) {
    in.Fail(in.Name("modifiers") + ": " + keys.error());
    return {};
  }
  return *keys;
}

vb::MouseButton ReadButton(ObjectReader& in) {
  auto b = in.Enum("button", {"left", "middle", "right", "back"}).value_or("left");
  if (b == "middle") return vb::MouseButton::kMiddle;
  if (b == "right") return vb::MouseButton::kRight;
  if (b == "back") return vb::MouseButton::kBack;
  return vb::MouseButton::kLeft;
}

// One action of the native shape (docs/computer-use.md), coordinates in display pixels.
std::expected<vb::Action, std::string> ParseAction(const json& j, size_t index, const Display& d) {
  std::string path = fmt::format("actions[{}]", index);
  if (!j.is_object()) return std::unexpected(path + " must be an object");
  ObjectReader in(j, path);
  auto type = in.Enum("type", {"move", "click", "mouse_down", "mouse_up", "drag", "scroll", "type",
                               "key", "hold_key", "wait"});
  if (!type) {
    if (!in.Has("type")) in.Fail(path + ".type is required");
    return std::unexpected(*in.Finish());
  }
  vb::Action a;
  using T = vb::Action::Type;
  if (*type == "move") {
    a.type = T::kMove;
    a.at = ReadPoint(in, d, true);
  } else if (*type == "click") {
    a.type = T::kClick;
    a.at = ReadPoint(in, d, false);
    a.button = ReadButton(in);
    a.count = static_cast<int>(in.Integer("count", 1, vb::kMaxClickCount).value_or(1));
    a.modifiers = ReadModifiers(in);
  } else if (*type == "mouse_down" || *type == "mouse_up") {
    a.type = *type == "mouse_down" ? T::kMouseDown : T::kMouseUp;
    a.at = ReadPoint(in, d, false);
    a.button = ReadButton(in);
  } else if (*type == "drag") {
    a.type = T::kDrag;
    a.button = ReadButton(in);
    a.modifiers = ReadModifiers(in);
    if (const json* p = in.Array("path")) {
      if (p->size() < 2 || p->size() > vb::kMaxPathPoints)
        in.Fail(fmt::format("{}.path must have 2 to {} points", path, vb::kMaxPathPoints));
      for (size_t i = 0; i < p->size() && in.ok(); ++i)
        if (auto pt = PointFromJson((*p)[i], d, fmt::format("{}.path[{}]", path, i), in))
          a.path.push_back(*pt);
    } else if (in.ok()) {
      in.Fail(path + ".path is required");
    }
  } else if (*type == "scroll") {
    a.type = T::kScroll;
    a.at = ReadPoint(in, d, false);
    a.dx =
        static_cast<int>(in.Integer("dx", -vb::kMaxScrollSteps, vb::kMaxScrollSteps).value_or(0));
    a.dy =
        static_cast<int>(in.Integer("dy", -vb::kMaxScrollSteps, vb::kMaxScrollSteps).value_or(0));
    a.modifiers = ReadModifiers(in);
    if (in.ok() && a.dx == 0 && a.dy == 0)
      in.Fail(path + ": dx or dy (wheel steps) must be non-zero");
  } else if (*type == "type") {
    a.type = T::kType;
    if (auto text = in.String("text", 0, vb::kMaxTextChars * 4)) {
      auto cps = vb::DecodeUtf8(*text);
      if (!cps)
        in.Fail(path + ".text: " + cps.error());
      else if (cps->size() > vb::kMaxTextChars)
        in.Fail(fmt::format("{}.text has more than {} characters", path, vb::kMaxTextChars));
      else
        a.text = std::move(*cps);
    } else if (in.ok()) {
      in.Fail(path + ".text is required");
    }
  } else if (*type == "key" || *type == "hold_key") {
    a.type = *type == "key" ? T::kKey : T::kHoldKey;
    if (auto keys = in.String("keys", 1, 1024)) {
      if (*type == "key") {
        auto seq = vb::ParseKeySequence(*keys);
        if (!seq)
          in.Fail(path + ".keys: " + seq.error());
        else
          a.keys = std::move(*seq);
      } else {
        auto combo = vb::ParseCombo(*keys);
        if (!combo)
          in.Fail(path + ".keys: " + combo.error());
        else
          a.keys = {std::move(*combo)};
      }
    } else if (in.ok()) {
      in.Fail(path + ".keys is required (e.g. \"ctrl+shift+t\", \"Return\")");
    }
    if (*type == "hold_key")
      a.duration = std::chrono::milliseconds(
          in.Integer("duration_ms", 0, vb::kMaxActionDuration.count()).value_or(500));
  } else {
    a.type = T::kWait;
    a.duration = std::chrono::milliseconds(
        in.Integer("duration_ms", 0, vb::kMaxActionDuration.count()).value_or(1000));
  }
  if (auto err = in.Finish()) return std::unexpected(*err);
  if (auto v = vb::Validate(a, d.screen_w, d.screen_h); !v)
    return std::unexpected(path + ": " + v.error());
  return a;
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
  if (r.state != SandboxState::kRunning) StopMirror(r.id);
}

void DesktopRoutes::StopMirror(const std::string& id) {
  last_paste_.erase(id);
  auto it = mirrors_.find(id);
  if (it == mirrors_.end()) return;
  it->second->Stop();
  mirrors_.erase(it);
}

asio::awaitable<std::expected<std::shared_ptr<vb::FrameMirror>, HttpResponse>>
DesktopRoutes::ReadyMirror(const std::string& id) {
  using R = std::expected<std::shared_ptr<vb::FrameMirror>, HttpResponse>;
  if (auto op = ctx_.sandboxes.BeginGuestOperation(id, "screen"); !op)
    co_return R(std::unexpected(op.error()));
  auto sb = ctx_.manager.Find(id);
  if (!sb || sb->state != SandboxState::kRunning)
    co_return R(
        std::unexpected(Error(409, "invalid_state", fmt::format("sandbox {} is not running", id))));
  auto it = mirrors_.find(id);
  if (it == mirrors_.end()) {
    uint32_t slot = sb->slot;
    // The connector checks, at every (re)connect, that the slot still holds this sandbox: a
    // mirror must never reach the next sandbox to use the slot.
    auto connect = [this, id,
                    slot]() -> asio::awaitable<std::expected<asio::ip::tcp::socket, std::string>> {
      auto now = ctx_.manager.Find(id);
      if (!now || now->slot != slot || now->state != SandboxState::kRunning)
        co_return std::unexpected(std::string("the sandbox is no longer running"));
      auto s = co_await ctx_.manager.ConnectGuest(slot, slot_network::kGuestRfbPort, 5s);
      if (!s) co_return std::unexpected(s.error().message);
      co_return std::move(*s);
    };
    auto m = std::make_shared<vb::FrameMirror>(ctx_.executor, std::move(connect), id);
    m->Start();
    it = mirrors_.emplace(id, std::move(m)).first;
  }
  auto mirror = it->second;
  // The screen of a sandbox whose pages still reload after its restore is not what the caller
  // asked for; the mirror connects meanwhile.
  if (auto fresh = co_await ctx_.manager.WaitBrowserFresh(sb, kBrowserFreshTimeout); !fresh) {
    if (sb->state != SandboxState::kRunning)
      co_return R(
          std::unexpected(Error(409, "invalid_state",
                                fmt::format("sandbox {} is {}: {}", id, vmhost::ToString(sb->state),
                                            fresh.error().message))));
    co_return R(std::unexpected(Error(504, "guest_timeout", fresh.error().message)));
  }
  auto ready = co_await mirror->WaitReady(kMirrorReadyTimeout);
  if (!ready) {
    if (mirror->stopped())
      co_return R(std::unexpected(
          Error(409, "invalid_state", fmt::format("sandbox {} stopped running", id))));
    co_return R(
        std::unexpected(Error(504, "guest_timeout", "the sandbox's screen: " + ready.error())));
  }
  co_return R(std::move(mirror));
}

Reply DesktopRoutes::Screenshot(Call& c) {
  ImageRequest img;
  DisplaySize display;
  for (const auto& [k, v] : c.ex.query()) {
    auto dim = [&](const char* name) -> std::expected<uint32_t, HttpResponse> {
      if (v.empty() || v.size() > 5 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(v) < 1 || std::stoul(v) > vb::kMaxScreenSide)
        return std::unexpected(
            Error(400, "invalid_request",
                  fmt::format("{} must be between 1 and {}", name, vb::kMaxScreenSide)));
      return static_cast<uint32_t>(std::stoul(v));
    };
    if (k == "format") {
      if (v != "png" && v != "jpeg")
        co_return Error(400, "invalid_request",
                        fmt::format("format must be png or jpeg (got '{}')", v));
      img.format = v;
    } else if (k == "quality") {
      if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(v) < 1 || std::stoi(v) > 100)
        co_return Error(400, "invalid_request", "quality must be between 1 and 100");
      img.quality = std::stoi(v);
    } else if (k == "width" || k == "height") {
      auto n = dim(k.c_str());
      if (!n) co_return n.error();
      (k == "width" ? img.width : img.height) = *n;
    } else if (k == "display") {
      auto d = ParseSize(v);
      if (!d) co_return Error(400, "invalid_request", d.error());
      display = *d;
    } else {
      co_return Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k));
    }
  }
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "screenshot");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  const auto& fb = (*mirror)->framebuffer();
  Display d = DisplayOf(EffectiveDisplay(c.id, display), fb);
  // One of width/height alone keeps the aspect ratio.
  if (img.width && !img.height)
    img.height = std::max<uint32_t>(1, static_cast<uint32_t>(uint64_t{img.width} * d.h() / d.w()));
  if (img.height && !img.width)
    img.width = std::max<uint32_t>(1, static_cast<uint32_t>(uint64_t{img.height} * d.w() / d.h()));
  uint32_t w = 0, h = 0;
  auto bytes = Encode(fb, img, d, &w, &h);
  if (!bytes) co_return Error(500, "internal", "encoding the screenshot: " + bytes.error());
  HttpResponse r;
  r.content_type = img.format == "png" ? "image/png" : "image/jpeg";
  r.body = std::move(*bytes);
  r.headers.emplace_back("X-Screen-Width", std::to_string(fb.width));
  r.headers.emplace_back("X-Screen-Height", std::to_string(fb.height));
  r.headers.emplace_back("X-Image-Width", std::to_string(w));
  r.headers.emplace_back("X-Image-Height", std::to_string(h));
  r.headers.emplace_back("X-Frame-Seq", std::to_string((*mirror)->seq()));
  co_return r;
}

Reply DesktopRoutes::Cursor(Call& c) {
  DisplaySize display;
  for (const auto& [k, v] : c.ex.query()) {
    if (k != "display")
      co_return Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k));
    auto d = ParseSize(v);
    if (!d) co_return Error(400, "invalid_request", d.error());
    display = *d;
  }
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "cursor read");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  const auto& fb = (*mirror)->framebuffer();
  Display d = DisplayOf(EffectiveDisplay(c.id, display), fb);
  auto p = d.ToDisplay((*mirror)->pointer());
  co_return Json(200, json{{"x", p.x},
                           {"y", p.y},
                           {"screen", {{"width", fb.width}, {"height", fb.height}}},
                           {"display", d.ToJson()}});
}

asio::awaitable<std::expected<void, std::string>> DesktopRoutes::TypeText(
    Call& c, vb::FrameMirror& m, const std::u32string& text) {
  // Printable ASCII, Return and Tab are on every keyboard map: keysyms. A run holding any other
  // character is pasted, from its first such character to its last (ASCII between them goes
  // with it; Return and Tab end a run): the guest agent sets the CLIPBOARD selection and ctrl+v
  // pastes it. Such a character sent as a keysym would make Xvnc bind it to a spare keycode at
  // the key press, and the browser, which loads the changed keymap only after that key, dropped
  // it (a CI run typed "héllo" as "hllo"); the spare keycodes also run out for good.
  std::u32string keys, paste, tail;
  auto type_keys = [&]() -> asio::awaitable<std::expected<void, std::string>> {
    vb::Action a;
    a.type = vb::Action::Type::kType;
    a.text = std::exchange(keys, {});
    co_return co_await vb::Perform(m, a);
  };
  auto type_paste = [&]() -> asio::awaitable<std::expected<void, std::string>> {
    std::string utf8;
    for (char32_t ch : std::exchange(paste, {})) AppendUtf8(utf8, ch);
    auto sb = ctx_.manager.Find(c.id);
    if (!sb || !sb->agent || sb->agent->closed())
      co_return std::unexpected(
          std::string("pasting text: the sandbox has no guest agent connection"));
    auto keep = sb;
    // Chromium reads the clipboard after a ctrl+v when its event loop gets to it, and reads it
    // twice. A next paste that replaces the clipboard before then made the earlier one insert
    // nothing ("x é y 世" typed as "xy世" in CI runs with Chromium 156.0.8078.114): give the
    // previous paste of this sandbox time to be read first.
    if (auto last = last_paste_.find(c.id); last != last_paste_.end()) {
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
    agent::v1::Request req;
    req.mutable_clipboard_set()->set_text(utf8);
    auto r = co_await keep->agent->Call(std::move(req), 15s);
    if (!r) co_return std::unexpected("pasting text: setting the clipboard: " + r.error().message);
    // xclip returns before its background process owns the selection: until then ctrl+v gets
    // the previous owner's text, or nothing while that owner is giving it up (a CI run lost a
    // pasted "ß" so). Paste once the clipboard reads back as this text.
    auto clipboard_holds_text = [&]() -> asio::awaitable<std::expected<void, std::string>> {
      for (int attempt = 0;; ++attempt) {
        agent::v1::Request get;
        get.mutable_clipboard_get();
        auto now = co_await keep->agent->Call(std::move(get), 15s);
        if (now && now->has_clipboard() && now->clipboard().text() == utf8) break;
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
      if (auto k = co_await vb::Perform(m, paste_key); !k) co_return k;
      last_paste_[c.id] = vb::FrameMirror::Clock::now();
      auto settled = co_await m.Settle(before, t0, o);
      if (settled.changed) break;
      if (press == 0)
        log::Warn("api",
                  "sandbox {}: nothing changed on the screen 3 s after pasting {} bytes of text; "
                  "pasting again",
                  c.id, utf8.size());
    }
    co_return std::expected<void, std::string>{};
  };
  // Ends a pasted run: pastes it, and the ASCII after its last other character goes as keys.
  auto end_run = [&]() -> asio::awaitable<std::expected<void, std::string>> {
    if (!paste.empty())
      if (auto r = co_await type_paste(); !r) co_return r;
    keys += std::exchange(tail, {});
    co_return std::expected<void, std::string>{};
  };
  for (char32_t ch : text) {
    bool printable_ascii = ch >= 0x20 && ch < 0x7f;
    bool control = ch == U'\n' || ch == U'\r' || ch == U'\t';
    if (!printable_ascii && !control) {
      if (paste.empty() && !keys.empty())
        if (auto r = co_await type_keys(); !r) co_return r;
      paste += std::exchange(tail, {});
      paste.push_back(ch);
    } else if (printable_ascii && !paste.empty()) {
      tail.push_back(ch);
    } else {
      if (auto r = co_await end_run(); !r) co_return r;
      keys.push_back(ch);
    }
  }
  if (auto r = co_await end_run(); !r) co_return r;
  if (!keys.empty())
    if (auto r = co_await type_keys(); !r) co_return r;
  co_return std::expected<void, std::string>{};
}

asio::awaitable<std::expected<void, std::string>> DesktopRoutes::PressKeys(
    Call& c, vb::FrameMirror& m, const vb::Action& action) {
  // A combo that is one character beyond ASCII ("é", "U+4E16") is typed, that is pasted: as a
  // keysym the guest's keyboard map lacks it could be dropped (TypeText). The combos around it
  // are pressed in order; with a modifier ("ctrl+é") it goes as a keysym.
  vb::Action batch = action;
  batch.keys.clear();
  auto flush = [&]() -> asio::awaitable<std::expected<void, std::string>> {
    if (batch.keys.empty()) co_return std::expected<void, std::string>{};
    auto r = co_await vb::Perform(m, batch);
    batch.keys.clear();
    co_return r;
  };
  for (const auto& combo : action.keys) {
    auto ch = combo.size() == 1 ? vb::CharacterBeyondAscii(combo[0]) : std::nullopt;
    if (!ch) {
      batch.keys.push_back(combo);
      continue;
    }
    if (auto r = co_await flush(); !r) co_return r;
    if (auto r = co_await TypeText(c, m, std::u32string(1, *ch)); !r) co_return r;
  }
  co_return co_await flush();
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
      r = co_await TypeText(c, m, actions[i].text);
    else if (actions[i].type == vb::Action::Type::kKey)
      r = co_await PressKeys(c, m, actions[i]);
    else
      r = co_await vb::Perform(m, actions[i]);
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
  ObjectReader in(*body);
  // The screen size is needed to map coordinates: validate the envelope first, then connect.
  const json* list = in.Array("actions");
  if (in.ok() && !list) in.Fail("actions is required (a list of actions)");
  if (list && (list->empty() || list->size() > kMaxActionsPerCall))
    in.Fail(fmt::format("actions must have 1 to {} entries", kMaxActionsPerCall));
  DisplaySize display = ReadDisplayMember(in);
  std::optional<vb::SettleOptions> settle = vb::SettleOptions{};
  if (const json* s = in.Any("settle")) {
    if (s->is_boolean()) {
      if (!s->get<bool>()) settle.reset();
    } else if (s->is_object()) {
      ObjectReader sr(*s, "settle");
      if (auto q = sr.Integer("quiet_ms", 0, 5000)) settle->quiet = std::chrono::milliseconds(*q);
      if (auto t = sr.Integer("timeout_ms", 0, 30000))
        settle->timeout = std::chrono::milliseconds(*t);
      if (auto n = sr.Integer("no_change_ms", 0, 30000))
        settle->no_change = std::chrono::milliseconds(*n);
      if (auto err = sr.Finish()) in.Fail(*err);
    } else {
      in.Fail("settle must be true, false or {\"quiet_ms\", \"timeout_ms\", \"no_change_ms\"}");
    }
  }
  std::optional<ImageRequest> shot;
  if (const json* s = in.Any("screenshot")) {
    if (s->is_boolean()) {
      if (s->get<bool>()) shot = ImageRequest{};
    } else if (s->is_object()) {
      ObjectReader sr(*s, "screenshot");
      shot = ImageRequest{};
      shot->format = sr.Enum("format", {"png", "jpeg"}).value_or("png");
      shot->quality = static_cast<int>(sr.Integer("quality", 1, 100).value_or(80));
      if (auto err = sr.Finish()) in.Fail(*err);
    } else {
      in.Fail("screenshot must be true, false or {\"format\", \"quality\"}");
    }
  }
  if (auto err = in.Finish()) co_return Error(400, "invalid_request", *err);
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "actions");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  auto m = *mirror;
  Display d = DisplayOf(EffectiveDisplay(c.id, display), m->framebuffer());
  std::vector<vb::Action> actions;
  for (size_t i = 0; i < list->size(); ++i) {
    auto a = ParseAction((*list)[i], i, d);
    if (!a) co_return Error(400, "invalid_request", a.error());
    actions.push_back(std::move(*a));
  }
  auto step = co_await PerformStep(c, *m, actions, *list, settle);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!step.failure.empty()) {
    auto code = m->ready() ? 500 : 502;
    co_return Error(code, code == 502 ? "guest_error" : "internal",
                    fmt::format("{} ({} of {} actions were performed)", step.failure,
                                step.performed, actions.size()));
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
  if (shot) {
    if (!SameScreen(*m, d))
      co_return Error(502, "guest_error",
                      "the sandbox's screen was lost or resized during the actions");
    uint32_t w = 0, h = 0;
    auto bytes = Encode(m->framebuffer(), *shot, d, &w, &h);
    if (!bytes) co_return Error(500, "internal", "encoding the screenshot: " + bytes.error());
    out["screenshot"] = {
        {"format", shot->format}, {"width", w}, {"height", h}, {"data", Base64(*bytes)}};
  }
  co_return Json(200, out);
}

// ---------------------------------------------------------------------------------------------
// Model tool adapters: the tool calls computer-use models emit, as they come.

namespace {

// A tool call the model got wrong: the answer is a tool result with is_error, for the loop to
// hand back to the model (HTTP 200), rather than an HTTP error for the loop itself.
struct ModelError {
  std::string message;
};

std::expected<vb::Point, ModelError> ModelPoint(const json& v, const Display& d, const char* name) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer())
    return std::unexpected(ModelError{fmt::format("{} must be [x, y] (integers)", name)});
  int64_t x = v[0].get<int64_t>(), y = v[1].get<int64_t>();
  if (x < 0 || y < 0 || x >= d.w() || y >= d.h())
    return std::unexpected(ModelError{
        fmt::format("{} [{}, {}] is outside the {}x{} display", name, x, y, d.w(), d.h())});
  return d.ToScreen(static_cast<uint32_t>(x), static_cast<uint32_t>(y));
}

std::expected<std::vector<uint32_t>, ModelError> ModelModifiers(const json& input) {
  auto it = input.find("text");
  if (it == input.end() || it->is_null()) return std::vector<uint32_t>{};
  if (!it->is_string()) return std::unexpected(ModelError{"text (modifier keys) must be a string"});
  if (it->get<std::string>().empty()) return std::vector<uint32_t>{};
  auto keys = vb::ParseCombo(it->get<std::string>());
  if (!keys) return std::unexpected(ModelError{"text (modifier keys): " + keys.error()});
  return *keys;
}

std::expected<std::chrono::milliseconds, ModelError> ModelDuration(const json& input,
                                                                   double fallback_s) {
  auto it = input.find("duration");
  double s = fallback_s;
  if (it != input.end() && !it->is_null()) {
    if (!it->is_number())
      return std::unexpected(ModelError{"duration must be a number of seconds"});
    s = it->get<double>();
  }
  if (!(s >= 0) || s * 1000 > vb::kMaxActionDuration.count())
    return std::unexpected(ModelError{fmt::format("duration must be between 0 and {} seconds",
                                                  vb::kMaxActionDuration.count() / 1000)});
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// What one Anthropic computer-tool input asks for.
struct AnthropicStep {
  std::vector<vb::Action> actions;
  bool cursor_position = false;  // answer with text, not an image
  std::optional<vb::Rect> zoom;  // answer with this screen region at full resolution
};

std::expected<AnthropicStep, ModelError> ParseAnthropic(const json& in, const Display& d) {
  using T = vb::Action::Type;
  static const std::set<std::string, std::less<>> kKnown = {
      "action",           "coordinate",    "start_coordinate", "text",
      "scroll_direction", "scroll_amount", "duration",         "region"};
  for (auto it = in.begin(); it != in.end(); ++it)
    if (!kKnown.count(it.key()))
      return std::unexpected(ModelError{fmt::format("unknown parameter '{}'", it.key())});
  auto action_it = in.find("action");
  if (action_it == in.end() || !action_it->is_string())
    return std::unexpected(ModelError{"action is required"});
  std::string action = action_it->get<std::string>();
  auto text = [&]() -> std::expected<std::string, ModelError> {
    auto t = in.find("text");
    if (t == in.end() || !t->is_string() || t->get<std::string>().empty())
      return std::unexpected(ModelError{fmt::format("{} needs text", action)});
    return t->get<std::string>();
  };
  auto point = [&](const char* name,
                   bool required) -> std::expected<std::optional<vb::Point>, ModelError> {
    auto p = in.find(name);
    if (p == in.end() || p->is_null()) {
      if (required) return std::unexpected(ModelError{fmt::format("{} needs {}", action, name)});
      return std::optional<vb::Point>{};
    }
    auto pt = ModelPoint(*p, d, name);
    if (!pt) return std::unexpected(pt.error());
    return std::optional<vb::Point>{*pt};
  };
  AnthropicStep step;
  vb::Action a;
  if (action == "screenshot") return step;
  if (action == "cursor_position") {
    step.cursor_position = true;
    return step;
  }
  if (action == "key" || action == "hold_key") {
    auto t = text();
    if (!t) return std::unexpected(t.error());
    if (action == "key") {
      auto seq = vb::ParseKeySequence(*t);
      if (!seq) return std::unexpected(ModelError{seq.error()});
      a.type = T::kKey;
      a.keys = std::move(*seq);
    } else {
      auto combo = vb::ParseCombo(*t);
      if (!combo) return std::unexpected(ModelError{combo.error()});
      auto dur = ModelDuration(in, 0.5);
      if (!dur) return std::unexpected(dur.error());
      a.type = T::kHoldKey;
      a.keys = {std::move(*combo)};
      a.duration = *dur;
    }
  } else if (action == "type") {
    auto t = in.find("text");
    if (t == in.end() || !t->is_string()) return std::unexpected(ModelError{"type needs text"});
    auto cps = vb::DecodeUtf8(t->get<std::string>());
    if (!cps) return std::unexpected(ModelError{cps.error()});
    a.type = T::kType;
    a.text = std::move(*cps);
  } else if (action == "mouse_move") {
    auto p = point("coordinate", true);
    if (!p) return std::unexpected(p.error());
    a.type = T::kMove;
    a.at = **p;
  } else if (action == "left_mouse_down" || action == "left_mouse_up") {
    auto p = point("coordinate", false);
    if (!p) return std::unexpected(p.error());
    a.type = action == "left_mouse_down" ? T::kMouseDown : T::kMouseUp;
    a.at = *p;
  } else if (action == "left_click" || action == "right_click" || action == "middle_click" ||
             action == "double_click" || action == "triple_click") {
    auto p = point("coordinate", false);
    if (!p) return std::unexpected(p.error());
    auto mods = ModelModifiers(in);
    if (!mods) return std::unexpected(mods.error());
    a.type = T::kClick;
    a.at = *p;
    a.modifiers = std::move(*mods);
    a.button = action == "right_click"    ? vb::MouseButton::kRight
               : action == "middle_click" ? vb::MouseButton::kMiddle
                                          : vb::MouseButton::kLeft;
    a.count = action == "double_click" ? 2 : action == "triple_click" ? 3 : 1;
  } else if (action == "left_click_drag") {
    auto from = point("start_coordinate", true);
    if (!from) return std::unexpected(from.error());
    auto to = point("coordinate", true);
    if (!to) return std::unexpected(to.error());
    a.type = T::kDrag;
    a.path = {**from, **to};
  } else if (action == "scroll") {
    auto p = point("coordinate", false);
    if (!p) return std::unexpected(p.error());
    auto dir = in.find("scroll_direction");
    if (dir == in.end() || !dir->is_string())
      return std::unexpected(ModelError{"scroll needs scroll_direction"});
    auto amount = in.find("scroll_amount");
    int64_t n = 3;
    if (amount != in.end() && !amount->is_null()) {
      if (!amount->is_number_integer())
        return std::unexpected(ModelError{"scroll_amount must be an integer"});
      n = amount->get<int64_t>();
    }
    if (n < 1 || n > vb::kMaxScrollSteps)
      return std::unexpected(
          ModelError{fmt::format("scroll_amount must be between 1 and {}", vb::kMaxScrollSteps)});
    auto mods = ModelModifiers(in);
    if (!mods) return std::unexpected(mods.error());
    std::string d2 = dir->get<std::string>();
    a.type = T::kScroll;
    a.at = *p;
    a.modifiers = std::move(*mods);
    if (d2 == "up")
      a.dy = -static_cast<int>(n);
    else if (d2 == "down")
      a.dy = static_cast<int>(n);
    else if (d2 == "left")
      a.dx = -static_cast<int>(n);
    else if (d2 == "right")
      a.dx = static_cast<int>(n);
    else
      return std::unexpected(ModelError{"scroll_direction must be up, down, left or right"});
  } else if (action == "wait") {
    auto dur = ModelDuration(in, 1.0);
    if (!dur) return std::unexpected(dur.error());
    a.type = T::kWait;
    a.duration = *dur;
  } else if (action == "zoom") {
    auto r = in.find("region");
    if (r == in.end() || !r->is_array() || r->size() != 4)
      return std::unexpected(ModelError{"zoom needs region [x0, y0, x1, y1]"});
    for (const auto& v : *r)
      if (!v.is_number_integer()) return std::unexpected(ModelError{"region must hold 4 integers"});
    int64_t x0 = (*r)[0].get<int64_t>(), y0 = (*r)[1].get<int64_t>(), x1 = (*r)[2].get<int64_t>(),
            y1 = (*r)[3].get<int64_t>();
    if (x0 < 0 || y0 < 0 || x1 > d.w() || y1 > d.h() || x1 <= x0 || y1 <= y0)
      return std::unexpected(ModelError{fmt::format(
          "region [{}, {}, {}, {}] must lie within the {}x{} display with x0 < x1 and y0 < y1", x0,
          y0, x1, y1, d.w(), d.h())});
    auto sx = [&](int64_t v) { return static_cast<uint32_t>(std::lround(v * d.sx())); };
    auto sy = [&](int64_t v) { return static_cast<uint32_t>(std::lround(v * d.sy())); };
    uint32_t X0 = std::min(sx(x0), d.screen_w - 1), Y0 = std::min(sy(y0), d.screen_h - 1);
    uint32_t X1 = std::clamp(sx(x1), X0 + 1, d.screen_w),
             Y1 = std::clamp(sy(y1), Y0 + 1, d.screen_h);
    step.zoom = vb::Rect{X0, Y0, X1 - X0, Y1 - Y0};
    return step;
  } else {
    return std::unexpected(ModelError{fmt::format("unknown action '{}'", action.substr(0, 64))});
  }
  if (auto v = vb::Validate(a, d.screen_w, d.screen_h); !v)
    return std::unexpected(ModelError{v.error()});
  step.actions.push_back(std::move(a));
  return step;
}

// The query of an adapter call: display=WxH, format=png|jpeg, quality.
std::expected<std::pair<DisplaySize, ImageRequest>, HttpResponse> AdapterQuery(
    const std::map<std::string, std::string>& query) {
  DisplaySize display;
  ImageRequest img;
  for (const auto& [k, v] : query) {
    if (k == "display") {
      auto d = ParseSize(v);
      if (!d) return std::unexpected(Error(400, "invalid_request", d.error()));
      display = *d;
    } else if (k == "format") {
      if (v != "png" && v != "jpeg")
        return std::unexpected(Error(400, "invalid_request", "format must be png or jpeg"));
      img.format = v;
    } else if (k == "quality") {
      if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(v) < 1 || std::stoi(v) > 100)
        return std::unexpected(Error(400, "invalid_request", "quality must be between 1 and 100"));
      img.quality = std::stoi(v);
    } else {
      return std::unexpected(
          Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k)));
    }
  }
  return std::pair{display, img};
}

// OpenAI computer-use actions → ours. Scrolls come in pixels: 100 px per wheel step, at least one.
// A screenshot action is no action: nullopt.
std::expected<std::optional<vb::Action>, std::string> ParseOpenAiAction(const json& j,
                                                                        const Display& d,
                                                                        const std::string& path) {
  using T = vb::Action::Type;
  if (!j.is_object()) return std::unexpected(path + " must be an object");
  auto type_it = j.find("type");
  if (type_it == j.end() || !type_it->is_string())
    return std::unexpected(path + ".type is required");
  std::string type = type_it->get<std::string>();
  auto num = [&](const char* k,
                 bool required) -> std::expected<std::optional<int64_t>, std::string> {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) {
      if (required) return std::unexpected(fmt::format("{}.{} is required", path, k));
      return std::optional<int64_t>{};
    }
    if (!it->is_number_integer())
      return std::unexpected(fmt::format("{}.{} must be an integer", path, k));
    return std::optional<int64_t>{it->get<int64_t>()};
  };
  auto at = [&]() -> std::expected<vb::Point, std::string> {
    auto x = num("x", true);
    if (!x) return std::unexpected(x.error());
    auto y = num("y", true);
    if (!y) return std::unexpected(y.error());
    if (**x < 0 || **y < 0 || **x >= d.w() || **y >= d.h())
      return std::unexpected(
          fmt::format("{}: ({}, {}) is outside the {}x{} display", path, **x, **y, d.w(), d.h()));
    return d.ToScreen(static_cast<uint32_t>(**x), static_cast<uint32_t>(**y));
  };
  vb::Action a;
  if (type == "click" || type == "double_click") {
    auto p = at();
    if (!p) return std::unexpected(p.error());
    a.type = T::kClick;
    a.at = *p;
    a.count = type == "double_click" ? 2 : 1;
    auto b = j.find("button");
    std::string button = b != j.end() && b->is_string() ? b->get<std::string>() : "left";
    if (button == "left")
      a.button = vb::MouseButton::kLeft;
    else if (button == "right")
      a.button = vb::MouseButton::kRight;
    else if (button == "wheel" || button == "middle")
      a.button = vb::MouseButton::kMiddle;
    else if (button == "back")
      a.button = vb::MouseButton::kBack;
    else if (button == "forward")
      return std::unexpected(path +
                             ".button: 'forward' (X button 9) cannot be sent over the guest's RFB, "
                             "which carries buttons 1 to 8");
    else
      return std::unexpected(path + ".button must be left, right, wheel, back or forward");
  } else if (type == "move") {
    auto p = at();
    if (!p) return std::unexpected(p.error());
    a.type = T::kMove;
    a.at = *p;
  } else if (type == "drag") {
    auto p = j.find("path");
    if (p == j.end() || !p->is_array() || p->size() < 2 || p->size() > vb::kMaxPathPoints)
      return std::unexpected(
          fmt::format("{}.path must hold 2 to {} points", path, vb::kMaxPathPoints));
    a.type = T::kDrag;
    for (size_t i = 0; i < p->size(); ++i) {
      const json& q = (*p)[i];
      if (!q.is_object() || !q.contains("x") || !q.contains("y") || !q["x"].is_number_integer() ||
          !q["y"].is_number_integer())
        return std::unexpected(fmt::format("{}.path[{}] must be {{\"x\", \"y\"}}", path, i));
      int64_t x = q["x"].get<int64_t>(), y = q["y"].get<int64_t>();
      if (x < 0 || y < 0 || x >= d.w() || y >= d.h())
        return std::unexpected(fmt::format("{}.path[{}] ({}, {}) is outside the {}x{} display",
                                           path, i, x, y, d.w(), d.h()));
      a.path.push_back(d.ToScreen(static_cast<uint32_t>(x), static_cast<uint32_t>(y)));
    }
  } else if (type == "keypress") {
    auto k = j.find("keys");
    if (k == j.end() || !k->is_array() || k->empty() || k->size() > 8)
      return std::unexpected(path + ".keys must be a list of 1 to 8 key names");
    std::vector<uint32_t> combo;
    for (const auto& name : *k) {
      if (!name.is_string()) return std::unexpected(path + ".keys must hold strings");
      auto ks = vb::KeysymForName(name.get<std::string>());
      if (!ks) return std::unexpected(path + ".keys: " + ks.error());
      combo.push_back(*ks);
    }
    a.type = T::kKey;
    a.keys = {std::move(combo)};
  } else if (type == "scroll") {
    auto p = at();
    if (!p) return std::unexpected(p.error());
    auto sx = num("scroll_x", false), sy = num("scroll_y", false);
    if (!sx) return std::unexpected(sx.error());
    if (!sy) return std::unexpected(sy.error());
    auto steps = [](int64_t px) -> int64_t {
      if (px == 0) return 0;
      int64_t n = (std::abs(px) + 50) / 100;
      return (px < 0 ? -1 : 1) * std::max<int64_t>(1, n);
    };
    int64_t dx = steps(sx->value_or(0)), dy = steps(sy->value_or(0));
    if (std::abs(dx) > vb::kMaxScrollSteps || std::abs(dy) > vb::kMaxScrollSteps)
      return std::unexpected(
          fmt::format("{}: at most {} px per axis", path, vb::kMaxScrollSteps * 100));
    if (dx == 0 && dy == 0)
      return std::unexpected(path + ": scroll_x or scroll_y must be non-zero");
    a.type = T::kScroll;
    a.at = *p;
    a.dx = static_cast<int>(dx);
    a.dy = static_cast<int>(dy);
  } else if (type == "type") {
    auto t = j.find("text");
    if (t == j.end() || !t->is_string()) return std::unexpected(path + ".text is required");
    auto cps = vb::DecodeUtf8(t->get<std::string>());
    if (!cps) return std::unexpected(path + ".text: " + cps.error());
    a.type = T::kType;
    a.text = std::move(*cps);
  } else if (type == "wait") {
    auto ms = num("duration_ms", false);
    if (!ms) return std::unexpected(ms.error());
    a.type = T::kWait;
    a.duration = std::chrono::milliseconds(ms->value_or(2000));
  } else if (type == "screenshot") {
    return std::optional<vb::Action>{};
  } else {
    return std::unexpected(fmt::format("{}.type: unknown action '{}'", path, type.substr(0, 64)));
  }
  if (auto v = vb::Validate(a, d.screen_w, d.screen_h); !v)
    return std::unexpected(path + ": " + v.error());
  return std::optional<vb::Action>{std::move(a)};
}

}  // namespace

Reply DesktopRoutes::ComputerAnthropic(Call& c) {
  auto q = AdapterQuery(c.ex.query());
  if (!q) co_return q.error();
  auto [display, img] = *q;
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  // The tool's input as the model emitted it, or the whole tool_use block.
  const json* input = &*body;
  std::string tool_use_id;
  if (body->is_object() && body->value("type", "") == "tool_use") {
    auto it = body->find("input");
    if (it == body->end() || !it->is_object())
      co_return Error(400, "invalid_request", "tool_use.input must be an object");
    input = &*it;
    tool_use_id = body->value("id", "");
  }
  if (!input->is_object())
    co_return Error(400, "invalid_request",
                    "the body must be the tool's input object (or a tool_use block)");
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "computer action");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  auto m = *mirror;
  Display d = DisplayOf(EffectiveDisplay(c.id, display), m->framebuffer());
  auto result = [&](json content, bool is_error) {
    json r = {{"type", "tool_result"}, {"content", std::move(content)}, {"is_error", is_error}};
    if (!tool_use_id.empty()) r["tool_use_id"] = tool_use_id;
    return Json(200, r);
  };
  auto text_block = [](std::string t) {
    return json::array({{{"type", "text"}, {"text", std::move(t)}}});
  };
  auto step = ParseAnthropic(*input, d);
  if (!step) co_return result(text_block(step.error().message), true);
  if (step->cursor_position) {
    auto p = d.ToDisplay(m->pointer());
    co_return result(text_block(fmt::format("X={},Y={}", p.x, p.y)), false);
  }
  if (!step->actions.empty()) {
    std::optional<vb::SettleOptions> settle;
    if (step->actions.back().type != vb::Action::Type::kWait) settle = vb::SettleOptions{};
    auto out = co_await PerformStep(c, *m, step->actions, *input, settle);
    if (auto gone = op->Interrupted()) co_return *gone;
    if (!out.failure.empty()) co_return result(text_block(out.failure), true);
  }
  if (!SameScreen(*m, d))
    co_return Error(502, "guest_error",
                    "the sandbox's screen was lost or resized during the action");
  // The screen after the action (or the zoomed region at the screen's own resolution).
  auto image = step->zoom ? vb::Render(m->framebuffer(), *step->zoom, 0, 0)
                          : vb::Render(m->framebuffer(), {}, d.w(), d.h());
  if (!image) co_return Error(500, "internal", "rendering the screenshot: " + image.error());
  auto bytes = img.format == "png" ? vb::EncodePng(*image) : vb::EncodeJpeg(*image, img.quality);
  if (!bytes) co_return Error(500, "internal", "encoding the screenshot: " + bytes.error());
  co_return result(json::array({{{"type", "image"},
                                 {"source",
                                  {{"type", "base64"},
                                   {"media_type", "image/" + img.format},
                                   {"data", Base64(*bytes)}}}}}),
                   false);
}

Reply DesktopRoutes::ComputerOpenAi(Call& c) {
  auto q = AdapterQuery(c.ex.query());
  if (!q) co_return q.error();
  auto [display, img] = *q;
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  if (!body->is_object())
    co_return Error(400, "invalid_request",
                    "the body must be a computer_call item or an action object");
  // A computer_call item (action, or actions run in order), or a bare action.
  std::string call_id = body->value("call_id", "");
  json list = json::array();
  std::string where;
  if (body->value("type", "") == "computer_call") {
    if (body->contains("actions")) {
      if (!(*body)["actions"].is_array() || (*body)["actions"].empty() ||
          (*body)["actions"].size() > kMaxActionsPerCall)
        co_return Error(
            400, "invalid_request",
            fmt::format("actions must be a list of 1 to {} actions", kMaxActionsPerCall));
      list = (*body)["actions"];
      where = "actions";
    } else if (body->contains("action")) {
      list.push_back((*body)["action"]);
      where = "action";
    } else {
      co_return Error(400, "invalid_request", "a computer_call needs action or actions");
    }
  } else {
    list.push_back(*body);
    where = "action";
  }
  auto op = ctx_.sandboxes.BeginGuestOperation(c.id, "computer action");
  if (!op) co_return op.error();
  auto mirror = co_await ReadyMirror(c.id);
  if (auto gone = op->Interrupted()) co_return *gone;
  if (!mirror) co_return mirror.error();
  auto m = *mirror;
  Display d = DisplayOf(EffectiveDisplay(c.id, display), m->framebuffer());
  std::vector<vb::Action> actions;
  json params = json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    auto a =
        ParseOpenAiAction(list[i], d, where == "actions" ? fmt::format("actions[{}]", i) : where);
    if (!a) co_return Error(400, "invalid_request", a.error());
    if (!*a) continue;  // screenshot: the answer is one
    actions.push_back(std::move(**a));
    params.push_back(list[i]);
  }
  if (!actions.empty()) {
    // After a trailing wait the screen is taken as it is: the model asked to wait, not to settle.
    std::optional<vb::SettleOptions> settle;
    if (actions.back().type != vb::Action::Type::kWait) settle = vb::SettleOptions{};
    auto out = co_await PerformStep(c, *m, actions, params, settle);
    if (auto gone = op->Interrupted()) co_return *gone;
    if (!out.failure.empty())
      co_return Error(m->ready() ? 500 : 502, m->ready() ? "internal" : "guest_error",
                      fmt::format("{} ({} of {} actions were performed)", out.failure,
                                  out.performed, actions.size()));
  }
  if (!SameScreen(*m, d))
    co_return Error(502, "guest_error",
                    "the sandbox's screen was lost or resized during the actions");
  uint32_t w = 0, h = 0;
  auto bytes = Encode(m->framebuffer(), img, d, &w, &h);
  if (!bytes) co_return Error(500, "internal", "encoding the screenshot: " + bytes.error());
  json r = {{"type", "computer_call_output"},
            {"output",
             {{"type", "computer_screenshot"},
              {"image_url", "data:image/" + img.format + ";base64," + Base64(*bytes)}}}};
  if (!call_id.empty()) r["call_id"] = call_id;
  co_return Json(200, r);
}

}  // namespace deskbox::api
