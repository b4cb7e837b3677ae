#pragma once
/// \file nvrtc.hpp
/// One NVRTC compile: source closure + name expressions + options → cubin or PTX, the lowered
/// names and what ptxas reported per kernel. Also finds the CUDA headers NVRTC needs.

#include <kjit/runtime.hpp>

#include "runtime/kernel_sources.hpp"

#include <string>
#include <vector>

namespace kjit::detail {

/// The CUDA include directory handed to NVRTC and the version its cuda.h declares.
struct CudaHeaders {
  std::string include_dir;  ///< e.g. /usr/local/cuda/include
  std::string version;      ///< CUDA_VERSION from cuda.h, e.g. "13000"
  std::vector<std::string> include_options;  ///< -I<dir> (and -I<dir>/cccl when present)
  std::vector<std::string> include_dirs;     ///< the directories of include_options
};

/// Searches `configured` (KJIT_CUDA_HOME / CUDA_HOME / CUDA_PATH), the toolkit beside the loaded
/// NVRTC, then /usr/local/cuda, for an include dir holding cuda_bf16.h. Throws Unsupported naming
/// every place it looked when none has it (NVRTC has no built-in bf16/fp8 headers). Warns once
/// per process and directory when the headers' CUDA version (major.minor) is not the loaded
/// NVRTC's: a toolkit mix NVRTC may reject or compile differently.
CudaHeaders find_cuda_headers(const std::string& configured);

/// "12.4" for CUDA_VERSION "12040"; "" when `cuda_version` is not a number.
std::string cuda_version_major_minor(const std::string& cuda_version);

/// "13.0".
std::string nvrtc_version();

struct NvrtcResult {
  std::string binary;               ///< cubin or PTX
  std::vector<KernelInfo> kernels;  ///< per name expression, with ptxas' resource report
  std::string log;
  double ms = 0;
};

/// Compiles `sources` for `target` with `options` (already normalized, without include paths)
/// plus `include_options`. Throws CompileError with the NVRTC log, whose locations name the
/// kernel_sources file and line, the options and the NVRTC version.
NvrtcResult nvrtc_compile(const SourceClosure& sources, const std::vector<std::string>& name_expressions,
                          const Target& target, const std::vector<std::string>& options,
                          const std::vector<std::string>& include_options);

/// `expr` with the blanks that cannot matter removed (what the key hashes): runs of whitespace become one space where
/// it separates two tokens that would otherwise merge ("unsigned long", "a - -1", "0xe +1") and
/// vanish elsewhere ("k< 128 >" → "k<128>", "f<a, b>" → "f<a,b>"). An expression holding a
/// string or character literal, a comment or a backslash is only trimmed (blanks inside literals
/// matter, and digit separators make ' ambiguous). Different spellings of one type
/// ("size_t" / "unsigned long", "int32_t" / "int") stay different: only the compiler can tell
/// that they name one type, and only for one target and set of headers.
std::string canonical_name_expression(std::string_view expr);

/// The NVRTC options of one compile in canonical form, and what the include model needs of them.
struct Options {
  /// What NVRTC gets before the CUDA include options, in this order, and what the key hashes:
  /// kjit's own options for the target, then the user's in the order given (see normalize_options).
  std::vector<std::string> list;
  std::vector<std::string> include_dirs;  ///< the user's -I directories, in order
  std::vector<std::string> pre_includes;  ///< the user's -include files, in order
  bool no_source_include = false;         ///< -no-source-include was given
};

/// kjit's own NVRTC options for `target` (language standard, arch, device-only code, ptxas
/// report), in a fixed order, then the user's `extra` options in the order given, because NVRTC
/// resolves includes through `-I` in option order, processes `-include` files in order and lets a
/// later `-D`/`-U` of one macro override an earlier one. Only what provably cannot change the
/// compile is normalized:
///   - blanks around each option are trimmed;
///   - an option and its separate argument ("-I", "dir"; "--pre-include", "x.h") become one
///     token, and the spellings NVRTC documents as equal become one: "-D X", "-D=X",
///     "--define-macro=X" → "-DX" (likewise -U and -I: "--include-path=d" → "-Id"), "-include x.h",
///     "-include=x.h" → "--pre-include=x.h";
///   - inside a run of consecutive -D/-U options, options are stably sorted by macro name
///     (definitions of different macros commute; those of one macro keep their order), and an
///     option equal to the one before it is dropped (an identical redefinition changes nothing);
///   - a later exact duplicate of a flag without an argument ("--use_fast_math") is dropped.
/// Throws InvalidArgument for an option that sets the architecture (the target does) and for an
/// option whose separate argument is missing.
Options normalize_options(const Target& target, const std::vector<std::string>& extra);

}  // namespace kjit::detail
