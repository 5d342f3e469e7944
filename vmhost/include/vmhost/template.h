#pragma once
// Template snapshots on disk: <cache>/templates/<dir>/{disk.img, ram, state, manifest.pb}.
// All files are read-only (0444) once the template is complete; manifest.pb is written last,
// so a directory without a valid manifest is never mistaken for a template.
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

#include "template.pb.h"

namespace deskbox::vmhost {

struct TemplateError {
  enum class Code { kNotFound, kCorrupt, kMismatch, kIo, kIncompatible };
  Code code;
  std::string message;  // names the file and what is wrong
};

inline constexpr char kManifestFile[] = "manifest.pb";
inline constexpr char kDiskFile[] = "disk.img";
inline constexpr char kRamFile[] = "ram";
inline constexpr char kStateFile[] = "state";
inline constexpr uint32_t kManifestFormatVersion = 1;
inline constexpr size_t kMaxManifestPayload = 64 * 1024;

// Serialized form: magic, version, length, payload, SHA-256(payload).
std::string EncodeManifest(const v1::TemplateManifest& manifest);
std::expected<v1::TemplateManifest, TemplateError> DecodeManifest(std::string_view bytes);

enum class VerifyMode {
  kQuick,  // manifest valid, files present with the recorded sizes, read-only
  kFull,   // and every file's SHA-256 matches
};

// Opens and checks the template in `dir`. Every failure names the cause.
std::expected<v1::TemplateManifest, TemplateError> OpenTemplate(const std::string& dir,
                                                               VerifyMode mode);

// Fills size and sha256 of `names` (files in dir) into the manifest and writes manifest.pb
// atomically, mode 0444.
std::expected<void, TemplateError> SealTemplate(const std::string& dir,
                                                v1::TemplateManifest manifest);

}  // namespace deskbox::vmhost
