// ATen's own argument checks before a lowering runs: the op's Meta kernel (the structured
// kernels' meta functions, shared with CPU) runs on meta copies of the arguments, so a bad call
// raises what CPU raises (class and message) instead of reaching a lowering that assumed valid
// shapes, or answering silently (an in-place write into an expanded view).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace torch_tpu {

// Raises CPU's error for `args` if the Meta kernel finds them bad (CPU's kernel, run on
// zero-filled stand-ins, gives the class and message; the Meta kernel's error where CPU takes
// the call or the stand-ins would be large). Ops without a Meta kernel, and
// Meta kernels that cannot answer for these arguments (NotImplementedError), pass. Called on
// cache misses only: a key that compiled once has passed its checks, so the hot path pays
// nothing. Runtime Scalars are not part of the key, so checks on their values are made only
// for the first call of each key.
//
// Returns, for each fresh (non-aliasing) return, the strides ATen gives it where those are a
// dense layout other than contiguous (an elementwise op on a transposed input keeps the
// transposition): compiled graphs, traced with ATen's strides, view results accordingly.
// Empty where the result is contiguous or the Meta kernel did not run.
using OutputLayouts = std::vector<std::vector<int64_t>>;
OutputLayouts run_meta_checks(const c10::FunctionSchema& schema,
                              const std::vector<c10::IValue>& args);

// Raises CPU's error for an in-place or out= target with several elements on one memory
// location, or sharing part (not all) of its memory with an input (for indexed writes, any of
// it); warns as CPU for a masked or indexed write into an expanded tensor. Made on every call,
// before run_meta_checks (cache misses only): the cache key holds no aliasing, and these checks
// cost a few comparisons.
void check_written_overlap(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                           bool warn = true);

// Raises the error CPU's kernel raises for `args` (run on zero-filled CPU stand-ins), if it
// raises one; returns where CPU takes the call or has no kernel for it.
void raise_cpu_error(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args);

// The same, only where CPU's error is about the call's dtypes (errors the zero-filled values
// cause, an integer division by zero, are not the call's).
void raise_cpu_dtype_error(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args);

}  // namespace torch_tpu
