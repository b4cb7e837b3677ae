// A kernel cache as an OCI image layout (format in oci.hpp): tar through libarchive, SHA-256
// through libsodium, signatures through remote/record.hpp.

#include "cache/oci.hpp"

#include "cache/file_util.hpp"
#include "cache/input_file.hpp"
#include "cache/remote/record.hpp"
#include "cache/remote/tune_share.hpp"
#include "cache/store.hpp"
#include "cache/tune_table.hpp"

#include <kjit/error.hpp>

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sodium.h>

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#ifndef KJIT_VERSION
#define KJIT_VERSION "unknown"
#endif

namespace kjit::cache {
namespace {

using nlohmann::json;

constexpr std::string_view kLayoutVersion = "1.0.0";
constexpr std::string_view kIndexType = "application/vnd.oci.image.index.v1+json";
constexpr std::string_view kManifestType = "application/vnd.oci.image.manifest.v1+json";
constexpr std::string_view kConfigType = "application/vnd.oci.image.config.v1+json";
constexpr std::string_view kLayerType = "application/vnd.oci.image.layer.v1.tar";
constexpr std::string_view kRefName = "org.opencontainers.image.ref.name";
/// What a registry round trip may turn the image into: Docker's schema 2 manifest and config,
/// and compressed layers (skopeo compresses layers it pushes to a registry).
constexpr std::string_view kDockerManifestType = "application/vnd.docker.distribution.manifest.v2+json";
constexpr std::string_view kDockerConfigType = "application/vnd.docker.container.image.v1+json";
const std::set<std::string_view> kCompressedLayerTypes = {
    "application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip"};
constexpr std::string_view kSignatureDir = "signatures/";
constexpr std::string_view kSignatureSuffix = ".sig";
/// index.json, manifests and configs are a few kilobytes; registries refuse manifests over 4 MiB.
constexpr uint64_t kMaxJsonBytes = uint64_t{4} << 20;
/// As a bundle: far above a few hundred specializations at the store's per-entry cap.
constexpr uint64_t kMaxLayerBytes = uint64_t{16} << 30;

/// The GOARCH name of the machine this kjit was built for.
std::string host_architecture() {
#if defined(__x86_64__)
  return "amd64";
#elif defined(__aarch64__)
  return "arm64";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return "ppc64le";
#else
  return "unknown";
#endif
}

bool is_tag(std::string_view tag) {
  auto word = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; };
  if (tag.empty() || tag.size() > 128 || !word(tag[0])) return false;
  return std::all_of(tag.begin(), tag.end(), [&](char c) { return word(c) || c == '.' || c == '-'; });
}

void check_tag(const std::string& tag, const std::string& where) {
  if (!is_tag(tag)) {
    throw InvalidArgument(fmt::format("{}: tag '{}' is not [A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}", where, tag));
  }
}

// --- tar, through libarchive -------------------------------------------------------------------

struct ArchiveFree {
  void operator()(archive* a) const { archive_free(a); }  // closes first when still open
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

la_ssize_t append_to_string(archive*, void* out, const void* buffer, size_t length) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

/// An uncompressed ustar archive of `files` (path → bytes), each folder above them first, in
/// path order; every member with mtime 0, uid and gid 0, no names, mode 0644 (folders 0755).
std::string make_tar(const std::map<std::string, std::string>& files) {
  std::set<std::string> dirs;
  for (const auto& [path, bytes] : files) {
    for (size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
      dirs.insert(path.substr(0, slash + 1));
    }
  }
  std::map<std::string, const std::string*> members;  // folders end in '/', and sort before their contents
  for (const std::string& d : dirs) members.emplace(d, nullptr);
  for (const auto& [path, bytes] : files) members.emplace(path, &bytes);

  std::string out;
  ArchivePtr a(archive_write_new());
  if (!a || archive_write_set_format_ustar(a.get()) != ARCHIVE_OK || archive_write_add_filter_none(a.get()) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(a.get(), 1) != ARCHIVE_OK ||
      archive_write_open(a.get(), &out, nullptr, append_to_string, nullptr) != ARCHIVE_OK) {
    throw CacheError(fmt::format("cannot start a tar archive: {}", a ? archive_error_string(a.get()) : "out of memory"));
  }
  for (const auto& [path, bytes] : members) {
    std::unique_ptr<archive_entry, void (*)(archive_entry*)> e(archive_entry_new(), archive_entry_free);
    archive_entry_set_pathname(e.get(), path.c_str());
    archive_entry_set_filetype(e.get(), bytes ? AE_IFREG : AE_IFDIR);
    archive_entry_set_perm(e.get(), bytes ? 0644 : 0755);
    archive_entry_set_size(e.get(), bytes ? static_cast<la_int64_t>(bytes->size()) : 0);
    archive_entry_set_mtime(e.get(), 0, 0);
    archive_entry_set_uid(e.get(), 0);
    archive_entry_set_gid(e.get(), 0);
    if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK) {
      throw CacheError(fmt::format("cannot add {} to a tar archive: {}", path, archive_error_string(a.get())));
    }
    if (bytes && archive_write_data(a.get(), bytes->data(), bytes->size()) != static_cast<la_ssize_t>(bytes->size())) {
      throw CacheError(fmt::format("cannot add {} to a tar archive: {}", path, archive_error_string(a.get())));
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    throw CacheError(fmt::format("cannot finish a tar archive: {}", archive_error_string(a.get())));
  }
  return out;
}

/// The decompressed bytes of a gzip or zstd `blob`, at most kMaxLayerBytes. Throws CacheError.
std::string decompress(std::string_view blob) {
  ArchivePtr a(archive_read_new());
  archive_entry* e = nullptr;
  if (!a || archive_read_support_filter_all(a.get()) != ARCHIVE_OK || archive_read_support_format_raw(a.get()) != ARCHIVE_OK ||
      archive_read_open_memory(a.get(), blob.data(), blob.size()) != ARCHIVE_OK ||
      archive_read_next_header(a.get(), &e) != ARCHIVE_OK) {
    throw CacheError(fmt::format("does not decompress: {}", a ? archive_error_string(a.get()) : "out of memory"));
  }
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    const la_ssize_t n = archive_read_data(a.get(), buffer, sizeof buffer);
    if (n < 0) throw CacheError(fmt::format("does not decompress: {}", archive_error_string(a.get())));
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > kMaxLayerBytes) {
      throw CacheError(fmt::format("decompresses to more than {} bytes", kMaxLayerBytes));
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

struct TarFile {
  std::string path;
  std::string bytes;
};

/// The regular files of the tar `data`, paths without a leading "./"; folders are skipped.
/// Throws CacheError for anything else (a link, a device, an absolute path or "..") and for a
/// damaged archive.
std::vector<TarFile> read_tar(std::string_view data) {
  ArchivePtr a(archive_read_new());
  if (!a || archive_read_support_format_tar(a.get()) != ARCHIVE_OK ||
      archive_read_open_memory(a.get(), data.data(), data.size()) != ARCHIVE_OK) {
    throw CacheError(fmt::format("is not a tar archive: {}", a ? archive_error_string(a.get()) : "out of memory"));
  }
  std::vector<TarFile> files;
  for (;;) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK) throw CacheError(fmt::format("is not a whole tar archive: {}", archive_error_string(a.get())));
    const char* name = archive_entry_pathname(e);
    std::string path = name ? name : "";
    while (path.rfind("./", 0) == 0) path.erase(0, 2);
    const std::string shown = path.empty() ? std::string("(a member without a name)") : path;
    if (path.empty() || path[0] == '/' || path == ".." || path.rfind("../", 0) == 0 ||
        path.find("/../") != std::string::npos || (path.size() >= 3 && path.substr(path.size() - 3) == "/..")) {
      throw CacheError(fmt::format("holds {}, a path outside the image", shown));
    }
    const mode_t type = archive_entry_filetype(e);
    if (type == AE_IFDIR) continue;
    if (type != AE_IFREG || archive_entry_hardlink(e) != nullptr) {
      throw CacheError(fmt::format("holds {}, which is not a regular file (a link or a device)", shown));
    }
    const la_int64_t size = archive_entry_size(e);
    if (size < 0 || static_cast<uint64_t>(size) > data.size()) {
      throw CacheError(fmt::format("holds {} with an impossible size {}", shown, size));
    }
    TarFile f{path, std::string(static_cast<size_t>(size), '\0')};
    size_t got = 0;
    while (got < f.bytes.size()) {
      const la_ssize_t n = archive_read_data(a.get(), f.bytes.data() + got, f.bytes.size() - got);
      if (n <= 0) throw CacheError(fmt::format("is cut short in {}: {}", shown, n < 0 ? archive_error_string(a.get()) : "end of data"));
      got += static_cast<size_t>(n);
    }
    files.push_back(std::move(f));
  }
  return files;
}

// --- the layout's JSON -------------------------------------------------------------------------

/// Parses `bytes` of `what`. Throws CacheError naming `what` when they are not a JSON object.
json parse_object(std::string_view bytes, const std::string& what) {
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw CacheError(fmt::format("{} is not a JSON object", what));
  return j;
}

/// `j[name]` when it is a string; "" when absent and not `required`. Throws CacheError naming `what`.
std::string string_field(const json& j, const char* name, const std::string& what, bool required = true) {
  const auto it = j.find(name);
  if (it == j.end() && !required) return "";
  if (it == j.end() || !it->is_string()) throw CacheError(fmt::format("{} has no \"{}\" string", what, name));
  return it->get<std::string>();
}

struct Descriptor {
  std::string media_type;
  std::string digest;  ///< "sha256:<64 hex>"
  uint64_t size = 0;
  std::map<std::string, std::string> annotations;
};

json descriptor_json(const Descriptor& d) {
  json j = {{"mediaType", d.media_type}, {"digest", d.digest}, {"size", d.size}};
  if (!d.annotations.empty()) j["annotations"] = d.annotations;
  return j;
}

/// A blob's descriptor; throws CacheError naming `what` when it is not one of a SHA-256 blob.
Descriptor parse_descriptor(const json& j, const std::string& what) {
  if (!j.is_object()) throw CacheError(fmt::format("{} is not a descriptor (a JSON object)", what));
  Descriptor d;
  d.media_type = string_field(j, "mediaType", what);
  d.digest = string_field(j, "digest", what);
  const auto size = j.find("size");
  if (size == j.end() || !size->is_number_unsigned()) throw CacheError(fmt::format("{} has no \"size\" count", what));
  d.size = size->get<uint64_t>();
  if (const auto a = j.find("annotations"); a != j.end() && a->is_object()) {
    for (const auto& [k, v] : a->items()) {
      if (v.is_string()) d.annotations[k] = v.get<std::string>();
    }
  }
  const std::string_view hex = std::string_view(d.digest).substr(std::min<size_t>(d.digest.size(), 7));
  if (d.digest.rfind("sha256:", 0) != 0) {
    throw CacheError(fmt::format("{} names {}: only sha256 digests are read", what, d.digest));
  }
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    throw CacheError(fmt::format("{} names {}, which is not a SHA-256 digest", what, d.digest));
  }
  return d;
}

std::string blob_path(const std::string& dir, const std::string& digest) {
  return dir + "/blobs/sha256/" + digest.substr(7);
}

/// The bytes of the blob `d` describes, checked against its size and digest.
std::string read_blob(const std::string& dir, const Descriptor& d, uint64_t max_bytes, const std::string& what) {
  if (d.size > max_bytes) throw CacheError(fmt::format("{} ({}) is {} bytes, more than {}", what, d.digest, d.size, max_bytes));
  // One byte over the declared size is enough to tell a longer file.
  std::string bytes;
  try {
    bytes = read_input_file(blob_path(dir, d.digest), "OCI blob", d.size + 1);
  } catch (const InvalidArgument& e) {  // missing or unreadable: the layout is damaged
    throw CacheError(fmt::format("{} ({}): {}", what, d.digest, e.what()));
  }
  if (bytes.size() != d.size) {
    throw CacheError(fmt::format("{} ({}): size mismatch: its descriptor says {} bytes, the blob holds {}", what,
                                 d.digest, d.size, bytes.size()));
  }
  if (const std::string actual = oci_digest(bytes); actual != d.digest) {
    throw CacheError(fmt::format("{} ({}): digest mismatch: the blob hashes to {}", what, d.digest, actual));
  }
  return bytes;
}

/// Sorted, distinct, comma-separated.
std::string joined(const std::set<std::string>& values) {
  std::string out;
  for (const std::string& v : values) {
    if (v.empty()) continue;
    out += (out.empty() ? "" : ",") + v;
  }
  return out;
}

/// The group of an entry's layer: target, then NVRTC and CUDA headers versions.
using Group = std::tuple<std::string, std::string, std::string>;

std::string signature_path(const std::string& path) {
  return std::string(kSignatureDir) + path + std::string(kSignatureSuffix);
}

/// Reads index.json of an existing layout at `dir` (or an empty index when `dir` is missing or
/// empty). Throws CacheError naming `dir` when it holds files but no layout.
json existing_index(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return json{{"schemaVersion", 2}, {"mediaType", kIndexType}, {"manifests", json::array()}};
  if (!S_ISDIR(st.st_mode)) throw CacheError(fmt::format("{} is not a folder", dir));
  std::vector<std::string> names;
  if (const int err = detail::list_dir(dir, &names); err != 0) {
    throw CacheError(fmt::format("cannot list {}: {}", dir, detail::errno_text(err)));
  }
  if (names.empty()) return json{{"schemaVersion", 2}, {"mediaType", kIndexType}, {"manifests", json::array()}};
  std::string layout;
  if (detail::read_file(dir + "/oci-layout", kMaxJsonBytes, detail::kReadPlain, &layout) != 0) {
    throw CacheError(fmt::format("{} holds files but no OCI image layout (no oci-layout file): name a new or empty folder",
                                 dir));
  }
  std::string index;
  const int err = detail::read_file(dir + "/index.json", kMaxJsonBytes, detail::kReadPlain, &index);
  if (err != 0) throw CacheError(fmt::format("cannot read {}/index.json: {}", dir, detail::errno_text(err)));
  json j = parse_object(index, dir + "/index.json");
  if (!j.contains("manifests") || !j["manifests"].is_array()) {
    throw CacheError(fmt::format("{}/index.json has no \"manifests\" list", dir));
  }
  return j;
}

void write_or_throw(const std::string& path, std::string_view bytes) {
  if (const int err = detail::write_file_atomic(path, bytes); err != 0) {
    throw CacheError(fmt::format("cannot write {}: {}", path, detail::errno_text(err)));
  }
}

/// The key whose entry lives at `path` under a cache root, or nullopt.
std::optional<Key> entry_key_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  Key key;
  if (slash == std::string::npos || path.size() - slash - 1 < 32 ||
      !Key::from_hex(std::string_view(path).substr(slash + 1, 32), &key) || entry_relative_path(key) != path) {
    return std::nullopt;
  }
  return key;
}

/// The fingerprint id whose tuning table lives at `path` under a cache root, or nullopt.
std::optional<std::string> table_id_of(const std::string& path) {
  const size_t slash = path.find('/'), dot = path.rfind('.');
  if (slash == std::string::npos || dot == std::string::npos || dot <= slash + 1) return std::nullopt;
  std::string id = path.substr(slash + 1, dot - slash - 1);
  if (id.find('/') != std::string::npos || table_relative_path(id) != path) return std::nullopt;
  return id;
}

/// What an image holds, every part checked (oci.hpp's header comment).
struct CheckedImage {
  std::vector<Entry> entries;
  std::vector<std::string> tables;
};

/// The one image of `ref` (the tag's, or the only one), from index.json.
Descriptor choose_image(const std::string& dir, const OciRef& ref) {
  const json layout = parse_object(read_input_file(dir + "/oci-layout", "OCI image layout file", kMaxJsonBytes), "oci-layout");
  if (layout.value("imageLayoutVersion", std::string()) != kLayoutVersion) {
    throw CacheError(fmt::format("oci-layout does not say imageLayoutVersion {}", kLayoutVersion));
  }
  const json index = parse_object(read_input_file(dir + "/index.json", "OCI image index", kMaxJsonBytes), "index.json");
  if (!index.contains("manifests") || !index["manifests"].is_array()) throw CacheError("index.json has no \"manifests\" list");
  std::vector<Descriptor> images;
  std::string tags;
  for (const json& m : index["manifests"]) {
    Descriptor d = parse_descriptor(m, "a manifest of index.json");
    const auto tag = d.annotations.find(std::string(kRefName));
    tags += (tags.empty() ? "" : ", ") + (tag == d.annotations.end() ? std::string("(untagged)") : tag->second);
    if (ref.tag.empty() || (tag != d.annotations.end() && tag->second == ref.tag)) images.push_back(std::move(d));
  }
  if (images.empty()) {
    throw CacheError(ref.tag.empty() ? std::string("index.json lists no image")
                                     : fmt::format("no image is tagged {} (tags: {})", ref.tag, tags.empty() ? "none" : tags));
  }
  if (images.size() > 1) {
    throw CacheError(fmt::format("it holds {} images (tags: {}): name one as oci:DIR:TAG", images.size(), tags));
  }
  if (images[0].media_type != kManifestType && images[0].media_type != kDockerManifestType) {
    throw CacheError(fmt::format("the image is a {}, not an image manifest (for a multi-platform index, copy one "
                                 "platform's image: skopeo copy --override-arch)",
                                 images[0].media_type));
  }
  return images[0];
}

/// Every file of every layer of the image `image` describes, by path, with its layer's index.
std::map<std::string, std::pair<std::string, size_t>> layer_files(const std::string& dir, const Descriptor& image) {
  const json manifest = parse_object(read_blob(dir, image, kMaxJsonBytes, "the manifest"), "the manifest");
  if (!manifest.contains("layers") || !manifest["layers"].is_array()) throw CacheError("the manifest has no \"layers\" list");
  const Descriptor config_descriptor = parse_descriptor(manifest.value("config", json()), "the manifest's config");
  if (config_descriptor.media_type != kConfigType && config_descriptor.media_type != kDockerConfigType) {
    throw CacheError(fmt::format("the config is a {}, not an image config", config_descriptor.media_type));
  }
  const json config = parse_object(read_blob(dir, config_descriptor, kMaxJsonBytes, "the config"), "the config");
  const json& layers = manifest["layers"];
  const json rootfs = config.value("rootfs", json());
  if (!rootfs.is_object() || !rootfs.contains("diff_ids") || !rootfs["diff_ids"].is_array() ||
      rootfs["diff_ids"].size() != layers.size()) {
    throw CacheError(fmt::format("the config's rootfs.diff_ids do not list the manifest's {} layers", layers.size()));
  }
  std::map<std::string, std::pair<std::string, size_t>> files;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string what = fmt::format("layer {} of {}", i + 1, layers.size());
    const Descriptor d = parse_descriptor(layers[i], what);
    const bool plain = d.media_type == kLayerType;
    if (!plain && kCompressedLayerTypes.count(d.media_type) == 0) {
      throw CacheError(fmt::format("{} is a {}, not a tar layer", what, d.media_type));
    }
    std::string tar = read_blob(dir, d, kMaxLayerBytes, what);
    std::vector<TarFile> members;
    try {
      if (!plain) tar = decompress(tar);
      const json& diff_id = rootfs["diff_ids"][i];
      if (!diff_id.is_string() || oci_digest(tar) != diff_id.get<std::string>()) {
        throw CacheError(fmt::format("does not unpack to the config's diff_id {}",
                                     diff_id.is_string() ? diff_id.get<std::string>() : std::string("(not a string)")));
      }
      members = read_tar(tar);
    } catch (const CacheError& e) {
      throw CacheError(fmt::format("{} ({}) {}", what, d.digest, e.what()));
    }
    for (TarFile& f : members) {
      const auto [it, fresh] = files.emplace(f.path, std::make_pair(std::move(f.bytes), i));
      if (!fresh && it->second.first != f.bytes) {
        throw CacheError(fmt::format("layers {} and {} hold different files at {}", it->second.second + 1, i + 1, f.path));
      }
    }
  }
  return files;
}

CheckedImage check_image(const std::string& dir, const OciRef& ref, const std::vector<remote::PublicKey>& trusted) {
  const auto files = layer_files(dir, choose_image(dir, ref));
  CheckedImage out;
  std::set<std::string> signed_paths;
  // The file at `path` as a record of `kind` under `key`, with its signature when it has one.
  auto check = [&](remote::RecordKind kind, const Key& key, const std::string& path, const std::string& bytes,
                   size_t layer) {
    const auto sig = files.find(signature_path(path));
    if (sig != files.end()) signed_paths.insert(path);
    remote::Rejection why;
    std::string note;
    std::optional<remote::Record> r = remote::decode_detached(
        kind, key, bytes, sig == files.end() ? std::string_view() : std::string_view(sig->second.first), trusted, &why,
        &note);
    if (!r) {
      const bool plain = note.empty() || note == remote::rejection_name(why);
      throw CacheError(fmt::format("{} in layer {}: {}{}", path, layer + 1, remote::rejection_name(why),
                                   plain ? std::string() : " (" + note + ")"));
    }
    return std::move(*r);
  };
  for (const auto& [path, file] : files) {
    const auto& [bytes, layer] = file;
    if (path.rfind(kSignatureDir, 0) == 0) continue;  // checked with the file it signs, below
    if (const std::optional<Key> key = entry_key_of(path)) {
      out.entries.push_back(std::move(*check(remote::RecordKind::kEntry, *key, path, bytes, layer).entry));
    } else if (const std::optional<std::string> id = table_id_of(path)) {
      check(remote::RecordKind::kTuneTable, remote::tune_record_key(*id), path, bytes, layer);
      std::string recorded;
      try {
        recorded = decode_table(bytes).fingerprint_id;
      } catch (const CacheError& e) {
        throw CacheError(fmt::format("{} in layer {}: {}", path, layer + 1, e.what()));
      }
      if (recorded != *id) throw CacheError(fmt::format("{} in layer {} records fingerprint {}", path, layer + 1, recorded));
      out.tables.push_back(bytes);
    } else {
      throw CacheError(fmt::format("layer {} holds {}, which is no kjit cache entry, tuning table or signature",
                                   layer + 1, path));
    }
  }
  for (const auto& [path, file] : files) {
    if (path.rfind(kSignatureDir, 0) != 0) continue;
    const bool named = path.size() > kSignatureDir.size() + kSignatureSuffix.size() &&
                       path.compare(path.size() - kSignatureSuffix.size(), kSignatureSuffix.size(), kSignatureSuffix) == 0;
    if (!named || signed_paths.count(path.substr(kSignatureDir.size(), path.size() - kSignatureDir.size() -
                                                                          kSignatureSuffix.size())) == 0) {
      throw CacheError(fmt::format("layer {} holds {}, a signature of no file the image holds", file.second + 1, path));
    }
  }
  return out;
}

}  // namespace

std::string oci_digest(std::string_view bytes) {
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw Error("kjit: libsodium could not be initialized (no random source?)");
  unsigned char hash[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(hash, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  std::string out = "sha256:";
  for (unsigned char c : hash) out += fmt::format("{:02x}", c);
  return out;
}

OciRef parse_oci_ref(const std::string& text) {
  OciRef ref;
  if (text.rfind("oci:", 0) == 0) {
    const std::string rest = text.substr(4);
    const size_t colon = rest.find(':');
    ref.dir = rest.substr(0, colon);
    if (colon != std::string::npos) {
      ref.tag = rest.substr(colon + 1);
      check_tag(ref.tag, text);
    }
  } else {
    ref.dir = text;
  }
  if (ref.dir.empty()) throw InvalidArgument(fmt::format("'{}' names no OCI image layout folder", text));
  return ref;
}

OciExportReport export_oci(const DiskCache& cache, const std::string& dir, const ExportFilter& filter,
                           const OciExportOptions& options) {
  check_tag(options.tag, dir);
  const std::string architecture = options.architecture.empty() ? host_architecture() : options.architecture;
  if (options.os.empty() || architecture.find_first_of("/ ") != std::string::npos ||
      options.os.find_first_of("/ ") != std::string::npos) {
    throw InvalidArgument(fmt::format("platform '{}/{}' is not OS/ARCHITECTURE", options.os, architecture));
  }
  json index = existing_index(dir);
  ExportSet set = collect_export(cache, filter);

  OciExportReport report;
  report.tag = options.tag;
  report.skipped_bad = set.skipped_bad;
  report.skipped_tables = set.skipped_tables;
  report.entries = set.entries.size();
  report.tables = set.tables.size();

  std::map<Group, std::vector<const ShippedEntry*>> groups;
  std::set<std::string> targets, nvrtc, headers, fingerprints;
  for (const ShippedEntry& e : set.entries) {
    groups[{e.meta.target, e.meta.nvrtc_version, e.meta.cuda_headers_version}].push_back(&e);
    targets.insert(e.meta.target);
    nvrtc.insert(e.meta.nvrtc_version);
    headers.insert(e.meta.cuda_headers_version);
  }
  for (const ShippedTable& t : set.tables) fingerprints.insert(t.fingerprint_id);

  std::map<std::string, std::string> blobs;  // digest → bytes
  std::vector<Descriptor> layers;
  auto add_layer = [&](const std::map<std::string, std::string>& files, std::map<std::string, std::string> annotations) {
    std::string tar = make_tar(files);
    Descriptor d{std::string(kLayerType), oci_digest(tar), tar.size(), std::move(annotations)};
    blobs.emplace(d.digest, std::move(tar));
    layers.push_back(std::move(d));
  };
  for (const auto& [group, entries] : groups) {
    std::map<std::string, std::string> files;
    for (const ShippedEntry* e : entries) {
      const std::string path = entry_relative_path(e->key);
      files.emplace(path, e->bytes);
      if (options.signer) {
        files.emplace(signature_path(path),
                      remote::detached_signature(remote::RecordKind::kEntry, e->key, e->bytes, *options.signer));
      }
    }
    std::map<std::string, std::string> annotations = {{"dev.kjit.target", std::get<0>(group)},
                                                      {"dev.kjit.nvrtc-version", std::get<1>(group)},
                                                      {"dev.kjit.cuda-headers-version", std::get<2>(group)},
                                                      {"dev.kjit.entries", std::to_string(entries.size())}};
    add_layer(files, std::move(annotations));
  }
  for (const ShippedTable& t : set.tables) {
    const std::string path = table_relative_path(t.fingerprint_id);
    std::map<std::string, std::string> files = {{path, t.bytes}};
    if (options.signer) {
      files.emplace(signature_path(path), remote::detached_signature(remote::RecordKind::kTuneTable,
                                                                     remote::tune_record_key(t.fingerprint_id), t.bytes,
                                                                     *options.signer));
    }
    add_layer(files, {{"dev.kjit.fingerprint", t.fingerprint_id}});
  }

  std::map<std::string, std::string> labels = {{"dev.kjit.version", KJIT_VERSION},
                                               {"dev.kjit.entries", std::to_string(set.entries.size())},
                                               {"dev.kjit.targets", joined(targets)},
                                               {"dev.kjit.nvrtc-versions", joined(nvrtc)},
                                               {"dev.kjit.cuda-headers-versions", joined(headers)},
                                               {"dev.kjit.fingerprints", joined(fingerprints)}};
  if (options.signer) labels["dev.kjit.signer"] = fmt::format("{:016x}", options.signer->pub.id);

  json diff_ids = json::array();
  json layer_list = json::array();
  for (const Descriptor& d : layers) {
    diff_ids.push_back(d.digest);  // uncompressed: the diff_id is the layer's digest
    layer_list.push_back(descriptor_json(d));
  }
  const std::string config = json{{"architecture", architecture},
                                  {"os", options.os},
                                  {"config", {{"Labels", labels}}},
                                  {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}}
                                 .dump();
  const Descriptor config_descriptor{std::string(kConfigType), oci_digest(config), config.size(), {}};
  blobs.emplace(config_descriptor.digest, config);
  const std::string manifest = json{{"schemaVersion", 2},
                                    {"mediaType", kManifestType},
                                    {"config", descriptor_json(config_descriptor)},
                                    {"layers", layer_list},
                                    {"annotations", labels}}
                                   .dump();
  const Descriptor manifest_descriptor{std::string(kManifestType), oci_digest(manifest), manifest.size(),
                                       {{std::string(kRefName), options.tag}}};
  blobs.emplace(manifest_descriptor.digest, manifest);

  if (const int err = detail::make_dirs(dir + "/blobs/sha256"); err != 0) {
    throw CacheError(fmt::format("cannot create {}/blobs/sha256: {}", dir, detail::errno_text(err)));
  }
  for (const auto& [digest, bytes] : blobs) {
    write_or_throw(blob_path(dir, digest), bytes);
    report.bytes += bytes.size();
  }
  write_or_throw(dir + "/oci-layout", json{{"imageLayoutVersion", kLayoutVersion}}.dump());
  // The image of the same tag is replaced; the others stay in their order.
  json manifests = json::array();
  for (const json& m : index["manifests"]) {
    const bool same_tag = m.is_object() && m.contains("annotations") && m["annotations"].is_object() &&
                          m["annotations"].value(std::string(kRefName), std::string()) == options.tag;
    if (!same_tag) manifests.push_back(m);
  }
  manifests.push_back(descriptor_json(manifest_descriptor));
  index["manifests"] = manifests;
  write_or_throw(dir + "/index.json", index.dump());
  report.layers = layers.size();
  report.manifest_digest = manifest_descriptor.digest;
  return report;
}

ImportReport import_oci(DiskCache& cache, const OciRef& ref, const OciImportOptions& options) {
  CheckedImage image;
  try {
    image = check_image(ref.dir, ref, options.trusted);
  } catch (const CacheError& e) {
    throw CacheError(fmt::format("OCI image oci:{}{}: {}; nothing was imported", ref.dir,
                                 ref.tag.empty() ? std::string() : ":" + ref.tag, e.what()));
  }
  ImportReport report;
  report.declared = image.entries.size();
  publish_shipped(cache, image.entries, image.tables, ref.dir, report);
  return report;
}

}  // namespace kjit::cache
