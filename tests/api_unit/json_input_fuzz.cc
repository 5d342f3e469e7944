// Untrusted request bodies and query strings: the bounded JSON parser, the strict field reader
// (as the create and exec handlers use it) and percent-decoding must never crash or hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/http_server.h"
#include "api/json_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  deskbox::api::PercentDecode(text, true);
  auto j = deskbox::api::ParseJson(text);
  if (!j) return 0;
  deskbox::api::ObjectReader in(*j);
  in.String("template", 1, 128);
  if (const auto* r = in.Object("resolution")) {
    deskbox::api::ObjectReader rr(*r, "resolution");
    rr.Integer("width", 1, 100000);
    rr.Integer("height", 1, 100000);
    rr.Finish();
  }
  in.Integer("timeout_s", 1, 604800);
  in.Enum("on_timeout", {"pause", "stop"});
  in.Array("argv");
  in.Bool("follow");
  in.Any("egress");
  in.Finish();
  deskbox::api::Dump(*j);
  return 0;
}
