// The older Cholesky entry points, composed on the device from the native Cholesky factor and
// triangular solves: cholesky (errors on a matrix that is not positive-definite, as on CPU),
// cholesky_inverse and cholesky_solve's helper. Autograd uses their own derivative formulas.
#include <ATen/core/Tensor.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_cholesky.h>
#include <ATen/ops/linalg_solve_triangular.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace torch_tpu::aten {
namespace {

at::Tensor cholesky(const at::Tensor& self, bool upper) { return at::linalg_cholesky(self, upper); }

// A = L L^T (or U^T U): A^{-1} B = L^{-T} (L^{-1} B), or U^{-1} (U^{-T} B).
at::Tensor cholesky_solve_helper(const at::Tensor& rhs, const at::Tensor& factor, bool upper) {
  at::Tensor first = at::linalg_solve_triangular(upper ? factor.mT() : factor, rhs, false);
  return at::linalg_solve_triangular(upper ? factor : factor.mT(), first, true);
}

at::Tensor cholesky_inverse(const at::Tensor& factor, bool upper) {
  TORCH_CHECK(factor.dim() >= 2 && factor.size(-1) == factor.size(-2),
              "cholesky_inverse: A must be batches of square matrices, but got a tensor of shape ",
              factor.sizes());
  at::Tensor identity = at::eye(factor.size(-1), factor.options()).expand_as(factor);
  return cholesky_solve_helper(identity.contiguous(), factor, upper);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cholesky", TORCH_FN(cholesky));
  m.impl("cholesky_inverse", TORCH_FN(cholesky_inverse));
  m.impl("_cholesky_solve_helper", TORCH_FN(cholesky_solve_helper));
}

}  // namespace
}  // namespace torch_tpu::aten
