// VerifyLog on mutated valid logs: any change must be reported, except cutting the log at a
// record boundary, which yields a shorter valid log (the head hash tells it apart).
// The input is a list of edits applied to a fixed valid log: 4 bytes each,
// [op][position high][position low][value].
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "recorder/event_log.h"
#include "recorder_test_util.h"

namespace {
using namespace deskbox::recorder;

struct Fixture {
  std::string bytes;
  std::vector<size_t> boundaries;            // end of the header, then the end of each record
  std::vector<deskbox::Sha256Digest> heads;  // chain hash at each boundary
};

const Fixture& Valid() {
  static const Fixture f = [] {
    google::protobuf::SetLogHandler(nullptr);
    Fixture f;
    f.bytes = EncodeLogHeader("sb-fuzz");
    deskbox::Sha256Digest h =
        deskbox::Sha256(std::string_view(f.bytes).substr(0, f.bytes.size() - 32));
    f.boundaries.push_back(f.bytes.size());
    f.heads.push_back(h);
    uint64_t seq = 0;
    for (auto e : testing::AllKinds("sb-fuzz")) {
      e.set_seq(++seq);
      f.bytes += EncodeLogRecord(h, e.SerializeAsString(), &h);
      f.boundaries.push_back(f.bytes.size());
      f.heads.push_back(h);
    }
    auto v = VerifyLogBytes(f.bytes);
    if (!v || v->count != seq) __builtin_trap();
    return f;
  }();
  return f;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = Valid();
  std::string log = f.bytes;
  for (size_t i = 0; i + 4 <= size && i < 4 * 16; i += 4) {
    size_t pos = (size_t{data[i + 1]} << 8 | data[i + 2]);
    uint8_t value = data[i + 3];
    switch (data[i] % 5) {
      case 0:  // flip bits
        if (!log.empty()) log[pos % log.size()] ^= static_cast<char>(value ? value : 1);
        break;
      case 1:  // cut
        log.resize(pos % (log.size() + 1));
        break;
      case 2:  // delete a byte
        if (!log.empty()) log.erase(pos % log.size(), 1);
        break;
      case 3:  // insert a byte
        log.insert(pos % (log.size() + 1), 1, static_cast<char>(value));
        break;
      default: {  // move a record-sized slice elsewhere (reordering)
        size_t from = pos % (log.size() + 1);
        size_t n = std::min<size_t>(value + 1, log.size() - from);
        std::string slice = log.substr(from, n);
        log.erase(from, n);
        log.insert((pos * 7 + value) % (log.size() + 1), slice);
      }
    }
  }
  auto v = VerifyLogBytes(log);
  if (log == f.bytes) {
    if (!v || v->count != f.boundaries.size() - 1) __builtin_trap();
    return 0;
  }
  if (!v) return 0;  // the change was found
  // Accepted although changed: only a prefix ending on a record boundary may be.
  for (size_t k = 0; k < f.boundaries.size(); ++k) {
    if (log.size() == f.boundaries[k] && f.bytes.compare(0, log.size(), log) == 0 &&
        v->count == k && v->head == f.heads[k])
      return 0;
  }
  __builtin_trap();
}
