// Helpers shared by the linear-algebra kernels: batched matrices [..., rows, cols] as builder
// values, their blocks, products and triangles.
#pragma once

#include <string>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

// ctx.tensor(index), checked to be a floating batch of matrices (rank >= 2).
Value matrix_input(LoweringContext& ctx, int index, const char* name);
// Checks on the device (raising LinAlgError at the next sync, as CPU's LAPACK call raises at
// once) that `a` holds no NaN, nor an infinity where `infinity_too`; `failure` is CPU's message.
void check_no_nan_at_runtime(Builder& b, const Value& a, bool infinity_too,
                             const std::string& failure);
// `x` in its computation type (float32 for the 16-bit floats).
Value wide(Builder& b, const Value& x);
// The last two dims exchanged.
Value matrix_transpose(Builder& b, const Value& x);
// Rows [start, stop) or columns [start, stop) of every matrix.
Value rows_of(Builder& b, const Value& x, int64_t start, int64_t stop);
Value cols_of(Builder& b, const Value& x, int64_t start, int64_t stop);
// The block rows [r0, r1) x columns [c0, c1).
Value block(Builder& b, const Value& x, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
// `x` with the block at (row, col) replaced by `update`.
Value with_block(Builder& b, const Value& x, const Value& update, int64_t row, int64_t col);
// Batched x @ y (same batch shape); x^T @ y when `transpose_x`.
Value matmul(Builder& b, const Value& x, const Value& y, bool transpose_x = false);
// The batch of [rows, cols] identity matrices shaped like `batch`.
Value identity(Builder& b, const Shape& batch, int64_t rows, int64_t cols, ElementType type);
// Entries with column - row >= diagonal kept (triu), or <= diagonal (tril); the rest zero.
Value triangle(Builder& b, const Value& x, bool upper, int64_t diagonal = 0);
Shape batch_of(const Value& x);
// `x` with its batch broadcast to `batch`, its last `kept` dims as they are: torch.linalg
// broadcasts the batches of a system's matrices and right-hand sides against each other.
Value with_batch(Builder& b, const Value& x, const Shape& batch, int64_t kept = 2);
Shape with_matrix(Shape batch, int64_t rows, int64_t cols);

}  // namespace torch_tpu::aten
