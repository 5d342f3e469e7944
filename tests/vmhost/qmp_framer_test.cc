#include <gtest/gtest.h>

#include "vmhost/qmp.h"

namespace deskbox::vmhost {
namespace {

TEST(QmpFramer, SplitsLinesAtEveryByte) {
  std::string stream =
      "{\"QMP\": {\"version\": {}}}\r\n{\"return\": {}, \"id\": 1}\r\n\r\n{\"event\": \"STOP\"}\r\n";
  for (size_t split = 0; split <= stream.size(); ++split) {
    QmpFramer f;
    std::vector<nlohmann::json> got;
    for (auto part : {stream.substr(0, split), stream.substr(split)}) {
      ASSERT_TRUE(f.Feed(part));
      for (;;) {
        auto n = f.Next();
        ASSERT_TRUE(n) << split;
        if (!*n) break;
        got.push_back(**n);
      }
    }
    ASSERT_EQ(got.size(), 3u) << "split at " << split;
    EXPECT_TRUE(got[0].contains("QMP"));
    EXPECT_EQ(got[1]["id"], 1);
    EXPECT_EQ(got[2]["event"], "STOP");
  }
}

TEST(QmpFramer, RejectsNonObjectsAndStaysFailed) {
  QmpFramer f;
  ASSERT_TRUE(f.Feed("[1,2]\n{\"return\":{}}\n"));
  auto n = f.Next();
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error().code, QmpError::Code::kProtocol);
  EXPECT_FALSE(f.Next());
  EXPECT_FALSE(f.Feed("{}\n"));
}

TEST(QmpFramer, RejectsGarbage) {
  QmpFramer f;
  ASSERT_TRUE(f.Feed("{\"return\": \n"));
  EXPECT_FALSE(f.Next());
}

TEST(QmpFramer, BoundsALineWithoutNewline) {
  QmpFramer f;
  std::string chunk(64 * 1024, 'x');
  bool failed = false;
  for (int i = 0; i < 32 && !failed; ++i) failed = !f.Feed(chunk);
  EXPECT_TRUE(failed) << "a 2 MiB line without newline must be refused";
}

}  // namespace
}  // namespace deskbox::vmhost
