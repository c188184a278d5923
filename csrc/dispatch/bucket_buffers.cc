#include "csrc/dispatch/bucket_buffers.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>

#include "csrc/device/runtime.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/size_buckets.h"
#include "csrc/dispatch/view_io.h"

namespace torch_tpu {

namespace {

// TORCH_TPU_SIZE_BUCKETS=0 at start-up, or set_size_buckets(false), turns buckets off.
std::atomic<int>& setting() {
  static std::atomic<int> on = [] {
    const char* value = std::getenv("TORCH_TPU_SIZE_BUCKETS");
    return value == nullptr || std::string_view(value) != "0" ? -1 : 0;  // -1: not yet asked
  }();
  return on;
}

// TORCH_TPU_SIZE_BUCKETS=always: every fill and upload starts a bucket at its first length, so
// that a test suite runs its ops at buckets (a bucket must change nothing a user sees).
bool always() {
  static const bool always = [] {
    const char* value = std::getenv("TORCH_TPU_SIZE_BUCKETS");
    return value != nullptr && std::string_view(value) == "always";
  }();
  return always;
}

bool enabled() {
  int on = setting().load(std::memory_order_relaxed);
  if (on < 0) {
    on = Runtime::get().client().supports_views() ? 1 : 0;
    setting().store(on, std::memory_order_relaxed);
  }
  return on == 1;
}

// What fills and uploads have met, by (op, dtype, bucket): the first length, whether a
// second one came, and how each shape ran.
struct Met {
  int64_t first_length = -1;
  bool two_lengths = false;
  std::map<std::vector<int64_t>, bool> shapes;  // shape -> ran at the bucket
};
std::mutex met_mutex;
std::map<std::tuple<std::string, int, int64_t>, Met>& met_by_bucket() {
  static std::map<std::tuple<std::string, int, int64_t>, Met> met;
  return met;
}

}  // namespace

void set_size_buckets(bool on) {
  TORCH_CHECK(!on || Runtime::get().client().supports_views(),
              "torch_tpu: size buckets need a plugin that makes views of device buffers");
  setting().store(on ? 1 : 0);
}

bool size_buckets() { return enabled(); }

void forget_met_shapes() {
  std::lock_guard<std::mutex> lock(met_mutex);
  met_by_bucket().clear();
}

bool fill_uses_bucket(const std::string& op_name, c10::ScalarType dtype, int64_t bucket,
                      c10::IntArrayRef sizes, int64_t length) {
  std::lock_guard<std::mutex> lock(met_mutex);
  Met& met = met_by_bucket()[{op_name, static_cast<int>(dtype), bucket}];
  auto [shape, added] = met.shapes.try_emplace(sizes.vec(), met.two_lengths || always());
  if (!added) return shape->second;
  if (met.first_length < 0) met.first_length = length;
  met.two_lengths = met.two_lengths || met.first_length != length;
  return shape->second;
}

bool plain(const at::Tensor& tensor, int64_t length) {
  return tensor.defined() && tensor.is_privateuseone() && tensor.numel() == length &&
         covers_whole_storage(tensor) && !tensor.is_conj() && !tensor.is_neg();
}

std::shared_ptr<pjrt::Buffer> bucket_of(const at::Tensor& tensor, int64_t bucket) {
  DeviceStorage::Contents contents = device_storage(tensor).raw_contents();
  if (!contents.bucket || contents.type != to_element_type(tensor.scalar_type())) return nullptr;
  const std::vector<int64_t> dims = contents.bucket->dims();
  return dims.size() == 1 && dims[0] == bucket ? contents.bucket : nullptr;
}

at::Tensor stand_in(const at::Tensor& like, int64_t bucket,
                    std::shared_ptr<pjrt::Buffer> contents) {
  const auto nbytes = static_cast<size_t>(bucket) * like.element_size();
  auto* storage = new DeviceStorage(nbytes, like.device().index());
  if (contents) storage->assign(std::move(contents), to_element_type(like.scalar_type()));
  c10::Storage holder(
      c10::Storage::use_byte_size_t(), nbytes,
      c10::DataPtr(
          storage, storage, [](void* context) { delete static_cast<DeviceStorage*>(context); },
          like.device()),
      /*allocator=*/nullptr, /*resizable=*/false);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(holder), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), like.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous({bucket});
  return tensor;
}

int64_t bucket_length_of(const DeviceStorage& storage, hlo::ElementType type) {
  DeviceStorage::Contents contents = storage.raw_contents();
  if (contents.type != type) return 0;
  if (contents.pending) return contents.pending->bucket;
  return contents.bucket && contents.bucket->dims().size() == 1 ? contents.bucket->dims()[0] : 0;
}

at::Tensor bucket_stand_in(const at::Tensor& like, const DeviceStorage& source) {
  const hlo::ElementType type = to_element_type(like.scalar_type());
  at::Tensor flat = stand_in(like, bucket_length_of(source, type), nullptr);
  if (source.raw_contents().pending && share_pending(source, device_storage(flat))) return flat;
  // Held, or pending a moment ago and run since (another thread's flush).
  DeviceStorage::Contents contents = source.raw_contents();
  TORCH_INTERNAL_ASSERT(contents.bucket, "torch_tpu: a bucket stand-in of a storage without one");
  device_storage(flat).assign(contents.bucket, type);
  return flat;
}

void take_as_bucket(const at::Tensor& flat, const at::Tensor& result, GrownLength grown) {
  const DeviceStorage& source = device_storage(flat);
  DeviceStorage& target = device_storage(result);
  if (share_pending(source, target, flat.numel())) return;
  DeviceStorage::Contents contents = source.raw_contents();
  target.assign_bucket(contents.buffer, contents.type, grown);
}

}  // namespace torch_tpu
