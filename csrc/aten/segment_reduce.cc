// segment_reduce and its backward, composed from device tensor ops. The segmentation (lengths,
// or offsets' differences) is read to the host once to label every position along `axis` with
// its segment, or with a spill slot past the last one where the lengths do not cover the axis
// (as unsafe=True allows). The reductions are then scatter_reduce and gathers on the device,
// following CPU's rules: the initial value takes part in every segment, an empty mean is NaN
// without one, tied extrema share a positive gradient, and a zero's product gradient is the
// product of the others.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <string_view>
#include <vector>

namespace torch_tpu::aten {
namespace {

enum class Reduction { Sum, Mean, Max, Min, Prod };

Reduction parse_reduction(std::string_view reduce) {
  if (reduce == "sum") return Reduction::Sum;
  if (reduce == "mean") return Reduction::Mean;
  if (reduce == "max" || reduce == "amax") return Reduction::Max;
  if (reduce == "min" || reduce == "amin") return Reduction::Min;
  if (reduce == "prod") return Reduction::Prod;
  TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
}

const char* scatter_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::Max:
      return "amax";
    case Reduction::Min:
      return "amin";
    case Reduction::Prod:
      return "prod";
    default:
      return "sum";
  }
}

// The value every segment starts from: `initial`, or the reduction's identity.
at::Scalar start_value(Reduction reduction, const std::optional<at::Scalar>& initial,
                       bool is_floating) {
  if (initial.has_value()) return *initial;
  switch (reduction) {
    case Reduction::Max:
      return is_floating ? at::Scalar(-std::numeric_limits<double>::infinity())
                         : at::Scalar(std::numeric_limits<int64_t>::lowest());
    case Reduction::Min:
      return is_floating ? at::Scalar(std::numeric_limits<double>::infinity())
                         : at::Scalar(std::numeric_limits<int64_t>::max());
    case Reduction::Prod:
      return at::Scalar(1);
    default:
      return at::Scalar(0);
  }
}

struct Segmentation {
  int64_t axis = 0;
  int64_t segments = 0;
  at::Tensor labels;   // int64 on the device, shaped like data: segment of each element
  at::Tensor lengths;  // on the device in data's dtype, shaped like the output
};

Segmentation segment(const at::Tensor& data, const std::optional<at::Tensor>& lengths,
                     const std::optional<at::Tensor>& offsets, int64_t axis, bool unsafe) {
  Segmentation result;
  // As CPU: the axis wraps as for a vector when the data is 0-d, whose rank is checked below.
  result.axis = c10::maybe_wrap_dim(axis, std::max<int64_t>(data.dim(), 1));
  // CPU's and CUDA's kernels: floating data, integer segmentation.
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(data.scalar_type()),
                              "\"_segment_reduce\" not implemented for '", data.scalar_type(), "'");
  for (const auto& segmentation : {lengths, offsets}) {
    if (!segmentation.has_value() || !segmentation->defined()) continue;
    const c10::ScalarType type = segmentation->scalar_type();
    TORCH_CHECK_NOT_IMPLEMENTED(type == at::kInt || type == at::kLong,
                                "\"_segment_reduce\" not implemented for '", type, "'");
  }
  at::Tensor host;
  if (lengths.has_value() && lengths->defined()) {
    host = lengths->to(at::kCPU, at::kLong);
  } else {
    TORCH_CHECK(offsets.has_value() && offsets->defined(),
                "segment_reduce(): Either lengths or offsets must be defined");
    at::Tensor bounds = offsets->to(at::kCPU, at::kLong);
    TORCH_CHECK(bounds.dim() >= 1 && bounds.size(-1) >= 1,
                "segment_reduce(): offsets must hold at least one value per row");
    const int64_t n = bounds.size(-1) - 1;
    host = bounds.narrow(-1, 1, n) - bounds.narrow(-1, 0, n);
  }
  host = host.contiguous();
  TORCH_CHECK(host.dim() == result.axis + 1, "Expected axis to be the last dimension of ",
              "lengths but got ", result.axis, ".");
  TORCH_CHECK(data.dim() >= host.dim(), "segment_reduce(): the data has fewer dimensions (",
              data.dim(), ") than its lengths or offsets (", host.dim(), ")");
  TORCH_CHECK(data.sizes().slice(0, result.axis) == host.sizes().slice(0, result.axis),
              "segment_reduce(): lengths (or offsets) must match data's shape before axis");
  const int64_t extent = data.size(result.axis);
  const int64_t segments = host.size(-1);
  const int64_t rows = segments == 0 ? 0 : host.numel() / segments;
  const int64_t* length = host.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    TORCH_CHECK(length[i] >= 0, "lengths contains negative value!");
  }
  std::vector<int64_t> row_shape = data.sizes().slice(0, result.axis + 1).vec();
  at::Tensor labels = at::full(row_shape, segments, at::TensorOptions().dtype(at::kLong));
  int64_t* label = labels.mutable_data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t position = 0;
    for (int64_t s = 0; s < segments; ++s) {
      for (int64_t k = 0; k < length[r * segments + s] && position < extent; ++k) {
        label[r * extent + position++] = s;
      }
    }
    int64_t total = 0;
    for (int64_t s = 0; s < segments; ++s) total += length[r * segments + s];
    TORCH_CHECK(unsafe || total == extent,
                "segment_reduce(): Expected all rows of lengths along axis to sum to "
                "data.size(lengths.dim()-1) when !unsafe.");
  }
  // Trailing dims of data (after axis) share their row's labels and lengths.
  std::vector<int64_t> view_shape = row_shape;
  std::vector<int64_t> length_shape = host.sizes().vec();
  for (int64_t d = result.axis + 1; d < data.dim(); ++d) {
    view_shape.push_back(1);
    length_shape.push_back(1);
  }
  std::vector<int64_t> out_shape = data.sizes().vec();
  out_shape[result.axis] = segments;
  result.segments = segments;
  result.labels = labels.to(data.device()).view(view_shape).expand(data.sizes());
  result.lengths = host.to(data.device(), data.scalar_type()).view(length_shape).expand(out_shape);
  return result;
}

// Sizes of a per-segment tensor with one more (spill) slot along the axis.
std::vector<int64_t> with_spill(const at::Tensor& data, const Segmentation& seg) {
  std::vector<int64_t> shape = data.sizes().vec();
  shape[seg.axis] = seg.segments + 1;
  return shape;
}

// Per-segment values `t` read back at every position of data; spilled positions read zero.
at::Tensor at_positions(const at::Tensor& t, const Segmentation& seg) {
  std::vector<int64_t> spill = t.sizes().vec();
  spill[seg.axis] = 1;
  return at::cat({t, at::zeros(spill, t.options())}, seg.axis).gather(seg.axis, seg.labels);
}

// Sum of `values` over each segment, read back at every position (spilled ones get theirs).
at::Tensor segment_total_at_positions(const at::Tensor& values, const Segmentation& seg) {
  return at::zeros(with_spill(values, seg), values.options())
      .scatter_add(seg.axis, seg.labels, values)
      .gather(seg.axis, seg.labels);
}

at::Tensor segment_reduce(const at::Tensor& data, c10::string_view reduce,
                          const std::optional<at::Tensor>& lengths,
                          const std::optional<at::Tensor>& indices,
                          const std::optional<at::Tensor>& offsets, int64_t axis, bool unsafe,
                          const std::optional<at::Scalar>& initial) {
  TORCH_CHECK(!indices.has_value() || !indices->defined(),
              "segment_reduce(): indices based reduction is not supported yet.");
  const Reduction reduction = parse_reduction(std::string_view(reduce.data(), reduce.size()));
  Segmentation seg = segment(data, lengths, offsets, axis, unsafe);
  at::Tensor start =
      at::full(with_spill(data, seg), start_value(reduction, initial, data.is_floating_point()),
               data.options());
  at::Tensor out = start.scatter_reduce(seg.axis, seg.labels, data, scatter_name(reduction), true)
                       .narrow(seg.axis, 0, seg.segments);
  if (reduction != Reduction::Mean) return out;
  // Mean divides (initial + sum) by the length; an empty segment keeps initial, else is NaN.
  at::Tensor empty = at::scalar_tensor(
      initial.has_value() ? *initial : at::Scalar(std::numeric_limits<double>::quiet_NaN()),
      data.options());
  return at::where(seg.lengths > 0, out / seg.lengths, empty);
}

at::Tensor segment_reduce_backward(const at::Tensor& grad, const at::Tensor& output,
                                   const at::Tensor& data, c10::string_view reduce,
                                   const std::optional<at::Tensor>& lengths,
                                   const std::optional<at::Tensor>& offsets, int64_t axis,
                                   const std::optional<at::Scalar>& initial) {
  const Reduction reduction = parse_reduction(std::string_view(reduce.data(), reduce.size()));
  Segmentation seg = segment(data, lengths, offsets, axis, /*unsafe=*/true);
  at::Tensor in_segment = seg.labels < seg.segments;
  at::Tensor g = at_positions(grad, seg);
  at::Tensor zero = at::zeros({}, data.options());
  switch (reduction) {
    case Reduction::Sum:
      return g;
    case Reduction::Mean:
      return at::where(in_segment, g / at_positions(seg.lengths, seg), zero);
    case Reduction::Max:
    case Reduction::Min: {
      // Every element equal to the extremum (or NaN) gets the gradient; CPU divides only a
      // positive gradient among ties, and so does this.
      at::Tensor hit = (at::isnan(data) | (data == at_positions(output, seg))) & in_segment;
      at::Tensor result = at::where(hit, g, zero);
      at::Tensor ties = segment_total_at_positions(hit.to(data.scalar_type()), seg);
      return at::where((ties >= 2) & (result > 0), result / ties, result);
    }
    case Reduction::Prod: {
      at::Tensor nan = at::isnan(data);
      at::Tensor is_zero = data == 0;
      at::Tensor special = nan | is_zero;
      at::Tensor regular = g * at_positions(output, seg) / data;
      // A zero's (or NaN's) gradient is the product of the other elements (and initial).
      at::Tensor others =
          at::full(with_spill(data, seg), initial.has_value() ? *initial : 1, data.options())
              .scatter_reduce(seg.axis, seg.labels, at::where(special, at::ones_like(data), data),
                              "prod", true)
              .gather(seg.axis, seg.labels);
      at::Tensor other_nans =
          segment_total_at_positions(nan.to(data.scalar_type()), seg) - nan.to(data.scalar_type());
      at::Tensor other_zeros = segment_total_at_positions(is_zero.to(data.scalar_type()), seg) -
                               is_zero.to(data.scalar_type());
      at::Tensor exclusive = at::where(
          other_nans > 0, at::full({}, std::numeric_limits<double>::quiet_NaN(), data.options()),
          at::where(other_zeros > 0, others * 0, others));
      return at::where(in_segment, at::where(special, g * exclusive, regular), zero);
    }
  }
  return g;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("segment_reduce", TORCH_FN(segment_reduce));
  m.impl("_segment_reduce_backward", TORCH_FN(segment_reduce_backward));
}

}  // namespace
}  // namespace torch_tpu::aten
