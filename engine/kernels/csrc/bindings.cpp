// One Python module for every C++ CPU kernel (torch's JIT builder compiles them together).
#include <torch/extension.h>

#include "cpu_ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // The attention kernel runs for milliseconds a layer: let the server's event loop thread run
  // meanwhile. The short elementwise ops keep the GIL (releasing costs more than they take).
  m.def("paged_decode", &paged_decode, "paged decode attention (float32 query, float32 or bfloat16 KV cache and out)",
        py::call_guard<py::gil_scoped_release>());
  m.def("supports", &paged_decode_supports, "whether a head_dim / GQA group is compiled in");
  m.def("write_kv_cache", &write_kv_cache, "scatter a step's K and V into their cache slots");
  m.def("rotary_embedding_", &rotary_embedding_, "rotate-half rotary, in place on q and k");
  m.def("rms_norm", &rms_norm, "RMSNorm of every row");
  m.def("fused_add_rms_norm_", &fused_add_rms_norm_,
        "residual += x, then x = RMSNorm(residual), in place (x float32 or bfloat16)");
  m.def("quantize_rows_u8", &quantize_rows_u8,
        "per-row symmetric int8 codes + 128 as uint8, and each row's float32 scale (W8A8 input)");
  m.def("silu_and_mul", &silu_and_mul, "silu(gate) * up of a fused [gate | up] projection (float32 or bfloat16)");
}
