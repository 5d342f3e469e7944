// deskbox-events: offline tool for event logs.
//
//   deskbox-events verify FILE              exit 0: "ok: N events, head <hex>"
//                                           exit 1: what is wrong, at which offset and seq
//   deskbox-events verify FILE --recording DIR
//                                           also every screen recording segment in DIR
//                                           against the log's recording events (size, SHA-256,
//                                           missing and unlisted files); exit 1 names each one
//   deskbox-events dump FILE [--since SEQ]  one JSON object per line (events with seq > SEQ);
//                                           exit 1 if the log is damaged (after the good part)
// Exit status 2: usage error or the file cannot be read.
#include <google/protobuf/stubs/logging.h>

#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>

#include "recorder/event_json.h"
#include "recorder/event_log.h"
#include "recorder/recording_check.h"

namespace {
using deskbox::recorder::EventLogError;

int Usage() {
  std::fprintf(stderr,
               "usage: deskbox-events verify FILE [--recording DIR]\n"
               "       deskbox-events dump FILE [--since SEQ]\n");
  return 2;
}

int ExitFor(const EventLogError& e) {
  using C = EventLogError::Code;
  return e.code == C::kNotFound || e.code == C::kIo ? 2 : 1;
}

int Verify(const std::string& path) {
  auto r = deskbox::recorder::VerifyLog(path);
  if (!r) {
    std::fprintf(stderr, "bad: %s (%s)\n", r.error().message.c_str(),
                 std::string(ToString(r.error().code)).c_str());
    return ExitFor(r.error());
  }
  std::printf("ok: %llu events, head %s\n", static_cast<unsigned long long>(r->count),
              deskbox::ToHex(r->head).c_str());
  return 0;
}

int VerifyRecording(const std::string& path, const std::string& dir) {
  if (auto r = deskbox::recorder::EventLogReader::Open(path, {}); !r) {
    std::fprintf(stderr, "bad: %s\n", r.error().message.c_str());
    return ExitFor(r.error());
  }
  auto c = deskbox::recorder::CheckRecording(path, dir, std::nullopt);
  for (const auto& p : c.problems) std::fprintf(stderr, "bad: %s: %s\n", p.kind.c_str(), p.message.c_str());
  if (!c.ok) return 1;
  std::printf("ok: %llu events, %llu segments, head %s\n", static_cast<unsigned long long>(c.events),
              static_cast<unsigned long long>(c.segments_checked), c.head.c_str());
  return 0;
}

int Dump(const std::string& path, uint64_t since) {
  auto reader = deskbox::recorder::EventLogReader::Open(path, {.since_seq = since});
  if (!reader) {
    std::fprintf(stderr, "bad: %s\n", reader.error().message.c_str());
    return ExitFor(reader.error());
  }
  for (;;) {
    auto e = (*reader)->Next();
    if (!e) {
      std::fflush(stdout);
      std::fprintf(stderr, "bad: %s (%s)\n", e.error().message.c_str(),
                   std::string(ToString(e.error().code)).c_str());
      return ExitFor(e.error());
    }
    if (!*e) break;
    std::string line = deskbox::recorder::ToJson(**e);
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return std::fflush(stdout) == 0 ? 0 : 2;
}
}  // namespace

int main(int argc, char** argv) {
  google::protobuf::SetLogHandler(nullptr);  // a damaged log is reported by us, once
  if (argc < 3) return Usage();
  std::string_view cmd = argv[1];
  std::string path = argv[2];
  if (cmd == "verify" && argc == 3) return Verify(path);
  if (cmd == "verify" && argc == 5 && std::string_view(argv[3]) == "--recording")
    return VerifyRecording(path, argv[4]);
  if (cmd == "dump") {
    uint64_t since = 0;
    if (argc == 5 && std::string_view(argv[3]) == "--since") {
      std::string_view v = argv[4];
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), since);
      if (ec != std::errc() || p != v.data() + v.size()) return Usage();
    } else if (argc != 3) {
      return Usage();
    }
    return Dump(path, since);
  }
  return Usage();
}
