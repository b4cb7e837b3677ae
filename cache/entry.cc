// Encoding and defensive decoding of one cache entry (layout in entry.hpp).

#include "cache/entry.hpp"

#include "cache/le_bytes.hpp"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <cstring>
#include <limits>
#include <new>

namespace kjit::cache {
namespace {

using nlohmann::json;

constexpr char kMagic[8] = {'K', 'J', 'I', 'T', 'C', 'U', 'B', 'N'};
constexpr size_t kHeaderBytes = 52;
constexpr size_t kVersionOffset = 8;
constexpr size_t kKeyOffset = 12;
constexpr size_t kMetaSizeOffset = 28;
constexpr size_t kPayloadSizeOffset = 36;
constexpr size_t kChecksumOffset = 44;

using detail::get_le;
void put_u32(std::string& out, uint32_t v) { detail::put_le(out, v, 4); }
void put_u64(std::string& out, uint64_t v) { detail::put_le(out, v, 8); }

json meta_to_json(const EntryMeta& m) {
  json kernels = json::array();
  for (const KernelMeta& k : m.kernels) {
    kernels.push_back({{"name_expression", k.name_expression},
                       {"lowered_name", k.lowered_name},
                       {"registers", k.registers},
                       {"spill_bytes", k.spill_bytes},
                       {"static_smem", k.static_smem}});
  }
  json inputs = json::array();
  for (const InputDigest& i : m.inputs) inputs.push_back(json::array({i.kind, i.name, i.digest}));
  return json{{"family", m.family},
              {"template_args", m.template_args},
              {"target", m.target},
              {"ptx", m.ptx},
              {"kernels", std::move(kernels)},
              {"options", m.options},
              {"nvrtc_version", m.nvrtc_version},
              {"cuda_headers_version", m.cuda_headers_version},
              {"source_name", m.source_name},
              {"compile_ms", m.compile_ms},
              {"created_unix", m.created_unix},
              {"inputs", std::move(inputs)}};
}

// Field readers: a missing field keeps its default (older writers of the same format version may
// omit it); a field of the wrong type makes the whole entry bad, because then the bytes are not
// something encode() wrote.
bool read_string(const json& obj, const char* name, std::string* out, std::string* why) {
  auto it = obj.find(name);
  if (it == obj.end()) return true;
  if (!it->is_string()) {
    *why = std::string("bad metadata: '") + name + "' is not a string";
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

bool read_int(const json& obj, const char* name, int64_t lo, int64_t hi, int64_t* out,
              std::string* why) {
  auto it = obj.find(name);
  if (it == obj.end()) return true;
  if (!it->is_number_integer()) {
    *why = std::string("bad metadata: '") + name + "' is not an integer";
    return false;
  }
  // Unsigned JSON integers above INT64_MAX would wrap in get<int64_t>().
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    *why = std::string("bad metadata: '") + name + "' is out of range";
    return false;
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    *why = std::string("bad metadata: '") + name + "' is out of range";
    return false;
  }
  *out = v;
  return true;
}

bool read_int32(const json& obj, const char* name, int* out, std::string* why) {
  int64_t v = *out;
  if (!read_int(obj, name, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), &v,
                why)) {
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool meta_from_json(const json& j, EntryMeta* m, std::string* why) {
  if (!j.is_object()) {
    *why = "bad metadata: not a JSON object";
    return false;
  }
  if (!read_string(j, "family", &m->family, why) ||
      !read_string(j, "template_args", &m->template_args, why) ||
      !read_string(j, "target", &m->target, why) ||
      !read_string(j, "nvrtc_version", &m->nvrtc_version, why) ||
      !read_string(j, "cuda_headers_version", &m->cuda_headers_version, why) ||
      !read_string(j, "source_name", &m->source_name, why) ||
      !read_int(j, "created_unix", std::numeric_limits<int64_t>::min(),
                std::numeric_limits<int64_t>::max(), &m->created_unix, why)) {
    return false;
  }
  if (auto it = j.find("ptx"); it != j.end()) {
    if (!it->is_boolean()) {
      *why = "bad metadata: 'ptx' is not a boolean";
      return false;
    }
    m->ptx = it->get<bool>();
  }
  if (auto it = j.find("compile_ms"); it != j.end()) {
    if (!it->is_number()) {
      *why = "bad metadata: 'compile_ms' is not a number";
      return false;
    }
    m->compile_ms = it->get<double>();
  }
  if (auto it = j.find("options"); it != j.end()) {
    if (!it->is_array()) {
      *why = "bad metadata: 'options' is not an array";
      return false;
    }
    for (const json& o : *it) {
      if (!o.is_string()) {
        *why = "bad metadata: 'options' holds a non-string";
        return false;
      }
      m->options.push_back(o.get<std::string>());
    }
  }
  if (auto it = j.find("inputs"); it != j.end()) {
    if (!it->is_array()) {
      *why = "bad metadata: 'inputs' is not an array";
      return false;
    }
    for (const json& i : *it) {
      if (!i.is_array() || i.size() != 3 || !i[0].is_string() || !i[1].is_string() || !i[2].is_string()) {
        *why = "bad metadata: 'inputs' holds something other than [kind, name, digest]";
        return false;
      }
      m->inputs.push_back({i[0].get<std::string>(), i[1].get<std::string>(), i[2].get<std::string>()});
    }
  }
  if (auto it = j.find("kernels"); it != j.end()) {
    if (!it->is_array()) {
      *why = "bad metadata: 'kernels' is not an array";
      return false;
    }
    for (const json& k : *it) {
      if (!k.is_object()) {
        *why = "bad metadata: 'kernels' holds a non-object";
        return false;
      }
      KernelMeta km;
      if (!read_string(k, "name_expression", &km.name_expression, why) ||
          !read_string(k, "lowered_name", &km.lowered_name, why) ||
          !read_int32(k, "registers", &km.registers, why) ||
          !read_int32(k, "spill_bytes", &km.spill_bytes, why) ||
          !read_int32(k, "static_smem", &km.static_smem, why)) {
        return false;
      }
      m->kernels.push_back(std::move(km));
    }
  }
  return true;
}

}  // namespace

std::string encode(const Entry& entry) {
  // Replacing invalid UTF-8 (an odd byte in a user's define, say) keeps encode() from throwing;
  // metadata is descriptive, so a replaced character costs nothing.
  const std::string meta =
      meta_to_json(entry.meta).dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(kHeaderBytes + meta.size() + entry.payload.size());
  out.append(kMagic, sizeof(kMagic));
  put_u32(out, kFormatVersion);
  put_u64(out, entry.key.hi);
  put_u64(out, entry.key.lo);
  put_u64(out, meta.size());
  put_u64(out, entry.payload.size());
  put_u64(out, 0);  // checksum, filled in below once the body is in place
  out += meta;
  out += entry.payload;
  const uint64_t sum = XXH3_64bits(out.data() + kHeaderBytes, out.size() - kHeaderBytes);
  for (int i = 0; i < 8; ++i) out[kChecksumOffset + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  return out;
}

std::optional<Entry> decode(std::string_view bytes, const Key* expected, std::string* why) {
  std::string scratch;
  if (why == nullptr) why = &scratch;
  why->clear();

  if (bytes.size() < kHeaderBytes) {
    // A short prefix of a real entry is "truncated"; anything else never was an entry.
    const size_t n = bytes.size() < sizeof(kMagic) ? bytes.size() : sizeof(kMagic);
    *why = (n == 0 || std::memcmp(bytes.data(), kMagic, n) == 0) ? "truncated" : "bad magic";
    return std::nullopt;
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    *why = "bad magic";
    return std::nullopt;
  }
  const uint64_t version = get_le(bytes, kVersionOffset, 4);
  if (version != kFormatVersion) {
    *why = "format version " + std::to_string(version) + " != " + std::to_string(kFormatVersion);
    return std::nullopt;
  }
  Entry entry;
  entry.key.hi = get_le(bytes, kKeyOffset, 8);
  entry.key.lo = get_le(bytes, kKeyOffset + 8, 8);
  if (expected != nullptr && entry.key != *expected) {
    *why = "key mismatch";
    return std::nullopt;
  }
  // Sizes come from untrusted bytes: compare against what is left instead of adding them, so a
  // huge value cannot overflow into a small one.
  const uint64_t meta_size = get_le(bytes, kMetaSizeOffset, 8);
  const uint64_t payload_size = get_le(bytes, kPayloadSizeOffset, 8);
  const uint64_t body = bytes.size() - kHeaderBytes;
  if (meta_size > body || payload_size > body - meta_size) {
    *why = "truncated";
    return std::nullopt;
  }
  if (meta_size + payload_size != body) {
    *why = "trailing bytes";
    return std::nullopt;
  }
  const uint64_t stored_sum = get_le(bytes, kChecksumOffset, 8);
  if (XXH3_64bits(bytes.data() + kHeaderBytes, body) != stored_sum) {
    *why = "checksum mismatch";
    return std::nullopt;
  }

  const std::string_view meta_text = bytes.substr(kHeaderBytes, meta_size);
  try {
    const json j = json::parse(meta_text.begin(), meta_text.end(), nullptr,
                               /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      *why = "bad metadata: not valid JSON";
      return std::nullopt;
    }
    if (!meta_from_json(j, &entry.meta, why)) return std::nullopt;
    entry.payload.assign(bytes.data() + kHeaderBytes + meta_size, payload_size);
  } catch (const std::bad_alloc&) {
    *why = "out of memory";
    return std::nullopt;
  } catch (const std::exception& e) {
    // Deeply nested or otherwise odd JSON that passed the checksum: a foreign writer.
    *why = std::string("bad metadata: ") + e.what();
    return std::nullopt;
  }
  return entry;
}

}  // namespace kjit::cache
