// torch.histogram and torch.histogramdd, composed from device tensor ops: each coordinate finds
// its bin by a search of that dimension's edges (the last bin includes its right edge, values
// outside the edges or NaN are left out), and the (weighted) counts are added into the flattened
// histogram. Edges from a bin count are laid out on the host by CPU's linspace over the range or
// over the data's min and max (one host read), so they are the same numbers CPU uses.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/where.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace torch_tpu::aten {
namespace {

// The input as rows of points, [N, D]: reshape's -1 cannot infer N where D is 0.
at::Tensor points_of(const at::Tensor& self) {
  return self.dim() == 1 ? self.unsqueeze(0) : self.flatten(0, -2);
}

void check_input(const at::Tensor& self, const std::optional<at::Tensor>& weight, int64_t dims) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "torch.histogramdd: input tensor and bins tensors should have the same dtype, ",
              "and it should be floating point, but got ", self.scalar_type());
  TORCH_CHECK(self.dim() >= 1 && self.size(-1) == dims,
              "torch.histogramdd: expected input to have a last dimension of size ", dims,
              " (one per dimension of the histogram), but got shape ", self.sizes());
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(weight->scalar_type() == self.scalar_type(),
                "torch.histogramdd: if weight tensor is provided, it should have the same ",
                "dtype as the input tensor");
    TORCH_CHECK(weight->sizes() == self.sizes().slice(0, self.dim() - 1),
                "torch.histogramdd: if weight tensor is provided it should have the same shape ",
                "as the input tensor excluding its innermost dimension, but got input with ",
                "shape ", self.sizes(), " and weight with shape ", weight->sizes());
  }
}

// The outer edges of each dimension: `range`, or the data's min and max; an empty range widens
// by 0.5 each way (numpy's rule, which also keeps density finite).
std::vector<std::pair<double, double>> outer_edges(
    const at::Tensor& points, int64_t dims, const std::optional<at::ArrayRef<double>>& range) {
  // Without data or range the edges span [0, 1], as on CPU.
  std::vector<std::pair<double, double>> edges(static_cast<size_t>(dims), {0.0, 1.0});
  if (range.has_value()) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * dims, "torch.histogramdd: for a ", dims,
                "-dimensional histogram, range should have ", 2 * dims, " elements, but got ",
                range->size());
    for (int64_t d = 0; d < dims; ++d) edges[d] = {(*range)[2 * d], (*range)[2 * d + 1]};
  } else if (points.numel() > 0) {
    auto [low, high] = at::aminmax(points, 0);
    at::Tensor low_host = low.to(at::kCPU, at::kDouble);
    at::Tensor high_host = high.to(at::kCPU, at::kDouble);
    for (int64_t d = 0; d < dims; ++d) {
      edges[d] = {low_host[d].item<double>(), high_host[d].item<double>()};
    }
  }
  for (int64_t d = 0; d < dims; ++d) {
    auto& [low, high] = edges[d];
    TORCH_CHECK(std::isfinite(low) && std::isfinite(high), "torch.histogramdd: dimension ", d,
                "'s range [", low, ", ", high, "] is not finite");
    TORCH_CHECK(low <= high, "torch.histogramdd: min should not exceed max, but got min ", low,
                " max ", high, " for dimension ", d);
    if (low == high) {
      low -= 0.5;
      high += 0.5;
    }
  }
  return edges;
}

std::vector<at::Tensor> edges_from_counts(const at::Tensor& self, at::IntArrayRef bins,
                                          const std::optional<at::ArrayRef<double>>& range) {
  const auto dims = static_cast<int64_t>(bins.size());
  for (int64_t d = 0; d < dims; ++d) {
    TORCH_CHECK(bins[d] > 0, "torch.histogramdd(): bins must be > 0, but got ", bins[d],
                " for dimension ", d);
  }
  auto outer = outer_edges(points_of(self), dims, range);
  std::vector<at::Tensor> edges;
  for (int64_t d = 0; d < dims; ++d) {
    edges.push_back(at::linspace(outer[d].first, outer[d].second, bins[d] + 1,
                                 at::TensorOptions().dtype(self.scalar_type()))
                        .to(self.device()));
  }
  return edges;
}

// The histogram of the points self[..., d] over `edges` (one increasing edge tensor per d).
at::Tensor count(const at::Tensor& self, const std::vector<at::Tensor>& edges,
                 const std::optional<at::Tensor>& weight, bool density) {
  const auto dims = static_cast<int64_t>(edges.size());
  check_input(self, weight, dims);
  // Points of no coordinates fall in no bin: a 0-d histogram of 0 (a density of 0 / 0), as on
  // CPU.
  if (dims == 0) {
    return at::full({}, density ? std::numeric_limits<double>::quiet_NaN() : 0.0, self.options());
  }
  at::Tensor points = points_of(self);
  std::vector<int64_t> shape;
  for (const at::Tensor& e : edges) {
    TORCH_CHECK(e.dim() == 1 && e.numel() >= 1,
                "torch.histogramdd: bins tensors should be 1-dimensional with at least one edge");
    TORCH_CHECK(e.scalar_type() == self.scalar_type(),
                "torch.histogramdd: input tensor and bins tensors should have the same dtype");
    shape.push_back(std::max<int64_t>(e.numel() - 1, 0));
  }
  at::Tensor flat = at::zeros({points.size(0)}, points.options().dtype(at::kLong));
  at::Tensor inside = at::ones({points.size(0)}, points.options().dtype(at::kBool));
  int64_t stride = 1;
  for (int64_t d = dims - 1; d >= 0; --d) {
    const at::Tensor& e = edges[d];
    at::Tensor x = points.select(1, d).contiguous();
    const int64_t bins = e.numel() - 1;
    inside = inside & (x >= e[0]) & (x <= e[-1]);
    // upper_bound - 1; the rightmost bin keeps its right edge.
    at::Tensor position =
        (at::searchsorted(e, x, false, true) - 1).clamp(0, std::max<int64_t>(bins - 1, 0));
    flat = flat + position * stride;
    stride *= std::max<int64_t>(bins, 1);
  }
  at::Tensor w = weight.has_value() && weight->defined()
                     ? weight->reshape({-1})
                     : at::ones({points.size(0)}, points.options());
  w = at::where(inside, w, at::zeros({}, w.options()));
  flat = at::where(inside, flat, at::zeros({}, flat.options()));
  int64_t total = 1;
  for (int64_t s : shape) total *= s;
  at::Tensor hist = at::zeros({total}, self.options());
  if (total > 0) hist = hist.index_add(0, flat, w);
  hist = hist.view(shape);
  if (density) {
    hist = hist / hist.sum();
    for (int64_t d = 0; d < dims; ++d) {
      std::vector<int64_t> lengths_shape(static_cast<size_t>(dims), 1);
      lengths_shape[d] = shape[d];
      hist = hist / edges[d].diff().reshape(lengths_shape);
    }
  }
  return hist;
}

std::tuple<at::Tensor, at::Tensor> histogram_bins_tensor(const at::Tensor& self,
                                                         const at::Tensor& bins,
                                                         const std::optional<at::Tensor>& weight,
                                                         bool density) {
  // CPU's order: the dtypes first, then the shapes.
  TORCH_CHECK(
      bins.scalar_type() == self.scalar_type(),
      "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
      "input with dtype ",
      self.dtype(), " and bins for dimension 0 with dtype ", bins.dtype());
  TORCH_CHECK(
      !weight.has_value() || !weight->defined() || weight->scalar_type() == self.scalar_type(),
      "torch.histogram: input tensor and weight tensor should have the same dtype");
  TORCH_CHECK(bins.dim() == 1, "torch.histogram(): bins tensor should have one dimension, but got ",
              bins.dim(), " dimensions");
  TORCH_CHECK(bins.numel() > 0,
              "torch.histogramdd: bins tensor should have at least 1 element, but got 0 elements "
              "in the bins tensor for dimension 0");
  std::optional<at::Tensor> flat_weight;
  if (weight.has_value() && weight->defined()) {
    // As CPU: the weight is flattened, and needs one value per input element.
    TORCH_CHECK(weight->numel() == self.numel(),
                "torch.histogramdd: if weight tensor is provided it should have the same shape as ",
                "the input tensor excluding its innermost dimension, but got input with shape [",
                self.numel(), ", 1] and weight with shape [", weight->numel(), "]");
    flat_weight = weight->reshape({-1});
  }
  return {count(self.reshape({-1, 1}), {bins}, flat_weight, density), bins.clone()};
}

std::tuple<at::Tensor, at::Tensor> histogram_bin_ct(const at::Tensor& self, int64_t bins,
                                                    std::optional<at::ArrayRef<double>> range,
                                                    const std::optional<at::Tensor>& weight,
                                                    bool density) {
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()),
                              "torch.histogram: not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  at::Tensor edges = edges_from_counts(self.reshape({-1, 1}), {bins}, range)[0];
  return histogram_bins_tensor(self, edges, weight, density);
}

// The out= tensors are the input's dtype, as CPU requires (it does not cast into them).
void check_out_dtypes(const at::Tensor& self, const at::Tensor& hist, const at::Tensor& bin_edges) {
  TORCH_CHECK(hist.scalar_type() == self.scalar_type(),
              "torch.histogram: input tensor and hist tensor should have the same dtype, but got "
              "input ",
              self.dtype(), " and hist ", hist.dtype());
  TORCH_CHECK(bin_edges.scalar_type() == self.scalar_type(),
              "torch.histogram: input tensor and bin_edges tensor should have the same dtype, but "
              "got input ",
              self.dtype(), " and bin_edges ", bin_edges.dtype());
}

std::tuple<at::Tensor&, at::Tensor&> histogram_bins_tensor_out(
    const at::Tensor& self, const at::Tensor& bins, const std::optional<at::Tensor>& weight,
    bool density, at::Tensor& hist, at::Tensor& bin_edges) {
  check_out_dtypes(self, hist, bin_edges);
  auto [h, e] = histogram_bins_tensor(self, bins, weight, density);
  hist.resize_(h.sizes()).copy_(h);
  bin_edges.resize_(e.sizes()).copy_(e);
  return {hist, bin_edges};
}

std::tuple<at::Tensor&, at::Tensor&> histogram_bin_ct_out(const at::Tensor& self, int64_t bins,
                                                          std::optional<at::ArrayRef<double>> range,
                                                          const std::optional<at::Tensor>& weight,
                                                          bool density, at::Tensor& hist,
                                                          at::Tensor& bin_edges) {
  check_out_dtypes(self, hist, bin_edges);
  auto [h, e] = histogram_bin_ct(self, bins, range, weight, density);
  hist.resize_(h.sizes()).copy_(h);
  bin_edges.resize_(e.sizes()).copy_(e);
  return {hist, bin_edges};
}

std::vector<at::Tensor> histogramdd_bin_edges(const at::Tensor& self, at::IntArrayRef bins,
                                              std::optional<at::ArrayRef<double>> range,
                                              const std::optional<at::Tensor>& weight,
                                              bool density) {
  check_input(self, weight, static_cast<int64_t>(bins.size()));
  return edges_from_counts(self, bins, range);
}

at::Tensor histogramdd_from_bin_cts(const at::Tensor& self, at::IntArrayRef bins,
                                    std::optional<at::ArrayRef<double>> range,
                                    const std::optional<at::Tensor>& weight, bool density) {
  check_input(self, weight, static_cast<int64_t>(bins.size()));
  return count(self, edges_from_counts(self, bins, range), weight, density);
}

at::Tensor histogramdd_from_bin_tensors(const at::Tensor& self, at::TensorList bins,
                                        const std::optional<at::Tensor>& weight, bool density) {
  return count(self, bins.vec(), weight, density);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histogram.bins_tensor", TORCH_FN(histogram_bins_tensor));
  m.impl("histogram.bin_ct", TORCH_FN(histogram_bin_ct));
  m.impl("histogram.bins_tensor_out", TORCH_FN(histogram_bins_tensor_out));
  m.impl("histogram.bin_ct_out", TORCH_FN(histogram_bin_ct_out));
  m.impl("_histogramdd_bin_edges", TORCH_FN(histogramdd_bin_edges));
  m.impl("_histogramdd_from_bin_cts", TORCH_FN(histogramdd_from_bin_cts));
  m.impl("_histogramdd_from_bin_tensors", TORCH_FN(histogramdd_from_bin_tensors));
}

}  // namespace
}  // namespace torch_tpu::aten
