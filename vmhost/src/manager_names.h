#pragma once
// The names SandboxManager's files (sandbox_manager.cc, sandbox_pools.cc, sandbox_browser.cc,
// sandbox_recovery.cc, sandbox_trim.cc) write in.
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "vmhost/sandbox_host.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;
using nlohmann::json;

namespace manager {
inline constexpr char kLog[] = "vmhost";
inline VmError JailerErr(std::string m) { return {VmError::Code::kJailer, std::move(m)}; }
}  // namespace manager

}  // namespace deskbox::vmhost
