#include <cstddef>
#include <cstdint>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "vmhost/template.h"

namespace {
// Invalid UTF-8 in string fields is expected here; keep the output readable.
const bool kQuiet = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)deskbox::vmhost::DecodeManifest(bytes);
  // Also fuzz a well-formed header around the input so the payload parser is reached.
  deskbox::vmhost::v1::TemplateManifest m;
  if (!m.ParseFromString(bytes)) return 0;
  m.set_format_version(deskbox::vmhost::kManifestFormatVersion);
  if (m.ByteSizeLong() > deskbox::vmhost::kMaxManifestPayload) return 0;
  auto encoded = deskbox::vmhost::EncodeManifest(m);
  auto round = deskbox::vmhost::DecodeManifest(encoded);
  if (!round) __builtin_trap();  // whatever we encode we must read back
  return 0;
}
