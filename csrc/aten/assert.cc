// torch._assert_async(tensor[, msg]): asserts a one-element tensor is nonzero without a host
// sync, as CUDA's device-side assert does. The value is checked inside the executable and a
// failure is raised at the next sync point (RuntimeError, CPU's class), leaving the process
// usable. Models assert this way on every step (TorchTitan's RoPE position bound).
#include <c10/util/Exception.h>

#include <string>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

LOWER({"_assert_async", "_assert_async.msg"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const at::Tensor& meta = ctx.tensor_meta(0);
  TORCH_CHECK(meta.numel() != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(meta.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
  TORCH_CHECK(!meta.is_complex(), "_assert_async: complex tensors are not supported on tpu");
  Value value = b.reshape(ctx.tensor(0), {});
  Value nonzero = b.ne(value, splat(b, 0, value.type, {}));
  std::string failure =
      ctx.num_args() > 1 ? "a value that fails the assertion \"" + ctx.arg(1).toStringRef() + "\""
                         : "a zero where a single nonzero value was expected";
  b.check_at_runtime(nonzero, Builder::CheckKind::RaisesRuntimeError, failure);
  return Values{};
});

}  // namespace
}  // namespace torch_tpu::aten
