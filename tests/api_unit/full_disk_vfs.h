#pragma once
// FullDiskVfs: SQLite's default VFS with a switch that makes every write to a database, its WAL
// or its journal fail as a full disk does (SQLITE_FULL: what SQLite's unix VFS makes of ENOSPC)
// or as a failing disk does (SQLITE_IOERR_WRITE). Reads, locks and the WAL index go through
// unchanged, so a Store on it behaves as on a real disk that ran out of room, without one.
//
// Install() registers it as the default VFS: a Store opened afterwards uses it (one opened
// before does not). It passes everything through until Set() says otherwise.
#include <sqlite3.h>

#include <atomic>
#include <cstdlib>

namespace deskbox::api::testing {

class FullDiskVfs {
 public:
  enum class Mode { kWorking, kFull, kFailing };

  static void Install() {
    static const bool installed = [] {
      sqlite3_initialize();
      Real() = sqlite3_vfs_find(nullptr);
      if (!Real()) std::abort();
      static sqlite3_vfs vfs = *Real();
      vfs.zName = "deskbox-full-disk";
      vfs.szOsFile = static_cast<int>(sizeof(File)) + Real()->szOsFile;
      vfs.xOpen = Open;
      vfs.pNext = nullptr;
      return sqlite3_vfs_register(&vfs, 1) == SQLITE_OK;
    }();
    if (!installed) std::abort();
  }
  static void Set(Mode m) { ModeRef().store(m); }
  static Mode mode() { return ModeRef().load(); }

 private:
  struct File {
    sqlite3_file base;
    sqlite3_file* real;  // the real VFS's file, right after this struct
  };

  static sqlite3_vfs*& Real() {
    static sqlite3_vfs* real = nullptr;
    return real;
  }
  static std::atomic<Mode>& ModeRef() {
    static std::atomic<Mode> m{Mode::kWorking};
    return m;
  }
  static sqlite3_file* R(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

  static int Open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out) {
    auto* file = reinterpret_cast<File*>(f);
    file->real = reinterpret_cast<sqlite3_file*>(file + 1);
    int rc = Real()->xOpen(Real(), name, file->real, flags, out);
    file->base.pMethods = file->real->pMethods ? &kMethods : nullptr;
    return rc;
  }

  static int Write(sqlite3_file* f, const void* p, int n, sqlite3_int64 off) {
    switch (mode()) {
      case Mode::kFull: return SQLITE_FULL;
      case Mode::kFailing: return SQLITE_IOERR_WRITE;
      case Mode::kWorking: break;
    }
    return R(f)->pMethods->xWrite(R(f), p, n, off);
  }
  static int Close(sqlite3_file* f) { return R(f)->pMethods->xClose(R(f)); }
  static int Read(sqlite3_file* f, void* p, int n, sqlite3_int64 off) {
    return R(f)->pMethods->xRead(R(f), p, n, off);
  }
  static int Truncate(sqlite3_file* f, sqlite3_int64 size) { return R(f)->pMethods->xTruncate(R(f), size); }
  static int Sync(sqlite3_file* f, int flags) { return R(f)->pMethods->xSync(R(f), flags); }
  static int FileSize(sqlite3_file* f, sqlite3_int64* size) { return R(f)->pMethods->xFileSize(R(f), size); }
  static int Lock(sqlite3_file* f, int l) { return R(f)->pMethods->xLock(R(f), l); }
  static int Unlock(sqlite3_file* f, int l) { return R(f)->pMethods->xUnlock(R(f), l); }
  static int CheckReservedLock(sqlite3_file* f, int* out) { return R(f)->pMethods->xCheckReservedLock(R(f), out); }
  static int FileControl(sqlite3_file* f, int op, void* arg) { return R(f)->pMethods->xFileControl(R(f), op, arg); }
  static int SectorSize(sqlite3_file* f) { return R(f)->pMethods->xSectorSize(R(f)); }
  static int DeviceCharacteristics(sqlite3_file* f) { return R(f)->pMethods->xDeviceCharacteristics(R(f)); }
  static int ShmMap(sqlite3_file* f, int pg, int sz, int extend, void volatile** p) {
    return R(f)->pMethods->xShmMap(R(f), pg, sz, extend, p);
  }
  static int ShmLock(sqlite3_file* f, int off, int n, int flags) { return R(f)->pMethods->xShmLock(R(f), off, n, flags); }
  static void ShmBarrier(sqlite3_file* f) { R(f)->pMethods->xShmBarrier(R(f)); }
  static int ShmUnmap(sqlite3_file* f, int del) { return R(f)->pMethods->xShmUnmap(R(f), del); }
  static int Fetch(sqlite3_file* f, sqlite3_int64 off, int n, void** p) { return R(f)->pMethods->xFetch(R(f), off, n, p); }
  static int Unfetch(sqlite3_file* f, sqlite3_int64 off, void* p) { return R(f)->pMethods->xUnfetch(R(f), off, p); }

  static constexpr sqlite3_io_methods kMethods = {
      3,         Close,      Read,       Write,      Truncate,    Sync,       FileSize,   Lock,       Unlock,
      CheckReservedLock,     FileControl, SectorSize, DeviceCharacteristics, ShmMap, ShmLock, ShmBarrier,
      ShmUnmap,  Fetch,      Unfetch};
};

}  // namespace deskbox::api::testing
