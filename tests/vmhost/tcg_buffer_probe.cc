// Allocates a buffer the way QEMU allocates TCG's translation cache (an anonymous private
// PROT_NONE reservation, opened read/write/exec region by region, with huge-page advice), writes
// into it, and prints what the kernel made of it: for tcg_buffer_preload_test.
//   tcg_buffer_probe BYTES [BYTES…]   one buffer per argument
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cstring>
#include <sys/mman.h>

#include <fstream>
#include <string>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    size_t len = std::strtoull(argv[i], nullptr, 10);
    void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    size_t half = len / 2;
    if (mprotect(p, half, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) { perror("mprotect"); return 1; }
    (void)madvise(p, len, MADV_HUGEPAGE);
    std::memset(p, 0xc3, half);
    unsigned char* b = static_cast<unsigned char*>(p);
    if (b[0] != 0xc3 || b[half - 1] != 0xc3) { fprintf(stderr, "buffer does not hold what was written\n"); return 1; }
    // The mapping's /proc/self/smaps entry: its header line and its VmFlags.
    std::ifstream smaps("/proc/self/smaps");
    char start[32];
    snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(p));
    std::string line;
    bool in = false;
    while (std::getline(smaps, line)) {
      if (line.rfind(start, 0) == 0) { in = true; printf("map %s\n", line.c_str()); }
      else if (in && line.rfind("VmFlags:", 0) == 0) { printf("flags %s\n", line.c_str() + 8); break; }
    }
  }
  return 0;
}
