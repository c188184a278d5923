// Margin losses over classes, forward and backward: multi_margin_loss (the hinge on every
// other class, p = 1 or 2, optional class weights) and multilabel_margin_loss (every target
// class against every non-target class; the target list ends at the first -1).
#include <c10/util/Exception.h>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr int64_t kReductionNone = 0, kReductionMean = 1;

// Input [], [C] or [N, C] as [N, C]; `batched` tells which.
struct Scores {
  Value x;  // [N, C]
  int64_t n, classes;
  bool batched;
};

Scores scores_of(LoweringContext& ctx, int index, const char* name) {
  Value x = ctx.tensor(index);
  TORCH_CHECK(x.rank() <= 2, name,
              ": Expected non-empty vector or matrix with optional 0-dim batch size, but got: ",
              x.rank(), "-d input");
  bool batched = x.rank() == 2;
  int64_t n = batched ? x.shape[0] : 1, classes = x.rank() == 0 ? 1 : x.shape[x.rank() - 1];
  return {ctx.b.reshape(ctx.b.convert(x, opmath(x.type)), {n, classes}), n, classes, batched};
}

// The per-sample loss [N] reduced, or shaped [N] ([] for a single sample) without reduction.
Value reduced(Builder& b, const Value& per_sample, const Scores& s, int64_t reduction) {
  if (reduction == kReductionNone) return s.batched ? per_sample : b.reshape(per_sample, {});
  Value total = sum(b, per_sample, {0});
  return reduction == kReductionMean ? b.divide(total, c(b, static_cast<double>(s.n), total))
                                     : total;
}

// d loss / d per-sample loss as [N, 1]: grad_output, divided by N for the mean.
Value upstream(Builder& b, const Value& grad, const Scores& s, int64_t reduction) {
  Value g = b.convert(grad, s.x.type);
  g = reduction == kReductionNone ? b.reshape(g, {s.n, 1})
                                  : broadcast_to(b, b.reshape(g, {1, 1}), {s.n, 1});
  if (reduction == kReductionMean) g = b.divide(g, c(b, static_cast<double>(s.n), g));
  return g;
}

// multi_margin_loss terms: z[n, i] = margin - x[n, y] + x[n, i] for i != y (0 at y), and the
// weight w[y] per sample.
struct MultiMargin {
  Value z;       // [N, C]
  Value hit;     // [N, C] pred: i == y
  Value weight;  // [N, 1]
};

MultiMargin multi_margin(LoweringContext& ctx, const Scores& s, int target_index, int margin_index,
                         int weight_index) {
  Builder& b = ctx.b;
  Value target = b.reshape(b.convert(ctx.tensor(target_index), ElementType::S64), {s.n, 1});
  check_index_range(b, target, 0, s.classes, std::nullopt,
                    Builder::CheckKind::RaisesRuntimeError);  // as CPU raises
  Value hit = b.eq(b.iota({s.n, s.classes}, ElementType::S64, 1),
                   broadcast_to(b, target, {s.n, s.classes}));
  Value zero = c(b, 0, s.x);
  Value picked = b.reshape(sum(b, b.select(hit, s.x, zero), {1}), {s.n, 1});
  Value margin = splat(b, 0, s.x.type, {s.n, s.classes});
  margin = b.add(margin, broadcast_to(b, ctx.scalar(margin_index, s.x.type), margin.shape));
  Value z = b.add(b.subtract(margin, broadcast_to(b, picked, s.x.shape)), s.x);
  Value weight = splat(b, 1, s.x.type, {s.n, 1});
  if (auto w = ctx.optional_tensor(weight_index)) {
    Value per_class = b.broadcast_in_dim(b.convert(*w, s.x.type), {s.n, s.classes}, {1});
    weight = b.reshape(sum(b, b.select(hit, per_class, zero), {1}), {s.n, 1});
  }
  return {b.select(hit, zero, z), hit, weight};
}

int64_t margin_power(LoweringContext& ctx, int index) {
  int64_t p = ctx.arg(index).toScalar().toLong();
  TORCH_CHECK(p == 1 || p == 2, "only p == 1 and p == 2 supported");
  return p;
}

// max(0, z) as CPU computes it (`if (z > 0)`): 0 where z is NaN too.
Value positive_part(Builder& b, const Value& z) {
  Value zero = c(b, 0, z);
  return b.select(b.gt(z, zero), z, zero);
}

// multi_margin_loss(self, target, p, margin, weight?, reduction):
// sum_{i != y} w[y] max(0, margin - x[y] + x[i])^p / C per sample.
LOWER({"multi_margin_loss", "multi_margin_loss.out"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Scores s = scores_of(ctx, 0, "multi_margin_loss");
        int64_t p = margin_power(ctx, 2);
        MultiMargin m = multi_margin(ctx, s, 1, 3, 4);
        Value hinge = positive_part(b, m.z);
        Value term = p == 1 ? hinge : b.multiply(hinge, hinge);
        term = b.multiply(term, broadcast_to(b, m.weight, term.shape));
        Value per_sample = sum(b, term, {1});
        per_sample = b.divide(per_sample, c(b, static_cast<double>(s.classes), per_sample));
        per_sample = b.reshape(per_sample, {s.n});
        return Values{b.convert(reduced(b, per_sample, s, ctx.arg(5).toInt()), ctx.tensor(0).type)};
      },
      {2});

// multi_margin_loss_backward(grad_output, self, target, p, margin, weight?, reduction).
LOWER({"multi_margin_loss_backward", "multi_margin_loss_backward.grad_input"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Scores s = scores_of(ctx, 1, "multi_margin_loss_backward");
        int64_t p = margin_power(ctx, 3);
        MultiMargin m = multi_margin(ctx, s, 2, 4, 5);
        Value zero = c(b, 0, m.z);
        Value active = b.gt(m.z, zero);
        Value slope = p == 1 ? c(b, 1, m.z) : b.multiply(c(b, 2, m.z), m.z);
        Value g = b.select(active, slope, zero);
        g = b.divide(b.multiply(g, broadcast_to(b, m.weight, g.shape)),
                     c(b, static_cast<double>(s.classes), g));
        // x[y] enters every term with the opposite sign.
        Value at_target = broadcast_to(b, b.reshape(sum(b, g, {1}), {s.n, 1}), g.shape);
        g = b.select(m.hit, b.negate(at_target), g);
        g = b.multiply(g,
                       broadcast_to(b, upstream(b, ctx.tensor(0), s, ctx.arg(6).toInt()), g.shape));
        return Values{b.convert(b.reshape(g, ctx.tensor(1).shape), ctx.tensor(1).type)};
      },
      {3});

// How often each class is listed among a sample's targets (the list ends at the first -1):
// [N, C].
Value target_counts(Builder& b, const Value& target_values, const Scores& s) {
  Value target = b.reshape(b.convert(target_values, ElementType::S64), {s.n, s.classes});
  check_index_range(b, target, -1, s.classes, std::nullopt,
                    Builder::CheckKind::RaisesRuntimeError);  // as CPU raises
  Value listed = b.ge(target, splat(b, 0, ElementType::S64, target.shape));
  // Entries from the first -1 on do not count: a running "all listed so far".
  Value ended = b.convert(b.not_(listed), ElementType::S32);
  Value ends_before =
      b.reduce_window(ended, b.constant_int(0, ElementType::S32), {1, s.classes}, {1, 1}, {1, 1},
                      {1, 1}, {{0, 0}, {s.classes - 1, 0}}, BinaryOp::Add);
  Value valid = b.eq(ends_before, splat(b, 0, ElementType::S32, ends_before.shape));
  Shape cube{s.n, s.classes, s.classes};  // [n, k, class]
  Value same = b.eq(b.broadcast_in_dim(target, cube, {0, 1}), b.iota(cube, ElementType::S64, 2));
  Value counted = b.and_(same, b.broadcast_in_dim(valid, cube, {0, 1}));
  return sum(b, b.select(counted, splat(b, 1, s.x.type, cube), splat(b, 0, s.x.type, cube)), {1});
}

// hinge[n, j, i] = max(0, 1 - x[j] + x[i]) for target j and non-target i, weighted by j's count.
struct Multilabel {
  Value counts;     // [N, C]
  Value is_target;  // [N, C] 0/1
  Value z;          // [N, C(j), C(i)] 1 - x[j] + x[i]
  Value pairs;      // [N, C(j), C(i)] count_j * (1 - is_target_i)
};

Multilabel multilabel(Builder& b, const Scores& s, const Value& target) {
  Value counts = target_counts(b, target, s);
  Value zero = c(b, 0, counts);
  Value is_target = b.select(b.gt(counts, zero), c(b, 1, counts), zero);
  Shape cube{s.n, s.classes, s.classes};
  Value z = b.add(b.subtract(c(b, 1, b.broadcast_in_dim(s.x, cube, {0, 1})),
                             b.broadcast_in_dim(s.x, cube, {0, 1})),
                  b.broadcast_in_dim(s.x, cube, {0, 2}));
  Value pairs = b.multiply(b.broadcast_in_dim(counts, cube, {0, 1}),
                           b.subtract(c(b, 1, z), b.broadcast_in_dim(is_target, cube, {0, 2})));
  return {counts, is_target, z, pairs};
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target).
LOWER({"multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Scores s = scores_of(ctx, 0, "multilabel_margin_loss");
        Multilabel m = multilabel(b, s, ctx.tensor(1));
        Value hinge = positive_part(b, m.z);
        Value per_sample = sum(b, b.multiply(hinge, m.pairs), {1, 2});
        per_sample = b.divide(per_sample, c(b, static_cast<double>(s.classes), per_sample));
        ElementType t = ctx.tensor(0).type;
        Value output = reduced(b, b.reshape(per_sample, {s.n}), s, ctx.arg(2).toInt());
        return Values{b.convert(output, t),
                      b.convert(b.reshape(m.is_target, ctx.tensor(0).shape), t)};
      });

// multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target).
LOWER({"multilabel_margin_loss_backward", "multilabel_margin_loss_backward.grad_input"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Scores s = scores_of(ctx, 1, "multilabel_margin_loss_backward");
        Multilabel m = multilabel(b, s, ctx.tensor(2));
        Value zero = c(b, 0, m.z);
        Value g = b.select(b.gt(m.z, zero), m.pairs, zero);  // d/dx[i], -d/dx[j]
        Value grad = b.subtract(sum(b, g, {1}), sum(b, g, {2}));
        grad = b.divide(grad, c(b, static_cast<double>(s.classes), grad));
        grad = b.multiply(
            grad, broadcast_to(b, upstream(b, ctx.tensor(0), s, ctx.arg(3).toInt()), grad.shape));
        return Values{b.convert(b.reshape(grad, ctx.tensor(1).shape), ctx.tensor(1).type)};
      });

}  // namespace
}  // namespace torch_tpu::aten
