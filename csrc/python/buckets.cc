#include "csrc/python/buckets.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>

#include "csrc/dispatch/bucket_rule.h"
#include "csrc/dispatch/op_padding.h"
#include "csrc/dispatch/size_buckets.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

const char* kind_name(BucketKind kind) {
  switch (kind) {
    case BucketKind::None:
      return "none";
    case BucketKind::Pointwise:
      return "pointwise";
    case BucketKind::Layout:
      return "layout";
    case BucketKind::Fill:
      return "fill";
    case BucketKind::Copy:
      return "copy";
    case BucketKind::Scan:
      return "scan";
    case BucketKind::Reduce:
      return "reduce";
    case BucketKind::Contract:
      return "contract";
    case BucketKind::IndexPut:
      return "index_put";
    case BucketKind::Cat:
      return "cat";
    case BucketKind::Attention:
      return "attention";
    case BucketKind::Bags:
      return "bags";
    case BucketKind::Lookup:
      return "lookup";
    case BucketKind::Rows:
      return "rows";
    case BucketKind::Own:
      return "own";
  }
  return "none";
}

}  // namespace

void bind_buckets(py::module_& m) {
  m.def("_size_buckets", &size_buckets);
  m.def("_set_size_buckets", &set_size_buckets);
  m.def("_forget_size_bucket_shapes", &forget_met_shapes);
  // The bucket of a compiled graph's symbolic size, `cap` its declared maximum.
  m.def(
      "_compiled_bucket_size",
      [](int64_t size, std::optional<int64_t> cap) {
        return bucket_size(size, compiled_buckets(cap));
      },
      py::arg("size"), py::arg("cap") = std::nullopt);
  // {op: (eager kind, compiled kind)} for every op with a rule on either path.
  m.def("_op_padding", [] {
    py::dict table;
    for (const OpPadding& row : op_paddings()) {
      table[py::str(std::string(row.op))] =
          py::make_tuple(kind_name(row.eager), kind_name(row.compiled));
    }
    return table;
  });
  // What padding reads as for `op` (a Reduce or Scan row) over `dtype`; None where unknown.
  m.def("_padding_neutral", [](const std::string& op, c10::ScalarType dtype) {
    const OpPadding* row = find_op_padding(op);
    return row != nullptr ? neutral(row->neutral, dtype) : std::nullopt;
  });
}

}  // namespace torch_tpu
