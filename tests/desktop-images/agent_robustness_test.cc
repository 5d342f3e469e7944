// Robustness: the service fed malformed, oversized and random requests. Exec and clipboard go
// to a fake runner (nothing is executed); file paths are confined to a temp dir.
#include <gtest/gtest.h>

#include <random>

#include <google/protobuf/stubs/logging.h>

#include "agent/log.h"
#include "agent/service.h"
#include "agent_fakes.h"
#include "desktop_images/agent_frame.h"

namespace deskbox::agent {
namespace {

using namespace std::chrono_literals;

class RequestGenerator {
 public:
  RequestGenerator(uint64_t seed, std::string root) : rng_(seed), root_(std::move(root)) {}

  pb::Request Next() {
    pb::Request r;
    r.set_id(Pick({0, 1, 2, 3, UINT64_MAX, rng_()}));
    switch (rng_() % 10) {
      case 0:
        r.mutable_ping();
        break;
      case 1:
        r.mutable_ready()->set_timeout_ms(static_cast<uint32_t>(Pick({0, 1, 300, 600'001, UINT32_MAX})));
        r.mutable_ready()->set_require_settled(rng_() % 2);
        break;
      case 2:
        r.mutable_set_clock()->set_unix_time_ns(static_cast<int64_t>(Pick({0, 1, rng_()})));
        break;
      case 3:
        r.mutable_reseed()->set_entropy(Blob(Pick({0, 31, 32, 33, 512, 513, 100000})));
        break;
      case 4: {
        auto* e = r.mutable_exec();
        const int argc = static_cast<int>(Pick({0, 1, 2, 50}));
        for (int i = 0; i < argc; ++i) e->add_argv(Text(Pick({0, 1, 10, 5000})));
        if (rng_() % 2) e->set_shell(Text(Pick({0, 5, 100000})));
        if (rng_() % 3 == 0) (*e->mutable_env())[Text(Pick({0, 1, 8}))] = Text(Pick({0, 8}));
        e->set_cwd(Pick({"", "/", "/tmp", "relative", "/nonexistent", "/bin/sh"}));
        if (rng_() % 4 == 0) e->set_stdin(Blob(Pick({0, 100, 15u << 20})));
        e->set_timeout_s(static_cast<uint32_t>(Pick({0, 1, 3600, 3601, UINT32_MAX})));
        e->set_max_output_bytes(Pick({0, 1, 6u << 20, (6u << 20) + 1, UINT64_MAX}));
        break;
      }
      case 5:
        r.mutable_file_read()->set_path(Path());
        r.mutable_file_read()->set_chunk_bytes(
            static_cast<uint32_t>(Pick({0, 1, 4096, 1u << 20, (1u << 20) + 1, UINT32_MAX})));
        break;
      case 6: {
        auto* w = r.mutable_file_write();
        w->set_path(Path());
        w->set_offset(Pick({0, 0, 0, 1, 100, UINT64_MAX}));
        w->set_data(Blob(Pick({0, 1, 1000, 1u << 20, (1u << 20) + 1})));
        w->set_last(rng_() % 2);
        w->set_mode(static_cast<uint32_t>(Pick({0, 0644, 0755, 07777, 010000, UINT32_MAX})));
        w->set_create_parents(rng_() % 2);
        break;
      }
      case 7:
        r.mutable_clipboard_get();
        break;
      case 8:
        r.mutable_clipboard_set()->set_text(Text(Pick({0, 10, 1u << 20, (1u << 20) + 1})));
        break;
      default:
        break;  // no kind
    }
    return r;
  }

 private:
  uint64_t Pick(std::initializer_list<uint64_t> values) {
    return *(values.begin() + rng_() % values.size());
  }
  const char* Pick(std::initializer_list<const char*> values) {
    return *(values.begin() + rng_() % values.size());
  }
  std::string Blob(size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < std::min<size_t>(n, 4096); ++i) s[i] = static_cast<char>(rng_());
    return s;
  }
  // Valid UTF-8 (the parser would reject anything else before the service sees it), with NULs.
  std::string Text(size_t n) {
    std::string s(n, 'a');
    for (size_t i = 0; i < std::min<size_t>(n, 64); ++i) {
      s[i] = "abc/=.\0 -"[rng_() % 9];
    }
    return s;
  }
  std::string Path() {
    switch (rng_() % 8) {
      case 0: return "";
      case 1: return "relative/file";
      case 2: return std::string("/with\0nul", 9);
      case 3: return "/" + std::string(5000, 'a');
      case 4: return root_;
      case 5: return root_ + "/";
      case 6: return root_ + "/sub/dir/file" + std::to_string(rng_() % 4);
      default: return root_ + "/file" + std::to_string(rng_() % 4);
    }
  }

  std::mt19937_64 rng_;
  std::string root_;
};

struct RobustnessFixture : ::testing::Test {
  testing::FakeClock clock;
  testing::FakeSystemControl system;
  testing::FakeProcessRunner processes;
  testing::FakeDesktopProbe desktop;
  InlineTaskRunner tasks;
  testing::TempDir dir;

  void SetUp() override {
    SetLogEnabled(std::getenv("DESKBOX_TEST_LOGS") != nullptr);
    google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" on every mutated string
    desktop.SetAllUp();
    // The fake runner answers with sizes at and beyond the caps it was given.
    processes.handler = [n = 0](const ExecSpec& spec) mutable -> std::expected<ExecOutcome, AgentError> {
      ++n;
      if (n % 7 == 0) return std::unexpected(MakeError(pb::Error::NOT_FOUND, "no such program"));
      ExecOutcome o;
      o.stdout_data.assign(std::min<size_t>(spec.max_output_bytes, (n % 3) ? 100 : 6u << 20), 'o');
      o.stderr_data.assign(std::min<size_t>(spec.max_output_bytes, (n % 5) ? 10 : 6u << 20), '\xff');
      o.exit_code = n % 4;
      o.timed_out = n % 11 == 0;
      return o;
    };
  }
};

TEST_F(RobustnessFixture, RandomRequestsKeepTheContract) {
  AgentService service(AgentDeps{clock, system, processes, desktop, tasks});
  RequestGenerator gen(20240601, dir.path());
  for (int i = 0; i < 3000; ++i) {
    pb::Request request = gen.Next();
    testing::ReplyRecorder rec;
    service.Handle(request, rec.reply());
    auto problem = testing::CheckResponses(request, rec.responses());
    ASSERT_EQ(problem, "") << "request " << i << " kind " << request.kind_case();
    if (i % 100 == 0) {
      clock.Advance(61s);
      service.Tick();
    }
  }
  service.OnDisconnect();
  // Whatever happened, no temp files are left behind.
  for (const auto& name : testing::ListDir(dir.path())) {
    EXPECT_EQ(name.find(".deskbox-"), std::string::npos) << name;
  }
}

TEST_F(RobustnessFixture, RandomBytesAsRequests) {
  AgentService service(AgentDeps{clock, system, processes, desktop, tasks});
  std::mt19937_64 rng(99);
  // Start from valid requests and mutate their bytes.
  RequestGenerator gen(7, dir.path());
  int parsed = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string bytes = gen.Next().SerializeAsString();
    if (bytes.size() > 65536) bytes.resize(65536);
    for (int flips = static_cast<int>(rng() % 4); flips > 0 && !bytes.empty(); --flips) {
      bytes[rng() % bytes.size()] ^= static_cast<char>(1u << (rng() % 8));
    }
    auto request = desktop_images::ParseRequest(bytes);
    if (!request) continue;
    ++parsed;
    testing::SandboxRequest(*request, dir.path());
    testing::ReplyRecorder rec;
    service.Handle(*request, rec.reply());
    ASSERT_EQ(testing::CheckResponses(*request, rec.responses()), "") << i;
  }
  EXPECT_GT(parsed, 1000);
}

TEST_F(RobustnessFixture, OversizedRequestsAreRefusedCheaply) {
  AgentService service(AgentDeps{clock, system, processes, desktop, tasks});
  pb::Request r;
  r.set_id(1);
  r.mutable_clipboard_set()->set_text(std::string(15u << 20, 'x'));
  testing::ReplyRecorder rec;
  service.Handle(r, rec.reply());
  ASSERT_EQ(rec.responses().size(), 1u);
  EXPECT_EQ(rec.responses()[0].error().code(), pb::Error::TOO_LARGE);
  EXPECT_TRUE(processes.Calls().empty());

  pb::Request w;
  w.set_id(2);
  w.mutable_file_write()->set_path(dir.File("big"));
  w.mutable_file_write()->set_data(std::string(15u << 20, 'x'));
  w.mutable_file_write()->set_last(true);
  service.Handle(w, rec.reply());
  ASSERT_EQ(rec.responses().size(), 2u);
  EXPECT_EQ(rec.responses()[1].error().code(), pb::Error::TOO_LARGE);
  EXPECT_TRUE(testing::ListDir(dir.path()).empty());
}

}  // namespace
}  // namespace deskbox::agent
