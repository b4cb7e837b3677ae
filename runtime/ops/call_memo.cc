/// \file runtime/ops/call_memo.cc
/// The call memos' shared generation (runtime/ops/call_memo.hpp).
#include "runtime/ops/call_memo.hpp"

#include <atomic>

namespace kjit::detail {
namespace {

std::atomic<uint64_t> generation{0};

}  // namespace

uint64_t call_memo_generation() noexcept { return generation.load(std::memory_order_acquire); }

void forget_op_calls() noexcept { generation.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace kjit::detail
