#include "vmhost/template.h"

#include <sys/stat.h>

#include <cstring>
#include <fmt/format.h>

#include "common/files.h"
#include "common/sha256.h"

namespace deskbox::vmhost {
namespace {
constexpr char kMagic[8] = {'D', 'B', 'X', 'T', 'M', 'P', 'L', '\0'};
constexpr size_t kHeader = 16;

void PutBe32(std::string& s, uint32_t v) {
  s.push_back(static_cast<char>(v >> 24));
  s.push_back(static_cast<char>(v >> 16));
  s.push_back(static_cast<char>(v >> 8));
  s.push_back(static_cast<char>(v));
}
uint32_t GetBe32(const char* p) {
  auto u = reinterpret_cast<const uint8_t*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
}
TemplateError Corrupt(std::string msg) { return {TemplateError::Code::kCorrupt, std::move(msg)}; }
}  // namespace

std::string EncodeManifest(const v1::TemplateManifest& manifest) {
  std::string payload = manifest.SerializeAsString();
  std::string out(kMagic, sizeof kMagic);
  PutBe32(out, kManifestFormatVersion);
  PutBe32(out, static_cast<uint32_t>(payload.size()));
  out += payload;
  auto digest = Sha256(payload);
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return out;
}

std::expected<v1::TemplateManifest, TemplateError> DecodeManifest(std::string_view bytes) {
  if (bytes.size() < kHeader + 32) return std::unexpected(Corrupt("manifest is truncated"));
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return std::unexpected(Corrupt("manifest has a wrong magic number"));
  uint32_t version = GetBe32(bytes.data() + 8);
  if (version != kManifestFormatVersion)
    return std::unexpected(TemplateError{TemplateError::Code::kIncompatible,
                                         fmt::format("manifest format version {} is not supported "
                                                     "(this build reads {})",
                                                     version, kManifestFormatVersion)});
  uint32_t len = GetBe32(bytes.data() + 12);
  if (len > kMaxManifestPayload) return std::unexpected(Corrupt("manifest payload is too large"));
  if (bytes.size() != kHeader + len + 32)
    return std::unexpected(Corrupt("manifest length does not match its header"));
  std::string_view payload = bytes.substr(kHeader, len);
  auto digest = Sha256(payload);
  if (std::memcmp(digest.data(), bytes.data() + kHeader + len, 32) != 0)
    return std::unexpected(Corrupt("manifest checksum mismatch"));
  v1::TemplateManifest m;
  if (!m.ParseFromArray(payload.data(), static_cast<int>(payload.size())))
    return std::unexpected(Corrupt("manifest payload does not parse"));
  if (m.format_version() != kManifestFormatVersion)
    return std::unexpected(Corrupt("manifest payload version differs from its header"));
  return m;
}

std::expected<v1::TemplateManifest, TemplateError> OpenTemplate(const std::string& dir,
                                                               VerifyMode mode) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return std::unexpected(
        TemplateError{TemplateError::Code::kNotFound, fmt::format("template {} not found", dir)});
  auto bytes = ReadFile(dir + "/" + kManifestFile, kHeader + kMaxManifestPayload + 32);
  if (!bytes) {
    if (bytes.error() == ENOENT)
      return std::unexpected(TemplateError{
          TemplateError::Code::kNotFound,
          fmt::format("template {} has no manifest (incomplete or not a template)", dir)});
    return std::unexpected(TemplateError{
        TemplateError::Code::kIo,
        fmt::format("reading {}/{}: {}", dir, kManifestFile, ErrnoString(bytes.error()))});
  }
  auto m = DecodeManifest(*bytes);
  if (!m) {
    m.error().message = fmt::format("template {}: {}", dir, m.error().message);
    return m;
  }
  for (const char* required : {kDiskFile, kRamFile, kStateFile}) {
    bool listed = false;
    for (const auto& f : m->files()) listed |= f.name() == required;
    if (!listed)
      return std::unexpected(
          Corrupt(fmt::format("template {}: manifest does not list {}", dir, required)));
  }
  for (const auto& f : m->files()) {
    if (f.name().empty() || f.name().find('/') != std::string::npos || f.name()[0] == '.')
      return std::unexpected(Corrupt(fmt::format("template {}: bad file name in manifest", dir)));
    std::string path = dir + "/" + f.name();
    if (::stat(path.c_str(), &st) != 0)
      return std::unexpected(TemplateError{TemplateError::Code::kNotFound,
                                           fmt::format("template file {} is missing", path)});
    if (static_cast<uint64_t>(st.st_size) != f.size())
      return std::unexpected(TemplateError{
          TemplateError::Code::kMismatch,
          fmt::format("template file {} has size {}, manifest says {}", path, st.st_size,
                      f.size())});
    if (st.st_mode & 0222)
      return std::unexpected(TemplateError{
          TemplateError::Code::kMismatch,
          fmt::format("template file {} is writable; templates must be read-only", path)});
    // QEMU maps the RAM file without checking its length: a short file would only fault (SIGBUS)
    // inside a running guest.
    if (f.name() == kRamFile && f.size() != (m->memory_mib() << 20))
      return std::unexpected(TemplateError{
          TemplateError::Code::kMismatch,
          fmt::format("template file {} has {} bytes; the guest's {} MiB of RAM need {}", path,
                      f.size(), m->memory_mib(), m->memory_mib() << 20)});
    if (mode == VerifyMode::kFull) {
      auto digest = Sha256File(path);
      if (!digest)
        return std::unexpected(TemplateError{
            TemplateError::Code::kIo, fmt::format("hashing {}: {}", path,
                                                  ErrnoString(digest.error()))});
      if (f.sha256().size() != 32 || std::memcmp(digest->data(), f.sha256().data(), 32) != 0)
        return std::unexpected(TemplateError{
            TemplateError::Code::kMismatch,
            fmt::format("template file {} does not match its checksum", path)});
    }
  }
  return m;
}

std::expected<void, TemplateError> SealTemplate(const std::string& dir,
                                                v1::TemplateManifest manifest) {
  manifest.set_format_version(kManifestFormatVersion);
  for (auto& f : *manifest.mutable_files()) {
    std::string path = dir + "/" + f.name();
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      return std::unexpected(TemplateError{TemplateError::Code::kNotFound,
                                           fmt::format("template file {} is missing", path)});
    auto digest = Sha256File(path);
    if (!digest)
      return std::unexpected(TemplateError{
          TemplateError::Code::kIo, fmt::format("hashing {}: {}", path,
                                                ErrnoString(digest.error()))});
    f.set_size(static_cast<uint64_t>(st.st_size));
    f.set_sha256(digest->data(), digest->size());
    if (::chmod(path.c_str(), 0444) != 0)
      return std::unexpected(TemplateError{
          TemplateError::Code::kIo, fmt::format("chmod {}: {}", path, ErrnoString(errno))});
  }
  auto w = WriteFileAtomic(dir + "/" + kManifestFile, EncodeManifest(manifest), 0444);
  if (!w)
    return std::unexpected(TemplateError{
        TemplateError::Code::kIo,
        fmt::format("writing {}/{}: {}", dir, kManifestFile, ErrnoString(w.error()))});
  return {};
}

}  // namespace deskbox::vmhost
