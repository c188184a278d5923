// Views of tensors whose sizes grow with a sequence's length (dispatch/length_buckets.h), read
// and written with the length a runtime input, so that one executable serves every length of a
// bucket. A view travels as an int[]: its sizes, then its strides, where a size of -1 is the
// length and a negative stride -c is c times the length.
#pragma once

#include <vector>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

struct GrownView {
  std::vector<int64_t> sizes;    // -1: the length
  std::vector<int64_t> strides;  // -c: c times the length
};

GrownView grown_view(const c10::IValue& encoded);

// The view's elements read from the flat buffer `flat`, in a shape of the view's sizes with
// the length's padded to `rows` (positions past the length read whatever lies there).
Value read_grown_view(Builder& b, const Value& flat, const GrownView& view, int64_t rows,
                      const Value& length, const Value& offset);

// `padded` (contiguous; its sizes those of `sizes` with the length's padded) as the first
// elements, in their exact contiguous order, of a flat buffer of `capacity` elements.
Value pack_grown(Builder& b, const Value& padded, const std::vector<int64_t>& sizes,
                 const Value& length, int64_t capacity);

}  // namespace torch_tpu::aten
