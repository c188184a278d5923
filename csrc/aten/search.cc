// Binning and patch ops: searchsorted/bucketize (CPU's binary search, step for step),
// histc (a scatter-add of bin indices), im2col/col2im (strided slices of the padded input and
// their adjoint) and
// channel_shuffle (a reshape and transpose).
#include <ATen/ops/aminmax.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cmath>
#include <optional>

#include "csrc/aten/binary_search.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// CPU copies non-contiguous arguments of searchsorted and bucketize to contiguous ones first,
// and warns (once per program, or on every call under torch.set_warn_always) on each call
// that does.
enum class SearchArgument { InputValue, Boundary, Sorter };
void warn_if_not_contiguous(const c10::IValue& value, SearchArgument argument) {
  static std::atomic<bool> warned[3];
  if (!value.isTensor() || value.toTensor().is_contiguous()) return;
  if (warned[static_cast<int>(argument)].exchange(true) && !c10::WarningUtils::get_warnAlways())
    return;
  static const char* const names[] = {"input value", "boundary", "sorter"};
  const char* name = names[static_cast<int>(argument)];
  TORCH_WARN("torch.searchsorted(): ", name,
             " tensor is non-contiguous; it is copied to a contiguous tensor first, which lowers "
             "performance. Pass a contiguous ",
             name, " tensor if possible. This message will only appear once per program.");
}

// searchsorted(sorted_sequence, self, out_int32, right, side, sorter).
LOWER(
    {"searchsorted.Tensor", "searchsorted.Tensor_out", "searchsorted.Scalar",
     "searchsorted.Scalar_out"},
    [](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value sequence = ctx.tensor(0);
      TORCH_CHECK(sequence.rank() >= 1,
                  "torch.searchsorted(): boundaries tensor should have positive dimension");
      c10::ScalarType type = promoted_type(ctx, {0, 1});
      ElementType t = et(type);
      Value values = ctx.arg(1).isTensor() ? b.convert(ctx.tensor(1), t) : ctx.scalar(1, t);
      if (values.rank() == 0 && sequence.rank() > 1) {
        TORCH_CHECK(false,
                    "torch.searchsorted(): input value can be a scalar only when "
                    "boundaries tensor dimension is 1");
      }
      bool right = ctx.arg(3).toBool();
      if (!ctx.arg(4).isNone()) right = ctx.arg(4).toStringRef() == "right";
      sequence = b.convert(sequence, t);
      ElementType out_type = ctx.arg(2).toBool() ? ElementType::S32 : ElementType::S64;
      if (sequence.shape.back() == 0) return Values{splat(b, 0, out_type, values.shape)};
      return Values{
          b.convert(binary_search(b, sequence, values, right, ctx.optional_tensor(5)), out_type)};
    },
    {},
    [](const std::vector<c10::IValue>& args) {
      TORCH_CHECK(
          args[4].isNone() || args[4].toStringRef() == "left" || args[4].toStringRef() == "right",
          "torch.searchsorted(): side can only be 'left' or 'right' but got ",
          args[4].toStringRef());
      TORCH_CHECK(!args[5].isTensor() || args[5].toTensor().scalar_type() == at::kLong,
                  "torch.searchsorted(): sorter must be a tensor of long dtype but got dtype ",
                  args[5].toTensor().scalar_type());  // (the message is built on failure only)
      warn_if_not_contiguous(args[1], SearchArgument::InputValue);
      warn_if_not_contiguous(args[0], SearchArgument::Boundary);
      warn_if_not_contiguous(args[5], SearchArgument::Sorter);
    });
// bucketize(self, boundaries, out_int32, right): searchsorted with 1-d boundaries.
LOWER(
    {"bucketize.Tensor", "bucketize.Tensor_out", "bucketize.Scalar", "bucketize.Scalar_out"},
    [](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value boundaries = ctx.tensor(1);
      TORCH_CHECK(boundaries.rank() == 1, "boundaries tensor must be 1 dimension, but got dim(",
                  boundaries.rank(), ")");
      ElementType t = et(promoted_type(ctx, {0, 1}));
      Value values = ctx.arg(0).isTensor() ? b.convert(ctx.tensor(0), t) : ctx.scalar(0, t);
      Value counts =
          binary_search(b, b.convert(boundaries, t), values, ctx.arg(3).toBool(), std::nullopt);
      return Values{b.convert(counts, ctx.arg(2).toBool() ? ElementType::S32 : ElementType::S64)};
    },
    {},
    [](const std::vector<c10::IValue>& args) {
      warn_if_not_contiguous(args[0], SearchArgument::InputValue);
      warn_if_not_contiguous(args[1], SearchArgument::Boundary);
    });

// histc(self, bins, min, max): counts in `bins` equal bins over [min, max]; min = max takes the
// data's range, and an empty range widens by one on each side, as on CPU.
LOWER(
    {"histc", "histc.out"},
    [](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x0 = ctx.tensor(0);
      int64_t bins = ctx.arg(1).toInt();
      TORCH_CHECK(bins > 0, "torch.histc(): bins must be > 0, but got ", bins, " for bins");
      // Neither CPU nor CUDA has a bool kernel.
      TORCH_CHECK_NOT_IMPLEMENTED(x0.type != ElementType::Pred,
                                  "\"histc\" not implemented for 'Bool'");
      // Integer inputs (which CUDA takes, and MoE layers count experts with) bin in float64, where
      // their bin arithmetic is exact; the counts keep the input's dtype, as on CUDA.
      ElementType m = x0.type == ElementType::F64 || !hlo::is_float(x0.type) ? ElementType::F64
                                                                             : ElementType::F32;
      int64_t n = hlo::num_elements(x0.shape);
      Value x = b.reshape(b.convert(x0, m), {n});
      Value lo = ctx.scalar(2, m), hi = ctx.scalar(3, m);
      Value use_data = b.eq(lo, hi);
      if (n > 0) {
        lo = b.select(use_data, reduce_extremum(b, x, {0}, false), lo);
        hi = b.select(use_data, reduce_extremum(b, x, {0}, true), hi);
      }
      Value same = b.eq(lo, hi);
      lo = b.select(same, b.subtract(lo, b.constant(1, m)), lo);
      hi = b.select(same, b.add(hi, b.constant(1, m)), hi);
      Value lo_v = broadcast_to(b, lo, {n}), hi_v = broadcast_to(b, hi, {n});
      Value scaled =
          b.divide(b.multiply(b.subtract(x, lo_v), splat(b, static_cast<double>(bins), m, {n})),
                   b.subtract(hi_v, lo_v));
      Value index = b.convert(b.floor(scaled), ElementType::S64);
      Value last = splat(b, static_cast<double>(bins - 1), ElementType::S64, {n});
      index = b.select(b.eq(x, hi_v), last, index);
      Value inside = b.and_(b.ge(x, lo_v), b.le(x, hi_v));
      // Values outside the range (and NaN) go to an extra bin that is dropped.
      index = b.select(inside, index, splat(b, static_cast<double>(bins), ElementType::S64, {n}));
      Value counts = combine_slices(b, splat(b, 0, m, {bins + 1}), 0, index, splat(b, 1, m, {n}),
                                    BinaryOp::Add);
      return Values{b.convert(b.slice(counts, {0}, {bins}, {1}), x0.type)};
    },
    {},
    // On every call: the range is made of Scalars, whose values are not in the cache key.
    [](const std::vector<c10::IValue>& args) {
      double low = args[2].toScalar().toDouble(), high = args[3].toScalar().toDouble();
      TORCH_CHECK(low <= high, "torch.histc: max must be larger than min");
      const at::Tensor& self = args[0].toTensor();
      if (low == high && self.numel() > 0) {
        // The data's range, read to the host as CUDA's histc reads it (a sync), so that a
        // non-finite one is refused at the call.
        auto [min, max] = at::aminmax(self);
        low = min.item<double>();
        high = max.item<double>();
      }
      TORCH_CHECK(std::isfinite(low) && std::isfinite(high), "torch.histc: range of [", low, ", ",
                  high, "] is not finite");
    });

// im2col(self, kernel_size, dilation, padding, stride) -> [N, C * kh * kw, oh * ow].
LOWER({"im2col", "im2col.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  bool batched = x.rank() == 4;
  TORCH_CHECK(x.rank() == 3 || x.rank() == 4,
              "Expected 3D or 4D (batch mode) tensor for input with possibly 0 batch size");
  if (!batched) x = b.reshape(x, {1, x.shape[0], x.shape[1], x.shape[2]});
  auto k = ctx.arg(1).toIntVector(), d = ctx.arg(2).toIntVector(), p = ctx.arg(3).toIntVector(),
       s = ctx.arg(4).toIntVector();
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t oh = (H + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
  int64_t ow = (W + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  TORCH_CHECK(oh > 0 && ow > 0, "Given input with spatial size (", H, ", ", W,
              "), the calculated shape of the array of sliding blocks is (", oh, ", ", ow,
              "), but its components must be at least one.");
  Value padded =
      b.pad(x, b.constant(0, x.type), {0, 0, p[0], p[1]}, {0, 0, p[0], p[1]}, {0, 0, 0, 0});
  std::vector<Value> taps;
  for (int64_t i = 0; i < k[0]; ++i) {
    for (int64_t j = 0; j < k[1]; ++j) {
      int64_t r0 = i * d[0], c0 = j * d[1];
      Value window =
          b.slice(padded, {0, 0, r0, c0},
                  {N, C, r0 + (oh - 1) * s[0] + 1, c0 + (ow - 1) * s[1] + 1}, {1, 1, s[0], s[1]});
      taps.push_back(b.reshape(window, {N, C, 1, oh * ow}));
    }
  }
  Value columns = b.reshape(b.concatenate(taps, 2), {N, C * k[0] * k[1], oh * ow});
  if (!batched) columns = b.reshape(columns, {C * k[0] * k[1], oh * ow});
  return Values{columns};
});

// channel_shuffle(self [N, C, ...], groups): channels regrouped as [C/g, g] from [g, C/g].
LOWER({"channel_shuffle", "channel_shuffle.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  int64_t groups = ctx.arg(1).toInt();
  TORCH_CHECK(x.rank() > 2, "channel_shuffle expects input to have at least 3 dimensions, but got ",
              "input with sizes ", x.rank());
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive.",
              " Value of groups:", groups);
  TORCH_CHECK(x.shape[1] % groups == 0, "Number of channels must be divisible by groups. Got ",
              x.shape[1], " channels and ", groups, " groups.");
  Shape split{x.shape[0], groups, x.shape[1] / groups};
  std::vector<int64_t> order{0, 2, 1};
  for (int64_t d = 2; d < x.rank(); ++d) {
    split.push_back(x.shape[d]);
    order.push_back(d + 1);
  }
  return Values{b.reshape(b.transpose(b.reshape(x, split), order), x.shape)};
});

// col2im(self [N, C * kh * kw, L], output_size, kernel_size, dilation, padding, stride): the
// adjoint of im2col, each tap's columns added back where they were read.
LOWER({"col2im", "col2im.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value cols = ctx.tensor(0);
  bool batched = cols.rank() == 3;
  if (!batched) cols = b.reshape(cols, {1, cols.shape[0], cols.shape[1]});
  auto size = ctx.arg(1).toIntVector(), k = ctx.arg(2).toIntVector(), d = ctx.arg(3).toIntVector(),
       p = ctx.arg(4).toIntVector(), s = ctx.arg(5).toIntVector();
  int64_t N = cols.shape[0], taps = k[0] * k[1];
  TORCH_CHECK(cols.shape[1] % taps == 0,
              "Expected size of input's dimension 1 to be divisible by "
              "the product of kernel_size, but got input.size(1)=",
              cols.shape[1], " and kernel_size=(", k[0], ", ", k[1], ")");
  int64_t C = cols.shape[1] / taps, H = size[0], W = size[1];
  int64_t oh = (H + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
  int64_t ow = (W + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  TORCH_CHECK(oh * ow == cols.shape[2], "Given output_size=(", H, ", ", W,
              "), expected size of input's dimension 2 to match the calculated number of sliding "
              "blocks ",
              oh, " * ", ow, " = ", oh * ow, ", but got input.size(2)=", cols.shape[2]);
  Value grouped = b.reshape(cols, {N, C, taps, oh, ow});
  int64_t PH = H + 2 * p[0], PW = W + 2 * p[1];
  Value canvas = splat(b, 0, cols.type, {N, C, PH, PW});
  for (int64_t i = 0; i < k[0]; ++i) {
    for (int64_t j = 0; j < k[1]; ++j) {
      int64_t t = i * k[1] + j, r0 = i * d[0], c0 = j * d[1];
      Value tap =
          b.reshape(b.slice(grouped, {0, 0, t, 0, 0}, {N, C, t + 1, oh, ow}, {1, 1, 1, 1, 1}),
                    {N, C, oh, ow});
      int64_t hi_h = PH - (r0 + (oh - 1) * s[0] + 1), hi_w = PW - (c0 + (ow - 1) * s[1] + 1);
      canvas = b.add(canvas, b.pad(tap, b.constant(0, cols.type), {0, 0, r0, c0},
                                   {0, 0, hi_h, hi_w}, {0, 0, s[0] - 1, s[1] - 1}));
    }
  }
  Value out = b.slice(canvas, {0, 0, p[0], p[1]}, {N, C, p[0] + H, p[1] + W}, {1, 1, 1, 1});
  if (!batched) out = b.reshape(out, {C, H, W});
  return Values{out};
});

}  // namespace
}  // namespace torch_tpu::aten
