#pragma once
// What the fake guest services (fake_rfb_server.h, fake_devtools.h) share: a listening socket
// on 127.0.0.1, and polling what they recorded on their own thread.
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <thread>

namespace deskbox::api {

// Opens `acceptor` listening on 127.0.0.1 at a port the kernel picks; returns the port.
inline uint16_t ListenOnLoopback(boost::asio::ip::tcp::acceptor& acceptor) {
  namespace asio = boost::asio;
  acceptor.open(asio::ip::tcp::v4());
  acceptor.set_option(asio::socket_base::reuse_address(true));
  acceptor.bind({asio::ip::make_address("127.0.0.1"), 0});
  acceptor.listen();
  return acceptor.local_endpoint().port();
}

// Polls `done` every 5 ms until it holds or `timeout` passes.
inline bool PollUntil(const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace deskbox::api
