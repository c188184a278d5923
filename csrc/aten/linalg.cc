// Matrix products: mm, bmm, addmm, baddbmm, dot, mv, addr.
#include <ATen/ops/addr_ops.h>
#include <c10/util/Exception.h>

#include <cmath>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

void check_matmul(const Value& a, const Value& b, const char* name, int64_t rank) {
  TORCH_CHECK(a.rank() == rank, name, ": self must be a ", rank, "D tensor, got ", a.rank(), "D");
  TORCH_CHECK(b.rank() == rank, name, ": mat2 must be a ", rank, "D tensor, got ", b.rank(), "D");
  TORCH_CHECK(a.type == b.type,
              "expected m1 and m2 to have the same dtype, but got: ", to_scalar_type(a.type),
              " != ", to_scalar_type(b.type));
  int64_t k = a.shape[rank - 1], k2 = b.shape[rank - 2];
  TORCH_CHECK(k == k2,
              rank == 2 ? "mat1 and mat2 shapes cannot be multiplied ("
                        : "Expected size for "
                          "first two dimensions of batch2 tensor to be: [",
              rank == 2 ? hlo::join(a.shape, "x") : "", rank == 2 ? " and " : "",
              rank == 2 ? hlo::join(b.shape, "x") : "", rank == 2 ? ")" : "]");
  if (rank == 3) {
    TORCH_CHECK(a.shape[0] == b.shape[0],
                "batch1 and batch2 must have same number of batches, got ", a.shape[0], " and ",
                b.shape[0]);
  }
}

Value mm(Builder& b, const Value& a, const Value& c) {
  return b.dot_general(a, c, {}, {}, {1}, {0}, a.type);
}

Value bmm(Builder& b, const Value& a, const Value& c) {
  return b.dot_general(a, c, {0}, {0}, {2}, {1}, a.type);
}

LOWER({"mm", "mm.out"}, [](LoweringContext& ctx) {
  Value a = ctx.tensor(0), c = ctx.tensor(1);
  check_matmul(a, c, "mm", 2);
  return Values{mm(ctx.b, a, c)};
});
LOWER({"bmm", "bmm.out"}, [](LoweringContext& ctx) {
  Value a = ctx.tensor(0), c = ctx.tensor(1);
  check_matmul(a, c, "bmm", 3);
  return Values{bmm(ctx.b, a, c)};
});
// dot(a, c), and vdot, which conjugates its first argument (the identity on reals).
Values dot(LoweringContext& ctx, bool conjugate_first) {
  Value a = ctx.tensor(0), c = ctx.tensor(1);
  TORCH_CHECK(a.rank() == 1 && c.rank() == 1, "1D tensors expected, but got ", a.rank(), "D and ",
              c.rank(), "D tensors");
  TORCH_CHECK(a.shape == c.shape, "inconsistent tensor size, expected tensor [", a.shape[0],
              "] and src [", c.shape[0], "] to have the same number of elements, but got ",
              a.shape[0], " and ", c.shape[0], " elements respectively");
  if (conjugate_first) a = ctx.b.conj(a);
  return Values{ctx.b.dot_general(a, c, {}, {}, {0}, {0}, a.type)};
}
LOWER({"dot", "dot.out"}, [](LoweringContext& ctx) { return dot(ctx, false); });
LOWER({"vdot", "vdot.out"}, [](LoweringContext& ctx) { return dot(ctx, true); });
LOWER({"mv", "mv.out"}, [](LoweringContext& ctx) {
  Value a = ctx.tensor(0), v = ctx.tensor(1);
  TORCH_CHECK(a.rank() == 2 && v.rank() == 1 && a.shape[1] == v.shape[0],
              "size mismatch, got input (", a.shape.at(0), "), mat (", hlo::join(a.shape, "x"),
              "), vec (", hlo::join(v.shape, "x"), ")");
  return Values{ctx.b.dot_general(a, v, {}, {}, {1}, {0}, a.type)};
});

// beta * self + alpha * product, with beta == 0 ignoring self (NaNs included), as torch does.
Value scale_add(LoweringContext& ctx, const Value& product, int beta_index, int alpha_index) {
  Builder& b = ctx.b;
  ElementType t = product.type;
  Value self = as(b, ctx.tensor(0), t, product.shape);
  Value alpha = as(b, ctx.scalar(alpha_index, t), t, product.shape);
  Value beta = as(b, ctx.scalar(beta_index, t), t, product.shape);
  Value scaled_self = b.multiply(beta, self);
  Value zero = splat(b, 0, t, product.shape);
  scaled_self = b.select(b.eq(beta, zero), zero, scaled_self);
  return b.add(scaled_self, b.multiply(alpha, product));
}

LOWER({"addmm", "addmm_", "addmm.out"}, [](LoweringContext& ctx) {
  Value a = ctx.tensor(1), c = ctx.tensor(2);
  check_matmul(a, c, "addmm", 2);
  return Values{scale_add(ctx, mm(ctx.b, a, c), 3, 4)};
});
LOWER({"baddbmm", "baddbmm_", "baddbmm.out"}, [](LoweringContext& ctx) {
  Value a = ctx.tensor(1), c = ctx.tensor(2);
  check_matmul(a, c, "baddbmm", 3);
  return Values{scale_add(ctx, bmm(ctx.b, a, c), 3, 4)};
});
LOWER({"addmv", "addmv_", "addmv.out"}, [](LoweringContext& ctx) {
  Value a = ctx.tensor(1), v = ctx.tensor(2);
  return Values{scale_add(ctx, ctx.b.dot_general(a, v, {}, {}, {1}, {0}, a.type), 3, 4)};
});

// addbmm(self, batch1, batch2, beta, alpha): the batch of products summed, contracting the
// batch dimension along with k.
LOWER({"addbmm", "addbmm_", "addbmm.out"}, [](LoweringContext& ctx) {
  Value a = ctx.tensor(1), c = ctx.tensor(2);
  check_matmul(a, c, "addbmm", 3);
  return Values{scale_add(ctx, ctx.b.dot_general(a, c, {}, {}, {0, 2}, {0, 1}, a.type), 3, 4)};
});

// linalg_cross(self, other, dim): along a dimension of size 3, after broadcasting.
LOWER({"linalg_cross", "linalg_cross.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type);
  Value x = operand(ctx, 0, t, shape), y = operand(ctx, 1, t, shape);
  int64_t dim = wrap_dim(ctx.arg(2).toInt(), static_cast<int64_t>(shape.size()));
  TORCH_CHECK(shape[dim] == 3, "linalg.cross: inputs dimension ", dim, " must have length 3. Got ",
              ctx.tensor_meta(0).size(dim), " and ", ctx.tensor_meta(1).size(dim));
  auto part = [&](const Value& v, int64_t i) {
    std::vector<int64_t> start(v.rank(), 0), limit(v.shape.begin(), v.shape.end()),
        strides(v.rank(), 1);
    start[dim] = i;
    limit[dim] = i + 1;
    return b.slice(v, start, limit, strides);
  };
  auto term = [&](int64_t i, int64_t j) {
    return b.subtract(b.multiply(part(x, i), part(y, j)), b.multiply(part(x, j), part(y, i)));
  };
  return Values{b.concatenate({term(1, 2), term(2, 0), term(0, 1)}, dim)};
});

// x with its batch dims (all but the last two) broadcast to `batch`.
Value with_batch(Builder& b, const Value& x, const Shape& batch) {
  Shape shape = batch;
  shape.insert(shape.end(), x.shape.end() - 2, x.shape.end());
  return broadcast_to(b, x, shape);
}
Shape common_batch(const Value& x1, const Value& x2) {
  return broadcast_shapes(Shape(x1.shape.begin(), x1.shape.end() - 2),
                          Shape(x2.shape.begin(), x2.shape.end() - 2));
}

// Pairwise differences x1[..., i, :] - x2[..., j, :] as [..., P, R, M], batch dims broadcast.
Value pairwise_differences(Builder& b, const Value& a1, const Value& a2) {
  Shape batch = common_batch(a1, a2);
  Value x1 = with_batch(b, a1, batch), x2 = with_batch(b, a2, batch);
  const int64_t r = x1.rank();
  Shape pair(x1.shape.begin(), x1.shape.end() - 1);
  pair.push_back(x2.shape[r - 2]);
  pair.push_back(x1.shape[r - 1]);
  std::vector<int64_t> first, second;
  for (int64_t d = 0; d < r - 2; ++d) {
    first.push_back(d);
    second.push_back(d);
  }
  first.insert(first.end(), {r - 2, r});
  second.insert(second.end(), {r - 1, r});
  return b.subtract(b.broadcast_in_dim(x1, pair, first), b.broadcast_in_dim(x2, pair, second));
}

// _cdist_forward(x1 [..., P, M], x2 [..., R, M], p, compute_mode) -> [..., P, R], p-norms of
// the pairwise differences (p = 0 counts nonzeros, p = inf takes the largest).
LOWER({"_cdist_forward", "_cdist_forward.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x1 = ctx.tensor(0), x2 = ctx.tensor(1);
  TORCH_CHECK(x1.rank() >= 2 && x2.rank() >= 2, "cdist only supports at least 2D tensors");
  TORCH_CHECK(x1.shape.back() == x2.shape.back(),
              "X1 and X2 must have the same number of columns.");
  double p = ctx.arg(2).toDouble();
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  ElementType acc = opmath(x1.type);
  Value a = b.abs(pairwise_differences(b, b.convert(x1, acc), b.convert(x2, acc)));
  const int64_t last = a.rank() - 1;
  Value d;
  if (p == 0) {
    d = sum(b, b.convert(b.ne(a, splat(b, 0, acc, a.shape)), acc), {last});
  } else if (std::isinf(p)) {
    d = reduce_extremum(b, a, {last}, true);
  } else if (p == 1) {
    d = sum(b, a, {last});
  } else if (p == 2) {
    d = b.sqrt(sum(b, b.multiply(a, a), {last}));
  } else {
    Value s = sum(b, b.power(a, splat(b, p, acc, a.shape)), {last});
    d = b.power(s, splat(b, 1.0 / p, acc, s.shape));
  }
  return Values{b.convert(d, x1.type)};
});

// The gradient for x1 of p-norm distances `dist` [..., P, R] given `grad` of the same shape.
Value distance_gradient(Builder& b, const Value& grad_in, const Value& x1, const Value& x2,
                        double p, const Value& dist_in) {
  ElementType acc = opmath(x1.type);
  Value diff = pairwise_differences(b, b.convert(x1, acc), b.convert(x2, acc));
  const int64_t last = diff.rank() - 1;
  std::vector<int64_t> keep;
  for (int64_t d = 0; d < last; ++d) keep.push_back(d);
  Value grad = b.broadcast_in_dim(b.convert(grad_in, acc), diff.shape, keep);
  Value dist = b.broadcast_in_dim(b.convert(dist_in, acc), diff.shape, keep);
  Value zero = splat(b, 0, acc, diff.shape);
  Value a = b.abs(diff), sign = b.sign(diff);
  Value term;
  if (p == 0) {
    term = zero;
  } else if (p == 1) {
    term = sign;
  } else if (std::isinf(p)) {
    term = b.select(b.eq(a, dist), sign, zero);
  } else if (p < 2) {
    // sign(d) |d|^(p-1) / dist^(p-1), 0 where d is 0.
    Value ratio = b.power(b.divide(a, dist), splat(b, p - 1, acc, a.shape));
    term = b.select(b.eq(a, zero), zero, b.multiply(sign, ratio));
  } else {
    term = b.divide(b.multiply(diff, b.power(a, splat(b, p - 2, acc, a.shape))),
                    b.power(dist, splat(b, p - 1, acc, a.shape)));
  }
  term = b.select(b.eq(dist, zero), zero, term);
  Value g = sum(b, b.multiply(grad, term), {last - 1});
  // Batch dims that x1 was broadcast along are summed back.
  int64_t extra = g.rank() - x1.rank();
  std::vector<int64_t> summed;
  for (int64_t d = 0; d < g.rank() - 2; ++d) {
    if (d < extra || (x1.shape[d - extra] == 1 && g.shape[d] != 1)) summed.push_back(d);
  }
  if (!summed.empty()) g = b.reshape(sum(b, g, summed), x1.shape);
  return b.convert(g, x1.type);
}

// _cdist_backward(grad [..., P, R], x1, x2, p, cdist) -> the gradient for x1.
LOWER({"_cdist_backward", "_cdist_backward.out"}, [](LoweringContext& ctx) {
  return Values{distance_gradient(ctx.b, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2),
                                  ctx.arg(3).toDouble(), ctx.tensor(4))};
});

// Positions (i * n + j, i < j, row-major) of pdist's pairs in the n x n distance matrix.
Value upper_pairs(Builder& b, int64_t n) {
  // Row i's pairs are the columns i + 1 .. n - 1 of row i.
  std::vector<Value> rows;
  for (int64_t i = 0; i + 1 < n; ++i) {
    Value columns = b.iota({n - 1 - i}, ElementType::S64, 0);
    rows.push_back(b.add(columns, b.constant_int(i * n + i + 1, ElementType::S64, {n - 1 - i})));
  }
  return b.concatenate(rows, 0);
}

// _pdist_forward(self [N, M], p): the upper triangle of cdist(self, self), row by row.
LOWER({"_pdist_forward", "_pdist_forward.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  TORCH_CHECK(x.rank() == 2, "pdist only supports 2D tensors, got: ", x.rank(), "D");
  double p = ctx.arg(1).toDouble();
  TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
  int64_t n = x.shape[0];
  if (n < 2) return Values{splat(b, 0, x.type, {0})};
  ElementType acc = opmath(x.type);
  Value a = b.abs(pairwise_differences(b, b.convert(x, acc), b.convert(x, acc)));
  Value d;
  if (p == 0) {
    d = sum(b, b.convert(b.ne(a, splat(b, 0, acc, a.shape)), acc), {2});
  } else if (std::isinf(p)) {
    d = reduce_extremum(b, a, {2}, true);
  } else if (p == 1) {
    d = sum(b, a, {2});
  } else if (p == 2) {
    d = b.sqrt(sum(b, b.multiply(a, a), {2}));
  } else {
    Value s2 = sum(b, b.power(a, splat(b, p, acc, a.shape)), {2});
    d = b.power(s2, splat(b, 1.0 / p, acc, s2.shape));
  }
  Value picked = take_slices(b, b.reshape(d, {n * n}), 0, upper_pairs(b, n));
  return Values{b.convert(picked, x.type)};
});
// _pdist_backward(grad, self, p, pdist): the pairs' gradients, mirrored into a symmetric
// matrix, through the distance gradient.
LOWER({"_pdist_backward", "_pdist_backward.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), x = ctx.tensor(1), dist = ctx.tensor(3);
  double p = ctx.arg(2).toDouble();
  int64_t n = x.shape[0];
  if (n < 2) return Values{splat(b, 0, x.type, x.shape)};
  Value pairs = upper_pairs(b, n);
  auto square = [&](const Value& v) {
    Value upper = b.reshape(
        combine_slices(b, splat(b, 0, v.type, {n * n}), 0, pairs, v, std::nullopt), {n, n});
    return b.add(upper, b.transpose(upper, {1, 0}));
  };
  return Values{distance_gradient(b, square(grad), x, x, p, square(dist))};
});

// addr runs ATen's composite kernel, which broadcasts `self` against the outer product either
// way; CPU's kernel expands `self` to the product's shape, so a `self` of more dimensions is
// refused with expand's error, as there.
at::Tensor addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2,
                const at::Scalar& beta, const at::Scalar& alpha) {
  if (vec1.dim() == 1 && vec2.dim() == 1) (void)self.expand({vec1.size(0), vec2.size(0)});
  return at::_ops::addr::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CompositeExplicitAutograd), self, vec1, vec2, beta,
      alpha);
}

// addr_ runs ATen's composite kernel, which writes through addr.out and so resized a `self`
// of another shape; CPU refuses it (an in-place op keeps its target's shape), with its message.
at::Tensor& addr_(at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2,
                  const at::Scalar& beta, const at::Scalar& alpha) {
  TORCH_CHECK(vec1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", vec1.dim(), "-D");
  TORCH_CHECK(vec2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", vec2.dim(), "-D");
  TORCH_CHECK(self.dim() == 2, "2D tensor expected, got ", self.dim(), "D tensor for input");
  TORCH_CHECK(self.size(0) == vec1.size(0) && self.size(1) == vec2.size(0),
              "size mismatch, input: ", self.sizes(), ", v1: ", vec1.sizes(),
              ", v2: ", vec2.sizes());
  return at::_ops::addr_::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CompositeExplicitAutograd), self, vec1, vec2, beta,
      alpha);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("addr", &addr);
  m.impl("addr_", &addr_);
}

}  // namespace
}  // namespace torch_tpu::aten
