#include "runtime/kernel_sources.hpp"

#include "runtime/toolkit_memo.hpp"

#include "cache/file_util.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

namespace kjit::detail {

struct EmbeddedSource {
  const char* path;
  const unsigned char* data;
  size_t size;
};
// Generated at build time by cmake/embed_kernel_sources.cmake; ends with a null path.
extern const EmbeddedSource kEmbeddedSources[];
extern const char kEmbeddedSourcesDigest[];

namespace {
// The include scan asks about every name it meets, most of them not kernel sources.
const EmbeddedSource* embedded(std::string_view path) {
  static const auto* index = [] {
    auto* m = new std::unordered_map<std::string_view, const EmbeddedSource*>;
    for (const EmbeddedSource* e = kEmbeddedSources; e->path; ++e) m->emplace(e->path, e);
    return m;
  }();
  auto it = index->find(path);
  return it == index->end() ? nullptr : it->second;
}

// The bytes of the file at `path`, whole (a header has no size limit: one left out would leave the
// key short of an input NVRTC reads), or nullopt when it cannot be read.
std::optional<std::string> read_whole(const std::string& path) {
  std::string text;
  if (cache::read_file(path, std::numeric_limits<uint64_t>::max(), cache::kReadPlain, &text) != 0) return std::nullopt;
  return text;
}

// The embedded standard header for include name `name` ("cstdint"), or null.
const EmbeddedSource* embedded_std_header(std::string_view name) {
  if (!is_std_header_name(name)) return nullptr;
  std::string path(kStdHeaderDir);
  path += name;
  return embedded(path);
}
}  // namespace

bool is_std_header_name(std::string_view name) {
  return !name.empty() && name.find('/') == std::string_view::npos && name != "." && name != "..";
}

std::optional<std::string> KernelSources::std_header(std::string_view name) const {
  if (!is_std_header_name(name)) return std::nullopt;
  std::string path(kStdHeaderDir);
  path += name;
  if (!contains(path)) return std::nullopt;
  return read(path);
}

KernelSources::KernelSources(std::string live_dir) : live_dir_(std::move(live_dir)) {}

std::optional<std::string> KernelSources::read(std::string_view path) const {
  if (!live_dir_.empty()) {
    // Reject paths that climb out of the folder: a kernel source names files inside it.
    if (path.find("..") != std::string_view::npos || (!path.empty() && path.front() == '/')) return std::nullopt;
    return read_whole(live_dir_ + "/" + std::string(path));
  }
  if (const EmbeddedSource* e = embedded(path)) return std::string(reinterpret_cast<const char*>(e->data), e->size);
  return std::nullopt;
}

std::string_view KernelSources::digest() const noexcept {
  return live_dir_.empty() ? std::string_view(kEmbeddedSourcesDigest) : std::string_view();
}

bool KernelSources::contains(std::string_view path) const {
  if (!live_dir_.empty()) {
    if (path.find("..") != std::string_view::npos || (!path.empty() && path.front() == '/')) return false;
    struct stat st {};
    return ::stat((live_dir_ + "/" + std::string(path)).c_str(), &st) == 0 && S_ISREG(st.st_mode);
  }
  return embedded(path) != nullptr;
}

std::vector<std::string> KernelSources::list() const {
  std::vector<std::string> out;
  if (!live_dir_.empty()) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(live_dir_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file()) out.push_back(std::filesystem::relative(it->path(), live_dir_).string());
    }
  } else {
    for (const EmbeddedSource* e = kEmbeddedSources; e->path; ++e) out.emplace_back(e->path);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// One include directive (or __has_include probe) found by the textual scan.
struct Include {
  std::string name;
  bool quoted = false;
  bool next = false;  // #include_next / __has_include_next: every hit counts
};

std::string_view skip_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// Reads `<name>` or `"name"` at the start of `s` (after blanks).
bool header_name(std::string_view s, Include& out) {
  s = skip_space(s);
  if (s.empty() || (s[0] != '<' && s[0] != '"')) return false;
  const char close = s[0] == '<' ? '>' : '"';
  const size_t end = s.find(close, 1);
  if (end == std::string_view::npos || end == 1) return false;
  out.name = std::string(s.substr(1, end - 1));
  out.quoted = close == '"';
  return true;
}

// The includes of `text`, in order. Only preprocessing lines are looked at; conditionals are
// ignored on purpose (see kernel_sources.hpp).
std::vector<Include> scan_includes(std::string_view text) {
  std::vector<Include> out;
  size_t pos = 0;
  while (pos < text.size()) {
    // Jump from '#' to '#' (memchr) and keep those that start a line, blanks aside.
    const size_t hash = text.find('#', pos);
    if (hash == std::string_view::npos) break;
    size_t end = text.find('\n', hash);
    if (end == std::string_view::npos) end = text.size();
    pos = end + 1;
    size_t bol = hash;
    while (bol > 0 && (text[bol - 1] == ' ' || text[bol - 1] == '\t')) --bol;
    if (bol > 0 && text[bol - 1] != '\n') continue;
    std::string_view line = skip_space(text.substr(hash + 1, end - hash - 1));
    Include inc;
    if (line.substr(0, 12) == "include_next") {
      inc.next = true;
      if (header_name(line.substr(12), inc)) out.push_back(std::move(inc));
    } else if (line.substr(0, 7) == "include") {
      if (header_name(line.substr(7), inc)) out.push_back(std::move(inc));
    } else {
      // #if / #elif __has_include(<x>): whether x exists changes the compile.
      for (size_t at = line.find("__has_include"); at != std::string_view::npos;
           at = line.find("__has_include", at + 13)) {
        std::string_view rest = line.substr(at + 13);
        Include probe;
        if (rest.substr(0, 5) == "_next") {
          probe.next = true;
          rest.remove_prefix(5);
        }
        rest = skip_space(rest);
        if (!rest.empty() && rest[0] == '(' && header_name(rest.substr(1), probe)) out.push_back(std::move(probe));
      }
    }
  }
  return out;
}

std::string digest(std::string_view bytes) { return cache::digest_hex(bytes); }

// "dir" + "/" + name the way a search path entry forms it; "" and "." mean the working directory.
std::string join(std::string_view dir, std::string_view name) {
  if (dir.empty() || dir == ".") return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

std::string parent_dir(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

// The first component of an include name ("cuda" for "cuda/std/cstdint"): a directory can hold
// the file only if it holds that entry.
std::string_view first_component(std::string_view name) { return name.substr(0, name.find('/')); }

// What a toolkit file reaches when nothing outside the toolkit shadows any name on the way:
// every file (path below the toolkit, digest) and the names that were looked up. Valid for a
// call whose in-memory headers and -I directories hold none of those names.
struct ToolkitClosure {
  std::vector<std::pair<std::string, std::string>> files;  // ("<cuda>/...", xxh3)
  std::set<std::string> names;
  std::set<std::string, std::less<>> first_components;
  bool names_in_embedded_sources = false;
  /// Some name is one of kjit's standard headers: a program with ProgramSpec::std_headers
  /// resolves it in memory.
  bool names_std_headers = false;
  /// What the closure's walk stat'ed (files read and paths with no file), for the key memo, and
  /// whether every file read was settled (a record can vouch for it).
  std::vector<std::pair<std::string, FileStamp>> checks;
  bool settled = true;
};

// Toolkit files, read once per process: whether a path exists, a file's digest and includes,
// and the closure of each toolkit file reached; closures also come from and go to the records
// of toolkit_memo.hpp, so that a new process can take them from stat calls.
class ToolkitMemo {
 public:
  struct File {
    std::string xxh3;
    std::vector<Include> includes;
    FileStamp stamp;       // of the bytes read
    bool settled = false;  // the stamp can vouch for these bytes in a later process
  };

  FileStamp stat(const std::string& path) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = stats_.find(path); it != stats_.end()) return it->second;
    }
    const FileStamp s = stamp_path(path);
    std::lock_guard lock(mutex_);
    return stats_.emplace(path, s).first->second;
  }

  bool exists(const std::string& path) { return stat(path).regular; }

  // nullptr when the file cannot be read.
  const File* file(const std::string& path) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = files_.find(path); it != files_.end()) return it->second.get();
    }
    // Read into one reused buffer: the toolkit closure is megabytes, and fresh memory (or a
    // mapping) per file costs more in page faults than the copy.
    thread_local std::string buffer;
    const int64_t start = realtime_ns();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    const FileStamp before = stamp_fd(fd);
    size_t got = 0;
    for (;;) {
      if (buffer.size() - got < 65536) buffer.resize(std::max<size_t>(buffer.size() * 2, got + 65536));
      const ssize_t n = ::read(fd, buffer.data() + got, buffer.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    // A stamp that moved while we read does not describe the bytes we got.
    const FileStamp after = stamp_fd(fd);
    ::close(fd);
    files_read_.fetch_add(1, std::memory_order_relaxed);
    const std::string_view text(buffer.data(), got);
    auto f = std::make_unique<File>(File{digest(text), scan_includes(text), after,
                                         before == after && got == after.size && stamp_is_settled(after, start)});
    std::lock_guard lock(mutex_);
    return files_.emplace(path, std::move(f)).first->second.get();  // a racing reader's copy is equal
  }

  // The closure of toolkit file `path` found in `ip.toolkit_dirs` alone (see ToolkitClosure):
  // from this process's memo, else from the record if every check still holds, else walked.
  const ToolkitClosure& closure(const std::string& path, const IncludePath& ip) {
    const std::vector<std::string>& dirs = ip.toolkit_dirs;
    const std::string memo_key = path + '\0' + fmt::format("{}", fmt::join(dirs, std::string(1, '\0')));
    {
      std::lock_guard lock(mutex_);
      if (auto it = closures_.find(memo_key); it != closures_.end()) return *it->second;
    }
    const std::string record = ip.toolkit_memo_dir.empty() ? std::string() : memo_record_path(ip.toolkit_memo_dir, dirs);
    std::unique_ptr<ToolkitClosure> c;
    if (!record.empty()) c = from_record(record, path, dirs);
    if (!c) {
      MemoClosure stored;
      const bool persist = walk(path, dirs, c, stored);
      if (persist && ip.toolkit_memo_writable && !record.empty()) {
        std::lock_guard lock(record_mutex_);
        records_[record].added[path] = std::move(stored);
        dirty_.store(true, std::memory_order_release);
      }
    }
    std::lock_guard lock(mutex_);
    return *closures_.emplace(memo_key, std::move(c)).first->second;
  }

  // Writes the closures this process walked into its record, merged with what the record on
  // disk holds now (another process may have added some since we read it).
  void flush(const IncludePath& ip) {
    if (!dirty_.load(std::memory_order_acquire) || ip.toolkit_memo_dir.empty()) return;
    const std::string path = memo_record_path(ip.toolkit_memo_dir, ip.toolkit_dirs);
    std::lock_guard lock(record_mutex_);
    auto it = records_.find(path);
    if (it == records_.end() || it->second.added.empty()) return;
    Record& r = it->second;
    MemoRecord out;
    out.toolkit_dirs = ip.toolkit_dirs;
    for (auto& [root, c] : r.added) out.closures.push_back(c);
    if (std::optional<MemoRecord> now = load_memo(path, ip.toolkit_dirs)) {
      for (MemoClosure& c : now->closures) {
        // Roots are what user code includes from the toolkit, a handful; the cap only guards
        // against a record that grows without end.
        if (r.added.count(c.root) || out.closures.size() >= kMaxClosuresPerRecord) continue;
        out.closures.push_back(std::move(c));
      }
    }
    std::sort(out.closures.begin(), out.closures.end(),
              [](const MemoClosure& a, const MemoClosure& b) { return a.root < b.root; });
    // One attempt per walked closure: a cache that refuses the write is not asked again.
    if (save_memo(path, out)) records_written_.fetch_add(1, std::memory_order_relaxed);
    for (auto& [root, c] : r.added) r.stored[root] = std::move(c);
    r.added.clear();
    bool more = false;
    for (const auto& [p, rec] : records_) more = more || !rec.added.empty();
    dirty_.store(more, std::memory_order_release);
  }

  ToolkitMemoCounters counters() const {
    ToolkitMemoCounters c;
    c.files_read = files_read_.load(std::memory_order_relaxed);
    c.records_loaded = records_loaded_.load(std::memory_order_relaxed);
    c.records_written = records_written_.load(std::memory_order_relaxed);
    c.closures_from_records = closures_from_records_.load(std::memory_order_relaxed);
    return c;
  }

  static const std::string* under(const std::string& path, const std::vector<std::string>& dirs) {
    for (const std::string& dir : dirs) {
      if (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/') return &dir;
    }
    return nullptr;
  }

 private:
  static constexpr size_t kMaxClosuresPerRecord = 256;

  // One record file: the closures read from it (once per process) and those walked here since
  // the last flush.
  struct Record {
    bool loaded = false;
    std::map<std::string, MemoClosure> stored;
    std::map<std::string, MemoClosure> added;
  };

  // Walks the closure of `path`, reading what it must; fills `stored` with what a record needs.
  // Returns whether the result may be recorded: every file read has a settled stamp.
  bool walk(const std::string& path, const std::vector<std::string>& dirs, std::unique_ptr<ToolkitClosure>& out,
            MemoClosure& stored) {
    auto c = std::make_unique<ToolkitClosure>();
    bool persist = true;
    std::set<std::string> seen;
    std::map<std::string, std::string> files;
    std::map<std::string, FileStamp> checks;
    std::vector<std::string> pending{path};
    while (!pending.empty()) {
      std::string p = std::move(pending.back());
      pending.pop_back();
      if (!seen.insert(p).second) continue;
      const File* f = file(p);
      if (!f || !f->settled) persist = false;
      if (f) checks[p] = f->stamp;
      const std::string* root = under(p, dirs);
      if (!f || !root) continue;
      files.emplace("<cuda>/" + p.substr(root->size() + 1), f->xxh3);
      const std::string own = parent_dir(p);
      for (const Include& inc : f->includes) {
        c->names.insert(inc.name);
        c->first_components.emplace(first_component(inc.name));
        std::vector<std::string> candidates;
        if (inc.quoted) candidates.push_back(join(own, inc.name));
        for (const std::string& d : dirs) candidates.push_back(join(d, inc.name));
        for (std::string& cand : candidates) {
          // Which candidate is the first hit depends on the misses before it: a file that
          // appears there later shadows this one, so a record checks that each is still a miss.
          if (!exists(cand)) {
            checks.emplace(cand, FileStamp{});
            continue;
          }
          pending.push_back(std::move(cand));
          if (!inc.next) break;
        }
      }
    }
    c->files.assign(files.begin(), files.end());
    c->names_in_embedded_sources = any_embedded(c->names);
    c->names_std_headers = any_std_header(c->names);
    stored.root = path;
    stored.files = c->files;
    stored.names.assign(c->names.begin(), c->names.end());
    stored.checks.assign(checks.begin(), checks.end());
    c->checks = stored.checks;
    c->settled = persist;
    out = std::move(c);
    return persist;
  }

  // The record's closure of `root` if every check agrees with what stat says now.
  std::unique_ptr<ToolkitClosure> from_record(const std::string& record, const std::string& root,
                                              const std::vector<std::string>& dirs) {
    MemoClosure stored;
    {
      std::lock_guard lock(record_mutex_);
      Record& r = records_[record];
      if (!r.loaded) {
        r.loaded = true;
        if (std::optional<MemoRecord> m = load_memo(record, dirs)) {
          records_loaded_.fetch_add(1, std::memory_order_relaxed);
          for (MemoClosure& c : m->closures) r.stored[c.root] = std::move(c);
        }
      }
      auto it = r.stored.find(root);
      if (it == r.stored.end()) return nullptr;
      stored = it->second;
    }
    for (const auto& [p, want] : stored.checks) {
      const FileStamp now = stat(p);
      // A toolkit record holds no directory stamps: one that does is not ours.
      if (want.directory || (want.regular ? now != want : now.regular)) return nullptr;
    }
    auto c = std::make_unique<ToolkitClosure>();
    c->files = std::move(stored.files);
    c->checks = std::move(stored.checks);
    for (std::string& n : stored.names) {
      c->first_components.emplace(first_component(n));
      c->names.insert(std::move(n));
    }
    // Not stored: they depend on the library's kernel sources, not on the toolkit.
    c->names_in_embedded_sources = any_embedded(c->names);
    c->names_std_headers = any_std_header(c->names);
    closures_from_records_.fetch_add(1, std::memory_order_relaxed);
    return c;
  }

  static bool any_embedded(const std::set<std::string>& names) {
    for (const std::string& n : names) {
      if (embedded(n)) return true;
    }
    return false;
  }

  static bool any_std_header(const std::set<std::string>& names) {
    for (const std::string& n : names) {
      if (embedded_std_header(n)) return true;
    }
    return false;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, FileStamp> stats_;
  std::unordered_map<std::string, std::unique_ptr<File>> files_;
  std::unordered_map<std::string, std::unique_ptr<ToolkitClosure>> closures_;
  std::mutex record_mutex_;  // records_; held across a record's load and save
  std::map<std::string, Record> records_;
  std::atomic<bool> dirty_{false};  // some record has closures to write
  std::atomic<uint64_t> files_read_{0}, records_loaded_{0}, records_written_{0}, closures_from_records_{0};
};

// Never destroyed: used until process exit. A slot, so reset_toolkit_memo() can swap it.
std::atomic<ToolkitMemo*>& toolkit_memo_slot() {
  static std::atomic<ToolkitMemo*> slot{new ToolkitMemo};
  return slot;
}

ToolkitMemo& toolkit_memo() { return *toolkit_memo_slot().load(std::memory_order_acquire); }

// Walks the include closure in NVRTC's search order (kernel_sources.hpp says which).
class ClosureWalk {
 public:
  ClosureWalk(const ProgramSpec& spec, const KernelSources& sources, const IncludePath& path, SourceClosure& out,
              KeyChecks* checks)
      : spec_(spec), sources_(sources), path_(path), out_(out), checks_(checks) {
    // A -I directory's listing and files are not stat'ed as checks.
    if (checks_ && !path_.user_dirs.empty()) checks_->usable = false;
  }

  void main_source() {
    const std::string dir = parent_dir(spec_.source_name);
    for (const Include& inc : scan_includes(out_.text)) resolve(inc, dir);
    for (const std::string& name : path_.pre_includes) pre_include(name);
  }

  void finish() {
    out_.headers.assign(in_memory_.begin(), in_memory_.end());
    out_.files.clear();
    for (auto& [p, d] : files_) out_.files.push_back({p, d});
  }

 private:
  void pre_include(const std::string& name) {
    if (memory(name)) return;
    // A -include file is looked for in the working directory, then on the -I path.
    search(Include{name, false, false}, ".");
  }

  // `dir`: the including file's directory ("." = the working directory).
  void resolve(const Include& inc, const std::string& dir) {
    if (memory(inc.name)) return;
    search(inc, inc.quoted && path_.source_dirs ? dir : std::string());
  }

  // Steps 2-4 of the search; `first` is step 2's directory, empty for none.
  void search(const Include& inc, const std::string& first) {
    if (!inc.name.empty() && inc.name.front() == '/') {
      if (exists(inc.name)) visit(inc.name);
      return;
    }
    auto try_dir = [&](const std::string& dir, bool user_dir) {
      if (user_dir && !user_dir_may_hold(dir, inc.name)) return false;
      std::string candidate = join(dir, inc.name);
      if (!exists(candidate)) return false;
      visit(candidate);
      return !inc.next;
    };
    if (!first.empty() && try_dir(first, false)) return;
    for (const std::string& dir : path_.user_dirs) {
      if (try_dir(dir, true)) return;
    }
    for (const std::string& dir : path_.toolkit_dirs) {
      if (try_dir(dir, false)) return;
    }
  }

  // An in-memory header: ProgramSpec::headers, then the kernel sources, then (with
  // ProgramSpec::std_headers) kjit's standard headers.
  bool memory(const std::string& name) {
    if (in_memory_.count(name)) return true;
    std::optional<std::string> text;
    for (const auto& [n, t] : spec_.headers) {
      if (n == name) {
        text = t;
        break;
      }
    }
    if (!text && sources_.contains(name)) text = sources_.read(name);
    if (!text && spec_.std_headers) {
      text = sources_.std_header(name);
      if (text) std_names_.insert(name);
    }
    if (!text) return false;
    std::vector<Include> includes = scan_includes(*text);
    in_memory_.emplace(name, std::move(*text));
    const std::string dir = parent_dir(name);
    for (const Include& inc : includes) resolve(inc, dir);
    return true;
  }

  // Whether user directory `dir` can hold `name`: it must hold the name's first component. One
  // directory listing per call and directory replaces a failed stat per name.
  bool user_dir_may_hold(const std::string& dir, std::string_view name) {
    return listing(dir).count(first_component(name)) > 0;
  }

  const std::set<std::string, std::less<>>& listing(const std::string& dir) {
    auto it = listings_.find(dir);
    if (it != listings_.end()) return it->second;
    std::set<std::string, std::less<>>& entries = listings_[dir];
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d)) entries.emplace(e->d_name);
      ::closedir(d);
    }
    return entries;
  }

  bool exists(const std::string& path) {
    const FileStamp s =
        ToolkitMemo::under(path, path_.toolkit_dirs) ? toolkit_memo().stat(path) : stamp_path(path);
    if (checks_) checks_->add(path, s);
    return s.regular;
  }

  // Whether the memoized toolkit closure holds for this call: no name in it is an in-memory
  // header or can be found in a user directory. kjit's standard headers are the exception: the
  // closure's files stay (where a standard header shadows a toolkit file of its name, that file
  // is hashed needlessly, which only makes the key more specific) and visit() adds the headers.
  bool toolkit_closure_applies(const ToolkitClosure& c) {
    if (c.names_in_embedded_sources || !sources_.live_dir().empty()) return false;
    for (const auto& [n, t] : spec_.headers) {
      if (c.names.count(n)) return false;
    }
    for (const auto& n : in_memory_) {
      if (c.names.count(n.first) && !std_names_.count(n.first)) return false;
    }
    for (const std::string& dir : path_.user_dirs) {
      for (const std::string& entry : listing(dir)) {
        if (c.first_components.count(entry)) return false;
      }
    }
    return true;
  }

  void visit(const std::string& path) {
    if (!visited_.insert(path).second) return;
    const std::string dir = parent_dir(path);
    if (const std::string* root = ToolkitMemo::under(path, path_.toolkit_dirs)) {
      const ToolkitClosure& c = toolkit_memo().closure(path, path_);
      if (path_.source_dirs && toolkit_closure_applies(c)) {
        files_.insert(c.files.begin(), c.files.end());
        if (checks_) {
          for (const auto& [p, s] : c.checks) checks_->add(p, s);
          checks_->usable = checks_->usable && c.settled;
        }
        if (spec_.std_headers && c.names_std_headers) {
          for (const std::string& n : c.names) {
            if (embedded_std_header(n)) memory(n);
          }
        }
        return;
      }
      const ToolkitMemo::File* f = toolkit_memo().file(path);
      if (checks_) {
        if (f) checks_->add(path, f->stamp);
        checks_->usable = checks_->usable && f && f->settled;
      }
      if (!f) return;
      // Below the toolkit dir that holds it, so the install path does not enter the key.
      files_.emplace("<cuda>/" + path.substr(root->size() + 1), f->xxh3);
      for (const Include& inc : f->includes) resolve(inc, dir);
      return;
    }
    // A file outside the toolkit is read and digested on every call: no record vouches for it.
    if (checks_) checks_->usable = false;
    auto text = read_whole(path);
    if (!text) return;  // unreadable: NVRTC will fail on it too, and say so
    files_.emplace(path, digest(*text));
    for (const Include& inc : scan_includes(*text)) resolve(inc, dir);
  }

  const ProgramSpec& spec_;
  const KernelSources& sources_;
  const IncludePath& path_;
  SourceClosure& out_;
  KeyChecks* checks_;
  std::map<std::string, std::string> in_memory_;
  std::set<std::string> std_names_;  // names in in_memory_ that are kjit's standard headers
  std::map<std::string, std::string> files_;
  std::set<std::string> visited_;
  std::map<std::string, std::set<std::string, std::less<>>> listings_;
};

}  // namespace

SourceClosure resolve_sources(const ProgramSpec& spec, const KernelSources& sources, const IncludePath& path,
                              KeyChecks* checks) {
  SourceClosure c;
  c.name = spec.source_name;
  if (!spec.source_text.empty()) {
    c.text = spec.source_text;
  } else if (auto text = sources.read(spec.source_name)) {
    c.text = std::move(*text);
  } else {
    throw InvalidArgument(fmt::format("kernel source '{}' not found in {}", spec.source_name,
                                      sources.live_dir().empty() ? std::string("the embedded kernel sources")
                                                                 : "KJIT_KERNEL_DIR=" + sources.live_dir()));
  }
  ClosureWalk walk(spec, sources, path, c, checks);
  walk.main_source();
  walk.finish();
  toolkit_memo().flush(path);
  return c;
}

ToolkitMemoCounters toolkit_memo_counters() { return toolkit_memo().counters(); }

void reset_toolkit_memo() {
  // The old memo is kept, not deleted: a walk that still holds a closure from it stays valid.
  // (Kept in a list rather than dropped, so leak checkers see it reachable; only tests reset.)
  static std::mutex retired_mutex;
  static auto* retired = new std::vector<ToolkitMemo*>;
  std::lock_guard lock(retired_mutex);
  retired->push_back(toolkit_memo_slot().exchange(new ToolkitMemo, std::memory_order_acq_rel));
}

}  // namespace kjit::detail
