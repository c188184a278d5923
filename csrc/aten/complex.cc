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

// CPU's checks of complex() and polar()'s parts: one dtype, half (complex only), float or double.
void check_parts(const at::Tensor& first, const at::Tensor& second, bool half_allowed) {
  const c10::ScalarType type = first.scalar_type();
  TORCH_CHECK(type == second.scalar_type(), "Expected object of scalar type ", type,
              " but got scalar type ", second.scalar_type(), " for second argument");
  TORCH_CHECK(type == c10::kHalf || type == c10::kFloat || type == c10::kDouble,
              "Expected both inputs to be Half, Float or Double tensors but got ", type, " and ",
              second.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(half_allowed || type != c10::kHalf,
                              "\"polar_cpu\" not implemented for 'Half'");
}

// complex(real, imag): both half (a complex32 result), float or double, broadcast together.
LOWER({"complex", "complex.out"}, [](LoweringContext& ctx) {
  const at::Tensor& re = ctx.tensor_meta(0);
  check_parts(re, ctx.tensor_meta(1), /*half_allowed=*/true);
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(re.scalar_type());
  return Values{ctx.b.complex(operand(ctx, 0, t, shape), operand(ctx, 1, t, shape))};
});

// polar(abs, angle) = abs (cos angle + i sin angle).
LOWER({"polar", "polar.out"}, [](LoweringContext& ctx) {
  const at::Tensor& magnitude = ctx.tensor_meta(0);
  check_parts(magnitude, ctx.tensor_meta(1), /*half_allowed=*/false);
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(magnitude.scalar_type());
  Builder& b = ctx.b;
  Value r = operand(ctx, 0, t, shape), angle = operand(ctx, 1, t, shape);
  return Values{b.complex(b.multiply(r, b.cosine(angle)), b.multiply(r, b.sine(angle)))};
});

}  // namespace

// The views only relabel the storage (dtype, sizes, strides); reading a storage through the
// other dtype is the dispatcher's business (csrc/dispatch/reinterpret.h).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}

}  // namespace torch_tpu::aten
