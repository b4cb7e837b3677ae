#pragma once
/// \file kernel_sources.hpp
/// Where kernel source text comes from: the copies embedded into libkjit at build time, or the
/// live folder named by KJIT_KERNEL_DIR (for kernel development), and the transitive closure of a
/// program's quoted includes, which is both what NVRTC is handed and what the key hashes.

#include <kjit/runtime.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::detail {

/// Kernel sources by path relative to kernel_sources/ ("rotary/rotary.cu").
class KernelSources {
 public:
  /// Embedded copies when `live_dir` is empty, else files read from `live_dir` on each call.
  explicit KernelSources(std::string live_dir);
  /// The text of `path`, or nullopt when there is none such.
  std::optional<std::string> read(std::string_view path) const;
  /// Every source path, sorted.
  std::vector<std::string> list() const;
  const std::string& live_dir() const noexcept { return live_dir_; }

 private:
  std::string live_dir_;
};

/// A program's main source and every header its quoted includes reach, transitively.
struct SourceClosure {
  std::string name;
  std::string text;
  /// (include name, text), sorted by name, each once.
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Resolves `spec`'s source and its quoted includes: first against spec.headers, then against
/// `sources`. Includes that resolve nowhere are left for NVRTC to find on its include path (the
/// CUDA headers, covered by the CUDA version in the key). Throws InvalidArgument when the main
/// source is missing.
SourceClosure resolve_sources(const ProgramSpec& spec, const KernelSources& sources);

}  // namespace kjit::detail
