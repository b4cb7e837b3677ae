#ifndef KJIT_STD_DETAIL_PRELUDE_H
#define KJIT_STD_DETAIL_PRELUDE_H
// What every NVRTC standard header of kjit (kernel_sources/kjit/std/) includes first. Those
// headers are handed to NVRTC under the standard names (<cstdint>, <type_traits>, ...) when a
// program has ProgramSpec::std_headers; docs/std-headers.md gives the rules they follow.
#if !defined(__CUDACC_RTC__)
#error "kjit/std/: these headers stand in for the standard library under NVRTC only"
#endif

// libcu++ unrolls its type-list indexing (cuda/std/__type_traits/type_list.h) to
// _CCCL_META_UNROLL_LIMIT cases with nested preprocessor repetition. It picks 16 under NVRTC and
// 10 under nvcc; the 16 cost NVRTC 13.0 about half a second of preprocessing in every compile
// that reaches <type_traits> (docs/std-headers.md). The value only selects an implementation of
// the same traits. A program that includes a libcu++ header before any of kjit's keeps its value.
#ifndef _CCCL_META_UNROLL_LIMIT
#define _CCCL_META_UNROLL_LIMIT 10
#endif

namespace __kjit_std {

// False for every argument list, but only once a call instantiates it: a host-only function
// declared with KJIT_STD_HOST_ONLY fails where it is called, never where it is declared.
template <class...>
struct __host_only {
  static constexpr bool value = false;
};

// What a host-only call evaluates to, so that the static_assert is the only error it causes.
struct __no_value {
  template <class _Tp>
  __device__ operator _Tp() const {
    return _Tp();
  }
};

}  // namespace __kjit_std

// Declares NAME at global scope as a device function whose every call is a compile error:
// "kjit: <HEADER>: NAME is host-only; HINT". The header then puts it into std as well.
#define KJIT_STD_HOST_ONLY(HEADER, NAME, HINT)                                                  \
  template <class... _Args>                                                                     \
  __device__ ::__kjit_std::__no_value NAME(_Args&&...) {                                        \
    static_assert(::__kjit_std::__host_only<_Args...>::value,                                   \
                  "kjit: <" HEADER ">: " #NAME " is host-only; " HINT);                          \
    return {};                                                                                  \
  }

#endif  // KJIT_STD_DETAIL_PRELUDE_H
