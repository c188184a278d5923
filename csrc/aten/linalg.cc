// Matrix products: mm, bmm, addmm, baddbmm, dot, mv.
#include <c10/util/Exception.h>

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
// vdot conjugates its first argument: the same as dot for real dtypes (complex is not offered).
LOWER({"dot", "dot.out", "vdot", "vdot.out"}, [](LoweringContext& ctx) {
  Value a = ctx.tensor(0), c = ctx.tensor(1);
  TORCH_CHECK(a.rank() == 1 && c.rank() == 1, "1D tensors expected, but got ", a.rank(), "D and ",
              c.rank(), "D tensors");
  TORCH_CHECK(a.shape == c.shape, "inconsistent tensor size, expected tensor [", a.shape[0],
              "] and src [", c.shape[0], "] to have the same number of elements, but got ",
              a.shape[0], " and ", c.shape[0], " elements respectively");
  return Values{ctx.b.dot_general(a, c, {}, {}, {0}, {0}, a.type)};
});
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
  Value scaled_self = b.binary("multiply", beta, self);
  Value zero = splat(b, 0, t, product.shape);
  scaled_self = b.select(b.compare("EQ", beta, zero), zero, scaled_self);
  return b.binary("add", scaled_self, b.binary("multiply", alpha, product));
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
    return b.binary("subtract", b.binary("multiply", part(x, i), part(y, j)),
                    b.binary("multiply", part(x, j), part(y, i)));
  };
  return Values{b.concatenate({term(1, 2), term(2, 0), term(0, 1)}, dim)};
});

}  // namespace
}  // namespace torch_tpu::aten
