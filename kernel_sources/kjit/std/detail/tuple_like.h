// tuple_size_v and tuple_element_t, which <utility>, <tuple> and <array> all declare. libcu++
// declares std::tuple_size and std::tuple_element itself under NVRTC (real class templates in
// std, specialized for its pair, tuple and array, so that structured bindings work); these
// aliases read those, so a program's own std::tuple_size specialization counts too.
#ifndef KJIT_STD_DETAIL_TUPLE_LIKE_H
#define KJIT_STD_DETAIL_TUPLE_LIKE_H
// Included after the libcu++ header (<cuda/std/utility>, <cuda/std/tuple> or <cuda/std/array>)
// that declares them.

namespace std {
template <class _Tp>
inline constexpr ::size_t tuple_size_v = tuple_size<_Tp>::value;
template <::size_t _Ip, class _Tp>
using tuple_element_t = typename tuple_element<_Ip, _Tp>::type;
}  // namespace std

#endif  // KJIT_STD_DETAIL_TUPLE_LIKE_H
