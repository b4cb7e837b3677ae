#pragma once
/// \file errors.hpp
/// kjit's C++ exceptions as Python exceptions with the same messages:
///   kjit.Error(RuntimeError)            kjit::Error
///   kjit.InvalidArgument(Error, ValueError)
///   kjit.Unsupported(Error)
///   kjit.CompileError(Error)            .log (the NVRTC log), .options (the normalized options)
///   kjit.DriverError(Error)             .code (the CUresult)
///   kjit.CacheError(Error)
///   kjit.JitDisabled(Error)             .family, .params, .target, .command

#include <nanobind/nanobind.h>

namespace kjit::python {

/// Creates the exception types in `m` and registers the translator.
void register_errors(nanobind::module_& m);

}  // namespace kjit::python
