// Stand-alone driver for libFuzzer-style targets when libFuzzer is not available (g++).
// Runs every file given on the command line (a directory: every file in it, such as the target's
// corpus and regressions in tests/fuzz/), then a bounded number of mutated inputs built from a
// deterministic seed: random bytes, bit flips, truncations and length-field extremes, a quarter
// of them starting from those files. Exit status 0 means no crash; a crash aborts the process and
// fails the test.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Mutate(std::vector<uint8_t>& buf, std::mt19937_64& rng) {
  switch (rng() % 6) {
    case 0:  // fresh random bytes
      buf.resize(rng() % 4096);
      for (auto& b : buf) b = static_cast<uint8_t>(rng());
      break;
    case 1:  // flip bits
      for (int i = 0; i < 8 && !buf.empty(); ++i) buf[rng() % buf.size()] ^= 1u << (rng() % 8);
      break;
    case 2:  // truncate
      if (!buf.empty()) buf.resize(rng() % buf.size());
      break;
    case 3: {  // insert an extreme 32-bit value (length fields)
      static constexpr uint32_t kVals[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x10000, 0x7fffffff,
                                           0x80000000, 0xffffffff};
      uint32_t v = kVals[rng() % std::size(kVals)];
      size_t at = buf.empty() ? 0 : rng() % buf.size();
      uint8_t be[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
      buf.insert(buf.begin() + at, be, be + 4);
      break;
    }
    case 4:  // duplicate a slice
      if (!buf.empty() && buf.size() < 65536) {
        size_t a = rng() % buf.size(), n = rng() % (buf.size() - a) + 1;
        std::vector<uint8_t> slice(buf.begin() + a, buf.begin() + a + n);
        buf.insert(buf.begin() + rng() % buf.size(), slice.begin(), slice.end());
      }
      break;
    default:  // append random tail
      for (int i = 0, n = rng() % 64; i < n; ++i) buf.push_back(static_cast<uint8_t>(rng()));
  }
  if (buf.size() > (1u << 20)) buf.resize(1u << 20);
}

std::vector<uint8_t> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 100000, max_seconds = 30;
  std::vector<std::vector<uint8_t>> corpus;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--iterations=", 13) == 0) {
      iterations = std::atol(argv[i] + 13);
    } else if (std::strncmp(argv[i], "--max-seconds=", 14) == 0) {
      max_seconds = std::atol(argv[i] + 14);
    } else if (std::filesystem::is_directory(argv[i])) {
      std::vector<std::filesystem::path> files;  // sorted: the same run on every machine
      for (const auto& e : std::filesystem::directory_iterator(argv[i]))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) corpus.push_back(ReadFile(f));
    } else if (std::filesystem::exists(argv[i])) {
      corpus.push_back(ReadFile(argv[i]));
    } else {
      std::fprintf(stderr, "fuzz: no such file or directory: %s\n", argv[i]);
      return 2;
    }
  }
  for (auto& c : corpus) LLVMFuzzerTestOneInput(c.data(), c.size());
  std::printf("fuzz: %zu kept inputs replayed\n", corpus.size());
  std::mt19937_64 rng(0xdeb0c5);
  std::vector<uint8_t> buf;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(max_seconds);
  long done = 0;
  for (; done < iterations; ++done) {
    if ((done & 1023) == 0 && std::chrono::steady_clock::now() > deadline) break;
    if (!corpus.empty() && rng() % 4 == 0) buf = corpus[rng() % corpus.size()];
    Mutate(buf, rng);
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::printf("fuzz: %ld inputs, no crash\n", done);
  return 0;
}
