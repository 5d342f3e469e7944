#pragma once
// The on-disk event log of one sandbox: append-only, hash-chained, one file per sandbox.
//
//   header   "DBXEVT1\0" | u32 version (1) | u32 id length N (1..128) | sandbox id (N bytes)
//            | SHA-256 of the preceding 16+N bytes  (= the chain's seed, h0)
//   record   u32 length L (1..1 MiB) | payload (L bytes, a serialized v1::Event)
//            | h_i = SHA-256(h_{i-1} | u32 length | payload)
//
// All integers are big-endian. Record i carries seq i (1, 2, 3, ... with no gap) and the
// header's sandbox id. Every byte of the file is covered by a hash, so any altered, reordered,
// inserted or removed record breaks the chain; the only change the file cannot reveal by itself
// is cutting it at a record boundary — compare the head hash with one kept elsewhere for that.
//
// Nothing here is thread-safe; EventLogWriter is used by one thread (LogEventSink's writer).
#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/sha256.h"
#include "common/unique_fd.h"
#include "recorder/event.pb.h"

namespace deskbox::recorder {

using Event = v1::Event;

inline constexpr uint32_t kEventLogFormatVersion = 1;
inline constexpr size_t kMaxRecordPayload = 1 << 20;  // bytes of one serialized Event
inline constexpr size_t kMaxSandboxIdLength = 128;
inline constexpr char kEventLogSuffix[] = ".events";

struct EventLogError {
  enum class Code {
    kNotFound,         // no such log
    kIo,               // a system call failed (errno in the message)
    kIncompatible,     // a format version this build does not read
    kBadHeader,        // wrong magic, header checksum, sandbox id
    kTruncated,        // the file ends inside the header or a record
    kBadLength,        // a record length of 0 or over kMaxRecordPayload
    kHashMismatch,     // the chain is broken: altered, reordered, inserted or removed bytes
    kBadRecord,        // the payload does not parse, or its seq / sandbox id are wrong
    kTooLarge,         // Append: the event serializes to more than kMaxRecordPayload
    kInvalidArgument,  // bad sandbox id, seq out of order, event of another sandbox
  };
  Code code;
  std::string message;  // names the file, the offset, the seq and what is wrong
  uint64_t offset = 0;  // byte offset of the bad record (or 0 for the header)
  uint64_t seq = 0;     // seq the bad record should have had (0 for the header)
};
std::string_view ToString(EventLogError::Code code);

// Sandbox ids become file names: 1..128 of [A-Za-z0-9_.-], not starting with '.'.
bool IsValidSandboxId(std::string_view id);

// Proto3 strings must be UTF-8 or the record would not parse back. Replaces invalid sequences
// in every string field of `e` with U+FFFD; returns true if anything changed.
bool SanitizeUtf8(Event& e);

// The header for `sandbox_id` and its hash (the chain seed). For tests and tools.
std::string EncodeLogHeader(std::string_view sandbox_id);
// One framed record: length, payload, SHA-256(prev | length | payload). For tests and tools;
// `payload` must be at most kMaxRecordPayload bytes.
std::string EncodeLogRecord(const Sha256Digest& prev, std::string_view payload,
                            Sha256Digest* hash_out = nullptr);

struct VerifyResult {
  uint64_t count = 0;     // records
  uint64_t last_seq = 0;  // == count
  Sha256Digest head{};    // hash of the last record (the header's hash if there is none)
  uint64_t bytes = 0;     // file size
  std::string sandbox_id;
};

// Reads the whole log and checks everything: header, lengths, chain, payloads, seq, sandbox id.
// Streams; memory stays under one record. Returns the first problem found.
std::expected<VerifyResult, EventLogError> VerifyLog(const std::string& path);
std::expected<VerifyResult, EventLogError> VerifyLogBytes(std::string_view bytes);

// Streams a log's events in order, verifying as it goes.
class EventLogReader {
 public:
  struct Options {
    uint64_t since_seq = 0;  // return only events with seq > since_seq (0: all)
    // The file may still be appended to: a record cut by the end of the file is treated as not
    // written yet (Next() returns std::nullopt and tries it again next time) instead of
    // kTruncated.
    bool live = false;
  };

  static std::expected<std::unique_ptr<EventLogReader>, EventLogError> Open(const std::string& path,
                                                                            Options options);
  // Reads from memory; `bytes` must outlive the reader.
  static std::expected<std::unique_ptr<EventLogReader>, EventLogError> FromBytes(
      std::string_view bytes, Options options);
  ~EventLogReader();

  // The next event with seq > since_seq; std::nullopt at the end of the log. After an error
  // the reader stays failed and returns the same error.
  std::expected<std::optional<Event>, EventLogError> Next();

  const std::string& sandbox_id() const { return sandbox_id_; }
  uint64_t records() const { return records_; }  // records verified so far (incl. skipped)
  const Sha256Digest& head() const { return head_; }
  uint64_t offset() const { return offset_; }  // end of the last verified record

  class Source;  // where bytes come from (file or memory); defined in event_log.cc

 private:
  EventLogReader(std::unique_ptr<Source> source, std::string name, Options options);
  std::expected<void, EventLogError> ReadHeader();
  EventLogError Fail(EventLogError e);

  std::unique_ptr<Source> source_;
  std::string name_;  // for messages
  Options options_;
  std::string sandbox_id_;
  uint64_t records_ = 0;
  uint64_t offset_ = 0;
  Sha256Digest head_{};
  std::string scratch_;  // prev hash | length | payload | hash of the record being read
  std::optional<EventLogError> failed_;
};

enum class SyncPolicy {
  kEveryRecord,  // fdatasync after every record: nothing acknowledged is ever lost
  kInterval,     // fdatasync at most every sync_interval (on Append / SyncIfDue / Sync / close)
};

struct EventLogWriterOptions {
  SyncPolicy sync = SyncPolicy::kEveryRecord;
  std::chrono::milliseconds sync_interval{100};
  int file_mode = 0640;  // for a new log
};

// Appends to one sandbox's log. Open() creates the log, or opens an existing one after verifying
// it completely; a torn tail left by a crash (a record cut short, a tail of zeros, or a last
// record whose bytes did not all reach the disk) is cut off — the cut bytes are kept in
// <path>.torn — and the chain and seq continue from the last good record. Any other damage is
// refused (kept as evidence, not repaired).
class EventLogWriter {
 public:
  static std::expected<std::unique_ptr<EventLogWriter>, EventLogError> Open(
      const std::string& path, std::string_view sandbox_id, EventLogWriterOptions options);
  ~EventLogWriter();  // syncs

  // Writes `e` as the next record with one write(2). Fills an empty sandbox_id and a zero seq;
  // a set seq must be next_seq(). Invalid UTF-8 in strings is replaced (see SanitizeUtf8).
  // On failure nothing is appended and the chain is unchanged.
  std::expected<void, EventLogError> Append(Event& e);
  std::expected<void, EventLogError> Sync();
  std::expected<void, EventLogError> SyncIfDue();  // kInterval: when the interval has passed

  uint64_t next_seq() const { return last_seq_ + 1; }
  uint64_t last_seq() const { return last_seq_; }
  const Sha256Digest& head() const { return head_; }
  uint64_t size() const { return end_; }
  bool dirty() const { return dirty_; }  // appended since the last fdatasync
  // Bytes cut off as a torn tail when this writer opened the log (0 if none).
  uint64_t truncated_bytes() const { return truncated_bytes_; }
  const std::string& path() const { return path_; }

 private:
  EventLogWriter() = default;

  std::string path_;
  std::string sandbox_id_;
  EventLogWriterOptions options_;
  UniqueFd fd_;
  uint64_t end_ = 0;
  uint64_t last_seq_ = 0;
  Sha256Digest head_{};
  bool dirty_ = false;
  bool broken_ = false;  // a failed write could not be undone; refuse further appends
  uint64_t truncated_bytes_ = 0;
  std::chrono::steady_clock::time_point last_sync_;
  std::string buf_;
};

}  // namespace deskbox::recorder
