#pragma once
/// \file runtime/internal/shipping.hpp
/// What kjit's tools (tools/) need of the internals, one part of runtime/internal/
/// (docs/architecture.md): a precompiled cache shipped as a bundle (cache/bundle.hpp) or an OCI
/// image (cache/oci.hpp), and the signing keys that sign and check them (cache/remote/signing.hpp):
/// `kjit cache export` and `import`.

#include "cache/bundle.hpp"
#include "cache/oci.hpp"
#include "cache/remote/signing.hpp"
