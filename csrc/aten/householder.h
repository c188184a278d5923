// Householder reflections as LAPACK's geqrf and orm2r compute them, shared by QR and the SVD.
#pragma once

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

struct Reflectors {
  Value packed;  // [..., m, n]: R on and above the diagonal, the reflectors' tails below
  Value tau;     // [..., min(m, n)]
};

// geqrf of `a`: for each column, LAPACK's dlarfg reflector beta = -sign(alpha) |(alpha, x)|,
// tau = (beta - alpha) / beta, v = x / (alpha - beta); tau = 0 when x is already zero.
Reflectors householder(Builder& b, Value a);

// H_0 H_1 ... H_{k-1} x (Q x), or H_{k-1} ... H_0 x (Q^T x) when `transposed`; `packed` has the
// reflectors in its first k = tau.shape[-1] columns.
Value apply_reflectors(Builder& b, const Value& packed, const Value& tau, Value x, bool transposed);

}  // namespace torch_tpu::aten
