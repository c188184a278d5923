// QR by Householder reflections, as LAPACK's geqrf/orgqr/ormqr compute it (so the signs of Q
// and R match CPU): geqrf, linalg_householder_product, ormqr and linalg_qr. Matrices are small
// and their sizes static, so the reflector steps are unrolled.
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>

#include "csrc/aten/common.h"
#include "csrc/aten/householder.h"
#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

LOWER({"geqrf", "geqrf.a"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.geqrf");
  Reflectors f = householder(ctx.b, wide(ctx.b, a));
  return Values{ctx.b.convert(f.packed, a.type), ctx.b.convert(f.tau, a.type)};
});

// linalg_householder_product(A [..., m, n], tau [..., k]) -> the first n columns of Q.
LOWER({"linalg_householder_product", "linalg_householder_product.out"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.householder_product");
  Builder& b = ctx.b;
  Value tau = ctx.tensor(1);
  const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1];
  TORCH_CHECK(m >= n,
              "torch.linalg.householder_product: input.shape[-2] must be greater than or "
              "equal to input.shape[-1]");
  TORCH_CHECK(tau.rank() == a.rank() - 1 && tau.shape.back() <= n,
              "torch.linalg.householder_product: input.shape[-1] must be greater than or equal "
              "to tau.shape[-1]");
  Value packed = wide(b, a);
  Value q = identity(b, batch_of(a), m, n, packed.type);
  q = apply_reflectors(b, packed, wide(b, tau), q, /*transposed=*/false);
  return Values{b.convert(q, a.type)};
});

// ormqr(A, tau, C, left, transpose): Q C, Q^T C, C Q or C Q^T with Q = H_0 ... H_{k-1}.
LOWER({"ormqr", "ormqr.out"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.ormqr");
  Builder& b = ctx.b;
  Value c = ctx.tensor(2);
  bool left = ctx.arg(3).toBool(), transpose = ctx.arg(4).toBool();
  const int64_t m = a.shape[a.rank() - 2];
  TORCH_CHECK(c.rank() == a.rank(), "torch.ormqr: input and other must have the same rank");
  TORCH_CHECK(c.shape[c.rank() - (left ? 2 : 1)] == m, "torch.ormqr: other.shape[", left ? -2 : -1,
              "] must be equal to input.shape[-2]");
  Value packed = wide(b, a), tau = wide(b, ctx.tensor(1));
  Value x = wide(b, c);
  // From the right, C Q = (Q^T C^T)^T.
  if (!left) x = matrix_transpose(b, x);
  x = apply_reflectors(b, packed, tau, x, /*transposed=*/left == transpose);
  if (!left) x = matrix_transpose(b, x);
  return Values{b.convert(x, c.type)};
});

// linalg_qr(A, mode): "reduced" (Q m x k, R k x n), "complete" (Q m x m, R m x n) or "r"
// (R only; Q empty).
LOWER({"linalg_qr", "linalg_qr.out"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.qr");
  Builder& b = ctx.b;
  std::string mode(ctx.arg(1).toStringView());
  TORCH_CHECK(mode == "reduced" || mode == "complete" || mode == "r",
              "qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1], k = std::min(m, n);
  Reflectors f = householder(b, wide(b, a));
  bool complete = mode == "complete";
  Value r = triangle(b, complete ? f.packed : rows_of(b, f.packed, 0, k), /*upper=*/true);
  Value q = splat(b, 0, a.type, {0});
  if (mode != "r") {
    Value basis = identity(b, batch_of(a), m, complete ? m : k, f.packed.type);
    q = b.convert(apply_reflectors(b, f.packed, f.tau, basis, /*transposed=*/false), a.type);
  }
  return Values{q, b.convert(r, a.type)};
});

}  // namespace
}  // namespace torch_tpu::aten
