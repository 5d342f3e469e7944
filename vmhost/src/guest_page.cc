// One DevTools command to a guest page over its WebSocket: does the page run script, reload a
// page whose renderer is gone.
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/slot_network.h"
#include "vmhost/sandbox_manager.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;
namespace beast = boost::beast;

asio::awaitable<std::expected<nlohmann::json, VmError>> SandboxManager::GuestPageCall(
    uint32_t slot, const std::string& page_id, const std::string& method, const nlohmann::json& params,
    std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto fail = [&](std::string what) {
    return std::unexpected(VmError{VmError::Code::kGuest, fmt::format("page {}: {}: {}", page_id, method, what)});
  };
  auto s = co_await ConnectGuest(slot, slot_network::kGuestCdpPort, timeout);
  if (!s) co_return std::unexpected(s.error());
  beast::websocket::stream<asio::ip::tcp::socket> ws(std::move(*s));
  ws.read_message_max(1 << 20);
  // One timer bounds the handshake, the request and every read; cancelling the socket ends
  // whichever operation is pending.
  asio::steady_timer timer(ws.get_executor());
  timer.expires_at(deadline);
  bool expired = false;
  timer.async_wait([&](boost::system::error_code ec) {
    if (ec) return;
    expired = true;
    beast::get_lowest_layer(ws).cancel();
  });
  struct CancelTimer {
    asio::steady_timer& t;
    ~CancelTimer() { t.cancel(); }
  } cancel_timer{timer};
  boost::system::error_code ec;
  co_await ws.async_handshake(slot_network::GuestCdpHostPort(), "/devtools/page/" + page_id,
                              asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return fail("websocket handshake: " + (expired ? std::string("timed out") : ec.message()));
  const std::string request = nlohmann::json{{"id", 1}, {"method", method}, {"params", params}}.dump();
  co_await ws.async_write(asio::buffer(request), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return fail("websocket write: " + ec.message());
  // Events may come before the answer (none are enabled, but be lenient): a bounded number.
  for (int i = 0; i < 64; ++i) {
    beast::flat_buffer buf;
    co_await ws.async_read(buf, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return fail(expired ? "no answer" : "websocket read: " + ec.message());
    auto msg = nlohmann::json::parse(beast::buffers_to_string(buf.data()), nullptr, false);
    if (!msg.is_object() || msg.value("id", 0) != 1) continue;
    auto result = msg.find("result");
    if (result == msg.end() || !result->is_object()) co_return fail("answered " + msg.dump().substr(0, 200));
    co_return std::move(*result);
  }
  co_return fail("no answer among 64 messages");
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::GuestPageEvaluates(uint32_t slot,
                                                                               const std::string& page_id,
                                                                               std::chrono::milliseconds timeout) {
  nlohmann::json params;
  params["expression"] = "1";
  params["returnByValue"] = true;
  auto r = co_await GuestPageCall(slot, page_id, "Runtime.evaluate", params, timeout);
  if (!r) co_return std::unexpected(r.error());
  auto value = r->find("result");
  if (value != r->end() && value->is_object() && value->value("value", 0) == 1)
    co_return std::expected<void, VmError>{};
  co_return std::unexpected(VmError{VmError::Code::kGuest, fmt::format("page {}: Runtime.evaluate answered {}",
                                                                        page_id, r->dump().substr(0, 200))});
}

}  // namespace deskbox::vmhost
