#pragma once
// FrameMirror: one long-lived RFB session per sandbox that keeps the current frame, a frame
// sequence number and the damage of recent updates, and carries input to the guest.
//
// Screenshots are read from the mirror (no guest round trip). After input, Settle() waits for
// the screen to settle: for the first update after the input, then for a quiet period in which
// only small damage (a caret, the pointer) arrives, bounded by a timeout — no fixed sleeps.
//
// Threads: none of its own. Everything runs on the executor it is given (deskboxd's io_context);
// the socket comes from a Connector (vmhost opens it inside the sandbox's netns). When the
// connection ends (pause and resume, a restarted X server) it reconnects with backoff until
// Stop().
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "vnc_bridge/error.h"
#include "vnc_bridge/rfb_client.h"

namespace deskbox::vnc_bridge {

struct SettleOptions {
  std::chrono::milliseconds quiet{200};       // no large damage for this long: settled
  std::chrono::milliseconds timeout{5000};    // give up waiting (settled = false)
  std::chrono::milliseconds no_change{2000};  // nothing changed at all by then: settled, unchanged
  uint64_t small_area = 48 * 48;              // damage this small (a caret, the pointer) is quiet
  uint32_t small_side = 64;
};

struct SettleResult {
  uint64_t seq = 0;      // frame sequence number when it returned
  bool changed = false;  // some update arrived after the input
  bool settled = false;  // the screen was quiet at the end (false: timed out while it changed)
  std::chrono::milliseconds waited{0};
  std::chrono::milliseconds first_change{-1};  // input → first update, -1 if none
};

struct Point {
  uint32_t x = 0, y = 0;
};

class FrameMirror : public std::enable_shared_from_this<FrameMirror> {
 public:
  // A connection to the guest's RFB server, or why there is none (kClosed: the sandbox is no
  // longer running; kTimeout; kIo).
  using Connector =
      std::function<boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, Error>>()>;
  using Clock = std::chrono::steady_clock;

  FrameMirror(boost::asio::any_io_executor executor, Connector connect, std::string name);
  ~FrameMirror();

  void Start();
  // Ends the session; waiters wake with an error.
  void Stop();
  bool stopped() const { return stopped_; }

  // Waits until a whole frame is mirrored (at once when it already is). Errors: kTimeout, or
  // last_error() once stopped (kClosed).
  boost::asio::awaitable<std::expected<void, Error>> WaitReady(std::chrono::milliseconds timeout);
  bool ready() const { return client_ && client_->ready(); }
  const Framebuffer& framebuffer() const { return client_->framebuffer(); }
  uint64_t seq() const { return seq_; }
  // Why the last connection ended or could not be made (message empty: none has yet).
  const Error& last_error() const { return last_error_; }
  uint64_t connects() const { return connects_; }

  // Input, sent in order by one writer. Errors: not ready (last_error(), or kClosed when no
  // connection was made yet), or the guest stopped reading (kTooLarge).
  std::expected<void, Error> Pointer(uint8_t buttons, uint32_t x, uint32_t y);
  std::expected<void, Error> Key(bool down, uint32_t keysym);
  // Waits until the guest's RFB server has processed all input sent before (an RFB fence), at
  // most `timeout`. False when it could not tell: the server does no fences, the connection
  // changed, or the time ran out.
  boost::asio::awaitable<bool> Sync(std::chrono::milliseconds timeout);
  // Input queued or being written, not yet taken by the guest's socket.
  size_t unsent() const { return pending_.size() + in_flight_; }
  // Lets the writer catch up: waits until at most `at_most` bytes of input are unsent. Input is
  // queued without waiting, so a long run of it (typing long text) calls this between parts to
  // stay far below the cap on unsent input. Errors: not ready, or the guest took nothing
  // within `timeout` (kTooLarge, as when the cap is reached).
  boost::asio::awaitable<std::expected<void, Error>> Drain(size_t at_most, std::chrono::milliseconds timeout);
  Point pointer() const { return pointer_; }
  uint8_t buttons() const { return buttons_; }

  // Called on the executor after each batch of updates is applied to framebuffer() (the screen
  // recorder takes its frames here). One observer; nullptr removes it. It must not stop or
  // destroy the mirror.
  void SetOnUpdate(std::function<void()> on_update) { on_update_ = std::move(on_update); }

  // Waits for the screen to settle after `after_seq` (the seq() read before the input was sent).
  boost::asio::awaitable<SettleResult> Settle(uint64_t after_seq, Clock::time_point input_time,
                                              const SettleOptions& options);
  // When update `seq` arrived, if it is among the recent ones the mirror keeps.
  std::optional<Clock::time_point> UpdateTime(uint64_t seq) const;
  // Waits until seq() > after_seq or `timeout`; true if it advanced.
  boost::asio::awaitable<bool> WaitUpdate(uint64_t after_seq, std::chrono::milliseconds timeout);

 private:
  struct UpdateInfo {
    uint64_t seq;
    Clock::time_point time;
    uint64_t largest_area;
    uint32_t largest_side;
  };
  boost::asio::awaitable<void> Run();
  boost::asio::awaitable<std::expected<void, Error>> Session(boost::asio::ip::tcp::socket& sock);
  // Why input cannot go now the screen is not ready.
  Error NotReady() const;
  void Flush();
  boost::asio::awaitable<void> WriteLoop(std::shared_ptr<boost::asio::ip::tcp::socket> sock);
  // Wakes every waiter (new update, connection change, stop).
  void Notify();
  // Sleeps until `until` or Notify().
  boost::asio::awaitable<void> WaitChange(Clock::time_point until);
  // Sleeps until `until` or a cancel of the timers in `waiters` (Notify() for waiters_).
  boost::asio::awaitable<void> WaitOn(std::set<boost::asio::steady_timer*>& waiters, Clock::time_point until);

  boost::asio::any_io_executor executor_;
  Connector connect_;
  std::string name_;
  std::unique_ptr<RfbClient> client_;
  std::shared_ptr<boost::asio::ip::tcp::socket> socket_;
  std::string pending_;  // output not yet written
  size_t in_flight_ = 0;  // output being written
  std::set<boost::asio::steady_timer*> drain_waiters_;  // woken after each write
  bool writing_ = false;
  bool stopped_ = false;
  bool started_ = false;
  uint64_t seq_ = 0;  // across reconnects: never goes back
  uint64_t connects_ = 0;
  Error last_error_{ErrorCode::kClosed, ""};
  std::deque<UpdateInfo> history_;
  std::set<boost::asio::steady_timer*> waiters_;
  boost::asio::steady_timer backoff_;
  Point pointer_{};
  bool pointer_known_ = false;
  uint8_t buttons_ = 0;
  uint32_t fence_id_ = 0;
  std::function<void()> on_update_;
};

}  // namespace deskbox::vnc_bridge
