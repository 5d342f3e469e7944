// Fuzz target: bytes parsed as a Request and handed to the AgentService, with fakes for
// everything that would touch the machine (no program is run; file paths are confined to a
// temp dir). Aborts when a response breaks the service's contract.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "agent/log.h"
#include "agent/service.h"
#include "agent_fakes.h"
#include "desktop_images/agent_frame.h"

namespace {

using namespace deskbox::agent;
namespace pb = ::deskbox::agent::v1;

struct World {
  testing::FakeClock clock;
  testing::FakeSystemControl system;
  testing::FakeProcessRunner processes;
  testing::FakeDesktopProbe desktop;
  InlineTaskRunner tasks;
  testing::TempDir dir;
  AgentService service{AgentDeps{clock, system, processes, desktop, tasks}};
  uint64_t calls = 0;

  World() {
    SetLogEnabled(false);
    google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" on every mutated string
    desktop.SetAllUp();
    processes.handler = [](const ExecSpec& spec) -> std::expected<ExecOutcome, AgentError> {
      ExecOutcome o;
      o.stdout_data.assign(std::min<size_t>(spec.max_output_bytes, 64), '\xfe');
      return o;
    };
  }
};

// Consumes the input front to back; zeros once it runs out.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t Int(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | (pos_ < size_ ? data_[pos_++] : 0);
    return v;
  }
  // Short UTF-8 text built from the input (the parser would reject non-UTF-8 before us).
  std::string Text() {
    static constexpr char kAlphabet[] = "ab/.=-_ \0\xc3\xa9";
    std::string s;
    for (uint64_t n = Int(1) % 24; n > 0; --n) {
      const uint64_t c = Int(1) % (sizeof kAlphabet - 1);
      if (kAlphabet[c] == '\xc3') {
        s += "\xc3\xa9";
      } else if (kAlphabet[c] != '\xa9') {
        s += kAlphabet[c];
      }
    }
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Most random inputs do not parse as a Request, or parse as one without a kind; those are
// turned into a request of a kind the input picks, so every handler is reached.
pb::Request Structured(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  pb::Request r;
  r.set_id(in.Int(1));
  switch (in.Int(1) % 9) {
    case 0: r.mutable_ping(); break;
    case 1:
      r.mutable_ready()->set_timeout_ms(static_cast<uint32_t>(in.Int(3)));
      r.mutable_ready()->set_require_settled(in.Int(1) & 1);
      break;
    case 2: r.mutable_set_clock()->set_unix_time_ns(static_cast<int64_t>(in.Int(8))); break;
    case 3: r.mutable_reseed()->set_entropy(std::string(in.Int(2) % 600, 'e')); break;
    case 4: {
      auto* e = r.mutable_exec();
      for (uint64_t n = in.Int(1) % 4; n > 0; --n) e->add_argv(in.Text());
      if (in.Int(1) & 1) e->set_shell(in.Text());
      if (in.Int(1) & 1) (*e->mutable_env())[in.Text()] = in.Text();
      e->set_cwd(in.Int(1) & 1 ? "/" : in.Text());
      e->set_timeout_s(static_cast<uint32_t>(in.Int(2)));
      e->set_max_output_bytes(in.Int(4) << (in.Int(1) % 16));
      break;
    }
    case 5:
      r.mutable_file_read()->set_path((in.Int(1) & 1 ? "/" : "") + in.Text());
      r.mutable_file_read()->set_chunk_bytes(static_cast<uint32_t>(in.Int(3)));
      break;
    case 6: {
      auto* w = r.mutable_file_write();
      w->set_path((in.Int(1) & 1 ? "/" : "") + in.Text());
      w->set_offset(in.Int(1) & 1 ? 0 : in.Int(2));
      w->set_data(std::string(in.Int(2) << (in.Int(1) % 6), 'd'));
      w->set_last(in.Int(1) & 1);
      w->set_mode(static_cast<uint32_t>(in.Int(2)));
      w->set_create_parents(in.Int(1) & 1);
      break;
    }
    case 7: r.mutable_clipboard_get(); break;
    default: r.mutable_clipboard_set()->set_text(in.Text()); break;
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World world_instance;  // for the whole run; removes its temp dir at exit
  World* world = &world_instance;
  auto request = deskbox::desktop_images::ParseRequest(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!request || request->kind_case() == pb::Request::KIND_NOT_SET) {
    request = Structured(data, size);
  }
  testing::SandboxRequest(*request, world->dir.path());
  // The service keeps the reply of an unfinished write and answers through it when the write
  // expires, inputs later (FileWriter::ExpireIdle). Like the agent's connection (port.cc), the
  // recorder lives as long as a reply that points to it.
  auto rec = std::make_shared<testing::ReplyRecorder>();
  world->service.Handle(*request,
                        [rec, reply = rec->reply()](pb::Response r) { return reply(std::move(r)); });
  const std::string problem = testing::CheckResponses(*request, rec->responses());
  if (!problem.empty()) {
    std::fprintf(stderr, "contract broken: %s\n", problem.c_str());
    std::abort();
  }
  if (++world->calls % 256 == 0) {
    world->clock.Advance(std::chrono::seconds(61));
    world->service.Tick();  // expire abandoned writes, so the session limit is exercised
  }
  return 0;
}
