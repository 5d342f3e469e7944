// The event log reader on arbitrary bytes: no crash, memory bounded by one record (the length
// cap is checked before anything is allocated), and whatever parses renders as JSON.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "recorder/event_json.h"
#include "recorder/event_log.h"

namespace {
using namespace deskbox::recorder;

const bool kQuiet = [] {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in payloads is expected here
  return true;
}();

void Drain(std::string_view bytes, uint64_t since, bool live) {
  auto r = EventLogReader::FromBytes(bytes, {.since_seq = since, .live = live});
  if (!r) return;
  for (int i = 0; i < 100000; ++i) {
    auto e = (*r)->Next();
    if (!e || !*e) break;
    if ((*e)->seq() <= since) __builtin_trap();  // `since` must hold
    (void)ToJson(**e);
  }
  if ((*r)->offset() > bytes.size()) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const uint64_t since = size % 3;
  const bool live = size & 1;

  // 1. The bytes as a whole file.
  Drain(in, since, live);

  // 2. A valid header, then the bytes as records.
  static const std::string header = EncodeLogHeader("sb-fuzz");
  std::string with_header = header;
  with_header += in;
  Drain(with_header, since, live);

  // 3. Correctly chained records whose payloads are slices of the input, so the Event parser
  //    and the seq / sandbox id checks are reached. The first byte of each slice gives its size.
  std::string chained = header;
  deskbox::Sha256Digest h = deskbox::Sha256(std::string_view(header).substr(0, header.size() - 32));
  for (size_t at = 0; at < in.size();) {
    size_t n = static_cast<uint8_t>(in[at++]) + 1;
    std::string_view payload = in.substr(at, n);
    at += payload.size();
    chained += EncodeLogRecord(h, payload, &h);
  }
  Drain(chained, since, live);

  // 4. The input in every string field: after SanitizeUtf8 the event must serialize to
  //    something protobuf parses back (our UTF-8 check is at least as strict as its own).
  //    (A prefix is enough for that and keeps the target fast.)
  const std::string s(in.substr(0, 256));
  Event e;
  e.set_sandbox_id(s);
  e.mutable_actor()->set_id(s);
  e.mutable_cdp()->set_method(s);
  SanitizeUtf8(e);
  Event back;
  if (!back.ParseFromString(e.SerializeAsString())) __builtin_trap();
  (void)ToJson(e);
  return 0;
}
