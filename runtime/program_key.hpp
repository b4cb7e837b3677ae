#pragma once
/// \file runtime/program_key.hpp
/// The cache key of a program for a target: what goes into the XXH3-128 of cache::KeyBuilder,
/// field by field and in order (docs/cache-key.md states the contract; changing it changes every
/// key, and the cache's format version says so).
///
/// A program the key memo covers (runtime/key_memo.hpp) takes its key from this process's memo
/// or from the memo's record under the cache root, without walking its include closure; its
/// sources are then resolved only when a compile needs them (complete()).

#include <kjit/device.hpp>
#include <kjit/key_inputs.hpp>
#include <kjit/runtime.hpp>

#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/store.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/nvrtc.hpp"

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kjit::detail {

/// A program's key for one target, and the inputs of its compile.
struct PreparedProgram {
  SourceClosure sources;  ///< empty when the key came from the key memo (resolved == false)
  bool resolved = false;
  std::vector<std::string> options;  ///< normalized (normalize_options)
  std::vector<std::string> names;    ///< canonical name expressions
  cache::Key key;
};

/// Builds programs' keys for one Runtime: its kernel sources, its NVRTC and CUDA headers, and
/// its disk cache (where the key memo and the toolkit memo live). Thread-safe.
class ProgramKeys {
 public:
  /// `kernel_dir`: RuntimeConfig::kernel_dir (empty: the embedded sources); `cuda_home`:
  /// RuntimeConfig::cuda_home, looked up on first use. `disk` must outlive this object.
  ProgramKeys(std::string kernel_dir, std::string cuda_home, const cache::DiskCache& disk);

  /// The key of `spec` for `target`, and what a compile needs. With `use_memo`, a program the
  /// key memo covers takes its key from the memo and its sources stay unresolved. Throws
  /// InvalidArgument for a spec without name expressions or a kernel source that is not found,
  /// and what normalize_options throws for a bad option.
  PreparedProgram prepare(const ProgramSpec& spec, const Target& target, bool use_memo = true);

  /// Resolves the sources of `p` when its key came from the key memo (a compile needs them).
  /// The walk's key replaces the recorded one (they agree unless a file changed since the checks).
  void complete(PreparedProgram& p, const ProgramSpec& spec, const Target& target);

  /// Runtime::key_inputs: every input of the key, for `kjit cache explain`.
  KeyInputs key_inputs(const ProgramSpec& spec, const Target& target);

  /// The files of `closure` as the key hashes them: the main source, the in-memory headers, the
  /// files on disk (their digests already taken by the walk). An entry records them.
  static std::vector<cache::InputDigest> input_digests(const SourceClosure& closure);

  /// The CUDA headers NVRTC compiles against (found once, on first use).
  const CudaHeaders& headers();
  /// "12.8": the NVRTC version in every key.
  const std::string& nvrtc_version() const noexcept { return nvrtc_version_; }

 private:
  // The key fields beside the sources, shared by the key and the key memo's id.
  void add_spec_fields(cache::KeyBuilder& b, const PreparedProgram& p, const Target& target);
  // The key memo's id of a program: every key input but the toolkit's files.
  cache::Key key_memo_id(const ProgramSpec& spec, const PreparedProgram& p, const Target& target,
                         const IncludePath& path);
  // This process's memo, then the record.
  std::optional<cache::Key> recall(const cache::Key& id);

  KernelSources sources_;
  std::string cuda_home_;
  std::string nvrtc_version_;
  const cache::DiskCache& disk_;
  std::once_flag headers_once_;
  CudaHeaders cuda_;
  std::mutex memo_mutex_;
  std::unordered_map<cache::Key, cache::Key, cache::KeyHash> known_keys_;  // key memo id → key
};

}  // namespace kjit::detail
