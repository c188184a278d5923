// CTC loss (_ctc_loss) and its gradient (_ctc_loss_backward), composed from device tensor ops.
// The targets are read to the host once to lay out each sequence's extended labels (a blank
// between and around the targets). The forward variables alpha and backward variables beta run
// one time step at a time over every sequence and label at once, in log space with CPU's
// max-shifted log-sum-exp; steps beyond a sequence's input length stay at -inf, as on CPU. The
// gradient follows CPU's formula, exp(lp) - exp(log(sum alpha beta) + nll - lp), which assumes
// log_probs came from log_softmax.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/log.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <vector>

#include "csrc/dispatch/fusion.h"

namespace torch_tpu::aten {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Each sequence's extended labels and the masks the recursions need, on the device.
struct Layout {
  int64_t batch = 0, steps = 0, labels = 0;  // N, T, S' = 2 * max target length + 1
  at::Tensor prime;         // int64 [N, S']: blank at even s, target (s - 1) / 2 at odd s
  at::Tensor valid;         // bool [N, S']: s <= 2 L
  at::Tensor skip;          // bool [N, S']: alpha may come from s - 2 (a target unlike s - 2's)
  at::Tensor last, second;  // bool [N, S']: s == 2 L, and s == 2 L - 1 with L > 0
  at::Tensor lengths;       // int64 [N] input lengths (host values also kept below)
  std::vector<int64_t> input_lengths, target_lengths;
};

Layout lay_out(const at::Tensor& log_probs, const at::Tensor& targets,
               at::IntArrayRef input_lengths, at::IntArrayRef target_lengths, int64_t blank) {
  TORCH_CHECK(log_probs.dim() == 3, "ctc_loss: expected log_probs of shape (T, N, C), got ",
              log_probs.sizes());
  TORCH_CHECK(log_probs.numel() > 0, "log_probs tensor must not be empty");
  Layout layout;
  layout.steps = log_probs.size(0);
  layout.batch = log_probs.size(1);
  const int64_t classes = log_probs.size(2);
  const int64_t n = layout.batch;
  TORCH_CHECK(blank >= 0 && blank < classes, "blank must be in label range");
  TORCH_CHECK(static_cast<int64_t>(input_lengths.size()) == n,
              "input_lengths must be of size batch_size");
  TORCH_CHECK(static_cast<int64_t>(target_lengths.size()) == n,
              "target_lengths must be of size batch_size");
  at::Tensor host = targets.to(at::kCPU, at::kLong).contiguous();
  const int64_t* target = host.const_data_ptr<int64_t>();
  int64_t max_target = 0;
  for (int64_t b = 0; b < n; ++b) {
    TORCH_CHECK(input_lengths[b] >= 0 && input_lengths[b] <= layout.steps,
                "Expected input_lengths to have value at most ", layout.steps, ", but got value ",
                input_lengths[b], " (while checking arguments for ctc_loss_cpu)");
    TORCH_CHECK(target_lengths[b] >= 0, "Expected target_lengths to be non-negative");
    max_target = std::max(max_target, target_lengths[b]);
  }
  const int64_t labels = 2 * max_target + 1;
  layout.labels = labels;
  at::Tensor prime = at::full({n, labels}, blank, at::kLong);
  at::Tensor valid = at::zeros({n, labels}, at::kBool);
  at::Tensor skip = at::zeros({n, labels}, at::kBool);
  at::Tensor last = at::zeros({n, labels}, at::kBool);
  at::Tensor second = at::zeros({n, labels}, at::kBool);
  int64_t* p = prime.mutable_data_ptr<int64_t>();
  bool* v = valid.mutable_data_ptr<bool>();
  bool* k = skip.mutable_data_ptr<bool>();
  bool* l = last.mutable_data_ptr<bool>();
  bool* s2 = second.mutable_data_ptr<bool>();
  int64_t offset = 0;
  for (int64_t b = 0; b < n; ++b) {
    const int64_t length = target_lengths[b];
    const int64_t start = host.dim() == 1 ? offset : b * host.size(1);
    TORCH_CHECK(host.dim() == 1 || length <= host.size(1), "Expected tensor to have size at least ",
                length, " at dimension 1, but got size ", host.size(1),
                " for argument #2 'targets' (while checking arguments for ctc_loss_cpu)");
    for (int64_t i = 0; i < length; ++i) {
      const int64_t label = target[start + i];
      TORCH_CHECK(label >= 0 && label < classes, "ctc_loss: target ", label,
                  " is not a class index in [0, ", classes, ")");
      p[b * labels + 2 * i + 1] = label;
    }
    for (int64_t s = 0; s <= 2 * length; ++s) {
      v[b * labels + s] = true;
      k[b * labels + s] = s > 1 && p[b * labels + s] != p[b * labels + s - 2];
    }
    l[b * labels + 2 * length] = true;
    if (length > 0) s2[b * labels + 2 * length - 1] = true;
    offset += length;
  }
  const at::Device device = log_probs.device();
  layout.prime = prime.to(device);
  layout.valid = valid.to(device);
  layout.skip = skip.to(device);
  layout.last = last.to(device);
  layout.second = second.to(device);
  layout.lengths = at::tensor(input_lengths.vec(), at::kLong).to(device);
  layout.input_lengths = input_lengths.vec();
  layout.target_lengths = target_lengths.vec();
  return layout;
}

// x shifted `by` places toward higher s along dim 1, -inf coming in (by < 0: toward lower s).
at::Tensor shifted(const at::Tensor& x, int64_t by) {
  const int64_t size = x.size(1);
  const int64_t span = std::min<int64_t>(std::abs(by), size);
  at::Tensor fill = at::full({x.size(0), span}, kNegInf, x.options());
  if (by > 0) return at::cat({fill, x.narrow(1, 0, size - span)}, 1);
  return at::cat({x.narrow(1, span, size - span), fill}, 1);
}

// log(exp(a) + exp(b) + exp(c)) shifted by their maximum, 0 when all are -inf (CPU's form).
at::Tensor log_sum_exp3(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  at::Tensor m = at::maximum(at::maximum(a, b), c);
  m = at::where(m == kNegInf, at::zeros({}, m.options()), m);
  return at::log(at::exp(a - m) + at::exp(b - m) + at::exp(c - m)) + m;
}

// log_probs read at every sequence's extended labels: [T, N, S'].
at::Tensor emissions(const at::Tensor& log_probs, const Layout& layout) {
  return log_probs.gather(2, layout.prime.unsqueeze(0).expand({layout.steps, -1, -1}));
}

std::tuple<at::Tensor, at::Tensor> ctc_loss(const at::Tensor& log_probs, const at::Tensor& targets,
                                            at::IntArrayRef input_lengths,
                                            at::IntArrayRef target_lengths, int64_t blank, bool) {
  Layout layout = lay_out(log_probs, targets, input_lengths, target_lengths, blank);
  at::Tensor emit = emissions(log_probs, layout);
  at::Tensor none = at::full({}, kNegInf, log_probs.options());
  at::Tensor s = at::arange(layout.labels, layout.lengths.options()).unsqueeze(0);
  std::vector<at::Tensor> alphas;
  at::Tensor alpha = at::where(layout.valid & (s <= 1), emit[0], none);
  for (int64_t t = 0; t < layout.steps; ++t) {
    if (t > 0) {
      at::Tensor from_skip = at::where(layout.skip, shifted(alpha, 2), none);
      at::Tensor next = log_sum_exp3(alpha, shifted(alpha, 1), from_skip) + emit[t];
      alpha = at::where(layout.valid, next, none);
    }
    // Steps at or past a sequence's input length are never computed on CPU: -inf.
    alphas.push_back(at::where((layout.lengths > t).unsqueeze(1), alpha, none));
    // Under DeferAndFuse, run each step's few ops: one graph of every step would take the
    // compiler minutes, while a step's graph is the same each time and compiles once.
    materialize_pending();
  }
  at::Tensor log_alpha =
      alphas.empty() ? at::full({layout.batch, 0, layout.labels}, kNegInf, log_probs.options())
                     : at::stack(alphas, 1);
  // The last step of each sequence, at its last two extended labels.
  at::Tensor final_step = (layout.lengths - 1).clamp_min(0);
  at::Tensor final_alpha =
      log_alpha.gather(1, final_step.view({-1, 1, 1}).expand({-1, 1, layout.labels})).squeeze(1);
  at::Tensor l1 = at::where(layout.last, final_alpha, none).amax(1);
  at::Tensor l2 = at::where(layout.second, final_alpha, none).amax(1);
  at::Tensor m = at::maximum(l1, l2);
  m = at::where(m == kNegInf, at::zeros({}, m.options()), m);
  at::Tensor nll = -(at::log(at::exp(l1 - m) + at::exp(l2 - m)) + m);
  return {nll, log_alpha};
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs,
                             const at::Tensor& targets, at::IntArrayRef input_lengths,
                             at::IntArrayRef target_lengths, const at::Tensor& nll,
                             const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  Layout layout = lay_out(log_probs, targets, input_lengths, target_lengths, blank);
  at::Tensor emit = emissions(log_probs, layout);
  at::Tensor none = at::full({}, kNegInf, log_probs.options());
  // The recursion may reach s + 2 when that label differs from s's: skip moved down by two.
  at::Tensor skip_back = shifted(layout.skip.to(log_probs.scalar_type()), -2) > 0;
  std::vector<at::Tensor> betas(static_cast<size_t>(layout.steps));
  at::Tensor beta = at::full({layout.batch, layout.labels}, kNegInf, log_probs.options());
  for (int64_t t = layout.steps - 1; t >= 0; --t) {
    at::Tensor start = at::where(layout.last | layout.second, emit[t], none);
    at::Tensor from_skip = at::where(skip_back, shifted(beta, -2), none);
    at::Tensor next =
        at::where(layout.valid, log_sum_exp3(beta, shifted(beta, -1), from_skip) + emit[t], none);
    at::Tensor at_end = (layout.lengths - 1 == t).unsqueeze(1);
    at::Tensor inside = (layout.lengths - 1 > t).unsqueeze(1);
    beta = at::where(at_end, start, at::where(inside, next, none));
    betas[static_cast<size_t>(t)] = beta;
    materialize_pending();  // one small graph per step, as in the forward
  }
  // log sum over s with prime(s) = c of alpha * beta, per step: [T, N, C].
  at::Tensor products = log_alpha.transpose(0, 1) + at::stack(betas, 0);  // [T, N, S']
  at::Tensor index = layout.prime.unsqueeze(0).expand_as(products);
  at::Tensor shape_like = at::full(log_probs.sizes(), kNegInf, log_probs.options());
  at::Tensor peak = shape_like.scatter_reduce(2, index, products, "amax", true);
  at::Tensor safe_peak = at::where(peak == kNegInf, at::zeros({}, peak.options()), peak);
  at::Tensor total = at::zeros(log_probs.sizes(), log_probs.options())
                         .scatter_add(2, index, at::exp(products - safe_peak.gather(2, index)));
  at::Tensor log_total = at::log(total) + safe_peak;
  at::Tensor loss = nll.view({1, -1, 1});
  at::Tensor result =
      (at::exp(log_probs) - at::exp(log_total + loss - log_probs)) * grad.view({1, -1, 1});
  at::Tensor steps = at::arange(layout.steps, layout.lengths.options()).view({-1, 1, 1});
  at::Tensor keep = steps < layout.lengths.view({1, -1, 1});
  if (zero_infinity) keep = keep & (loss != std::numeric_limits<double>::infinity());
  return at::where(keep, result, at::zeros({}, result.options()));
}

std::vector<int64_t> host_lengths(const at::Tensor& lengths, const char* name) {
  TORCH_CHECK(at::isIntegralType(lengths.scalar_type(), false), name, " must be integral");
  at::Tensor host = lengths.to(at::kCPU, at::kLong).contiguous();
  return {host.const_data_ptr<int64_t>(), host.const_data_ptr<int64_t>() + host.numel()};
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_tensor(const at::Tensor& log_probs,
                                                   const at::Tensor& targets,
                                                   const at::Tensor& input_lengths,
                                                   const at::Tensor& target_lengths, int64_t blank,
                                                   bool zero_infinity) {
  return ctc_loss(log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                  host_lengths(target_lengths, "target_lengths"), blank, zero_infinity);
}

at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs,
                                    const at::Tensor& targets, const at::Tensor& input_lengths,
                                    const at::Tensor& target_lengths, const at::Tensor& nll,
                                    const at::Tensor& log_alpha, int64_t blank,
                                    bool zero_infinity) {
  return ctc_loss_backward(grad, log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                           host_lengths(target_lengths, "target_lengths"), nll, log_alpha, blank,
                           zero_infinity);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_ctc_loss", TORCH_FN(ctc_loss));
  m.impl("_ctc_loss.Tensor", TORCH_FN(ctc_loss_tensor));
  m.impl("_ctc_loss_backward", TORCH_FN(ctc_loss_backward));
  m.impl("_ctc_loss_backward.Tensor", TORCH_FN(ctc_loss_backward_tensor));
}

}  // namespace
}  // namespace torch_tpu::aten
