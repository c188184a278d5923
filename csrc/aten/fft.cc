// The FFT primitives torch.fft is built from (_fft_c2c, _fft_r2c, _fft_c2r) by stablehlo.fft.
// stablehlo.fft transforms the trailing one to three dimensions, so the transformed dims are
// moved last, transformed in groups of at most three, and moved back.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// torch's fft_norm_mode: 0 no scaling, 1 by 1/sqrt(n), 2 by 1/n (n: points transformed).
Value normalize(Builder& b, const Value& x, int64_t mode, double points, double extra = 1.0) {
  double scale = extra;
  if (mode == 1) scale /= std::sqrt(points);
  if (mode == 2) scale /= points;
  if (scale == 1.0) return x;
  return b.multiply(x, splat(b, scale, x.type, x.shape));
}

std::vector<int64_t> wrapped_dims(const LoweringContext& ctx, int index, int64_t rank) {
  std::vector<int64_t> dims;
  for (int64_t d : ctx.arg(index).toIntVector()) dims.push_back(wrap_dim(d, rank));
  return dims;
}

// `x` with `dims` moved last (in order), and the permutation that moves them back.
std::pair<Value, std::vector<int64_t>> dims_last(Builder& b, const Value& x,
                                                 const std::vector<int64_t>& dims) {
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) order.push_back(d);
  }
  order.insert(order.end(), dims.begin(), dims.end());
  std::vector<int64_t> back(order.size());
  for (size_t i = 0; i < order.size(); ++i) back[order[i]] = static_cast<int64_t>(i);
  return {b.transpose(x, order), back};
}

// Unnormalized complex transform over `dims`. The inverse is conj(FFT(conj x)): XLA's IFFT
// divides by n, torch's unnormalized inverse does not.
Value c2c(Builder& b, Value x, const std::vector<int64_t>& dims, bool forward) {
  if (!forward) x = b.conj(x);
  for (size_t start = 0; start < dims.size(); start += 3) {
    std::vector<int64_t> group(dims.begin() + start,
                               dims.begin() + std::min(dims.size(), start + 3));
    auto [moved, back] = dims_last(b, x, group);
    std::vector<int64_t> lengths;
    for (int64_t d : group) lengths.push_back(x.shape[d]);
    x = b.transpose(b.fft(moved, FftType::FFT, lengths), back);
  }
  return forward ? x : b.conj(x);
}

double points(const Shape& shape, const std::vector<int64_t>& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(shape[d]);
  return n;
}

// _fft_c2c(self, dim, normalization, forward)
LOWER({"_fft_c2c", "_fft_c2c.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  TORCH_CHECK(hlo::is_complex(x.type), "_fft_c2c expects a complex input tensor, but got ",
              to_scalar_type(x.type));
  std::vector<int64_t> dims = wrapped_dims(ctx, 1, x.rank());
  if (dims.empty()) return Values{x};
  Value y = c2c(ctx.b, x, dims, ctx.arg(3).toBool());
  return Values{normalize(ctx.b, y, ctx.arg(2).toInt(), points(x.shape, dims))};
});

// _fft_r2c(self, dim, normalization, onesided): a real transform along the last of `dims`
// (keeping n/2+1 points when onesided), then complex transforms along the others.
LOWER({"_fft_r2c", "_fft_r2c.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  TORCH_CHECK(hlo::is_float(x.type) && (x.type == ElementType::F32 || x.type == ElementType::F64),
              "_fft_r2c expects a float or double input tensor, but got ", to_scalar_type(x.type));
  std::vector<int64_t> dims = wrapped_dims(ctx, 1, x.rank());
  TORCH_CHECK(!dims.empty(), "_fft_r2c must take at least one dimension");
  const bool onesided = ctx.arg(3).toBool();
  const double n = points(x.shape, dims);
  Value y;
  if (onesided) {
    const int64_t last = dims.back();
    auto [moved, back] = dims_last(b, x, {last});
    y = b.transpose(b.fft(moved, FftType::RFFT, {x.shape[last]}), back);
    dims.pop_back();
    if (!dims.empty()) y = c2c(b, y, dims, true);
  } else {
    y = c2c(b, b.convert(x, hlo::complex_type_of(x.type)), dims, true);
  }
  return Values{normalize(b, y, ctx.arg(2).toInt(), n)};
});

// _fft_c2r(self, dim, normalization, last_dim_size): complex inverse transforms along all but
// the last of `dims`, then the real inverse along it (to last_dim_size points).
LOWER({"_fft_c2r", "_fft_c2r.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  TORCH_CHECK(hlo::is_complex(x.type), "_fft_c2r expects a complex input tensor, but got ",
              to_scalar_type(x.type));
  std::vector<int64_t> dims = wrapped_dims(ctx, 1, x.rank());
  TORCH_CHECK(!dims.empty(), "_fft_c2r must take at least one dimension");
  const int64_t last_dim_size = ctx.arg(3).toInt();
  TORCH_CHECK(last_dim_size >= 1, "Invalid number of data points (", last_dim_size, ") specified");
  const int64_t last = dims.back();
  std::vector<int64_t> others(dims.begin(), dims.end() - 1);
  if (!others.empty()) x = c2c(b, x, others, false);
  // The real inverse reads exactly n/2+1 points: trim or zero-pad the last dim to that.
  const int64_t half = last_dim_size / 2 + 1;
  if (x.shape[last] > half) {
    std::vector<int64_t> start(x.rank(), 0), limit = x.shape, strides(x.rank(), 1);
    limit[last] = half;
    x = b.slice(x, start, limit, strides);
  } else if (x.shape[last] < half) {
    std::vector<int64_t> low(x.rank(), 0), high(x.rank(), 0), interior(x.rank(), 0);
    high[last] = half - x.shape[last];
    x = b.pad(x, splat(b, 0, x.type, {}), low, high, interior);
  }
  auto [moved, back] = dims_last(b, x, {last});
  Value y = b.transpose(b.fft(moved, FftType::IRFFT, {last_dim_size}), back);
  Shape out_shape = y.shape;
  // XLA's IRFFT divides by last_dim_size; torch's unnormalized inverse does not.
  double n = points(out_shape, dims);
  return Values{normalize(b, y, ctx.arg(2).toInt(), n, static_cast<double>(last_dim_size))};
});

}  // namespace
}  // namespace torch_tpu::aten
