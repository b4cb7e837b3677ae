#pragma once
/// \file key_inputs.hpp
/// Every input of a cache key, as Runtime::key_inputs returns it and `kjit cache explain` prints
/// it: what to compare when a specialization misses a cache that was expected to hold it.

#include <cstdint>
#include <string>
#include <vector>

namespace kjit {

/// One file the compile reads, and the digest the key hashes for it.
struct KeyInputFile {
  /// "source" (the main source), "header" (an in-memory header: ProgramSpec::headers or a kjit
  /// kernel source), "file" (a file on disk: the user's, or a toolkit file as "<cuda>/…").
  std::string kind;
  std::string name;    ///< the include name or path, as the key spells it
  std::string digest;  ///< XXH3-128 of the bytes, 32 hex digits
};

/// The inputs of one key, in the order the key serializes them.
struct KeyInputs {
  std::string key;              ///< 32 hex digits
  uint32_t format_version = 0;  ///< the key serialization and entry format version
  /// The main source, the in-memory headers (sorted by name), the files on disk (by path).
  std::vector<KeyInputFile> files;
  std::vector<std::string> name_expressions;  ///< canonical form
  std::string target;                         ///< "sm_90a"
  std::string nvrtc_version;                  ///< "13.0"
  std::string cuda_headers_version;           ///< CUDA_VERSION of the headers, "13000"
  std::vector<std::string> options;           ///< normalized, in the order NVRTC gets them
};

}  // namespace kjit
