// libdeskbox-tcgtrim.so: a QEMU TCG plugin (QEMU's public plugin API, `-plugin`) loaded into
// every restored sandbox under TCG. It lets the privileged helper hand an idle sandbox's
// translation cache back to the host (jailer.proto TrimTranslationCache):
//
//  1. The jailer sends the QEMU SIGUSR2. The handler only sets a flag.
//  2. The next time a vCPU goes idle (the plugin's idle callback, on that vCPU's thread), the
//     plugin asks QEMU for a plugin reset: QEMU stops every vCPU, flushes the whole translation
//     cache (tb_flush), and then calls back with all vCPUs still stopped.
//  3. In that callback nothing refers to the cache any more but the prologue at its start, so the
//     plugin discards every page of the cache past the prologue (MADV_DONTNEED on QEMU's own
//     anonymous mapping): the memory goes back to the host at once, with no disk involved.
//     The idle guest then translates again only the code it runs, packed at the cache's start.
//
// The cache is QEMU's one anonymous read/write/execute block of exactly the size given with
// -accel tcg,tb-size, cut into regions with guard pages between them. The plugin is told that
// size (argument bytes=N) and finds the block by it (FindCache). If it cannot find it, it says
// so on stderr and discards nothing.
//
// It registers no translation callback, so it adds no instrumentation to translated code; only
// the idle callback runs, a few times a second per vCPU on an idle guest. Only libc is used (no
// C++ runtime: this runs inside QEMU), and nothing that QEMU's seccomp sandbox denies.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

extern "C" {
// The part of QEMU's plugin API (include/qemu/qemu-plugin.h, version 2 and later) used here;
// QEMU resolves these against its own exported symbols when it loads the plugin.
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
typedef void (*qemu_plugin_simple_cb_t)(qemu_plugin_id_t id);
typedef void (*qemu_plugin_vcpu_simple_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index);
void qemu_plugin_register_vcpu_idle_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
void qemu_plugin_reset(qemu_plugin_id_t id, qemu_plugin_simple_cb_t cb);
}

namespace {

// The prologue TCG generates at the start of the cache (entry and exit code, a few hundred
// bytes on x86-64) survives a flush; everything after it is only translated blocks.
constexpr uintptr_t kKeepBytes = 64 << 10;

qemu_plugin_id_t plugin_id;
uint64_t cache_bytes = 0;
std::atomic<bool> trim_requested{false};
std::atomic<bool> resetting{false};
std::atomic<unsigned> trims{0};

void Note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Note(const char* fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0)
    (void)!write(2, line,
                 static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1);
}

void OnSignal(int) {
  trim_requested.store(true, std::memory_order_relaxed);
}

// [lo, hi) of the translation cache. QEMU maps it as one anonymous block of cache_bytes and cuts
// it into regions, each read/write/execute and followed by one PROT_NONE guard page: in
// /proc/self/maps a run of adjacent "rwxp" and one-page "---p" anonymous mappings. The run taken
// is the one that spans the whole cache size (to within 64 KiB), so no other executable memory
// can be mistaken for it. False if there is no such run.
bool FindCache(uintptr_t* lo, uintptr_t* hi) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t run_lo = 0, run_hi = 0;
  bool in_run = false, found = false;
  auto close_run = [&]() {
    if (in_run && run_hi - run_lo <= cache_bytes && run_hi - run_lo + kKeepBytes >= cache_bytes) {
      *lo = run_lo;
      *hi = run_hi;
      found = true;
    }
    in_run = false;
  };
  // Whole lines, read in chunks; QEMU's maps run to a few hundred lines.
  char buf[8192];
  size_t have = 0;
  while (!found) {
    ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n <= 0) break;
    have += static_cast<size_t>(n);
    buf[have] = '\0';
    char* line = buf;
    char* nl;
    while (!found && (nl = strchr(line, '\n')) != nullptr) {
      *nl = '\0';
      unsigned long start = 0, end = 0, offset = 0, inode = 0;
      char perms[5] = {0};
      unsigned dev_major = 0, dev_minor = 0;
      int path_at = 0;
      bool parsed = sscanf(line, "%lx-%lx %4s %lx %x:%x %lu %n", &start, &end, perms, &offset,
                           &dev_major, &dev_minor, &inode, &path_at) >= 7;
      bool anonymous = parsed && inode == 0 && line[path_at] == '\0';
      bool code = anonymous && strcmp(perms, "rwxp") == 0;
      bool guard = anonymous && strcmp(perms, "---p") == 0 && end - start == page;
      if (in_run && start == run_hi && (code || guard)) {
        run_hi = end;
      } else {
        close_run();
        if (code) {
          in_run = true;
          run_lo = start;
          run_hi = end;
        }
      }
      line = nl + 1;
    }
    have = static_cast<size_t>(buf + have - line);
    memmove(buf, line, have);
    if (have >= sizeof buf - 1) have = 0;  // a line longer than the buffer: not one of ours
  }
  if (!found) close_run();
  close(fd);
  return found;
}

void OnIdle(qemu_plugin_id_t, unsigned int);

// Runs with every vCPU stopped, right after QEMU flushed the translation cache.
void AfterFlush(qemu_plugin_id_t id) {
  uintptr_t lo = 0, hi = 0;
  if (FindCache(&lo, &hi)) {
    if (madvise(reinterpret_cast<void*>(lo + kKeepBytes), hi - lo - kKeepBytes, MADV_DONTNEED) ==
        0) {
      unsigned n = trims.fetch_add(1) + 1;
      Note("deskbox-tcgtrim: translation cache flushed and %lu MiB of it discarded (trim %u)\n",
           static_cast<unsigned long>((hi - lo) >> 20), n);
    } else {
      Note("deskbox-tcgtrim: discarding the translation cache failed: %s\n", strerror(errno));
    }
  } else {
    Note("deskbox-tcgtrim: no translation cache of %lu MiB found; nothing discarded\n",
         static_cast<unsigned long>(cache_bytes >> 20));
  }
  // A reset drops the plugin's callbacks: subscribe again.
  qemu_plugin_register_vcpu_idle_cb(id, OnIdle);
  resetting.store(false);
}

// On a vCPU's own thread as it goes idle: the only place QEMU lets a plugin flush the cache.
void OnIdle(qemu_plugin_id_t, unsigned int) {
  if (!trim_requested.load(std::memory_order_relaxed)) return;
  if (resetting.exchange(true)) return;
  trim_requested.store(false);
  qemu_plugin_reset(plugin_id, AfterFlush);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int qemu_plugin_version = 2;

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const qemu_info_t*, int argc,
                                                               char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (strncmp(argv[i], "bytes=", 6) == 0) {
      char* end = nullptr;
      cache_bytes = strtoull(argv[i] + 6, &end, 10);
      if (*end != '\0') cache_bytes = 0;
    }
  }
  if (cache_bytes < 4 * kKeepBytes) {
    Note("deskbox-tcgtrim: needs bytes=<translation cache size>\n");
    return 1;  // QEMU refuses to start: the jailer always passes it
  }
  plugin_id = id;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR2, &sa, nullptr) != 0) {
    Note("deskbox-tcgtrim: sigaction: %s\n", strerror(errno));
    return 1;
  }
  qemu_plugin_register_vcpu_idle_cb(id, OnIdle);
  return 0;
}

}  // extern "C"
