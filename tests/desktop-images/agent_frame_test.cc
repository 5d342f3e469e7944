#include "desktop_images/agent_frame.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "agent.pb.h"

namespace deskbox::desktop_images {
namespace {

namespace pb = ::deskbox::agent::v1;

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Header(uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
          static_cast<char>(n)};
}

std::vector<pb::Request> SampleRequests() {
  std::vector<pb::Request> out;
  pb::Request ping;
  ping.set_id(1);
  ping.mutable_ping();
  out.push_back(ping);
  pb::Request exec;
  exec.set_id(2);
  exec.mutable_exec()->add_argv("/bin/echo");
  exec.mutable_exec()->add_argv("hello");
  (*exec.mutable_exec()->mutable_env())["A"] = "b";
  exec.mutable_exec()->set_stdin(std::string(1000, '\0'));
  out.push_back(exec);
  pb::Request write;
  write.set_id(0xffffffffffffffffull);
  write.mutable_file_write()->set_path("/tmp/x");
  write.mutable_file_write()->set_data(std::string(70000, 'x'));
  write.mutable_file_write()->set_last(true);
  out.push_back(write);
  return out;
}

// Feeds `stream` in pieces cut at `cuts` and returns the payloads.
std::vector<std::string> Collect(FrameReader& reader, std::string_view stream,
                                 const std::vector<size_t>& cuts) {
  std::vector<std::string> payloads;
  size_t pos = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(stream.size());
  for (size_t end : ends) {
    auto piece = Bytes(stream.substr(pos, end - pos));
    pos = end;
    while (!piece.empty()) {
      piece = piece.subspan(reader.Feed(piece));
      auto next = reader.Next();
      EXPECT_TRUE(next.has_value());
      if (!next) return payloads;
      if (*next) payloads.push_back(std::move(**next));
    }
  }
  return payloads;
}

TEST(AgentFrame, RoundTrip) {
  for (const auto& request : SampleRequests()) {
    auto frame = EncodeFrame(request);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->size(), kFrameHeaderBytes + request.ByteSizeLong());
    FrameReader reader;
    EXPECT_EQ(reader.Feed(*frame), frame->size());
    auto next = reader.Next();
    ASSERT_TRUE(next.has_value());
    ASSERT_TRUE(next->has_value());
    auto parsed = ParseRequest(**next);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(parsed->SerializeAsString(), request.SerializeAsString());
    // Nothing more.
    auto again = reader.Next();
    ASSERT_TRUE(again.has_value());
    EXPECT_FALSE(again->has_value());
    EXPECT_EQ(reader.buffered_bytes(), 0u);
  }
}

TEST(AgentFrame, ResponseRoundTrip) {
  pb::Response response;
  response.set_id(9);
  response.mutable_exec()->set_stdout(std::string(5000, 'o'));
  response.mutable_exec()->set_exit_code(-1);
  auto frame = EncodeFrame(response);
  ASSERT_TRUE(frame);
  FrameReader reader;
  reader.Feed(*frame);
  auto payload = reader.Next();
  ASSERT_TRUE(payload && *payload);
  auto parsed = ParseResponse(**payload);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->exec().stdout(), std::string(5000, 'o'));
  EXPECT_EQ(parsed->exec().exit_code(), -1);
}

TEST(AgentFrame, SplitAtEveryByte) {
  std::string stream;
  std::vector<std::string> expected;
  for (const auto& request : SampleRequests()) {
    // Keep the stream small enough to split everywhere quickly.
    pb::Request small = request;
    if (small.has_file_write()) small.mutable_file_write()->set_data("abc");
    stream += *EncodeFrame(small);
    expected.push_back(small.SerializeAsString());
  }
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameReader reader;
    EXPECT_EQ(Collect(reader, stream, {cut}), expected) << "cut at " << cut;
  }
  // And byte by byte.
  std::vector<size_t> every;
  for (size_t i = 1; i < stream.size(); ++i) every.push_back(i);
  FrameReader reader;
  EXPECT_EQ(Collect(reader, stream, every), expected);
}

TEST(AgentFrame, RandomSplits) {
  std::string stream;
  std::vector<std::string> expected;
  for (int round = 0; round < 5; ++round) {
    for (const auto& request : SampleRequests()) {
      stream += *EncodeFrame(request);
      expected.push_back(request.SerializeAsString());
    }
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> cuts;
    for (size_t pos = 0;;) {
      pos += 1 + rng() % 40000;
      if (pos >= stream.size()) break;
      cuts.push_back(pos);
    }
    FrameReader reader;
    EXPECT_EQ(Collect(reader, stream, cuts), expected);
  }
}

TEST(AgentFrame, FeedTakesOnlyTheCurrentFrame) {
  pb::Request ping;
  ping.set_id(1);
  ping.mutable_ping();
  const std::string one = *EncodeFrame(ping);
  const std::string two = one + one;
  FrameReader reader;
  EXPECT_EQ(reader.Feed(two), one.size());
  EXPECT_EQ(reader.Feed(two), 0u) << "a complete frame waits for Next()";
  ASSERT_TRUE(reader.Next()->has_value());
  EXPECT_EQ(reader.Feed(std::string_view(two).substr(one.size())), one.size());
  ASSERT_TRUE(reader.Next()->has_value());
}

TEST(AgentFrame, ZeroLengthRejectedAndSticky) {
  FrameReader reader;
  pb::Request ping;
  ping.set_id(1);
  ping.mutable_ping();
  const std::string stream = Header(0) + *EncodeFrame(ping);
  EXPECT_EQ(reader.Feed(stream), 4u);
  auto next = reader.Next();
  ASSERT_FALSE(next.has_value());
  EXPECT_EQ(next.error(), FrameError::kEmptyFrame);
  EXPECT_TRUE(reader.failed());
  // Stays failed: takes nothing, repeats the error.
  EXPECT_EQ(reader.Feed(std::string_view(stream).substr(4)), 0u);
  EXPECT_FALSE(reader.Next().has_value());
  // Reset (a new connection) starts clean.
  reader.Reset();
  EXPECT_FALSE(reader.failed());
  EXPECT_EQ(reader.Feed(std::string_view(stream).substr(4)), stream.size() - 4);
  EXPECT_TRUE(reader.Next().value().has_value());
}

TEST(AgentFrame, OversizeRejectedFromTheHeaderAlone) {
  for (uint32_t n : {uint32_t(kMaxFrameBytes + 1), 0x7fffffffu, 0xffffffffu}) {
    FrameReader reader;
    // Only the header arrives: the error must not wait for the payload.
    EXPECT_EQ(reader.Feed(Header(n) + "xyz"), 4u);
    auto next = reader.Next();
    ASSERT_FALSE(next.has_value()) << n;
    EXPECT_EQ(next.error(), FrameError::kFrameTooLarge);
    EXPECT_LE(reader.buffered_bytes(), 4u);
  }
}

TEST(AgentFrame, HeaderInPiecesThenOversize) {
  FrameReader reader;
  const std::string header = Header(kMaxFrameBytes + 1);
  for (char c : header.substr(0, 3)) {
    EXPECT_EQ(reader.Feed(std::string_view(&c, 1)), 1u);
    EXPECT_TRUE(reader.Next().has_value());
  }
  EXPECT_EQ(reader.Feed(header.substr(3)), 1u);
  EXPECT_FALSE(reader.Next().has_value());
}

TEST(AgentFrame, ExactlyMaxIsAcceptedAndBounded) {
  FrameReader reader;
  const std::string header = Header(kMaxFrameBytes);
  EXPECT_EQ(reader.Feed(header), 4u);
  const std::string block(1 << 20, 'a');
  size_t fed = 0;
  // Offer more than the frame: the reader takes exactly the frame.
  while (fed < kMaxFrameBytes + (2u << 20)) {
    const size_t took = reader.Feed(block);
    fed += block.size();
    EXPECT_LE(reader.buffered_bytes(), kMaxFrameBytes + kFrameHeaderBytes);
    if (took < block.size()) break;
  }
  EXPECT_EQ(reader.buffered_bytes(), kMaxFrameBytes + kFrameHeaderBytes);
  auto next = reader.Next();
  ASSERT_TRUE(next && *next);
  EXPECT_EQ((*next)->size(), kMaxFrameBytes);
  EXPECT_LE((*next)->capacity(), kMaxFrameBytes + 64) << "no over-allocation for a full frame";
  EXPECT_EQ(reader.buffered_bytes(), 0u);
}

TEST(AgentFrame, CustomLimit) {
  FrameReader reader(100);
  EXPECT_EQ(reader.max_frame_bytes(), 100u);
  reader.Feed(Header(101));
  EXPECT_EQ(reader.Next().error(), FrameError::kFrameTooLarge);
  FrameReader ok(100);
  ok.Feed(Header(100) + std::string(100, 'z'));
  EXPECT_EQ(ok.Next().value().value(), std::string(100, 'z'));
}

TEST(AgentFrame, EncodeRejectsEmptyAndTooLarge) {
  pb::Request empty;  // no id, no kind: serializes to nothing
  EXPECT_EQ(EncodeFrame(empty).error(), FrameError::kEmptyFrame);
  pb::Response big;
  big.set_id(1);
  big.mutable_file_chunk()->set_data(std::string(200, 'x'));
  EXPECT_EQ(EncodeFrame(big, 100).error(), FrameError::kFrameTooLarge);
  EXPECT_TRUE(EncodeFrame(big, 1000).has_value());
  pb::Response huge;
  huge.set_id(1);
  huge.mutable_exec()->set_stdout(std::string(kMaxFrameBytes, 'x'));
  EXPECT_EQ(EncodeFrame(huge).error(), FrameError::kFrameTooLarge);
}

TEST(AgentFrame, GarbagePayloadRejected) {
  // Field 1 as a length-delimited field running past the end; a truncated varint; a wire type
  // that does not exist; invalid UTF-8 in a string field.
  const std::string cases[] = {
      std::string("\x0a\x7f" "abc", 5),
      std::string("\x08\xff\xff", 3),
      std::string("\x0f\x00", 2),
  };
  for (const auto& payload : cases) {
    EXPECT_EQ(ParseRequest(payload).error(), FrameError::kParseFailed);
    EXPECT_EQ(ParseResponse(payload).error(), FrameError::kParseFailed);
  }
  // proto3 strings must be UTF-8: file_write{path: "\xff"}, clipboard{text: "\xff"}.
  EXPECT_EQ(ParseRequest(std::string("\x82\x01\x03\x0a\x01\xff", 6)).error(),
            FrameError::kParseFailed);
  EXPECT_EQ(ParseResponse(std::string("\x7a\x03\x0a\x01\xff", 5)).error(),
            FrameError::kParseFailed);
  // A payload from the future (unknown field) still parses: forward compatibility.
  const std::string unknown("\xf8\x07\x01", 3);  // field 127, varint 1
  auto parsed = ParseRequest(unknown);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->kind_case(), pb::Request::KIND_NOT_SET);
}

TEST(AgentFrame, ErrorNames) {
  for (auto e : {FrameError::kEmptyFrame, FrameError::kFrameTooLarge, FrameError::kSerializeFailed,
                 FrameError::kParseFailed}) {
    EXPECT_FALSE(FrameErrorName(e).empty());
  }
}

}  // namespace
}  // namespace deskbox::desktop_images
