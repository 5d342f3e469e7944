// libdeskbox-tcgbuf.so: preloaded into a restored sandbox's QEMU under TCG. It gives TCG's
// translation cache a file to live in instead of anonymous memory, so that the privileged helper
// can hand an idle sandbox's cache back to the host (jailer.proto TrimTranslationCache): QEMU's
// anonymous code buffer (hundreds of MiB once a browser has run) could only be freed by swap,
// which these hosts do not have; pages of a file are written back and dropped like any other.
//
// QEMU allocates the buffer once at start: one anonymous private mapping of exactly the
// translation-cache size, PROT_NONE (QEMU 10 then opens each region read/write/exec) or
// read/write/exec (older releases). The jailer passes that size and the slot's directory:
//   DESKBOX_TCG_BUFFER_BYTES  the size QEMU was given with -accel tcg,tb-size (bytes)
//   DESKBOX_TCG_BUFFER_DIR    where the file goes: an unnamed O_TMPFILE, gone with the process
// The first mapping that matches becomes a shared mapping of that file, fully allocated first
// (fallocate) so that a full disk can never fault QEMU later; anything else, or any failure, is
// passed through untouched and QEMU keeps its anonymous buffer. Readahead is turned off for the
// buffer and QEMU's huge-page advice on it is dropped: either would read megabytes back for
// each fault on a trimmed cache, instead of the page the guest's code actually needs.
//
// Only libc is used (no C++ runtime: this is loaded into someone else's process); it runs before
// QEMU's seccomp sandbox is installed, and needs nothing that sandbox denies.
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace {

using MmapFn = void* (*)(void*, size_t, int, int, int, off_t);
using MadviseFn = int (*)(void*, size_t, int);

MmapFn real_mmap = nullptr;
MadviseFn real_madvise = nullptr;
std::atomic<bool> claimed{false};            // the buffer has been matched (or given up on)
std::atomic<uintptr_t> buffer_lo{0}, buffer_hi{0};

void Note(const char* fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) (void)!write(2, line, static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1);
}

__attribute__((constructor)) void Resolve() {
  real_mmap = reinterpret_cast<MmapFn>(dlsym(RTLD_NEXT, "mmap64"));
  if (!real_mmap) real_mmap = reinterpret_cast<MmapFn>(dlsym(RTLD_NEXT, "mmap"));
  real_madvise = reinterpret_cast<MadviseFn>(dlsym(RTLD_NEXT, "madvise"));
}

void* PassThrough(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (real_mmap) return real_mmap(addr, len, prot, flags, fd, off);
  long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  return reinterpret_cast<void*>(r);
}

size_t WantedBytes() {
  const char* s = getenv("DESKBOX_TCG_BUFFER_BYTES");
  if (!s || !*s) return 0;
  char* end = nullptr;
  unsigned long long v = strtoull(s, &end, 10);
  return *end == '\0' ? static_cast<size_t>(v) : 0;
}

void* FileBacked(void* addr, size_t len, int prot, int flags) {
  const char* dir = getenv("DESKBOX_TCG_BUFFER_DIR");
  if (!dir || dir[0] != '/') return MAP_FAILED;
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    Note("deskbox-tcgbuf: %s: cannot make the translation cache file (%s); it stays anonymous\n", dir, strerror(errno));
    return MAP_FAILED;
  }
  int rc = fallocate(fd, 0, 0, static_cast<off_t>(len));
  if (rc != 0) {
    Note("deskbox-tcgbuf: %s: cannot allocate %zu MiB (%s); the translation cache stays anonymous\n", dir, len >> 20,
         strerror(errno));
    close(fd);
    return MAP_FAILED;
  }
  int shared = (flags & ~(MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)) | MAP_SHARED;
  void* p = PassThrough(addr, len, prot, shared, fd, 0);
  int e = errno;
  close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) {
    Note("deskbox-tcgbuf: mapping the translation cache file failed (%s); it stays anonymous\n", strerror(e));
    return MAP_FAILED;
  }
  if (real_madvise) (void)real_madvise(p, len, MADV_RANDOM);
  buffer_lo = reinterpret_cast<uintptr_t>(p);
  buffer_hi = reinterpret_cast<uintptr_t>(p) + len;
  Note("deskbox-tcgbuf: translation cache (%zu MiB) is file-backed in %s\n", len >> 20, dir);
  return p;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  const bool candidate = fd == -1 && (flags & MAP_ANONYMOUS) && (flags & MAP_PRIVATE) && !(flags & MAP_FIXED) &&
                         (prot == PROT_NONE || prot == (PROT_READ | PROT_WRITE | PROT_EXEC));
  if (candidate && !claimed.load(std::memory_order_relaxed)) {
    size_t want = WantedBytes();
    if (want != 0 && len == want && !claimed.exchange(true)) {
      void* p = FileBacked(addr, len, prot, flags);
      if (p != MAP_FAILED) return p;
    }
  }
  return PassThrough(addr, len, prot, flags, fd, off);
}

__attribute__((visibility("default"))) void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mmap64(addr, len, prot, flags, fd, off);
}

__attribute__((visibility("default"))) int madvise(void* addr, size_t len, int advice) {
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (advice == MADV_HUGEPAGE && a >= buffer_lo.load() && a < buffer_hi.load()) return 0;
  if (real_madvise) return real_madvise(addr, len, advice);
  long r = syscall(SYS_madvise, addr, len, advice);
  return static_cast<int>(r);
}

}  // extern "C"
