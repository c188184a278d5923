// torch_tpu._C's bucketing part: eager size buckets' switch, and the one bucket rule and table
// of how each op treats padding (csrc/dispatch/bucket_rule.h, op_padding.h) that
// torch_tpu/_bucketing.py pads compiled graphs by.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu {
void bind_buckets(pybind11::module_& m);
}
