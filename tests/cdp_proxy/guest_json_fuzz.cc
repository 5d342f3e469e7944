// The guest's /json answers and clients' CDP messages are untrusted: the sanitizers and the
// method inspector must never crash, hang or pass through a URL that is not ours.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cdp_proxy/guest_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const deskbox::cdp_proxy::PublicUrls urls{"ws://h/v1/sandboxes/s/cdp", "?token=t", "h/v1/sandboxes/s/cdp"};
  if (auto v = deskbox::cdp_proxy::SanitizeVersion(text, urls)) {
    if (!v->body["webSocketDebuggerUrl"].get<std::string>().starts_with("ws://h/v1/sandboxes/s/cdp/")) std::abort();
  }
  if (auto t = deskbox::cdp_proxy::SanitizeTargets(text, urls)) {
    for (const auto& x : *t)
      if (x.contains("webSocketDebuggerUrl") &&
          !x["webSocketDebuggerUrl"].get<std::string>().starts_with("ws://h/v1/sandboxes/s/cdp/"))
        std::abort();
  }
  deskbox::cdp_proxy::SanitizeTarget(text, urls);
  deskbox::cdp_proxy::InspectClientMessage(text);
  return 0;
}
