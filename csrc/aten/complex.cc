// Complex numbers: the views between complex and real tensors, conjugation, and building
// complex tensors from parts (torch.complex, torch.polar).
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

LOWER({"_conj_physical", "conj_physical.out", "conj_physical_"},
      [](LoweringContext& ctx) { return Values{ctx.b.conj(ctx.tensor(0))}; });

// complex(real, imag): both float or both double, broadcast together.
LOWER({"complex", "complex.out"}, [](LoweringContext& ctx) {
  const at::Tensor& re = ctx.tensor_meta(0);
  const at::Tensor& im = ctx.tensor_meta(1);
  TORCH_CHECK(re.scalar_type() == im.scalar_type(), "Expected object of scalar type ",
              re.scalar_type(), " but got scalar type ", im.scalar_type(), " for second argument");
  TORCH_CHECK_TYPE(re.scalar_type() == c10::kFloat || re.scalar_type() == c10::kDouble,
                   "Expected both inputs to be Float or Double tensors but got ", re.scalar_type(),
                   " and ", im.scalar_type());
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(re.scalar_type());
  return Values{ctx.b.complex(operand(ctx, 0, t, shape), operand(ctx, 1, t, shape))};
});

// polar(abs, angle) = abs (cos angle + i sin angle).
LOWER({"polar", "polar.out"}, [](LoweringContext& ctx) {
  const at::Tensor& magnitude = ctx.tensor_meta(0);
  TORCH_CHECK(magnitude.scalar_type() == ctx.tensor_meta(1).scalar_type(),
              "Expected object of scalar type ", magnitude.scalar_type(), " but got scalar type ",
              ctx.tensor_meta(1).scalar_type(), " for second argument");
  TORCH_CHECK_TYPE(
      magnitude.scalar_type() == c10::kFloat || magnitude.scalar_type() == c10::kDouble,
      "Expected both inputs to be Float or Double tensors but got ", magnitude.scalar_type());
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(magnitude.scalar_type());
  Builder& b = ctx.b;
  Value r = operand(ctx, 0, t, shape), angle = operand(ctx, 1, t, shape);
  return Values{b.complex(b.binary("multiply", r, b.unary("cosine", angle)),
                          b.binary("multiply", r, b.unary("sine", angle)))};
});

}  // namespace

// The views only relabel the storage (dtype, sizes, strides); reading a storage through the
// other dtype is the dispatcher's business (csrc/dispatch/reinterpret.h).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}

}  // namespace torch_tpu::aten
