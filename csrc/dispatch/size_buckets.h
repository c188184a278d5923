// Size buckets for eager ops. A script that meets many lengths (a sweep over sizes, inputs of
// varying length) would compile one executable per op and length: 20-100 ms each on the CPU
// plugin, far more on a TPU. Once fills (or uploads) of an op and dtype have met two lengths
// within a bucket (bucket_rule.h), each new shape runs at the bucket's length, and its
// tensor is the first n elements of the bucket's buffer. Ops whose first n results do not depend
// on what lies past n in their inputs (elementwise ops, copies, prefix scans) then run at the
// bucket's length too, full reductions and accumulating scatters after what lies past n is
// replaced by a neutral value (n a runtime input): each bucket's executable serves every length
// in it. Any other reader sees a view of the first n elements, made when first needed (which
// waits for the bucket's producer).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/util/FunctionRef.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/dispatch/bucket_rule.h"
#include "csrc/dispatch/op_padding.h"

namespace torch_tpu {

// Whether eager ops may run at size buckets (TORCH_TPU_SIZE_BUCKETS; on where the plugin makes
// views of dense arrays, see Client::supports_views). Turning them off leaves tensors already
// in buckets as they are.
bool size_buckets();
void set_size_buckets(bool on);
// Forgets the lengths and shapes fills and uploads have met (tests start from none).
void forget_met_shapes();

// How an op runs at eager buckets, by its name ("aten::add_.Tensor"): its row of the padding
// table (op_padding.h) where this form of the op (in place, out=, overload) qualifies.
BucketKind bucket_kind(const std::string& op_name);
// The same for a kernel's run_lowering call, by its key prefix: remembered per thread, so a
// call costs one lookup.
BucketKind remembered_bucket_kind(const std::string& key_prefix);

// The bucket length an upload into `dst` should fill (its values first, zeros after), where
// uploads of this dtype have met two lengths of the bucket and `dst`'s shape is new, as for
// fills; nullopt where it is written at its exact length.
std::optional<int64_t> upload_bucket(const at::Tensor& dst);

// A tensor that grows a little each step (growing_buckets.h) has its storage at the start of a
// bucket's buffer, so that reads of views of it see the bucket's length rather than the exact one.
//
// Replaces each argument the op only reads that is a view of a bucketed storage by the same
// view of the bucket's buffer: its key and parameter then carry the bucket's length, and every
// length in the bucket shares one executable (a view's offset is a runtime input already).
void read_views_from_buckets(const c10::FunctionSchema& schema, std::vector<c10::IValue>& args);

// Borrowed, not stored: building it allocates nothing on the dispatcher's path.
using Redispatch = c10::function_ref<std::vector<c10::IValue>(std::vector<c10::IValue>&)>;

// The op's results computed at its size bucket through `redispatch`, where buckets are on, the
// mode runs ops one by one (Strict, Debug) and the op and its arguments qualify; nullopt where
// they do not, and the op runs at its exact sizes.
std::optional<std::vector<c10::IValue>> dispatch_in_buckets(BucketKind kind,
                                                            const std::string& op_name,
                                                            const c10::FunctionSchema& schema,
                                                            const std::vector<c10::IValue>& args,
                                                            Redispatch redispatch);

}  // namespace torch_tpu
