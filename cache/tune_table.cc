// Tuning tables (format in tune_table.hpp).

#include "cache/tune_table.hpp"

#include "cache/file_util.hpp"
#include "cache/warn.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <tuple>

namespace kjit::cache {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "kjit-tuning";
/// The folder of the tables under a cache root.
constexpr std::string_view kTuningDirName = "tuning";
/// A table holds a few hundred entries of a few hundred bytes; anything far larger is not one.
constexpr uint64_t kMaxTableBytes = uint64_t{64} << 20;
/// The deepest nesting a table has is 4 (entries → entry → choice → knobs).
constexpr size_t kMaxDepth = 8;
constexpr size_t kMaxBucket = 16;

/// Why a table does not decode (caught at the top and rethrown as CacheError).
struct Bad {
  std::string why;
};

const json& field(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end()) throw Bad{fmt::format("{}{} is missing", where, name)};
  return *it;
}

std::string get_string(const json& obj, const char* name, const std::string& where) {
  const json& v = field(obj, name, where);
  if (!v.is_string()) throw Bad{fmt::format("{}{} is not a string", where, name)};
  return v.get<std::string>();
}

int64_t get_int(const json& obj, const char* name, const std::string& where) {
  const json& v = field(obj, name, where);
  if (!v.is_number_integer()) throw Bad{fmt::format("{}{} is not an integer", where, name)};
  return v.get<int64_t>();
}

int get_int32(const json& obj, const char* name, const std::string& where) {
  const int64_t v = get_int(obj, name, where);
  if (v < INT32_MIN || v > INT32_MAX) throw Bad{fmt::format("{}{} = {} is out of range", where, name, v)};
  return static_cast<int>(v);
}

double get_number(const json& obj, const char* name, const std::string& where) {
  const json& v = field(obj, name, where);
  if (!v.is_number()) throw Bad{fmt::format("{}{} is not a number", where, name)};
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) throw Bad{fmt::format("{}{} = {} is not a finite non-negative number", where, name, d)};
  return d;
}

json choice_to_json(const TuneChoice& c) {
  json knobs = json::object();
  for (const auto& [name, value] : c.knobs) knobs[name] = value;
  return {{"family", c.family}, {"point", c.point},     {"knobs", knobs},         {"us", c.us},
          {"eager_us", c.eager_us}, {"spread", c.spread}, {"threads", c.threads}, {"smem", c.smem},
          {"registers", c.registers}, {"cluster", c.cluster}};
}

TuneChoice choice_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw Bad{fmt::format("{} is not an object", where.substr(0, where.size() - 1))};
  TuneChoice c;
  c.family = get_string(j, "family", where);
  c.point = get_string(j, "point", where);
  const json& knobs = field(j, "knobs", where);
  if (!knobs.is_object()) throw Bad{where + "knobs is not an object"};
  for (auto it = knobs.begin(); it != knobs.end(); ++it) {
    if (!it->is_number_integer()) throw Bad{fmt::format("{}knobs.{} is not an integer", where, it.key())};
    c.knobs[it.key()] = it->get<int64_t>();
  }
  c.us = get_number(j, "us", where);
  c.eager_us = get_number(j, "eager_us", where);
  c.spread = get_number(j, "spread", where);
  c.threads = get_int32(j, "threads", where);
  c.smem = get_int32(j, "smem", where);
  c.registers = get_int32(j, "registers", where);
  c.cluster = get_int32(j, "cluster", where);
  return c;
}

bool key_less(const TuneEntry& a, const TuneEntry& b) {
  return std::tie(a.op, a.bucket) < std::tie(b.op, b.bucket);
}

bool same_key(const TuneEntry& a, const TuneEntry& b) { return a.op == b.op && a.bucket == b.bucket; }

/// Holds an exclusive flock on a file; released when destroyed.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    if (const int err = detail::open_regular(path, O_RDWR | O_CREAT, &fd_); err != 0) {
      throw CacheError(fmt::format("cannot open tuning lock {}: {}", path, detail::errno_text(err)));
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      throw CacheError(fmt::format("cannot lock {}: {}", path, detail::errno_text(err)));
    }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string TuneChoice::describe() const {
  std::string s = family.empty() ? std::string("(no kernel)") : family;
  if (!point.empty()) s += " " + point;
  for (const auto& [name, value] : knobs) s += fmt::format(" {}={}", name, value);
  return s;
}

const TuneEntry* TuneTable::find(std::string_view op, const std::vector<int64_t>& bucket) const {
  for (const TuneEntry& e : entries) {
    if (e.op == op && e.bucket == bucket) return &e;
  }
  return nullptr;
}

std::string encode_table(const TuneTable& table) {
  std::vector<TuneEntry> sorted = table.entries;
  std::stable_sort(sorted.begin(), sorted.end(), key_less);
  json fingerprint = json::object();
  for (const auto& [k, v] : table.fingerprint_fields) fingerprint[k] = v;
  fingerprint["id"] = table.fingerprint_id;
  fingerprint["text"] = table.fingerprint_text;
  json entries = json::array();
  for (const TuneEntry& e : sorted) {
    entries.push_back({{"op", e.op},
                       {"bucket", e.bucket},
                       {"shape", e.shape},
                       {"winner", choice_to_json(e.winner)},
                       {"runner_up", e.has_runner_up ? choice_to_json(e.runner_up) : json(nullptr)},
                       {"default", choice_to_json(e.default_choice)},
                       {"margin", e.margin},
                       {"gain", e.gain},
                       {"tuned_unix", e.tuned_unix},
                       {"planner", e.planner}});
  }
  const json doc = {{"format", kFormat},
                    {"version", kTuneTableVersion},
                    {"fingerprint", fingerprint},
                    {"entries", entries}};
  return doc.dump(1) + "\n";
}

TuneTable decode_table(std::string_view bytes) {
  try {
    // Nesting deeper than a table's is refused while parsing, before it costs anything.
    const json::parser_callback_t depth_guard = [](int depth, json::parse_event_t, json&) {
      if (static_cast<size_t>(depth) > kMaxDepth) throw Bad{fmt::format("nested deeper than {} levels", kMaxDepth)};
      return true;
    };
    json doc;
    try {
      doc = json::parse(bytes.begin(), bytes.end(), depth_guard);
    } catch (const json::parse_error& e) {
      throw Bad{fmt::format("not JSON: {}", e.what())};
    }
    if (!doc.is_object()) throw Bad{"not a JSON object"};
    const auto format = doc.find("format");
    if (format == doc.end() || !format->is_string() || format->get<std::string>() != kFormat) {
      throw Bad{"format is not kjit-tuning"};
    }
    const int64_t version = get_int(doc, "version", "");
    if (version != kTuneTableVersion) {
      throw Bad{fmt::format("version {} != {} (written by another kjit)", version, kTuneTableVersion)};
    }
    TuneTable t;
    const json& fp = field(doc, "fingerprint", "");
    if (!fp.is_object()) throw Bad{"fingerprint is not an object"};
    t.fingerprint_id = get_string(fp, "id", "fingerprint.");
    // The id names the table's file (table_path): it must stay inside the tuning folder.
    const bool id_ok = !t.fingerprint_id.empty() && t.fingerprint_id.size() <= 64 &&
                       std::all_of(t.fingerprint_id.begin(), t.fingerprint_id.end(), [](char c) {
                         return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
                                c == '_';
                       });
    if (!id_ok) throw Bad{fmt::format("fingerprint.id {} is not 1 to 64 letters, digits, '-' or '_'", json(t.fingerprint_id).dump())};
    t.fingerprint_text = get_string(fp, "text", "fingerprint.");
    for (auto it = fp.begin(); it != fp.end(); ++it) {
      if (it.key() == "id" || it.key() == "text") continue;
      t.fingerprint_fields[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
    }
    const json& entries = field(doc, "entries", "");
    if (!entries.is_array()) throw Bad{"entries is not an array"};
    size_t i = 0;
    for (const json& j : entries) {
      ++i;
      const std::string where = fmt::format("entry {}: ", i);
      if (!j.is_object()) throw Bad{where + "not an object"};
      TuneEntry e;
      e.op = get_string(j, "op", where);
      const json& bucket = field(j, "bucket", where);
      if (!bucket.is_array() || bucket.size() > kMaxBucket) {
        throw Bad{fmt::format("{}bucket is not an array of at most {} integers", where, kMaxBucket)};
      }
      for (const json& b : bucket) {
        if (!b.is_number_integer()) throw Bad{where + "bucket holds a non-integer"};
        e.bucket.push_back(b.get<int64_t>());
      }
      e.shape = get_string(j, "shape", where);
      e.winner = choice_from_json(field(j, "winner", where), where + "winner.");
      const json& runner = field(j, "runner_up", where);
      e.has_runner_up = !runner.is_null();
      if (e.has_runner_up) e.runner_up = choice_from_json(runner, where + "runner_up.");
      e.default_choice = choice_from_json(field(j, "default", where), where + "default.");
      e.margin = get_number(j, "margin", where);
      e.gain = get_number(j, "gain", where);
      e.tuned_unix = get_int(j, "tuned_unix", where);
      if (j.contains("planner")) {
        const int64_t planner = get_int(j, "planner", where);
        if (planner < 1 || planner > INT32_MAX) throw Bad{fmt::format("{}planner {} is not a revision (1 or more)", where, planner)};
        e.planner = static_cast<int>(planner);
      }
      t.entries.push_back(std::move(e));
    }
    std::stable_sort(t.entries.begin(), t.entries.end(), key_less);
    for (size_t k = 1; k < t.entries.size(); ++k) {
      if (same_key(t.entries[k - 1], t.entries[k])) {
        throw Bad{fmt::format("two entries for op {} bucket {}", t.entries[k].op, json(t.entries[k].bucket).dump())};
      }
    }
    return t;
  } catch (const Bad& b) {
    throw CacheError(b.why);
  } catch (const json::exception& e) {
    throw CacheError(fmt::format("malformed: {}", e.what()));
  }
}

size_t merge_tables(TuneTable& base, const TuneTable& incoming) {
  if (base.fingerprint_id != incoming.fingerprint_id) {
    throw CacheError(fmt::format("cannot merge the tuning table of fingerprint {} into {}'s", incoming.fingerprint_id,
                                 base.fingerprint_id));
  }
  if (base.fingerprint_text.empty()) {
    base.fingerprint_text = incoming.fingerprint_text;
    base.fingerprint_fields = incoming.fingerprint_fields;
  }
  size_t taken = 0;
  for (const TuneEntry& e : incoming.entries) {
    auto it = std::find_if(base.entries.begin(), base.entries.end(), [&](const TuneEntry& b) { return same_key(b, e); });
    if (it == base.entries.end()) {
      base.entries.push_back(e);
      ++taken;
    } else if (e.tuned_unix > it->tuned_unix) {
      *it = e;
      ++taken;
    }
  }
  std::stable_sort(base.entries.begin(), base.entries.end(), key_less);
  return taken;
}

std::string tuning_dir(const std::string& root) { return root + "/" + std::string(kTuningDirName); }

std::string table_relative_path(const std::string& fingerprint_id) {
  return std::string(kTuningDirName) + "/" + fingerprint_id + ".json";
}

std::string table_path(const std::string& root, const std::string& fingerprint_id) {
  return root + "/" + table_relative_path(fingerprint_id);
}

bool read_table(const std::string& path, TuneTable* out) {
  std::string bytes;
  const int err = detail::read_file(path, kMaxTableBytes, detail::kReadPlain, &bytes);
  if (err == ENOENT) return false;
  if (err != 0) {
    throw CacheError(fmt::format("cannot read tuning table {}: {}", path,
                                 err == EFBIG ? std::string("larger than any table kjit writes") : detail::errno_text(err)));
  }
  try {
    *out = decode_table(bytes);
  } catch (const CacheError& e) {
    throw CacheError(fmt::format("tuning table {}: {}", path, e.what()));
  }
  return true;
}

TuneTable publish_table(const std::string& root, const TuneTable& table) {
  const std::string dir = tuning_dir(root);
  if (const int err = detail::make_dirs(dir); err != 0) {
    throw CacheError(fmt::format("cannot create {}: {}", dir, detail::errno_text(err)));
  }
  const std::string path = table_path(root, table.fingerprint_id);
  const FileLock lock(dir + "/" + table.fingerprint_id + ".lock");
  TuneTable merged;
  merged.fingerprint_id = table.fingerprint_id;
  try {
    if (read_table(path, &merged) && merged.fingerprint_id != table.fingerprint_id) {
      // Another device's table copied under this name: no planner reads it here (they check the
      // recorded fingerprint), and merging into it would mix two devices' measurements.
      throw CacheError(fmt::format("tuning table {} records fingerprint {}, not the {} its name says", path,
                                   merged.fingerprint_id, table.fingerprint_id));
    }
  } catch (const CacheError& e) {
    // Unreadable and foreign tables are kept for a person to look at, never overwritten unseen.
    const std::string aside = path + ".bad-" + detail::unique_suffix();
    const int moved = std::rename(path.c_str(), aside.c_str()) == 0 ? 0 : errno;
    warn(fmt::format("{}; {}", e.what(),
                     moved == 0 ? "moved aside to " + aside : "could not move it aside: " + detail::errno_text(moved)));
    if (moved != 0) throw;
    merged = TuneTable{};
    merged.fingerprint_id = table.fingerprint_id;
  }
  merge_tables(merged, table);
  merged.fingerprint_text = table.fingerprint_text;
  merged.fingerprint_fields = table.fingerprint_fields;
  if (const int err = detail::write_file_atomic(path, encode_table(merged)); err != 0) {
    throw CacheError(fmt::format("cannot write tuning table {}: {}", path, detail::errno_text(err)));
  }
  return merged;
}

std::vector<std::string> list_tables(const std::string& root) {
  std::vector<std::string> names;
  std::vector<std::string> out;
  if (detail::list_dir(tuning_dir(root), &names) != 0) return out;
  for (const std::string& n : names) {
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0 && n != "failed-compiles.json" &&
        !detail::is_temp_name(n)) {
      out.push_back(n);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kjit::cache
