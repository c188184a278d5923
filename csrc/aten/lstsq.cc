// linalg.lstsq composed on the device from the SVD (svd.cc): X = V diag(1/s) U^H B over the
// singular values above rcond * s_max, the minimum-norm least-squares solution that every
// LAPACK driver returns for the matrices it accepts. What else each driver reports follows
// CPU: rank (all but gels), singular values (gelsd, gelss) and residuals (m > n, full rank,
// all but gelsy). Autograd uses linalg_lstsq's own derivative formula.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_svd.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <limits>
#include <string>
#include <tuple>

namespace torch_tpu::aten {
namespace {

using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

double epsilon(c10::ScalarType type) {
  return type == c10::kDouble ? std::numeric_limits<double>::epsilon()
                              : std::numeric_limits<float>::epsilon();
}

Result lstsq(const at::Tensor& self, const at::Tensor& b, std::optional<double> rcond,
             std::optional<c10::string_view> driver_name) {
  TORCH_CHECK(self.dim() >= 2, "torch.linalg.lstsq: input must have at least 2 dimensions.");
  TORCH_CHECK(self.scalar_type() == b.scalar_type(),
              "torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
              "input's dtype ",
              self.scalar_type(), " and other's dtype ", b.scalar_type());
  TORCH_CHECK(self.scalar_type() == c10::kFloat || self.scalar_type() == c10::kDouble,
              "torch.linalg.lstsq: expected a float or double input on tpu, got ",
              self.scalar_type());
  TORCH_CHECK(self.dim() >= b.dim() && self.dim() - b.dim() <= 1,
              "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
              "(input.dim() - other.dim()) <= 1");
  const std::string driver(driver_name.value_or("gelsy"));
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss",
              "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, "
              "gelss)");
  const bool vector_rhs = b.dim() == self.dim() - 1;
  at::Tensor rhs = vector_rhs ? b.unsqueeze(-1) : b;
  TORCH_CHECK(rhs.dim() >= 2, "torch.linalg.lstsq: other must have at least 1 dimension.");
  TORCH_CHECK(self.size(-2) == rhs.size(-2),
              "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  const int64_t m = self.size(-2), n = self.size(-1);
  const double cutoff = rcond.value_or(epsilon(self.scalar_type()) * std::max(m, n));

  auto [u, s, vh] = at::linalg_svd(self, /*full_matrices=*/false);
  at::Tensor largest = s.numel() == 0 ? s.sum(-1, true) : s.amax(-1, true);
  at::Tensor kept = s > largest * cutoff;
  at::Tensor inverse = at::where(kept, s.reciprocal(), at::zeros_like(s));
  at::Tensor solution =
      vh.mH().matmul(inverse.unsqueeze(-1) * u.mH().matmul(rhs));  // broadcasts batches
  at::Tensor rank = kept.sum(-1);

  auto empty = [&](c10::ScalarType type) { return at::empty({0}, self.options().dtype(type)); };
  at::Tensor residuals = empty(self.scalar_type());
  if (m > n && driver != "gelsy") {
    // CPU reports them only when every matrix has full rank (gels assumes it does).
    bool full_rank =
        driver == "gels" || rank.numel() == 0 || (rank == n).all().template item<bool>();
    if (full_rank) residuals = (self.matmul(solution) - rhs).pow(2).sum(-2);
  }
  if (vector_rhs) {
    solution = solution.squeeze(-1);
    if (residuals.numel() != 0) residuals = residuals.squeeze(-1);
  }
  at::Tensor singular_values =
      driver == "gelsd" || driver == "gelss" ? s : empty(self.scalar_type());
  return {solution, residuals, driver == "gels" ? empty(c10::kLong) : rank, singular_values};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> lstsq_out(
    const at::Tensor& self, const at::Tensor& b, std::optional<double> rcond,
    std::optional<c10::string_view> driver, at::Tensor& solution, at::Tensor& residuals,
    at::Tensor& rank, at::Tensor& singular_values) {
  auto [x, r, k, s] = lstsq(self, b, rcond, driver);
  const std::pair<at::Tensor*, const at::Tensor*> outs[] = {
      {&solution, &x}, {&residuals, &r}, {&rank, &k}, {&singular_values, &s}};
  for (const auto& [out, value] : outs) {
    at::native::resize_output(*out, value->sizes());
    out->copy_(*value);
  }
  return {solution, residuals, rank, singular_values};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_lstsq", TORCH_FN(lstsq));
  m.impl("linalg_lstsq.out", TORCH_FN(lstsq_out));
}

}  // namespace
}  // namespace torch_tpu::aten
