#pragma once
/// \file memo_file.hpp
/// What the two memo records under the cache root share (toolkit_memo.hpp, key_memo.hpp): the
/// frame around a body, the body's strings and stat stamps, and reading and writing a record.
/// Both are optimizations: a record that is missing, torn, corrupt or foreign reads as absent
/// and is recomputed, and a write that fails is forgotten.
///
/// Frame (integers little-endian):
///
///   offset  size  field
///   0       8     magic (one per record kind)
///   8       4     record format version
///   12      8     body size B
///   20      8     XXH3-64 of the B body bytes
///   28      B     body; it starts with the library string ("kjit <version>")
///
/// In a body, a string is a u32 length then its bytes; a stamp is a u8 kind (0: no regular file
/// there, 1: a file, 2: a directory) and, for kinds 1 and 2, u64 size, u64 mtime_ns, u64
/// ctime_ns, u64 inode, u64 device (a directory's size is 0).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::detail {

/// What stat(2) says of a path, as far as the memos compare it: a regular file, or (from
/// stamp_dir) a directory, whose mtime and ctime move whenever an entry is added, removed or
/// renamed in it.
struct FileStamp {
  bool regular = false;    ///< false: nothing there, or not a regular file
  bool directory = false;  ///< a directory's stamp (stamp_dir); never both
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  uint64_t device = 0;

  friend bool operator==(const FileStamp& a, const FileStamp& b) noexcept {
    return a.regular == b.regular && a.directory == b.directory && a.size == b.size && a.mtime_ns == b.mtime_ns && a.ctime_ns == b.ctime_ns &&
           a.inode == b.inode && a.device == b.device;
  }
  friend bool operator!=(const FileStamp& a, const FileStamp& b) noexcept { return !(a == b); }
};

/// stat(2) of `path` (following links, as the compile's open does).
FileStamp stamp_path(const std::string& path);
/// fstat(2) of an open descriptor.
FileStamp stamp_fd(int fd);
/// stat(2) of a directory at `path`: its stamp, or an empty one (nothing there, or no directory).
FileStamp stamp_dir(const std::string& path);
/// Whether what is at `path` now still agrees with `recorded`: the same stamp for a file or a
/// directory, still no regular file where there was none.
bool stamp_holds(const std::string& path, const FileStamp& recorded);

/// "kjit <version>": records of another library version are foreign.
std::string memo_library();

/// Appends a string (u32 length, bytes).
void put_memo_str(std::string& out, std::string_view s);
/// Appends a stamp (kind, then the five fields of a file).
void put_memo_stamp(std::string& out, const FileStamp& s);

/// Reads a body front to back; any read past the end, or a bad stamp kind, sets ok() false and
/// yields zeros.
class MemoReader {
 public:
  explicit MemoReader(std::string_view bytes) : bytes_(bytes) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == bytes_.size(); }

  uint64_t u(int width);
  std::string str();
  /// A string that stays in the body's storage.
  std::string_view view();
  FileStamp stamp();
  /// A count of items each at least `min_item` bytes long: more than the bytes left can hold is
  /// corruption, caught before anything is reserved.
  size_t count(size_t min_item);

 private:
  uint64_t fail() {
    ok_ = false;
    return 0;
  }
  std::string_view bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

/// Frames `body` (see the file comment).
std::string frame_memo(std::string_view magic, uint32_t version, std::string_view body);
/// The body of a framed record of this magic and version whose size and checksum agree;
/// nullopt otherwise.
std::optional<std::string_view> unframe_memo(std::string_view bytes, std::string_view magic, uint32_t version);

/// The bytes at `path`, unless it is missing, unreadable, not a regular file or larger than
/// `max_bytes`.
std::optional<std::string> read_memo_file(const std::string& path, uint64_t max_bytes);
/// Writes `bytes` at `path` atomically (temp file + rename, no fsync: a record torn by a power
/// cut fails its checksum), creating the folder; removes temp files that crashed writers left
/// in it. Returns whether it was written.
bool write_memo_file(const std::string& path, std::string_view bytes);

}  // namespace kjit::detail
