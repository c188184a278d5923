// grid_sampler_2d / grid_sampler_3d composed from device tensor ops (gathers and arithmetic),
// with CPU's coordinate rules (GridSampler.h): unnormalize, then border clipping or reflection
// for the sampling position (for bicubic: for every tap). Registered for autograd too, so the
// gradients come from the same composition (gather's backward is a scatter-add).
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/floor.h>
#include <ATen/ops/fmod.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/round.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <vector>

namespace torch_tpu::aten {
namespace {

enum Interpolation : int64_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };

at::Tensor unnormalize(const at::Tensor& coord, int64_t size, bool align_corners) {
  if (align_corners) return (coord + 1) / 2 * static_cast<double>(size - 1);
  return ((coord + 1) * static_cast<double>(size) - 1) / 2;
}

at::Tensor clip(const at::Tensor& coord, int64_t size) {
  return at::clamp(coord, 0.0, static_cast<double>(size - 1));
}

// Reflects into [twice_low / 2, twice_high / 2] as a mirror folded back and forth.
at::Tensor reflect(const at::Tensor& coord, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return at::zeros_like(coord);
  const double low = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  at::Tensor distance = at::abs(coord - low);
  at::Tensor extra = at::fmod(distance, span);
  at::Tensor flips = at::floor(distance / span);
  at::Tensor even = at::fmod(flips, 2.0) == 0;
  return at::where(even, extra + low, (span - extra) + low);
}

at::Tensor apply_padding(const at::Tensor& coord, int64_t size, int64_t padding, bool align) {
  if (padding == kBorder) return clip(coord, size);
  if (padding == kReflection) {
    at::Tensor reflected =
        align ? reflect(coord, 0, 2 * (size - 1)) : reflect(coord, -1, 2 * size - 1);
    return clip(reflected, size);
  }
  return coord;
}

// input [N, C, *spatial]; positions: one integer-valued float tensor [N, *out] per spatial dim
// (in input dim order). Returns [N, C, *out]; taps outside the input read 0.
at::Tensor read_taps(const at::Tensor& input, const std::vector<at::Tensor>& positions) {
  const int64_t n = input.size(0), c = input.size(1);
  const int64_t k = static_cast<int64_t>(positions.size());
  at::Tensor linear, valid;
  for (int64_t d = 0; d < k; ++d) {
    const int64_t size = input.size(2 + d);
    at::Tensor inside = at::logical_and(positions[d] >= 0, positions[d] <= size - 1);
    valid = d == 0 ? inside : at::logical_and(valid, inside);
    at::Tensor index = at::clamp(positions[d], 0.0, static_cast<double>(size - 1)).to(c10::kLong);
    linear = d == 0 ? index : linear * size + index;
  }
  std::vector<int64_t> out_sizes(positions[0].sizes().begin(), positions[0].sizes().end());
  at::Tensor flat_input = input.reshape({n, c, -1});
  at::Tensor flat_index = linear.reshape({n, 1, -1}).expand({n, c, linear.numel() / n});
  at::Tensor values = at::gather(flat_input, 2, flat_index);
  std::vector<int64_t> shape{n, c};
  shape.insert(shape.end(), out_sizes.begin() + 1, out_sizes.end());
  values = values.reshape(shape);
  at::Tensor mask = valid.unsqueeze(1).to(values.scalar_type());
  return values * mask;
}

// CPU's cubic convolution coefficients (A = -0.75) for the four taps around t in [0, 1).
std::vector<at::Tensor> cubic_coefficients(const at::Tensor& t) {
  constexpr double a = -0.75;
  auto near = [&](const at::Tensor& x) { return ((x * (a + 2) - (a + 3)) * x) * x + 1; };
  auto far = [&](const at::Tensor& x) { return ((x * a - 5 * a) * x + 8 * a) * x - 4 * a; };
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

at::Tensor grid_sample(const at::Tensor& input_in, const at::Tensor& grid_in, int64_t interpolation,
                       int64_t padding, bool align, int64_t k) {
  // CPU's common checks come before the 2d/3d ones (a batch mismatch is reported first).
  TORCH_CHECK(input_in.dim() == grid_in.dim(),
              "grid_sampler(): expected grid to have same number of dimension as input, but got "
              "input with sizes ",
              input_in.sizes(), " and grid with sizes ", grid_in.sizes());
  TORCH_CHECK(input_in.dim() == 0 || input_in.size(0) == grid_in.size(0),
              "grid_sampler(): expected grid and input to have same batch size, but got input "
              "with sizes ",
              input_in.sizes(), " and grid with sizes ", grid_in.sizes());
  TORCH_CHECK(input_in.dim() == k + 2 && grid_in.dim() == k + 2 && grid_in.size(-1) == k,
              "grid_sampler_", k, "d(): expected ", k + 2, "D input and grid with last dim ", k,
              ", but got input with sizes ", input_in.sizes(), " and grid with sizes ",
              grid_in.sizes());
  TORCH_CHECK(interpolation >= kBilinear && interpolation <= kBicubic,
              "grid_sampler(): unknown interpolation mode ", interpolation);
  TORCH_CHECK(padding >= kZeros && padding <= kReflection, "grid_sampler(): unknown padding mode ",
              padding);
  TORCH_CHECK(interpolation != kBicubic || k == 2,
              "grid_sampler(): bicubic interpolation only supports 4D input");
  // Low-precision inputs are sampled in float32 and rounded once, as CPU's opmath does.
  const c10::ScalarType out_type = input_in.scalar_type();
  const bool widen = out_type == c10::kHalf || out_type == c10::kBFloat16;
  at::Tensor input = widen ? input_in.to(c10::kFloat) : input_in;
  at::Tensor grid = widen ? grid_in.to(c10::kFloat) : grid_in;

  // grid's last dim is (x, y[, z]): x indexes the last input dim.
  std::vector<at::Tensor> source(k);
  std::vector<at::Tensor> raw(k);
  for (int64_t d = 0; d < k; ++d) {
    const int64_t size = input.size(2 + d);
    raw[d] = unnormalize(grid.select(-1, k - 1 - d), size, align);
    source[d] = apply_padding(raw[d], size, padding, align);
  }
  at::Tensor out;
  if (interpolation == kNearest) {
    std::vector<at::Tensor> nearest;
    for (const at::Tensor& s : source) nearest.push_back(at::round(s));  // half to even
    // The grid gets a zero gradient, as on CPU, not none: a factor of one that depends on it.
    at::Tensor finite = at::isfinite(source[0]);
    at::Tensor one = at::where(finite, source[0] * 0, at::zeros_like(source[0])) + 1;
    out = read_taps(input, nearest) * one.unsqueeze(1);
  } else if (interpolation == kBilinear) {
    std::vector<at::Tensor> low(k), frac(k);
    for (int64_t d = 0; d < k; ++d) {
      low[d] = at::floor(source[d]);
      frac[d] = source[d] - low[d];
    }
    for (int64_t corner = 0; corner < (int64_t{1} << k); ++corner) {
      std::vector<at::Tensor> taps(k);
      at::Tensor weight;
      for (int64_t d = 0; d < k; ++d) {
        const bool high = ((corner >> d) & 1) != 0;
        taps[d] = high ? low[d] + 1 : low[d];
        at::Tensor w = high ? frac[d] : 1 - frac[d];
        weight = d == 0 ? w : weight * w;
      }
      at::Tensor term = read_taps(input, taps) * weight.unsqueeze(1);
      out = corner == 0 ? term : out + term;
    }
  } else {
    // Bicubic: 4x4 taps around the unpadded position; padding applies to each tap.
    std::vector<at::Tensor> low(2), coefficients[2];
    for (int64_t d = 0; d < 2; ++d) {
      low[d] = at::floor(raw[d]);
      coefficients[d] = cubic_coefficients(raw[d] - low[d]);
    }
    for (int64_t i = 0; i < 4; ++i) {    // along dim 0 (height)
      for (int64_t j = 0; j < 4; ++j) {  // along dim 1 (width)
        std::vector<at::Tensor> taps{
            apply_padding(low[0] + (i - 1), input.size(2), padding, align),
            apply_padding(low[1] + (j - 1), input.size(3), padding, align)};
        at::Tensor weight = coefficients[0][i] * coefficients[1][j];
        at::Tensor term = read_taps(input, taps) * weight.unsqueeze(1);
        out = (i == 0 && j == 0) ? term : out + term;
      }
    }
  }
  return widen ? out.to(out_type) : out;
}

// CPU's checks: a floating input (its kernels exist for no other), and a grid of the same
// dtype (a double grid of a float input is refused, not converted).
void check_dtypes(const at::Tensor& input, const at::Tensor& grid, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(input.scalar_type()), "\"", op,
                              "\" not implemented for '", c10::toString(input.scalar_type()), "'");
  TORCH_CHECK(input.scalar_type() == grid.scalar_type(), "expected scalar type ",
              input.scalar_type(), " but found ", grid.scalar_type());
}

at::Tensor grid_sampler_2d(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation,
                           int64_t padding, bool align_corners) {
  check_dtypes(input, grid, "grid_sampler_2d");
  return grid_sample(input, grid, interpolation, padding, align_corners, 2);
}

at::Tensor grid_sampler_3d(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation,
                           int64_t padding, bool align_corners) {
  check_dtypes(input, grid, "grid_sampler_3d");
  return grid_sample(input, grid, interpolation, padding, align_corners, 3);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("grid_sampler_2d", TORCH_FN(grid_sampler_2d));
  m.impl("grid_sampler_3d", TORCH_FN(grid_sampler_3d));
}

// The autograd kernels are the same composition, differentiated op by op.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("grid_sampler_2d", TORCH_FN(grid_sampler_2d));
  m.impl("grid_sampler_3d", TORCH_FN(grid_sampler_3d));
}

}  // namespace
}  // namespace torch_tpu::aten
