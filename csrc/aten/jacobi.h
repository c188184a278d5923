// Parallel cyclic Jacobi rotations, shared by the SVD (one-sided, on columns) and the symmetric
// eigendecomposition (two-sided). A round rotates the disjoint column pairs (i, h + i) of a
// [..., rows, 2h] matrix at once, then reorders the columns by the round-robin tournament
// schedule, so that every pair of columns meets once in a sweep of 2h - 1 rounds.
#pragma once

#include <utility>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

struct Rotation {
  Value cosine;  // [..., 1, h]
  Value sine;    // [..., 1, h]
  Value active;  // [..., 1, h] pred: the pair needed a rotation
};

// The rotation that zeroes gamma in [[alpha, gamma], [gamma, beta]] (all [..., 1, h]), where
// |gamma| > `threshold`; the identity elsewhere.
Rotation jacobi_rotation(Builder& b, const Value& alpha, const Value& beta, const Value& gamma,
                         const Value& threshold);

// Columns i and h + i of `m` [..., rows, 2h] rotated, then reordered for the next round.
Value rotate_column_pairs(Builder& b, const Value& m, const Rotation& rotation);

// The loop condition over the counters (round, quiet rounds): until a whole sweep needed no
// rotation, or kMaxSweeps sweeps (NaN input never settles).
constexpr int64_t kMaxSweeps = 40;
Value keep_going(Builder& b, const Value& round, const Value& quiet, int64_t rounds_per_sweep);
// The counters after a round in which `active` pairs rotated.
std::pair<Value, Value> next_counters(Builder& b, const Value& round, const Value& quiet,
                                      const Value& active);

// The machine epsilon of a float type.
double epsilon(ElementType type);

}  // namespace torch_tpu::aten
