// The tunable ops (runtime/ops/tuned.hpp), in TuneOpId order.
#include "runtime/ops/tuned.hpp"

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/mla/swa_decode.hpp"

namespace kjit::detail {

const std::vector<const TuneOpSpec*>& tune_ops() {
  static const std::vector<const TuneOpSpec*> ops = {
      &attention::detail::DecodeOp::tune_spec(),
      &attention::detail::PagedDecodeOp::tune_spec(),
      &attention::detail::PrefillOp::tune_spec(),
      &attention::detail::PagedPrefillPlanner::tune_spec(),
      &fp8::detail::GemmOp::tune_spec(),
      &mla::detail::SwaDecodeOp::tune_spec(),
  };
  return ops;
}

}  // namespace kjit::detail
