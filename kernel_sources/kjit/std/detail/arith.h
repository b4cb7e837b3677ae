// The few type traits <cmath> needs for its integer and mixed-type overloads, kept here rather
// than taken from <cuda/std/type_traits> so that <cmath> costs NVRTC no library parsing.
#ifndef KJIT_STD_DETAIL_ARITH_H
#define KJIT_STD_DETAIL_ARITH_H
#include "kjit/std/detail/prelude.h"

namespace __kjit_std {

template <bool _Cond, class _Tp = void>
struct __enable_if {};
template <class _Tp>
struct __enable_if<true, _Tp> {
  using type = _Tp;
};

template <class _Tp>
struct __remove_cv {
  using type = _Tp;
};
template <class _Tp>
struct __remove_cv<const _Tp> {
  using type = _Tp;
};
template <class _Tp>
struct __remove_cv<volatile _Tp> {
  using type = _Tp;
};
template <class _Tp>
struct __remove_cv<const volatile _Tp> {
  using type = _Tp;
};

// Integer types (bool and the character types included, as std::is_integral has them).
template <class _Tp>
struct __is_int_impl {
  static constexpr bool value = false;
};
#define KJIT_STD_INTEGER(T)                \
  template <>                              \
  struct __is_int_impl<T> {                \
    static constexpr bool value = true;    \
  };
KJIT_STD_INTEGER(bool)
KJIT_STD_INTEGER(char)
KJIT_STD_INTEGER(signed char)
KJIT_STD_INTEGER(unsigned char)
KJIT_STD_INTEGER(wchar_t)
KJIT_STD_INTEGER(char16_t)
KJIT_STD_INTEGER(char32_t)
KJIT_STD_INTEGER(short)
KJIT_STD_INTEGER(unsigned short)
KJIT_STD_INTEGER(int)
KJIT_STD_INTEGER(unsigned int)
KJIT_STD_INTEGER(long)
KJIT_STD_INTEGER(unsigned long)
KJIT_STD_INTEGER(long long)
KJIT_STD_INTEGER(unsigned long long)
#undef KJIT_STD_INTEGER

template <class _Tp>
struct __is_int : __is_int_impl<typename __remove_cv<_Tp>::type> {};

template <class _Tp, class _Up>
struct __is_same {
  static constexpr bool value = false;
};
template <class _Tp>
struct __is_same<_Tp, _Tp> {
  static constexpr bool value = true;
};

// What a list of argument types is made of (cv-qualifiers ignored).
template <class... _Tp>
struct __args {
  static constexpr bool arithmetic = true;
  static constexpr bool all_float = true;
  static constexpr bool all_double = true;
};
template <class _Tp, class... _Rest>
struct __args<_Tp, _Rest...> {
  using __type = typename __remove_cv<_Tp>::type;
  static constexpr bool arithmetic = (__is_int<__type>::value || __is_same<__type, float>::value ||
                                      __is_same<__type, double>::value) &&
                                     __args<_Rest...>::arithmetic;
  static constexpr bool all_float = __is_same<__type, float>::value && __args<_Rest...>::all_float;
  static constexpr bool all_double = __is_same<__type, double>::value && __args<_Rest...>::all_double;
};

// The type <cmath>'s promoting overloads compute in and return, defined only for the argument
// lists they take: arithmetic types that are neither all float nor all double (those two cases
// are NVRTC's own overloads). Any integer makes it double, as does a mix of float and double.
template <bool _Take, class... _Tp>
struct __promote_impl {};
template <class... _Tp>
struct __promote_impl<true, _Tp...> {
  using type = double;
};
template <class... _Tp>
struct __promote
    : __promote_impl<__args<_Tp...>::arithmetic && !__args<_Tp...>::all_float && !__args<_Tp...>::all_double,
                     _Tp...> {};

// The type the comparison functions (isless, ...) compare in: float when all arguments are float,
// else double; defined only for arithmetic arguments.
template <bool _Arithmetic, bool _AllFloat>
struct __compare_impl {};
template <>
struct __compare_impl<true, true> {
  using type = float;
};
template <>
struct __compare_impl<true, false> {
  using type = double;
};
template <class... _Tp>
struct __compare : __compare_impl<__args<_Tp...>::arithmetic, __args<_Tp...>::all_float> {};

}  // namespace __kjit_std

#endif  // KJIT_STD_DETAIL_ARITH_H
