// The shipped ops on DLPack tensors: each binding converts its arguments (tensors.hpp), allocates
// the outputs that were not passed in, sizes the workspace, and ends in run_op (the C++ op call
// and the result). Shapes, dtypes and rules are the C++ ops' (include/kjit/ops/*.hpp); the names
// a string argument takes are the C++ name tables (kjit/names.hpp, the family declarations),
// exported as tuples (kjit.fp8.SCALE_MODES, ...); the docstrings live in
// python/kjit/{attention,fp8,mla}.py.
#include "bench.hpp"
#include "names.hpp"
#include "flag.hpp"
#include "tensors.hpp"
#include "workspace.hpp"

#include "runtime/internal/python.hpp"

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/families.hpp>
#include <kjit/names.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>
#include <kjit/ops/rotary.hpp>
#include <kjit/ops/swa_decode.hpp>

#include <climits>

#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::python {

namespace bench {
int g_repeat = 0;
double g_last_ns = 0;
}  // namespace bench

namespace {

using namespace nanobind::literals;

/// Torch's spellings of kjit's dtypes (what str(torch.bfloat16) ends in), read beside kDTypeNames.
constexpr EnumName<DType> kTorchDTypeNames[] = {
    {DType::kBF16, "bfloat16"}, {DType::kF16, "float16"}, {DType::kF16, "half"},
    {DType::kF32, "float32"},   {DType::kF32, "float"},   {DType::kF64, "float64"},
    {DType::kI32, "int32"},     {DType::kI64, "int64"},   {DType::kU8, "uint8"},
    {DType::kE4M3, "float8_e4m3fn"}, {DType::kE5M2, "float8_e5m2"}};

/// Whether `t` is one of the FP8 formats (fp8::format_names()).
bool is_fp8_format(DType t) {
  static const std::vector<const char*> formats = fp8::format_names();
  for (const char* f : formats) {
    if (std::string_view(f) == dtype_name(t)) return true;
  }
  return false;
}

/// A kjit dtype name ("bf16", kDTypeNames), a torch one ("bfloat16", "torch.bfloat16"), or an
/// object whose str() is one of those; the op checks which dtypes it takes. With `fp8_only`,
/// only the FP8 formats. InvalidArgument "<op>: <name> must be one of ..., got '<text>'".
DType parse_dtype(const char* op, const char* name, nb::handle obj, bool fp8_only = false) {
  std::string s = nb::cast<std::string>(nb::str(obj));
  const size_t dot = s.rfind('.');
  if (dot != std::string::npos) s = s.substr(dot + 1);
  // Looks `s` up in `table`; with `accepted`, lists the names it takes instead (the message).
  const auto look_up = [&](const auto& table, std::string* accepted) -> const EnumName<DType>* {
    for (const EnumName<DType>& row : table) {
      if (fp8_only && !is_fp8_format(row.value)) continue;
      if (accepted != nullptr) *accepted += (accepted->empty() ? "" : ", ") + std::string(row.name);
      else if (s == row.name) return &row;
    }
    return nullptr;
  };
  if (const EnumName<DType>* row = look_up(kDTypeNames, nullptr)) return row->value;
  if (const EnumName<DType>* row = look_up(kTorchDTypeNames, nullptr)) return row->value;
  std::string ours, torch;
  look_up(kDTypeNames, &ours);
  look_up(kTorchDTypeNames, &torch);
  throw InvalidArgument(std::string(op) + ": " + name + " must be one of " + ours + " (or the torch dtypes " + torch +
                        "), got '" + s + "'");
}

nb::object out_or_alloc(OpCall& call, nb::handle given, const char* name, TensorRef* ref, DType dtype,
                        const int64_t* shape, int ndim) {
  if (!given.is_none()) {
    *ref = call.tensor(given, name);
    return nb::borrow(given);
  }
  return call.allocate(dtype, shape, ndim, ref);
}

nb::object out_or_alloc(OpCall& call, nb::handle given, const char* name, TensorRef* ref, DType dtype,
                        std::initializer_list<int64_t> shape) {
  return out_or_alloc(call, given, name, ref, dtype, shape.begin(), static_cast<int>(shape.size()));
}

/// The tail of every binding: runs the op (`launch(stream)`, repeated and timed under
/// kjit._C._bench_set_repeat), finishes the call (a JAX output is synchronized) and returns
/// `result`, the outputs the binding hands back.
template <class Launch>
nb::object run_op(OpCall& call, nb::object result, Launch&& launch) {
  bench::run([&] { launch(call.stream()); });
  call.finish();
  return result;
}

/// The outputs of an attention-style op (`Args` has q, out, lse, scale): `out` like q (bf16) and
/// the f32 `lse` of `lse_shape`, each the given tensor or else allocated (lse only when
/// `return_lse`). Returns what the binding returns: out, or (out, lse) when lse was asked for
/// or passed.
template <class Args>
nb::object out_and_lse(OpCall& call, Args& a, float scale, nb::handle out, nb::handle lse, bool return_lse,
                       std::initializer_list<int64_t> lse_shape) {
  a.scale = scale;
  nb::object o = out_or_alloc(call, out, "out", &a.out, DType::kBF16, a.q.shape, a.q.ndim);
  if (lse.is_none() && !return_lse) return o;
  nb::object l = out_or_alloc(call, lse, "lse", &a.lse, DType::kF32, lse_shape);
  return nb::make_tuple(o, l);
}

/// The tail of the split ops (decode, paged decode, SWA decode): their outputs (out_and_lse),
/// their workspace — the `workspace=` tensor when given (its bytes), else the cache's of
/// `bytes(a)` (the op's own sizing: an argument error names the op, not the query) — then
/// run_op with `launch(a, workspace, workspace_bytes, stream)`.
template <class Args, class Bytes, class Launch>
nb::object run_split_op(OpCall& call, Args& a, float scale, nb::handle out, nb::handle lse, bool return_lse,
                        std::initializer_list<int64_t> lse_shape, nb::handle workspace_arg, Bytes&& bytes,
                        Launch&& launch) {
  nb::object result = out_and_lse(call, a, scale, out, lse, return_lse, lse_shape);
  void* ws = nullptr;
  size_t ws_bytes = 0;
  if (!workspace_arg.is_none()) {
    const TensorRef w = call.tensor(workspace_arg, "workspace");
    ws = w.data;
    ws_bytes = static_cast<size_t>(w.numel()) * static_cast<size_t>(dtype_size(w.dtype));
  } else {
    ws_bytes = bytes(a);
    ws = workspace(call, a.q.device, ws_bytes);
  }
  return run_op(call, std::move(result), [&](CUstream stream) { launch(a, ws, ws_bytes, stream); });
}

/// The output an op allocates for `q` when none is passed (q's dtype and shape, contiguous),
/// viewing q's memory: what the shape-only queries validate the call with.
TensorRef contiguous_like(const TensorRef& q) {
  TensorRef r = q;
  int64_t stride = 1;
  for (int i = q.ndim - 1; i >= 0; --i) {
    r.strides[i] = stride;
    stride *= q.shape[i];
  }
  return r;
}

// ---- rotary ---------------------------------------------------------------------------------------

nb::object rotary(nb::handle q, nb::handle cos, nb::handle sin, nb::handle positions, nb::handle k,
                  nb::handle q_out, nb::handle k_out, int rotary_dim, std::string_view style, Flag inplace,
                  nb::handle stream) {
  OpCall call("kjit.rotary", stream);
  RotaryArgs a;
  a.q = call.required(q, "q");
  a.k = call.tensor(k, "k");
  a.cos = call.required(cos, "cos");
  a.sin = call.required(sin, "sin");
  a.positions = call.required(positions, "positions");
  a.rotary_dim = rotary_dim;
  a.style = parse_enum(kRotaryStyleNames, style, "kjit.rotary", "style");
  nb::object qr = nb::borrow(q), kr = nb::borrow(k);
  if (!q_out.is_none() || !k_out.is_none() || !inplace) {
    qr = out_or_alloc(call, q_out, "q_out", &a.q_out, DType::kBF16, a.q.shape, a.q.ndim);
    if (!k.is_none()) kr = out_or_alloc(call, k_out, "k_out", &a.k_out, DType::kBF16, a.k.shape, a.k.ndim);
  }
  return run_op(call, nb::make_tuple(qr, kr), [&](CUstream s) { kjit::rotary(a, s); });
}

// ---- attention ------------------------------------------------------------------------------------

attention::PagedKVCache paged_cache(OpCall& call, nb::handle k_pages, nb::handle v_pages, nb::handle indptr,
                                    nb::handle page_indices, nb::handle last_page_len) {
  attention::PagedKVCache c;
  c.k = call.required(k_pages, "k_pages");
  c.v = call.required(v_pages, "v_pages");
  c.indptr = call.required(indptr, "indptr");
  c.page_indices = call.required(page_indices, "page_indices");
  c.last_page_len = call.required(last_page_len, "last_page_len");
  return c;
}

/// decode's inputs and split requests: what the op and its workspace query share.
attention::DecodeArgs decode_inputs(OpCall& call, nb::handle q, nb::handle k, nb::handle v, nb::handle kv_lens,
                                    nb::handle mask, int num_splits, std::string_view merge) {
  attention::DecodeArgs a;
  a.q = call.required(q, "q");
  a.k = call.required(k, "k");
  a.v = call.required(v, "v");
  a.kv_lens = call.tensor(kv_lens, "kv_lens");
  a.mask = call.tensor(mask, "mask");
  a.num_splits = num_splits;
  a.merge = parse_enum(attention::kDecodeMergeNames, merge, call.op(), "merge");
  return a;
}

nb::object decode(nb::handle q, nb::handle k, nb::handle v, nb::handle kv_lens, nb::handle mask, nb::handle out,
                  nb::handle lse, Flag return_lse, float scale, int num_splits, std::string_view merge,
                  nb::handle workspace_arg, nb::handle stream) {
  OpCall call("kjit.attention.decode", stream);
  attention::DecodeArgs a = decode_inputs(call, q, k, v, kv_lens, mask, num_splits, merge);
  return run_split_op(
      call, a, scale, out, lse, return_lse, {a.q.shape[0], a.q.shape[2]}, workspace_arg,
      [](const auto& x) { return attention::detail::decode_workspace_bytes(x, attention::detail::DecodeOp::kInfo.name); },
      [](const auto& x, void* ws, size_t bytes, CUstream s) { attention::decode(x, ws, bytes, s); });
}

size_t decode_workspace_bytes(nb::handle q, nb::handle k, nb::handle v, nb::handle kv_lens, nb::handle mask,
                              int num_splits, std::string_view merge) {
  OpCall call("kjit.attention.decode_workspace_bytes", nb::none());
  attention::DecodeArgs a = decode_inputs(call, q, k, v, kv_lens, mask, num_splits, merge);
  a.out = contiguous_like(a.q);
  return attention::decode_workspace_bytes(a);
}

/// paged_decode's inputs and requests: what the op and its workspace query share.
attention::PagedDecodeArgs paged_decode_inputs(OpCall& call, nb::handle q, nb::handle k_pages, nb::handle v_pages,
                                               nb::handle indptr, nb::handle page_indices, nb::handle last_page_len,
                                               int num_splits, int64_t kv_len_hint, std::string_view merge) {
  attention::PagedDecodeArgs a;
  a.q = call.required(q, "q");
  a.cache = paged_cache(call, k_pages, v_pages, indptr, page_indices, last_page_len);
  a.num_splits = num_splits;
  a.kv_len_hint = kv_len_hint;
  a.merge = parse_enum(attention::kDecodeMergeNames, merge, call.op(), "merge");
  return a;
}

nb::object paged_decode(nb::handle q, nb::handle k_pages, nb::handle v_pages, nb::handle indptr,
                        nb::handle page_indices, nb::handle last_page_len, nb::handle out, nb::handle lse,
                        Flag return_lse, float scale, int num_splits, int64_t kv_len_hint, std::string_view merge,
                        nb::handle workspace_arg, nb::handle stream) {
  OpCall call("kjit.attention.paged_decode", stream);
  attention::PagedDecodeArgs a = paged_decode_inputs(call, q, k_pages, v_pages, indptr, page_indices, last_page_len,
                                                     num_splits, kv_len_hint, merge);
  return run_split_op(
      call, a, scale, out, lse, return_lse, {a.q.shape[0], a.q.shape[2]}, workspace_arg,
      [](const auto& x) {
        return attention::detail::paged_decode_workspace_bytes(x, attention::detail::PagedDecodeOp::kInfo.name);
      },
      [](const auto& x, void* ws, size_t bytes, CUstream s) { attention::paged_decode(x, ws, bytes, s); });
}

size_t paged_decode_workspace_bytes(nb::handle q, nb::handle k_pages, nb::handle v_pages, nb::handle indptr,
                                    nb::handle page_indices, nb::handle last_page_len, int num_splits,
                                    int64_t kv_len_hint, std::string_view merge) {
  OpCall call("kjit.attention.paged_decode_workspace_bytes", nb::none());
  attention::PagedDecodeArgs a = paged_decode_inputs(call, q, k_pages, v_pages, indptr, page_indices, last_page_len,
                                                     num_splits, kv_len_hint, merge);
  a.out = contiguous_like(a.q);
  return attention::paged_decode_workspace_bytes(a);
}

nb::object prefill(nb::handle q, nb::handle k, nb::handle v, nb::handle kv_lens, nb::handle mask, Flag causal,
                   nb::handle out, nb::handle lse, Flag return_lse, float scale, int block_m, std::string_view variant,
                   nb::handle stream) {
  OpCall call("kjit.attention.prefill", stream);
  attention::PrefillArgs a;
  a.q = call.required(q, "q");
  a.k = call.required(k, "k");
  a.v = call.required(v, "v");
  a.kv_lens = call.tensor(kv_lens, "kv_lens");
  a.mask = call.tensor(mask, "mask");
  a.causal = causal;
  a.block_m = block_m;
  a.variant = parse_enum(attention::kAttentionVariantNames, variant, "kjit.attention.prefill", "variant");
  nb::object result = out_and_lse(call, a, scale, out, lse, return_lse, {a.q.shape[0], a.q.shape[2], a.q.shape[1]});
  return run_op(call, std::move(result), [&](CUstream s) { attention::prefill(a, s); });
}

nb::object append_paged_kv(nb::handle k, nb::handle v, nb::handle k_pages, nb::handle v_pages, nb::handle indptr,
                           nb::handle page_indices, nb::handle last_page_len, nb::handle batch_indices,
                           nb::handle positions, nb::handle append_indptr, nb::handle stream) {
  OpCall call("kjit.attention.append_paged_kv", stream);
  attention::AppendPagedKVArgs a;
  a.k = call.required(k, "k");
  a.v = call.required(v, "v");
  a.cache = paged_cache(call, k_pages, v_pages, indptr, page_indices, last_page_len);
  a.batch_indices = call.tensor(batch_indices, "batch_indices");
  a.positions = call.tensor(positions, "positions");
  a.append_indptr = call.tensor(append_indptr, "append_indptr");
  return run_op(call, nb::none(), [&](CUstream s) { attention::append_paged_kv(a, s); });
}

/// A host int32 vector given as a list (or any sequence) of integers, or a CPU int32 tensor.
/// InvalidArgument names `op`, `name` and the offending entry.
std::vector<int32_t> host_int32s(const char* op, const char* name, nb::handle given) {
  std::vector<int32_t> host;
  if (PySequence_Check(given.ptr()) && !PyUnicode_Check(given.ptr()) && !PyBytes_Check(given.ptr()) &&
      !PyObject_HasAttrString(given.ptr(), "__dlpack__")) {
    size_t i = 0;
    for (nb::handle h : nb::borrow<nb::sequence>(given)) {
      // Any integer (Python or NumPy scalar) in the int32 range; floats, None and overflow are refused.
      long long value = 0;
      bool ok = false;
      if (PyIndex_Check(h.ptr())) {
        PyObject* index = PyNumber_Index(h.ptr());
        if (index != nullptr) {
          int overflow = 0;
          value = PyLong_AsLongLongAndOverflow(index, &overflow);
          Py_DECREF(index);
          ok = overflow == 0 && !PyErr_Occurred() && value >= INT32_MIN && value <= INT32_MAX;
        }
        PyErr_Clear();
      }
      if (!ok) {
        throw InvalidArgument(std::string(op) + ": " + name + "[" + std::to_string(i) +
                              "] must be an int in the int32 range, got " + nb::cast<std::string>(nb::repr(h)));
      }
      host.push_back(static_cast<int32_t>(value));
      ++i;
    }
    return host;
  }
  OpCall call(op, nb::none());
  const TensorRef t = call.required(given, name);
  if (t.device >= 0 || t.dtype != DType::kI32 || t.ndim != 1 || !t.is_contiguous()) {
    throw InvalidArgument(std::string(op) + ": " + name + " must be a host int32 vector (a list, or a CPU tensor), got " +
                          t.describe() + (t.device >= 0 ? " on a CUDA device" : ""));
  }
  const auto* p = static_cast<const int32_t*>(t.data);
  host.assign(p, p + t.shape[0]);
  return host;
}

/// A ragged prefill's plan and the device copy of its work map (freed with the object).
class PagedPrefillPlan {
 public:
  /// With the KV layout (kv_indptr, last_page_len, q_heads, page_size, causal), the tile is
  /// planned for `device` (attention::plan_paged_prefill(PagedPrefillPlanArgs)): tile_rows 0 takes
  /// the device's tuning table's choice for the call's bucket. Without it only a forced tile
  /// (attention::paged_tile_rows_fit) is planned, which reads no table in either overload.
  PagedPrefillPlan(nb::handle qo_indptr, int64_t head_dim, int tile_rows, int device, std::string_view variant,
                   nb::handle kv_indptr, nb::handle last_page_len, int64_t q_heads, int64_t page_size, Flag causal,
                   int64_t kv_heads, std::string_view pack_gqa, Flag persistent, int max_ctas,
                   std::string_view page_load)
      : device_(device) {
    static constexpr const char* kOp = "kjit.attention.plan_paged_prefill";
    // Parsed first: a bad name is reported before any driver call.
    const attention::AttentionVariant forced = parse_enum(attention::kAttentionVariantNames, variant, kOp, "variant");
    const attention::PackGqa pack = parse_enum(attention::kPackGqaNames, pack_gqa, kOp, "pack_gqa");
    const attention::PageLoad load = parse_enum(attention::kPageLoadNames, page_load, kOp, "page_load");
    const std::vector<int32_t> qo = host_int32s(kOp, "qo_indptr", qo_indptr);
    if (qo.empty()) throw InvalidArgument(std::string(kOp) + ": qo_indptr is empty (needs batch + 1 entries)");
    const int64_t batch = static_cast<int64_t>(qo.size()) - 1;
    if (device < 0) throw InvalidArgument(std::string(kOp) + ": device must be an ordinal, got " + std::to_string(device));
    if (!kv_indptr.is_none() || !last_page_len.is_none() || q_heads != 0 || page_size != 0 || kv_heads != 0 ||
        pack != attention::PackGqa::kAuto || !persistent || max_ctas != 0) {
      if (kv_indptr.is_none() || last_page_len.is_none()) {
        throw InvalidArgument(std::string(kOp) + ": the KV layout is kv_indptr, last_page_len, q_heads and page_size "
                              "together (kv_heads and pack_gqa plan with it); kv_indptr or last_page_len is missing");
      }
      const std::vector<int32_t> kv = host_int32s(kOp, "kv_indptr", kv_indptr);
      const std::vector<int32_t> last = host_int32s(kOp, "last_page_len", last_page_len);
      if (static_cast<int64_t>(kv.size()) != batch + 1 || static_cast<int64_t>(last.size()) != batch) {
        throw InvalidArgument(std::string(kOp) + ": kv_indptr needs batch + 1 = " + std::to_string(batch + 1) +
                              " entries and last_page_len batch = " + std::to_string(batch) + " (from qo_indptr), got " +
                              std::to_string(kv.size()) + " and " + std::to_string(last.size()));
      }
      // A forced kernel gets a tile it runs (PagedPrefillPlanArgs::variant).
      plan_ = attention::plan_paged_prefill(attention::PagedPrefillPlanArgs{
          /*qo_indptr_host=*/qo.data(), /*kv_indptr_host=*/kv.data(), /*last_page_len_host=*/last.data(),
          /*batch=*/batch, /*q_heads=*/q_heads, /*head_dim=*/head_dim, /*page_size=*/page_size, /*causal=*/causal,
          /*tile_rows=*/tile_rows, /*device=*/device, /*variant=*/forced, /*kv_heads=*/kv_heads, /*pack_gqa=*/pack,
          /*persistent=*/static_cast<bool>(persistent), /*max_ctas=*/max_ctas, /*page_load=*/load});
    } else if (tile_rows == 0) {
      throw InvalidArgument(std::string(kOp) + ": tile_rows 0 lets the device's tuning table choose the tile, which "
                            "reads the KV layout: pass kv_indptr, last_page_len, q_heads and page_size (or force "
                            "tile_rows=" + attention::paged_tile_rows_text() + ")");
    } else {
      plan_ = attention::plan_paged_prefill(qo.data(), batch, head_dim, tile_rows);
    }
    // variant="auto" keeps the plan's: kAuto, or the kernel a tuning table measured.
    if (forced != attention::AttentionVariant::kAuto) plan_.variant = forced;
    plan_.page_load = load;  // a host-only plan's is checked against the cache by paged_prefill
    if (plan_.workspace_bytes > 0) {
      detail::ensure_context(device);
      KJIT_CU(cuMemAlloc(&memory_, plan_.workspace_bytes));
      attention::upload_paged_prefill_plan(plan_, reinterpret_cast<void*>(memory_), plan_.workspace_bytes, device);
    }
  }
  ~PagedPrefillPlan() {
    if (memory_ && detail::try_driver()) detail::driver().cuMemFree(memory_);
  }
  PagedPrefillPlan(const PagedPrefillPlan&) = delete;
  PagedPrefillPlan& operator=(const PagedPrefillPlan&) = delete;

  const attention::PagedPrefillPlan& plan() const { return plan_; }
  void* workspace() const { return reinterpret_cast<void*>(memory_); }
  int device() const { return device_; }

 private:
  attention::PagedPrefillPlan plan_;
  CUdeviceptr memory_ = 0;
  int device_;
};

nb::object paged_prefill(nb::handle q, nb::handle qo_indptr, nb::handle k_pages, nb::handle v_pages,
                         nb::handle indptr, nb::handle page_indices, nb::handle last_page_len,
                         const PagedPrefillPlan& plan, Flag causal, nb::handle out, nb::handle lse, Flag return_lse,
                         float scale, nb::handle stream) {
  OpCall call("kjit.attention.paged_prefill", stream);
  attention::PagedPrefillArgs a;
  a.q = call.required(q, "q");
  a.qo_indptr = call.required(qo_indptr, "qo_indptr");
  a.cache = paged_cache(call, k_pages, v_pages, indptr, page_indices, last_page_len);
  a.causal = causal;
  nb::object result = out_and_lse(call, a, scale, out, lse, return_lse, {a.q.shape[1], a.q.shape[0]});
  const auto& p = plan.plan();
  return run_op(call, std::move(result),
                [&](CUstream s) { attention::paged_prefill(a, p, plan.workspace(), p.workspace_bytes, s); });
}

// ---- MLA sliding-window decode ----------------------------------------------------------------------

/// swa_decode's inputs and requests: what the op and its plan query share.
mla::SwaDecodeArgs swa_decode_inputs(OpCall& call, nb::handle q, nb::handle kv_cache, nb::handle inv_scale,
                                     nb::handle indices, nb::handle lens, int num_splits, int head_group,
                                     int cluster_split) {
  mla::SwaDecodeArgs a;
  a.q = call.required(q, "q");
  a.kv_cache = call.required(kv_cache, "kv_cache");
  a.inv_scale = call.required(inv_scale, "inv_scale");
  a.indices = call.required(indices, "indices");
  a.lens = call.required(lens, "lens");
  a.num_splits = num_splits;
  a.head_group = head_group;
  a.cluster_split = cluster_split;
  return a;
}

nb::object swa_decode(nb::handle q, nb::handle kv_cache, nb::handle inv_scale, nb::handle indices, nb::handle lens,
                      nb::handle out, nb::handle lse, Flag return_lse, float scale, int num_splits, int head_group,
                      int cluster_split, nb::handle workspace_arg, nb::handle stream) {
  OpCall call("kjit.mla.swa_decode", stream);
  mla::SwaDecodeArgs a =
      swa_decode_inputs(call, q, kv_cache, inv_scale, indices, lens, num_splits, head_group, cluster_split);
  return run_split_op(
      call, a, scale, out, lse, return_lse, {a.q.shape[0], a.q.shape[1]}, workspace_arg,
      [](const auto& x) { return mla::detail::swa_decode_workspace_bytes(x, mla::detail::SwaDecodeOp::kInfo.name); },
      [](const auto& x, void* ws, size_t bytes, CUstream s) { mla::swa_decode(x, ws, bytes, s); });
}

/// The plan swa_decode runs for this call, as swa_decode_workspace_bytes sizes it: the device's
/// tuned plan where one applies, else the built-in rule (a requested split count clamped to what
/// the window allows). (head_group, kv_tile, num_splits, cluster_split, split_len, ctas, launches,
/// workspace_bytes).
nb::tuple swa_decode_plan(nb::handle q, nb::handle kv_cache, nb::handle inv_scale, nb::handle indices,
                          nb::handle lens, int num_splits, int head_group, int cluster_split) {
  OpCall call("kjit.mla.swa_decode_plan", nb::none());
  mla::SwaDecodeArgs a =
      swa_decode_inputs(call, q, kv_cache, inv_scale, indices, lens, num_splits, head_group, cluster_split);
  a.out = contiguous_like(a.q);
  const mla::detail::SwaDims d = mla::detail::validate_swa_decode(a);
  const DeviceInfo& info = device_info(d.device);
  mla::detail::SwaPlan p;
  if (!kjit::detail::tuned_plan<mla::detail::SwaDecodeOp>(d, info, &p)) p = mla::detail::plan_swa_decode(d, info);
  return nb::make_tuple(p.heads_per_cta, p.tile, p.num_splits, p.cluster_split, p.split_len, p.ctas,
                        p.num_splits > 1 ? 2 : 1, p.workspace_bytes);
}

// ---- FP8 ----------------------------------------------------------------------------------------------

nb::object quantize(nb::handle x, nb::handle y, nb::handle format, std::string_view granularity, Flag dynamic,
                    nb::handle multiplier, nb::handle amax, nb::handle scale_inv, Flag pow2_scale, nb::handle stream) {
  OpCall call("kjit.fp8.quantize", stream);
  fp8::QuantizeArgs a;
  a.x = call.required(x, "x");
  a.granularity = fp8::parse_granularity(granularity, "kjit.fp8.quantize");
  a.dynamic = dynamic;
  a.pow2_scale = pow2_scale;
  if (!multiplier.is_none()) {
    if (PyFloat_Check(multiplier.ptr()) || PyLong_Check(multiplier.ptr())) {
      a.multiplier_value = static_cast<float>(PyFloat_AsDouble(multiplier.ptr()));
    } else {
      a.multiplier = call.tensor(multiplier, "multiplier");
    }
  }
  const DType fmt = parse_dtype("kjit.fp8.quantize", "format", format);
  nb::object yo = out_or_alloc(call, y, "y", &a.y, fmt, a.x.shape, a.x.ndim);
  // A byte tensor (frameworks without FP8 dtypes) holds the format asked for.
  if (a.y.dtype == DType::kU8) a.y.dtype = fmt;
  const int64_t rows = a.x.ndim == 2 ? a.x.shape[0] : 0, cols = a.x.ndim == 2 ? a.x.shape[1] : 0;
  const fp8::ScaleShape groups = fp8::scale_shape(a.granularity, rows, cols);
  const int64_t* scale_shape = groups.shape;
  const int scale_ndim = groups.ndim;
  nb::object so = out_or_alloc(call, scale_inv, "scale_inv", &a.scale_inv, DType::kF32, scale_shape, scale_ndim);
  nb::object ao = nb::none();
  const bool need_amax = !amax.is_none() || (dynamic && a.granularity == fp8::Granularity::kTensor);
  if (need_amax) ao = out_or_alloc(call, amax, "amax", &a.amax, DType::kF32, scale_shape, scale_ndim);
  return run_op(call, nb::make_tuple(yo, so, ao), [&](CUstream s) { fp8::quantize(a, s); });
}

nb::object gemm(nb::handle a_obj, nb::handle b_obj, nb::handle scale_a, nb::handle scale_b, nb::handle d,
                nb::handle out_dtype, nb::handle bias, std::string_view scale_mode, std::string_view kernel,
                std::string_view tile, int stages, int splits, int multicast, Flag b_constant, nb::handle fp8_format,
                nb::handle stream) {
  OpCall call("kjit.fp8.gemm", stream);
  fp8::GemmArgs g;
  g.a = call.required(a_obj, "a");
  g.b = call.required(b_obj, "b");
  // Byte tensors (frameworks without FP8 dtypes) hold the format `fp8_format` names.
  const DType fmt = parse_dtype("kjit.fp8.gemm", "fp8_format", fp8_format, /*fp8_only=*/true);
  if (g.a.dtype == DType::kU8) g.a.dtype = fmt;
  if (g.b.dtype == DType::kU8) g.b.dtype = fmt;
  g.scale_a = call.required(scale_a, "scale_a");
  g.scale_b = call.required(scale_b, "scale_b");
  g.bias = call.tensor(bias, "bias");
  g.scale_mode = parse_enum(fp8::kScaleModeNames, scale_mode, "kjit.fp8.gemm", "scale_mode");
  g.kernel = parse_enum(fp8::kGemmKernelNames, kernel, "kjit.fp8.gemm", "kernel");
  g.tile = fp8::parse_gemm_tile(tile, "kjit.fp8.gemm");
  g.stages = stages;
  g.splits = splits;
  g.multicast = multicast;
  g.b_constant = b_constant;
  const DType od = parse_dtype("kjit.fp8.gemm", "out_dtype", out_dtype);
  nb::object dout = out_or_alloc(call, d, "d", &g.d, od, {g.a.shape[0], g.b.shape[0]});
  return run_op(call, std::move(dout), [&](CUstream s) { fp8::gemm(g, s); });
}

/// kjit::fp8::Linear: owns the quantized weight and the activation buffers.
class Linear {
 public:
  Linear(nb::handle weight, std::string_view recipe, std::string_view weight_granularity, int64_t max_tokens,
         nb::handle activation_format, nb::handle weight_format, int history_len, int margin, nb::handle stream) {
    OpCall call("kjit.fp8.Linear", stream);
    const TensorRef w = call.required(weight, "weight");
    fp8::LinearConfig c;
    c.out_features = w.ndim == 2 ? w.shape[0] : 0;
    c.in_features = w.ndim == 2 ? w.shape[1] : 0;
    c.max_tokens = max_tokens;
    c.recipe = parse_enum(fp8::kRecipeNames, recipe, "kjit.fp8.Linear", "recipe");
    c.weight_granularity = fp8::parse_granularity(weight_granularity, "kjit.fp8.Linear");
    c.activation_format = parse_dtype("kjit.fp8.Linear", "activation_format", activation_format);
    c.weight_format = parse_dtype("kjit.fp8.Linear", "weight_format", weight_format);
    c.history_len = history_len;
    c.margin = margin;
    c.device = w.device < 0 ? 0 : w.device;
    if (w.device < 0) {
      throw InvalidArgument("kjit.fp8.Linear: weight must be on a CUDA device, got host memory " + w.describe());
    }
    linear_ = std::make_unique<fp8::Linear>(c, w, call.stream());
  }

  nb::object forward(nb::handle x, nb::handle y, nb::handle bias, nb::handle out_dtype, nb::handle stream) {
    OpCall call("kjit.fp8.Linear.forward", stream);
    const TensorRef xr = call.required(x, "x");
    const TensorRef br = call.tensor(bias, "bias");
    TensorRef yr;
    nb::object yo = out_or_alloc(call, y, "y", &yr, parse_dtype("kjit.fp8.Linear.forward", "out_dtype", out_dtype),
                                 {xr.shape[0], linear_->config().out_features});
    return run_op(call, std::move(yo), [&](CUstream s) { linear_->forward(xr, yr, s, br); });
  }

  const fp8::LinearConfig& config() const { return linear_->config(); }

 private:
  std::unique_ptr<fp8::Linear> linear_;
};

}  // namespace

void register_ops(nb::module_& m) {
  // The names each string argument takes, from the C++ name tables (kjit.ROTARY_STYLES, ...).
  m.attr("dtypes") = names_tuple(kDTypeNames);
  m.attr("rotary_styles") = names_tuple(kRotaryStyleNames);
  m.attr("attention_variants") = names_tuple(attention::kAttentionVariantNames);
  m.attr("attention_pack_gqa") = names_tuple(attention::kPackGqaNames);
  m.attr("attention_page_loads") = names_tuple(attention::kPageLoadNames);
  m.attr("attention_decode_merges") = names_tuple(attention::kDecodeMergeNames);
  m.attr("fp8_formats") = names_tuple(fp8::format_names());
  m.attr("fp8_granularities") = names_tuple(fp8::granularity_names());
  m.attr("fp8_scale_modes") = names_tuple(fp8::kScaleModeNames);
  m.attr("fp8_gemm_kernels") = names_tuple(fp8::kGemmKernelNames);
  m.attr("fp8_gemm_tiles") = names_tuple(fp8::gemm_tile_names());
  m.attr("fp8_recipes") = names_tuple(fp8::kRecipeNames);

  m.def("rotary", &rotary, "q"_a, "cos"_a, "sin"_a, "positions"_a, "k"_a = nb::none(), nb::kw_only(),
        "q_out"_a = nb::none(), "k_out"_a = nb::none(), "rotary_dim"_a = 0, "style"_a = "neox", "inplace"_a = true,
        "stream"_a = nb::none());
  m.def("attention_decode", &decode, "q"_a, "k"_a, "v"_a, "kv_lens"_a = nb::none(), nb::kw_only(),
        "mask"_a = nb::none(), "out"_a = nb::none(), "lse"_a = nb::none(), "return_lse"_a = false, "scale"_a = 0.f,
        "num_splits"_a = 0, "merge"_a = "auto", "workspace"_a = nb::none(), "stream"_a = nb::none());
  m.def("attention_decode_workspace_bytes", &decode_workspace_bytes, "q"_a, "k"_a, "v"_a, "kv_lens"_a = nb::none(),
        nb::kw_only(), "mask"_a = nb::none(), "num_splits"_a = 0, "merge"_a = "auto");
  m.def("attention_paged_decode_workspace_bytes", &paged_decode_workspace_bytes, "q"_a, "k_pages"_a, "v_pages"_a,
        "indptr"_a, "page_indices"_a, "last_page_len"_a, nb::kw_only(), "num_splits"_a = 0, "kv_len_hint"_a = 0,
        "merge"_a = "auto");
  m.def("attention_paged_decode", &paged_decode, "q"_a, "k_pages"_a, "v_pages"_a, "indptr"_a, "page_indices"_a,
        "last_page_len"_a, nb::kw_only(), "out"_a = nb::none(), "lse"_a = nb::none(), "return_lse"_a = false,
        "scale"_a = 0.f, "num_splits"_a = 0, "kv_len_hint"_a = 0, "merge"_a = "auto", "workspace"_a = nb::none(),
        "stream"_a = nb::none());
  m.def("attention_prefill", &prefill, "q"_a, "k"_a, "v"_a, nb::kw_only(), "kv_lens"_a = nb::none(),
        "mask"_a = nb::none(), "causal"_a = false, "out"_a = nb::none(), "lse"_a = nb::none(), "return_lse"_a = false,
        "scale"_a = 0.f, "block_m"_a = 0, "variant"_a = "auto", "stream"_a = nb::none());
  m.def("attention_append_paged_kv", &append_paged_kv, "k"_a, "v"_a, "k_pages"_a, "v_pages"_a, "indptr"_a,
        "page_indices"_a, "last_page_len"_a, nb::kw_only(), "batch_indices"_a = nb::none(),
        "positions"_a = nb::none(), "append_indptr"_a = nb::none(), "stream"_a = nb::none());
  nb::class_<PagedPrefillPlan>(m, "PagedPrefillPlan")
      .def(nb::init<nb::handle, int64_t, int, int, std::string_view, nb::handle, nb::handle, int64_t, int64_t, Flag,
                    int64_t, std::string_view, Flag, int, std::string_view>(),
           "qo_indptr"_a, "head_dim"_a, "tile_rows"_a = 0, "device"_a = 0, nb::kw_only(), "variant"_a = "auto",
           "kv_indptr"_a = nb::none(), "last_page_len"_a = nb::none(), "q_heads"_a = 0, "page_size"_a = 0,
           "causal"_a = false, "kv_heads"_a = 0, "pack_gqa"_a = "auto", "persistent"_a = true, "max_ctas"_a = 0,
           "page_load"_a = "auto")
      .def_prop_ro("batch", [](const PagedPrefillPlan& p) { return p.plan().batch; })
      .def_prop_ro("total_q", [](const PagedPrefillPlan& p) { return p.plan().total_q; })
      .def_prop_ro("head_dim", [](const PagedPrefillPlan& p) { return p.plan().head_dim; })
      .def_prop_ro("tile_rows", [](const PagedPrefillPlan& p) { return p.plan().tile_rows; })
      .def_prop_ro("num_work", [](const PagedPrefillPlan& p) { return p.plan().num_work(); })
      .def_prop_ro("pack_group", [](const PagedPrefillPlan& p) { return p.plan().pack_group; })
      .def_prop_ro("ctas", [](const PagedPrefillPlan& p) { return p.plan().ctas(); })
      .def_prop_ro("workspace_bytes", [](const PagedPrefillPlan& p) { return p.plan().workspace_bytes; })
      .def_prop_ro("variant",
                   [](const PagedPrefillPlan& p) { return attention::variant_name(p.plan().variant); })
      .def_prop_ro("page_load",
                   [](const PagedPrefillPlan& p) { return enum_name(attention::kPageLoadNames, p.plan().page_load); })
      .def_prop_ro("device", &PagedPrefillPlan::device);
  // The paged prefill's wide tile (attention::kWideTileRows, at kWideTileHeadDim only).
  m.attr("attention_wide_tile_rows") = attention::kWideTileRows;
  m.attr("attention_wide_tile_head_dim") = attention::kWideTileHeadDim;
  m.def("attention_paged_prefill", &paged_prefill, "q"_a, "qo_indptr"_a, "k_pages"_a, "v_pages"_a, "indptr"_a,
        "page_indices"_a, "last_page_len"_a, "plan"_a, nb::kw_only(), "causal"_a = false, "out"_a = nb::none(),
        "lse"_a = nb::none(), "return_lse"_a = false, "scale"_a = 0.f, "stream"_a = nb::none());
  m.def("mla_swa_decode", &swa_decode, "q"_a, "kv_cache"_a, "inv_scale"_a, "indices"_a, "lens"_a, nb::kw_only(),
        "out"_a = nb::none(), "lse"_a = nb::none(), "return_lse"_a = false, "scale"_a = 0.f, "num_splits"_a = 0,
        "head_group"_a = 0, "cluster_split"_a = 0, "workspace"_a = nb::none(), "stream"_a = nb::none());
  m.def("mla_swa_decode_plan", &swa_decode_plan, "q"_a, "kv_cache"_a, "inv_scale"_a, "indices"_a, "lens"_a,
        nb::kw_only(), "num_splits"_a = 0, "head_group"_a = 0, "cluster_split"_a = 0);
  m.def("fp8_quantize", &quantize, "x"_a, nb::kw_only(), "y"_a = nb::none(), "format"_a = "e4m3",
        "granularity"_a = "tensor", "dynamic"_a = false, "multiplier"_a = nb::none(), "amax"_a = nb::none(),
        "scale_inv"_a = nb::none(), "pow2_scale"_a = false, "stream"_a = nb::none());
  m.def(
      "fp8_scale_shape",
      [](std::string_view granularity, int64_t rows, int64_t cols) {
        const fp8::ScaleShape s = fp8::scale_shape(fp8::parse_granularity(granularity, "kjit.fp8.scale_shape"), rows, cols);
        return s.ndim == 1 ? nb::make_tuple(s.shape[0]) : nb::make_tuple(s.shape[0], s.shape[1]);
      },
      "granularity"_a, "rows"_a, "cols"_a,
      "The shape of quantize's scale_inv / amax for x [rows, cols] at `granularity`.");
  m.def("fp8_gemm", &gemm, "a"_a, "b"_a, "scale_a"_a, "scale_b"_a, nb::kw_only(), "d"_a = nb::none(),
        "out_dtype"_a = "bf16", "bias"_a = nb::none(), "scale_mode"_a = "tensorwise", "kernel"_a = "auto",
        "tile"_a = "auto", "stages"_a = 0, "splits"_a = 0, "multicast"_a = 0, "b_constant"_a = false,
        "fp8_format"_a = "e4m3",
        "stream"_a = nb::none());
  nb::class_<Linear>(m, "Linear")
      .def(nb::init<nb::handle, std::string_view, std::string_view, int64_t, nb::handle, nb::handle, int, int,
                    nb::handle>(),
           "weight"_a, nb::kw_only(), "recipe"_a = "delayed", "weight_granularity"_a = "row", "max_tokens"_a,
           "activation_format"_a = "e4m3", "weight_format"_a = "e4m3", "history_len"_a = 16, "margin"_a = 0,
           "stream"_a = nb::none())
      .def("forward", &Linear::forward, "x"_a, nb::kw_only(), "y"_a = nb::none(), "bias"_a = nb::none(),
           "out_dtype"_a = "bf16", "stream"_a = nb::none())
      .def_prop_ro("in_features", [](const Linear& l) { return l.config().in_features; })
      .def_prop_ro("out_features", [](const Linear& l) { return l.config().out_features; })
      .def_prop_ro("max_tokens", [](const Linear& l) { return l.config().max_tokens; });

  m.def(
      "family_values",
      [](std::string_view family, std::string_view param) {
        const kjit::Family& f = kjit::family(family);
        const int i = f.param_index(param);
        if (i < 0) throw InvalidArgument(f.name + ": no parameter '" + std::string(param) + "'");
        return f.params[static_cast<size_t>(i)].texts();
      },
      "family"_a, "param"_a,
      "The values a kernel family declares for a parameter (what the docstrings list and the ops accept).");
  m.def("clear_workspaces", &clear_workspaces);
  m.def("workspace_bytes_held", &workspace_bytes_held);
  m.def("_bench_set_repeat", [](int n) { bench::g_repeat = n; });
  m.def("_bench_last_ns", [] { return bench::g_last_ns; });
  m.def("_set_exchange_api_disabled", &set_exchange_api_disabled);
}

}  // namespace kjit::python
