// The cat of growing tensors (dispatch/size_buckets.h): parts written one after the other into
// a bucket's flat buffer, the first part's length a runtime input, so that one executable
// serves every length of the bucket.
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// One row of parts following each other (generate's [1, n] ids): each part written after the
// last by dynamic_update_slice.
Value cat_one_row(Builder& b, const Value& first, const std::vector<Value>& rest,
                  const Value& length, int64_t bucket) {
  const int64_t first_elements = first.shape[0];  // at most the bucket's (size_buckets.cc)
  Value flat = first_elements < bucket
                   ? b.pad(first, splat(b, 0, first.type, {}), {0}, {bucket - first_elements}, {0})
                   : first;
  Value offset = length;
  for (const Value& part : rest) {
    const int64_t elements = hlo::num_elements(part.shape);
    flat = b.dynamic_update_slice(flat, b.reshape(part, {elements}), {offset});
    offset = b.add(offset, splat(b, static_cast<double>(elements), ElementType::S64, {}));
  }
  return flat;
}

// `outer` rows, each first's row (length / outer elements) then each of rest's rows (a KV
// cache's [batch, heads, L, d] grown along L): rows interleave in memory, so each element of
// the result is gathered from where it comes from, its row found from the runtime length.
Value cat_rows(Builder& b, const Value& first, const std::vector<Value>& rest, const Value& length,
               int64_t bucket, int64_t outer) {
  const Shape out{bucket};
  auto constant = [&](int64_t value) {
    return splat(b, static_cast<double>(value), ElementType::S64, out);
  };
  // The source: first's buffer, then each part's elements; where each part's rows start.
  std::vector<Value> pieces{first};
  std::vector<int64_t> part_start, part_row;
  int64_t total = first.shape[0], rest_row = 0;
  for (const Value& part : rest) {
    const int64_t elements = hlo::num_elements(part.shape);
    pieces.push_back(b.reshape(part, {elements}));
    part_start.push_back(total);
    part_row.push_back(elements / outer);
    total += elements;
    rest_row += elements / outer;
  }
  Value source = pieces.size() > 1 ? b.concatenate(pieces, 0) : first;
  Value first_row = b.broadcast_in_dim(
      b.divide(length, splat(b, static_cast<double>(outer), ElementType::S64, {})), out, {});
  Value period = b.add(first_row, constant(rest_row));
  Value position = b.iota(out, ElementType::S64, 0);
  Value row = b.divide(position, period);
  Value within = b.subtract(position, b.multiply(row, period));
  // Past first's row: the part whose row holds `within`, the last part first.
  Value into_rest = b.subtract(within, first_row);
  Value index = constant(0);
  int64_t row_end = rest_row;
  for (size_t p = rest.size(); p-- > 0;) {
    const int64_t row_start = row_end - part_row[p];
    Value at = b.add(b.add(constant(part_start[p]), b.multiply(row, constant(part_row[p]))),
                     b.subtract(into_rest, constant(row_start)));
    index = p + 1 == rest.size() ? at : b.select(b.lt(into_rest, constant(row_end)), at, index);
    row_end = row_start;
  }
  index = b.select(b.lt(within, first_row), b.add(b.multiply(row, first_row), within), index);
  index = b.clamp(constant(0), index, constant(total - 1));
  Value values = take_slices(b, source, 0, index);
  Value real = b.lt(position, b.multiply(constant(outer), period));
  return b.select(real, values, splat(b, 0, first.type, out));
}

// (first, rest, length, bucket, outer): a flat buffer of `bucket` elements holding the cat of
// first's first `length` elements with rest along rows of `outer`, then zeros.
LOWER({"@bucket_cat"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value first = ctx.tensor(0);
  first = b.reshape(first, {hlo::num_elements(first.shape)});
  const std::vector<Value> rest = ctx.tensors(1);
  Value length = ctx.scalar(2, ElementType::S64);
  const int64_t bucket = ctx.arg(3).toInt(), outer = ctx.arg(4).toInt();
  return Values{outer == 1 ? cat_one_row(b, first, rest, length, bucket)
                           : cat_rows(b, first, rest, length, bucket, outer)};
});

}  // namespace
}  // namespace torch_tpu::aten
