#pragma once
// Helpers shared by the recorder tests and fuzz targets.
#include <stdio.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "common/files.h"
#include "recorder/event_log.h"

namespace deskbox::recorder::testing {

// One event of every kind, every field set to something other than its default.
inline std::vector<Event> AllKinds(const std::string& sandbox_id) {
  std::vector<Event> out;
  auto base = [&](v1::Actor::Kind kind, const char* actor_id) {
    Event e;
    e.set_sandbox_id(sandbox_id);
    e.set_time_unix_ns(1'706'702'400'123'456'789 + static_cast<int64_t>(out.size()));
    e.set_request_id("req-" + std::to_string(out.size()));
    e.mutable_actor()->set_kind(kind);
    e.mutable_actor()->set_id(actor_id);
    e.mutable_actor()->set_remote("192.0.2.7:40000");
    return e;
  };
  {
    Event e = base(v1::Actor::SYSTEM, "");
    auto* k = e.mutable_lifecycle();
    k->set_from_state("creating");
    k->set_to_state("running");
    k->set_reason("api");
    k->set_detail("restored from the warm pool");
    out.push_back(e);
  }
  {
    Event e = base(v1::Actor::AGENT, "key_agent");
    auto* k = e.mutable_action();
    k->set_type("click");
    k->set_params_json(R"({"x":10,"y":20,"button":"left"})");
    k->set_frame_seq(42);
    k->set_settled(true);
    k->set_duration_ms(35);
    out.push_back(e);
  }
  {
    Event e = base(v1::Actor::HUMAN, "tok_view");
    auto* k = e.mutable_viewer_input();
    k->set_kind("pointer");
    k->set_dropped(true);
    k->set_count(17);
    out.push_back(e);
  }
  {
    Event e = base(v1::Actor::TOKEN, "tok_cdp");
    auto* k = e.mutable_cdp();
    k->set_method("Page.navigate");
    k->set_session_id("9A3F");
    k->set_notable(true);
    k->set_note("navigation");
    out.push_back(e);
  }
  {
    Event e = base(v1::Actor::SYSTEM, "");
    auto* k = e.mutable_egress();
    k->set_protocol("tls");
    k->set_name("example.com");
    k->set_address("93.184.216.34");
    k->set_port(443);
    k->set_allowed(true);
    k->set_rule("allow example.com");
    k->set_reason("allowlist");
    k->set_bytes_up(1200);
    k->set_bytes_down(54000);
    k->set_duration_ms(812);
    out.push_back(e);
  }
  {
    Event e = base(v1::Actor::API_KEY, "key_ops");
    auto* k = e.mutable_exec();
    k->add_argv("ls");
    k->add_argv("-l");
    k->set_shell("ls -l | wc -l");
    k->set_exit_code(2);
    k->set_signal(9);
    k->set_duration_ms(1500);
    k->set_timed_out(true);
    k->set_stdout_bytes(100);
    k->set_stderr_bytes(7);
    out.push_back(e);
  }
  {
    Event e = base(v1::Actor::API_KEY, "key_ops");
    auto* k = e.mutable_file();
    k->set_direction("upload");
    k->set_path("/home/user/report.pdf");
    k->set_bytes(123456);
    k->set_ok(false);
    k->set_error("disk full");
    out.push_back(e);
  }
  return out;
}

// A recording event (a finished segment), every field set; not in AllKinds, whose size the
// log tests count on.
inline Event RecordingSegmentEvent(const std::string& sandbox_id) {
  Event e;
  e.set_sandbox_id(sandbox_id);
  e.set_time_unix_ns(1'706'702'460'000'000'000);
  e.set_request_id("req-rec");
  e.mutable_actor()->set_kind(v1::Actor::SYSTEM);
  auto* k = e.mutable_recording();
  k->set_phase("segment");
  k->set_index(3);
  k->set_file("000003.mp4");
  k->set_start_unix_ms(1'706'702'400'000);
  k->set_end_unix_ms(1'706'702'460'000);
  k->set_bytes(81234);
  k->set_sha256(std::string(64, 'a'));
  k->set_width(1280);
  k->set_height(800);
  k->set_frames(412);
  k->set_truncated(true);
  k->set_detail("cut back after a restart");
  k->set_dropped_frames(2);
  return e;
}

// A shell command's exit status (as pclose gives it) and standard output.
struct Run {
  int status;
  std::string out;
};
inline Run Shell(const std::string& cmd) {
  Run r{-1, ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = ::pclose(p);
  return r;
}

// A directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/recorder-test-XXXXXX";
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    if (!path_.empty()) (void)RemoveTree(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace deskbox::recorder::testing
