#pragma once
// A coroutine pause on the caller's executor (vmhost-internal).
#include <boost/asio/awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace deskbox::vmhost {

inline boost::asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  boost::asio::steady_timer t(co_await boost::asio::this_coro::executor);
  t.expires_after(d);
  boost::system::error_code ec;
  co_await t.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
}

}  // namespace deskbox::vmhost
