// The API on a full state disk (FullDiskVfs makes the database's writes fail as ENOSPC does):
// a request that would only change records is answered 507 insufficient_storage and changes
// nothing; reads go on; a state change of a VM that already happened is kept and written once
// there is room; a sandbox that could not be put on record does not stay running.
#include "api_routes_fixture.h"
#include "full_disk_vfs.h"

namespace deskbox::api {
namespace {

using testing::FullDiskVfs;

class StateDiskRoutesTest : public ApiRoutesTest {
 protected:
  static void SetUpTestSuite() { FullDiskVfs::Install(); }  // before the harness opens its store
  void TearDown() override { FullDiskVfs::Set(FullDiskVfs::Mode::kWorking); }

  void ExpectFull(const ClientResponse& r) {
    EXPECT_EQ(r.status, 507u) << r.body;
    EXPECT_EQ(Code(r), "insufficient_storage") << r.body;
    EXPECT_NE(r.body.find("state disk is full"), std::string::npos) << r.body;
  }
  size_t Alive() {
    return h_.OnServer([this] { return h_.host().alive(); });
  }
  std::vector<SandboxRecord> Stored() {
    return h_.OnServer([this] { return h_.store().LoadSandboxes().value_or(std::vector<SandboxRecord>{}); });
  }
  double Metric(const std::string& name) {
    auto body = h_.Call(verb::get, "/metrics").body;
    auto at = body.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(body.substr(at + name.size() + 2));
  }
};

TEST_F(StateDiskRoutesTest, WritesAre507AndChangeNothingReadsGoOnAndAllWorksOnceThereIsRoom) {
  std::string id = Create(json{{"metadata", {{"job", "before"}}}});
  std::string view = Token(id, "view");
  auto tokens_before = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/tokens"))["tokens"];
  ASSERT_EQ(Alive(), 1u);

  FullDiskVfs::Set(FullDiskVfs::Mode::kFull);
  ExpectFull(h_.Call(verb::post, "/v1/sandboxes", "{}"));
  EXPECT_EQ(Alive(), 1u) << "a sandbox not on record was left running";
  ExpectFull(h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", R"({"scope": "control"})"));
  ExpectFull(h_.Call(verb::post, "/v1/keys", R"({"name": "ci"})"));
  ExpectFull(h_.Call(verb::patch, "/v1/sandboxes/" + id, R"({"metadata": {"job": "after"}})"));
  ExpectFull(h_.Call(verb::put, "/v1/sandboxes/" + id + "/egress", R"({"default": "allow"})"));
  std::string view_id = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/tokens"))["tokens"][0].value("id", "");
  ExpectFull(h_.Call(verb::delete_, "/v1/tokens/" + view_id));
  auto keys = Body(h_.Call(verb::get, "/v1/keys"))["keys"];
  ASSERT_EQ(keys.size(), 1u);

  // Reads: as before the disk filled up; the token whose revocation failed still works.
  EXPECT_EQ(h_.Call(verb::get, "/healthz").status, 200u);
  auto listed = Body(h_.Call(verb::get, "/v1/sandboxes"))["sandboxes"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["metadata"]["job"], "before");
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/egress")).value("default", ""), "deny");
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/tokens"))["tokens"], tokens_before);
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id, "", view).status, 200u);
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/keys"))["keys"], keys);

  // A pause happens in the VM whatever the disk says: it is answered, kept in memory, and
  // written once there is room.
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause").status, 200u);
  EXPECT_EQ(State(id), "paused");
  EXPECT_EQ(Metric("deskbox_state_unsaved_sandboxes"), 1);
  EXPECT_EQ(Stored().at(0).state, vmhost::SandboxState::kRunning);

  FullDiskVfs::Set(FullDiskVfs::Mode::kWorking);
  for (int i = 0; i < 400 && Metric("deskbox_state_unsaved_sandboxes") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the timeout clock's tick
  EXPECT_EQ(Metric("deskbox_state_unsaved_sandboxes"), 0);
  auto stored = Stored();
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].state, vmhost::SandboxState::kPaused);
  EXPECT_EQ(stored[0].metadata_json, R"({"job":"before"})");

  EXPECT_EQ(h_.Call(verb::patch, "/v1/sandboxes/" + id, R"({"metadata": {"job": "after"}})").status, 200u);
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", R"({"scope": "control"})").status, 201u);
  EXPECT_EQ(h_.Call(verb::post, "/v1/keys", R"({"name": "ci"})").status, 201u);
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/tokens/" + view_id).status, 204u);
  Create();
  EXPECT_EQ(Alive(), 2u);
  EXPECT_EQ(Stored().size(), 2u);
}

TEST_F(StateDiskRoutesTest, AFailingStateDiskIs500) {
  std::string id = Create();
  FullDiskVfs::Set(FullDiskVfs::Mode::kFailing);
  auto r = h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", R"({"scope": "view"})");
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_EQ(Code(r), "internal");
  r = h_.Call(verb::post, "/v1/sandboxes", "{}");
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_EQ(Alive(), 1u);
}

}  // namespace
}  // namespace deskbox::api
