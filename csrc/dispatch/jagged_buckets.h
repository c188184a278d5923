// Jagged inputs (size_buckets.h): a recommendation model's indices, a different count each
// batch, uploaded into size buckets and read feature by feature as runs of one buffer. At exact
// sizes every count compiles embedding_bag's forward and backwards anew; in buckets, one
// executable serves every count of a bucket.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

namespace torch_tpu {

// _embedding_bag (and its forward-only form), _embedding_bag_dense_backward and
// _embedding_bag_per_sample_weights_backward, where the indices (and per-sample weights, and
// offset2bag) are 1-d runs of storages held in buckets: computed over a window of the indices'
// bucket length, the positions past their count in no bag. offset2bag and the weights'
// gradient come back as tensors over buckets. nullopt where the call does not qualify and runs
// at its exact sizes. ATen's argument checks (meta_checks.h) run first, as for the exact op.
std::optional<std::vector<c10::IValue>> bags_in_bucket(const std::string& op_name,
                                                       const c10::FunctionSchema& schema,
                                                       const std::vector<c10::IValue>& args);

}  // namespace torch_tpu
