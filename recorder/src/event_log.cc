#include "recorder/event_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/files.h"
#include "common/log.h"

namespace deskbox::recorder {
namespace {
constexpr char kEventsLog[] = "recorder";
constexpr char kMagic[8] = {'D', 'B', 'X', 'E', 'V', 'T', '1', '\0'};
constexpr size_t kFixedHeader = 16;  // magic, version, id length
constexpr size_t kHash = 32;
constexpr size_t kLen = 4;
// Reads are served from a window of this size so that small records cost no system call each.
constexpr size_t kReadWindow = 64 * 1024;

void PutBe32(char* p, uint32_t v) {
  p[0] = static_cast<char>(v >> 24);
  p[1] = static_cast<char>(v >> 16);
  p[2] = static_cast<char>(v >> 8);
  p[3] = static_cast<char>(v);
}
uint32_t GetBe32(const char* p) {
  auto u = reinterpret_cast<const uint8_t*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
}
Sha256Digest HashOf(const char* p, size_t n) {
  return Sha256(std::span(reinterpret_cast<const uint8_t*>(p), n));
}
EventLogError IoError(std::string what, int err) {
  return {EventLogError::Code::kIo, fmt::format("{}: {}", what, ErrnoString(err))};
}

// Length of the valid UTF-8 sequence at s[i], or 0 if there is none (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  uint8_t c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

bool FixUtf8(std::string* s) {
  size_t i = 0;
  while (i < s->size()) {
    size_t n = Utf8SequenceLength(*s, i);
    if (n == 0) break;
    i += n;
  }
  if (i == s->size()) return false;
  std::string out(*s, 0, i);
  while (i < s->size()) {
    size_t n = Utf8SequenceLength(*s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(*s, i, n);
      i += n;
    }
  }
  *s = std::move(out);
  return true;
}
}  // namespace

std::string_view ToString(EventLogError::Code code) {
  using C = EventLogError::Code;
  switch (code) {
    case C::kNotFound:
      return "not found";
    case C::kIo:
      return "i/o error";
    case C::kIncompatible:
      return "incompatible format version";
    case C::kBadHeader:
      return "bad header";
    case C::kTruncated:
      return "truncated";
    case C::kBadLength:
      return "bad record length";
    case C::kHashMismatch:
      return "hash chain mismatch";
    case C::kBadRecord:
      return "bad record";
    case C::kTooLarge:
      return "event too large";
    case C::kInvalidArgument:
      return "invalid argument";
  }
  return "unknown";
}

bool IsValidSandboxId(std::string_view id) {
  if (id.empty() || id.size() > kMaxSandboxIdLength || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

bool SanitizeUtf8(Event& e) {
  // Every string field of event.proto; a field missing here is caught by the writer's
  // read-back check (it refuses the event rather than write a record it could not read).
  bool changed = false;
  auto fix = [&](std::string* s) { changed |= FixUtf8(s); };
  fix(e.mutable_sandbox_id());
  fix(e.mutable_request_id());
  if (e.has_actor()) {
    fix(e.mutable_actor()->mutable_id());
    fix(e.mutable_actor()->mutable_remote());
  }
  switch (e.kind_case()) {
    case Event::kLifecycle: {
      auto* k = e.mutable_lifecycle();
      fix(k->mutable_from_state());
      fix(k->mutable_to_state());
      fix(k->mutable_reason());
      fix(k->mutable_detail());
      break;
    }
    case Event::kAction: {
      auto* k = e.mutable_action();
      fix(k->mutable_type());
      fix(k->mutable_params_json());
      break;
    }
    case Event::kViewerInput:
      fix(e.mutable_viewer_input()->mutable_kind());
      break;
    case Event::kCdp: {
      auto* k = e.mutable_cdp();
      fix(k->mutable_method());
      fix(k->mutable_session_id());
      fix(k->mutable_note());
      break;
    }
    case Event::kEgress: {
      auto* k = e.mutable_egress();
      fix(k->mutable_protocol());
      fix(k->mutable_name());
      fix(k->mutable_address());
      fix(k->mutable_rule());
      fix(k->mutable_reason());
      break;
    }
    case Event::kExec: {
      auto* k = e.mutable_exec();
      for (auto& a : *k->mutable_argv()) fix(&a);
      fix(k->mutable_shell());
      break;
    }
    case Event::kFile: {
      auto* k = e.mutable_file();
      fix(k->mutable_direction());
      fix(k->mutable_path());
      fix(k->mutable_error());
      break;
    }
    case Event::kRecording: {
      auto* k = e.mutable_recording();
      fix(k->mutable_phase());
      fix(k->mutable_file());
      fix(k->mutable_sha256());
      fix(k->mutable_detail());
      break;
    }
    case Event::KIND_NOT_SET:
      break;
  }
  return changed;
}

std::string EncodeLogHeader(std::string_view sandbox_id) {
  std::string h(kFixedHeader, '\0');
  std::memcpy(h.data(), kMagic, sizeof kMagic);
  PutBe32(h.data() + 8, kEventLogFormatVersion);
  PutBe32(h.data() + 12, static_cast<uint32_t>(sandbox_id.size()));
  h += sandbox_id;
  auto digest = HashOf(h.data(), h.size());
  h.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return h;
}

std::string EncodeLogRecord(const Sha256Digest& prev, std::string_view payload,
                            Sha256Digest* hash_out) {
  std::string buf(kHash + kLen + payload.size() + kHash, '\0');
  std::memcpy(buf.data(), prev.data(), kHash);
  PutBe32(buf.data() + kHash, static_cast<uint32_t>(payload.size()));
  std::memcpy(buf.data() + kHash + kLen, payload.data(), payload.size());
  auto digest = HashOf(buf.data(), kHash + kLen + payload.size());
  std::memcpy(buf.data() + kHash + kLen + payload.size(), digest.data(), kHash);
  if (hash_out) *hash_out = digest;
  return buf.substr(kHash);
}

// --- reading ------------------------------------------------------------------------------------

class EventLogReader::Source {
 public:
  virtual ~Source() = default;
  // Reads up to n bytes at offset; fewer only at the end of the data. Returns errno on failure.
  virtual std::expected<size_t, int> ReadAt(uint64_t offset, char* dst, size_t n) = 0;
};

namespace {
class MemorySource final : public EventLogReader::Source {
 public:
  explicit MemorySource(std::string_view bytes) : bytes_(bytes) {}
  std::expected<size_t, int> ReadAt(uint64_t offset, char* dst, size_t n) override {
    if (offset >= bytes_.size()) return 0;
    size_t k = std::min<uint64_t>(n, bytes_.size() - offset);
    std::memcpy(dst, bytes_.data() + offset, k);
    return k;
  }

 private:
  std::string_view bytes_;
};

class FileSource final : public EventLogReader::Source {
 public:
  explicit FileSource(UniqueFd fd) : fd_(std::move(fd)) {}
  std::expected<size_t, int> ReadAt(uint64_t offset, char* dst, size_t n) override {
    size_t done = 0;
    while (done < n) {
      uint64_t at = offset + done;
      if (at >= window_offset_ && at < window_offset_ + window_.size()) {
        size_t k = std::min<uint64_t>(n - done, window_offset_ + window_.size() - at);
        std::memcpy(dst + done, window_.data() + (at - window_offset_), k);
        done += k;
        continue;
      }
      if (n - done >= kReadWindow) {  // large read: straight into the caller's buffer
        auto r = PreadFull(at, dst + done, n - done);
        if (!r) return r;
        return done + *r;
      }
      window_.resize(kReadWindow);
      auto r = PreadFull(at, window_.data(), kReadWindow);
      if (!r) {
        window_.clear();
        return r;
      }
      window_.resize(*r);  // the window never holds bytes past what the file had then
      window_offset_ = at;
      if (*r == 0) return done;
    }
    return done;
  }

 private:
  std::expected<size_t, int> PreadFull(uint64_t offset, char* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_.get(), dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return std::unexpected(errno);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  UniqueFd fd_;
  std::string window_;
  uint64_t window_offset_ = 0;
};
}  // namespace

EventLogReader::EventLogReader(std::unique_ptr<Source> source, std::string name, Options options)
    : source_(std::move(source)), name_(std::move(name)), options_(options) {}
EventLogReader::~EventLogReader() = default;

std::expected<std::unique_ptr<EventLogReader>, EventLogError> EventLogReader::Open(
    const std::string& path, Options options) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    int err = errno;
    if (err == ENOENT)
      return std::unexpected(
          EventLogError{EventLogError::Code::kNotFound, fmt::format("{}: no such log", path)});
    return std::unexpected(IoError(fmt::format("opening {}", path), err));
  }
  std::unique_ptr<EventLogReader> r(
      new EventLogReader(std::make_unique<FileSource>(std::move(fd)), path, options));
  if (auto h = r->ReadHeader(); !h) return std::unexpected(h.error());
  return r;
}

std::expected<std::unique_ptr<EventLogReader>, EventLogError> EventLogReader::FromBytes(
    std::string_view bytes, Options options) {
  std::unique_ptr<EventLogReader> r(
      new EventLogReader(std::make_unique<MemorySource>(bytes), "<memory>", options));
  if (auto h = r->ReadHeader(); !h) return std::unexpected(h.error());
  return r;
}

EventLogError EventLogReader::Fail(EventLogError e) {
  failed_ = e;
  return e;
}

std::expected<void, EventLogError> EventLogReader::ReadHeader() {
  using C = EventLogError::Code;
  auto bad = [&](C code, std::string why) {
    return std::unexpected(Fail({code, fmt::format("{}: header: {}", name_, why), 0, 0}));
  };
  char fixed[kFixedHeader];
  auto n = source_->ReadAt(0, fixed, sizeof fixed);
  if (!n) return std::unexpected(Fail(IoError(fmt::format("reading {}", name_), n.error())));
  if (std::memcmp(fixed, kMagic, std::min(*n, sizeof kMagic)) != 0)
    return bad(C::kBadHeader, "not a deskbox event log (wrong magic)");
  if (*n < sizeof fixed) return bad(C::kTruncated, "the file ends inside the header");
  uint32_t version = GetBe32(fixed + 8);
  if (version != kEventLogFormatVersion)
    return bad(C::kIncompatible, fmt::format("format version {} is not supported (this build "
                                             "reads {})",
                                             version, kEventLogFormatVersion));
  uint32_t id_len = GetBe32(fixed + 12);
  if (id_len == 0 || id_len > kMaxSandboxIdLength)
    return bad(C::kBadHeader, fmt::format("sandbox id length {} is out of range", id_len));
  scratch_.assign(fixed, sizeof fixed);
  scratch_.resize(kFixedHeader + id_len + kHash);
  n = source_->ReadAt(kFixedHeader, scratch_.data() + kFixedHeader, id_len + kHash);
  if (!n) return std::unexpected(Fail(IoError(fmt::format("reading {}", name_), n.error())));
  if (*n < id_len + kHash) return bad(C::kTruncated, "the file ends inside the header");
  auto digest = HashOf(scratch_.data(), kFixedHeader + id_len);
  if (std::memcmp(digest.data(), scratch_.data() + kFixedHeader + id_len, kHash) != 0)
    return bad(C::kBadHeader, "header checksum mismatch");
  std::string id = scratch_.substr(kFixedHeader, id_len);
  if (!IsValidSandboxId(id)) return bad(C::kBadHeader, "the sandbox id is not valid");
  sandbox_id_ = std::move(id);
  head_ = digest;
  offset_ = kFixedHeader + id_len + kHash;
  return {};
}

std::expected<std::optional<Event>, EventLogError> EventLogReader::Next() {
  using C = EventLogError::Code;
  for (;;) {
    if (failed_) return std::unexpected(*failed_);
    const uint64_t seq = records_ + 1;
    auto bad = [&](C code, std::string why) {
      return std::unexpected(
          Fail({code, fmt::format("{}: record at offset {} (seq {}): {}", name_, offset_, seq, why),
                offset_, seq}));
    };
    char len_bytes[kLen];
    auto n = source_->ReadAt(offset_, len_bytes, kLen);
    if (!n) return std::unexpected(Fail(IoError(fmt::format("reading {}", name_), n.error())));
    if (*n == 0) return std::nullopt;  // a clean end
    if (*n < kLen) {
      if (options_.live) return std::nullopt;
      return bad(C::kTruncated, "the file ends inside the record's length");
    }
    uint32_t len = GetBe32(len_bytes);
    if (len == 0 || len > kMaxRecordPayload)
      return bad(C::kBadLength,
                 fmt::format("length {} is out of range (1..{})", len, kMaxRecordPayload));
    // scratch_ = previous hash | length | payload | stored hash, so the chain hash is computed
    // over one contiguous range without copying the payload.
    scratch_.resize(kHash + kLen + len + kHash);
    std::memcpy(scratch_.data(), head_.data(), kHash);
    std::memcpy(scratch_.data() + kHash, len_bytes, kLen);
    n = source_->ReadAt(offset_ + kLen, scratch_.data() + kHash + kLen, len + kHash);
    if (!n) return std::unexpected(Fail(IoError(fmt::format("reading {}", name_), n.error())));
    if (*n < len + kHash) {
      if (options_.live) return std::nullopt;
      return bad(C::kTruncated, fmt::format("the file ends {} bytes into a {}-byte record",
                                            kLen + *n, kLen + len + kHash));
    }
    auto digest = HashOf(scratch_.data(), kHash + kLen + len);
    if (std::memcmp(digest.data(), scratch_.data() + kHash + kLen + len, kHash) != 0)
      return bad(C::kHashMismatch,
                 "hash does not match the chain (altered, reordered or missing data)");
    Event e;
    if (!e.ParseFromArray(scratch_.data() + kHash + kLen, static_cast<int>(len)))
      return bad(C::kBadRecord, "payload does not parse as an Event");
    if (e.seq() != seq) return bad(C::kBadRecord, fmt::format("payload has seq {}", e.seq()));
    if (e.sandbox_id() != sandbox_id_)
      return bad(C::kBadRecord, "payload names another sandbox than the header");
    head_ = digest;
    offset_ += kLen + len + kHash;
    records_ = seq;
    if (seq > options_.since_seq) return e;
  }
}

namespace {
std::expected<VerifyResult, EventLogError> VerifyWith(
    std::expected<std::unique_ptr<EventLogReader>, EventLogError> opened) {
  if (!opened) return std::unexpected(opened.error());
  auto& r = **opened;
  for (;;) {
    auto e = r.Next();
    if (!e) return std::unexpected(e.error());
    if (!*e) break;
  }
  VerifyResult v;
  v.count = r.records();
  v.last_seq = r.records();
  v.head = r.head();
  v.bytes = r.offset();
  v.sandbox_id = r.sandbox_id();
  return v;
}
}  // namespace

std::expected<VerifyResult, EventLogError> VerifyLog(const std::string& path) {
  // since_seq = max: every record is verified, none is kept.
  return VerifyWith(EventLogReader::Open(path, {.since_seq = UINT64_MAX}));
}

std::expected<VerifyResult, EventLogError> VerifyLogBytes(std::string_view bytes) {
  return VerifyWith(EventLogReader::FromBytes(bytes, {.since_seq = UINT64_MAX}));
}

// --- writing ------------------------------------------------------------------------------------

namespace {
std::expected<void, int> WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

void SyncDirOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  UniqueFd dfd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd) ::fsync(dfd.get());
}

// Creates the log with its header, atomically: a reader never sees a half-written header.
// Returns EEXIST if another writer made it first.
std::expected<void, int> CreateLog(const std::string& path, std::string_view sandbox_id, int mode) {
  uint8_t rnd[6];
  RandomBytes(rnd);
  std::string tmp = path + ".tmp-" + ToHex(rnd);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return std::unexpected(errno);
  std::string header = EncodeLogHeader(sandbox_id);
  auto w = WriteAll(fd.get(), header.data(), header.size());
  if (w && (::fchmod(fd.get(), mode) != 0 || ::fsync(fd.get()) != 0)) w = std::unexpected(errno);
  fd.reset();
  if (w && ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0)
    w = std::unexpected(errno);
  if (!w) {
    ::unlink(tmp.c_str());
    return w;
  }
  SyncDirOf(path);
  return {};
}

// True if every byte of [from, to) in fd is zero (the shape of a crash after the file size
// reached the disk but its data did not).
std::expected<bool, int> AllZero(int fd, uint64_t from, uint64_t to) {
  char buf[65536];
  while (from < to) {
    size_t n = std::min<uint64_t>(sizeof buf, to - from);
    ssize_t r = ::pread(fd, buf, n, static_cast<off_t>(from));
    if (r < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errno);
    }
    if (r == 0) break;
    for (ssize_t i = 0; i < r; ++i)
      if (buf[i] != 0) return false;
    from += static_cast<uint64_t>(r);
  }
  return true;
}
}  // namespace

std::expected<std::unique_ptr<EventLogWriter>, EventLogError> EventLogWriter::Open(
    const std::string& path, std::string_view sandbox_id, EventLogWriterOptions options) {
  using C = EventLogError::Code;
  if (!IsValidSandboxId(sandbox_id))
    return std::unexpected(EventLogError{
        C::kInvalidArgument, fmt::format("{}: sandbox id is not valid for a log", path)});
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
  if (!fd && errno == ENOENT) {
    auto created = CreateLog(path, sandbox_id, options.file_mode);
    if (!created && created.error() != EEXIST)
      return std::unexpected(IoError(fmt::format("creating {}", path), created.error()));
    fd.reset(::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
  }
  if (!fd) return std::unexpected(IoError(fmt::format("opening {}", path), errno));

  std::unique_ptr<EventLogWriter> w(new EventLogWriter());
  w->path_ = path;
  w->sandbox_id_ = std::string(sandbox_id);
  w->options_ = options;
  w->fd_ = std::move(fd);
  w->last_sync_ = std::chrono::steady_clock::now();

  // Verify everything written so far, to continue the chain from a record we have checked.
  auto reader = EventLogReader::Open(path, {.since_seq = UINT64_MAX});
  if (!reader) return std::unexpected(reader.error());
  auto& r = **reader;
  if (r.sandbox_id() != sandbox_id)
    return std::unexpected(EventLogError{
        C::kInvalidArgument,
        fmt::format("{} is the log of sandbox {}, not {}", path, r.sandbox_id(), sandbox_id)});
  std::optional<EventLogError> damage;
  for (;;) {
    auto e = r.Next();
    if (!e) {
      damage = e.error();
      break;
    }
    if (!*e) break;
  }
  w->end_ = r.offset();
  w->head_ = r.head();
  w->last_seq_ = r.records();
  if (!damage) return w;
  if (damage->code == C::kIo) return std::unexpected(*damage);

  // Is the damage a torn tail? Only if nothing could follow it: the record runs past the end
  // of the file, or everything from it to the end is zeros, or it is the last record and its
  // bytes do not hash right (some of its blocks never reached the disk).
  struct stat st;
  if (::fstat(w->fd_.get(), &st) != 0)
    return std::unexpected(IoError(fmt::format("stat {}", path), errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t at = damage->offset;
  bool torn = damage->code == C::kTruncated;
  bool zeros = false;
  if (!torn) {
    auto z = AllZero(w->fd_.get(), at, size);
    if (!z) return std::unexpected(IoError(fmt::format("reading {}", path), z.error()));
    torn = zeros = *z;
  }
  if (!torn && damage->code == C::kHashMismatch) {
    char len_bytes[kLen];
    if (::pread(w->fd_.get(), len_bytes, kLen, static_cast<off_t>(at)) == kLen)
      torn = at + kLen + GetBe32(len_bytes) + kHash == size;
  }
  if (!torn) return std::unexpected(*damage);

  if (!zeros) {
    // Keep what is cut off; it is at most one record (records are bounded).
    std::string tail(size - at, '\0');
    ssize_t got = ::pread(w->fd_.get(), tail.data(), tail.size(), static_cast<off_t>(at));
    if (got >= 0) tail.resize(static_cast<size_t>(got));
    auto saved = WriteFileAtomic(fmt::format("{}.torn-{}", path, at), tail, options.file_mode);
    if (!saved)
      return std::unexpected(
          IoError(fmt::format("saving the torn tail of {}", path), saved.error()));
  }
  if (::ftruncate(w->fd_.get(), static_cast<off_t>(at)) != 0 || ::fsync(w->fd_.get()) != 0)
    return std::unexpected(IoError(fmt::format("truncating {}", path), errno));
  w->truncated_bytes_ = size - at;
  log::Warn(kEventsLog, "cut a torn tail of {} bytes: {}; continuing at seq {}", size - at,
            damage->message, w->next_seq());
  return w;
}

EventLogWriter::~EventLogWriter() {
  if (fd_ && dirty_ && !broken_) (void)Sync();
}

std::expected<void, EventLogError> EventLogWriter::Append(Event& e) {
  using C = EventLogError::Code;
  if (broken_)
    return std::unexpected(
        EventLogError{C::kIo, fmt::format("{}: an earlier write failed; reopen the log", path_),
                      end_, next_seq()});
  if (e.sandbox_id().empty()) e.set_sandbox_id(sandbox_id_);
  if (e.sandbox_id() != sandbox_id_)
    return std::unexpected(EventLogError{
        C::kInvalidArgument, fmt::format("{}: event of sandbox {}", path_, e.sandbox_id())});
  const bool assigned = e.seq() == 0;
  if (assigned) e.set_seq(next_seq());
  if (e.seq() != next_seq()) {
    return std::unexpected(EventLogError{
        C::kInvalidArgument,
        fmt::format("{}: event has seq {}, the log is at {}", path_, e.seq(), next_seq())});
  }
  auto refuse = [&](C code, std::string why) {
    if (assigned) e.set_seq(0);
    return std::unexpected(
        EventLogError{code, fmt::format("{}: {}", path_, why), end_, next_seq()});
  };
  SanitizeUtf8(e);
  const size_t len = e.ByteSizeLong();
  if (len > kMaxRecordPayload)
    return refuse(C::kTooLarge,
                  fmt::format("event of {} bytes is over the {}-byte cap", len, kMaxRecordPayload));
  // buf_ = previous hash | length | payload | hash; the record is buf_ without its first part.
  buf_.resize(kHash + kLen + len + kHash);
  std::memcpy(buf_.data(), head_.data(), kHash);
  PutBe32(buf_.data() + kHash, static_cast<uint32_t>(len));
  char* payload = buf_.data() + kHash + kLen;
  e.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(payload));
  {
    // Never write a record that would not read back (e.g. a string field SanitizeUtf8 missed).
    Event check;
    if (!check.ParseFromArray(payload, static_cast<int>(len)))
      return refuse(C::kBadRecord, "the event does not serialize to a readable record");
  }
  auto digest = HashOf(buf_.data(), kHash + kLen + len);
  std::memcpy(payload + len, digest.data(), kHash);

  // One write(2) for the whole record (O_APPEND); a short write is continued, and a failed one
  // is undone so that the file ends on a record boundary again.
  auto w = WriteAll(fd_.get(), buf_.data() + kHash, kLen + len + kHash);
  if (!w) {
    if (::ftruncate(fd_.get(), static_cast<off_t>(end_)) != 0) broken_ = true;
    return refuse(C::kIo, fmt::format("append: {}", ErrnoString(w.error())));
  }
  end_ += kLen + len + kHash;
  head_ = digest;
  last_seq_ = e.seq();
  dirty_ = true;
  if (options_.sync == SyncPolicy::kEveryRecord) return Sync();
  return SyncIfDue();
}

std::expected<void, EventLogError> EventLogWriter::Sync() {
  if (!dirty_) return {};
  if (::fdatasync(fd_.get()) != 0) {
    // After a failed fdatasync the kernel may have dropped the dirty pages: what is on disk is
    // unknown, so stop here; reopening verifies the file again.
    broken_ = true;
    return std::unexpected(EventLogError{
        EventLogError::Code::kIo, fmt::format("{}: fdatasync: {}", path_, ErrnoString(errno)), end_,
        last_seq_});
  }
  dirty_ = false;
  last_sync_ = std::chrono::steady_clock::now();
  return {};
}

std::expected<void, EventLogError> EventLogWriter::SyncIfDue() {
  if (!dirty_) return {};
  if (std::chrono::steady_clock::now() - last_sync_ < options_.sync_interval) return {};
  return Sync();
}

}  // namespace deskbox::recorder
