// Kernels that are not computations: allocation, views (metadata only), cross-device copies
// and reading a scalar back to the host.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>

#include "csrc/aten/common.h"
#include "csrc/aten/host_transfer.h"
#include "csrc/device/allocator.h"
#include "csrc/device/runtime.h"
#include "csrc/device/storage.h"
#include "csrc/dispatch/cache_entry.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/mode.h"
#include "csrc/dispatch/runtime_checks.h"
#include "csrc/dispatch/size_buckets.h"
#include "csrc/dispatch/view_io.h"
#include "csrc/profiler/device_trace.h"

namespace torch_tpu::aten {
namespace {

constexpr auto kKeys = c10::DispatchKey::PrivateUse1;

c10::DeviceGuard guard_for(std::optional<c10::Device> device) {
  int index = device && device->has_index() ? device->index() : current_device();
  return c10::DeviceGuard(c10::Device(c10::DeviceType::PrivateUse1, index));
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == c10::Layout::Strided,
              "torch_tpu: only strided tensors are supported, got layout ", *layout);
  auto guard = guard_for(device);
  c10::ScalarType type = dtype.value_or(c10::typeMetaToScalarType(at::get_default_dtype()));
  (void)to_element_type(type);  // rejects dtypes the device lacks
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(kKeys), type,
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  auto guard = guard_for(device);
  c10::ScalarType type = dtype.value_or(c10::typeMetaToScalarType(at::get_default_dtype()));
  (void)to_element_type(type);
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(kKeys), type);
}

// With deterministic algorithms on, memory handed out uninitialized is filled (NaN for floating
// types, the largest value for integers) so reading it is reproducible, as CPU and CUDA do.
bool fill_uninitialized() {
  const auto& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

// The registered kernels; the helpers above allocate staging buffers that are written at once.
at::Tensor empty_memory_format_op(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                  std::optional<c10::Layout> layout,
                                  std::optional<c10::Device> device, std::optional<bool> pin_memory,
                                  std::optional<c10::MemoryFormat> memory_format) {
  at::Tensor out = empty_memory_format(size, dtype, layout, device, pin_memory, memory_format);
  if (fill_uninitialized()) at::native::fill_empty_deterministic_(out);
  return out;
}

at::Tensor empty_strided_op(c10::IntArrayRef size, c10::IntArrayRef stride,
                            std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                            std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  at::Tensor out = empty_strided(size, stride, dtype, layout, device, pin_memory);
  if (fill_uninitialized()) at::native::fill_empty_deterministic_(out);
  return out;
}

// Whole-storage contiguous copy of `tensor` on the device (a clone when it is a view).
// A lazily conjugated or negated tensor is copied too, which applies the bit: the result holds
// the tensor's values as they read.
at::Tensor compact(const at::Tensor& tensor) {
  if (covers_whole_storage(tensor) && !tensor.is_conj() && !tensor.is_neg()) return tensor;
  at::Tensor out = empty_memory_format(tensor.sizes(), tensor.scalar_type(), std::nullopt,
                                       tensor.device(), std::nullopt, std::nullopt);
  out.copy_(tensor);
  return out;
}

void copy_storage_to_host(const at::Tensor& tensor, void* dst, std::size_t nbytes) {
  profiler::HostSpan span("sync: reading a tpu tensor");  // shown where a host sync happens
  metrics().host_syncs++;
  metrics().downloads++;
  std::shared_ptr<pjrt::Buffer> buffer;
  try {
    buffer = storage_buffer(tensor);
    if (!buffer->read_in_place(dst, nbytes, "reading a tpu tensor")) {
      buffer->copy_to_host(dst, nbytes).await("reading a tpu tensor");
    }
  } catch (const pjrt::Error&) {
    raise_async_error();  // names the op that failed, if it was asynchronous work
    throw;
  }
  // A sync point: report earlier asynchronous failures and failed index checks here, and a
  // read of values whose op's check failed, however often it is read.
  raise_async_error();
  raise_failed_runtime_checks();
  raise_if_result_of_failed_check(*buffer);
  // A tensor at a size bucket reads a view of the bucket: the execution's result is the bucket.
  if (auto bucket = device_storage(tensor).raw_contents().bucket) {
    raise_if_result_of_failed_check(*bucket);
  }
}

// A host read of a tensor without elements reads nothing, but is a sync point all the same:
// an index check its producer failed is reported here, not at some later, unrelated read, and
// again at every later read of it, as for a tensor with elements.
void empty_read_sync_point(const at::Tensor& tensor) {
  if (device_storage(tensor).contents().pending) materialize_pending();
  raise_async_error();
  raise_failed_runtime_checks();
  if (auto buffer = device_storage(tensor).contents().buffer) {
    raise_if_result_of_failed_check(*buffer);
  }
}

// A view of a small storage, or one covering most of its storage, is read by downloading the
// whole storage and picking its elements on the host, so reading views of many shapes (the
// padded outputs of bucketed compiled graphs) compiles nothing.
constexpr int64_t kWholeStorageBytes = int64_t{16} << 20;

bool download_whole_storage(const at::Tensor& tensor) {
  if (covers_whole_storage(tensor) || tensor.is_conj() || tensor.is_neg()) return false;
  int64_t storage_bytes = storage_elements(tensor) * static_cast<int64_t>(tensor.element_size());
  if (storage_bytes > kWholeStorageBytes && tensor.numel() * 2 < storage_elements(tensor)) {
    return false;
  }
  return device_storage(tensor).contents().type == to_element_type(tensor.scalar_type());
}

// Blocks until the device tensor's values are in `dst` (a dense host buffer of its dtype).
void download(const at::Tensor& tensor, void* dst) {
  if (tensor.numel() == 0) {
    empty_read_sync_point(tensor);
    return;
  }
  // Read again after its op's check failed: raise before a compacting copy makes a new buffer.
  const DeviceStorage::Contents contents = device_storage(tensor).contents();
  for (const auto& buffer : {contents.buffer, contents.bucket}) {
    if (buffer) raise_if_result_of_failed_check(*buffer);
  }
  if (download_whole_storage(tensor)) {
    auto host_options = tensor.options().device(c10::kCPU);
    at::Tensor whole = at::empty({storage_elements(tensor)}, host_options);
    copy_storage_to_host(tensor, whole.data_ptr(), whole.numel() * whole.element_size());
    at::Tensor view = whole.as_strided(tensor.sizes(), tensor.strides(), tensor.storage_offset());
    at::from_blob(dst, tensor.sizes(), host_options).copy_(view);
    return;
  }
  at::Tensor dense = compact(tensor);
  copy_storage_to_host(dense, dst, dense.numel() * dense.element_size());
}

// Makes `host` (dense, of dst's dtype and element count) dst's whole storage, through
// `upload(client, data, type, dims, device)`, one of the client's upload flavours.
// `host` holding more elements than `dst` (a size bucket's, see size_buckets.h) becomes the
// bucket whose first elements are dst's.
template <typename Upload>
void replace_storage_by_upload(const at::Tensor& dst, const at::Tensor& host, Upload&& upload) {
  auto& runtime = Runtime::get();
  hlo::ElementType type = to_element_type(dst.scalar_type());
  std::vector<int64_t> dims{host.numel()};
  // Shown where an upload happens (what `python -m torch_tpu diagnose` counts per step).
  profiler::HostSpan span(profiler::collecting() ? "upload: a host tensor of " +
                                                       std::to_string(host.nbytes()) + " bytes"
                                                 : std::string());
  metrics().uploads++;
  auto buffer =
      std::make_shared<pjrt::Buffer>(upload(runtime.client(), host.data_ptr(), to_pjrt_type(type),
                                            dims, runtime.device(dst.device().index())));
  if (host.numel() > dst.numel()) {
    device_storage(dst).assign_bucket(std::move(buffer), type);
  } else {
    device_storage(dst).assign(std::move(buffer), type);
  }
}

// `src` (dense, of dst's dtype) into a bucket of `bucket` elements that dst's storage starts.
void upload_into_bucket(const at::Tensor& dst, const at::Tensor& src, int64_t bucket) {
  // Our own padded copy: the upload may read it after returning.
  at::Tensor padded = at::zeros({bucket}, src.options());
  padded.narrow(0, 0, src.numel()).copy_(src.reshape({-1}));
  replace_storage_by_upload(dst, padded, [&](pjrt::Client& client, auto... args) {
    return client.upload_async(args..., [keep = padded.storage()]() {});
  });
}

void upload_into(const at::Tensor& dst, const at::Tensor& src_cpu, bool non_blocking) {
  // The host values as they read (conjugate and negative bits applied).
  at::Tensor src =
      src_cpu.to(dst.scalar_type()).resolve_conj().resolve_neg().expand(dst.sizes()).contiguous();
  // A view, or a lazily conjugated or negated destination, is written by a device copy.
  if (!covers_whole_storage(dst) || dst.is_conj() || dst.is_neg()) {
    at::Tensor staging = empty_memory_format(dst.sizes(), dst.scalar_type(), std::nullopt,
                                             dst.device(), std::nullopt, std::nullopt);
    upload_into(staging, src, non_blocking);
    dst.copy_(staging);
    return;
  }
  if (src.numel() == 0) return;
  // As on CUDA, a non-blocking upload reads the host memory after returning only where the
  // caller promised not to touch it until a sync (pinned memory), or where it is our own copy:
  // pageable memory may be written again as soon as the call returns.
  if (std::optional<int64_t> bucket = upload_bucket(dst)) {
    upload_into_bucket(dst, src, *bucket);
    return;
  }
  const bool async =
      non_blocking && (!src.storage().is_alias_of(src_cpu.storage()) || src_cpu.is_pinned());
  replace_storage_by_upload(dst, src, [&](pjrt::Client& client, auto... args) {
    return async ? client.upload_async(args..., [keep = src.storage()]() {})
                 : client.upload(args...);
  });
}

}  // namespace

void adopt_host_values(const at::Tensor& dst, at::Tensor host) {
  if (!dst.is_privateuseone() || !host.is_cpu() || host.scalar_type() != dst.scalar_type() ||
      !host.sizes().equals(dst.sizes()) || !host.is_contiguous() || host.is_conj() ||
      host.is_neg() || !covers_whole_storage(dst) || dst.is_conj() || dst.is_neg() ||
      dst.numel() == 0) {
    const_cast<at::Tensor&>(dst).copy_(host);
    return;
  }
  // A collective's jagged result (an all_to_all of a batch's indices) joins the size buckets
  // as an upload would.
  if (std::optional<int64_t> bucket = upload_bucket(dst)) {
    upload_into_bucket(dst, host, *bucket);
    return;
  }
  replace_storage_by_upload(dst, host, [&](pjrt::Client& client, auto... args) {
    return client.upload_zero_copy(args..., [keep = host.storage()]() {});
  });
}

namespace {

const c10::FunctionSchema& copy_schema() {
  static const c10::FunctionSchema& schema =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "").schema();
  return schema;
}

// dst = src on the device, converting dtype and broadcasting as copy_ does.
// A copy of one whole dense storage into another of the same dtype and size shares the
// source's buffer instead of running anything: device buffers are immutable (every write makes
// a new one and inputs are never donated), so two storages may hold the same one. This is what
// makes AOTAutograd's write-back of mutated inputs (optimizer steps) and param.copy_ cheap.
bool share_buffer(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.scalar_type() != src.scalar_type() || dst.device() != src.device() ||
      dst.sizes() != src.sizes() || !covers_whole_storage(dst) || !covers_whole_storage(src) ||
      dst.is_conj() != src.is_conj() || dst.is_neg() != src.is_neg()) {
    return false;
  }
  // While a compiled graph records, every value flows through its fused graph, so that a
  // replay of it (graph_replay.cc) reproduces the copy.
  if (recording()) return false;
  DeviceStorage::Contents contents = device_storage(src).raw_contents();
  // A pending (deferred or recorded) source takes the normal path, which defers the copy too.
  if ((!contents.buffer && !contents.bucket) || contents.pending ||
      contents.type != to_element_type(src.scalar_type())) {
    return false;
  }
  // A size bucket's start is shared as such, without making its view.
  if (contents.bucket) {
    device_storage(dst).assign_bucket(contents.bucket, contents.type, contents.grown);
  } else {
    device_storage(dst).assign(contents.buffer, contents.type);
  }
  return true;
}

void device_copy(const at::Tensor& dst, const at::Tensor& src) {
  if (share_buffer(dst, src)) return;
  static const Lowering lowering = [](LoweringContext& ctx) {
    const at::Tensor& dst_meta = ctx.tensor_meta(0);
    Shape shape(dst_meta.sizes().begin(), dst_meta.sizes().end());
    Value value = as(ctx.b, ctx.tensor(1), et(dst_meta.scalar_type()), shape);
    // The source reads as its values; a conjugated or negated destination stores them so.
    if (dst_meta.is_conj()) value = ctx.b.conj(value);
    if (dst_meta.is_neg()) value = ctx.b.negate(value);
    return Values{value};
  };
  run_lowering("aten::copy_", lowering, copy_schema(), {dst, src, false});
}

// dst = src where they are on two tpu devices of this process: src's values, dense on its own
// device, are moved device to device by the plugin, then copied into dst on dst's device, which
// converts the dtype, broadcasts and writes a view as a copy on one device does.
void copy_between_devices(const at::Tensor& dst, const at::Tensor& src) {
  TORCH_CHECK(!recording(), "torch_tpu: a compiled graph cannot copy from ", src.device(), " to ",
              dst.device(), "; copy outside the compiled function");
  at::Tensor dense;
  {
    c10::DeviceGuard on_source(src.device());
    dense = src.resolve_conj().resolve_neg().contiguous();
    if (!covers_whole_storage(dense)) dense = dense.clone();
  }
  std::shared_ptr<pjrt::Buffer> source = storage_buffer(dense);
  auto moved = std::make_shared<pjrt::Buffer>(
      source->copy_to_device(Runtime::get().device(dst.device().index())));
  // The source stays alive until the copy has read it.
  moved->ready_event().on_ready([keep = std::move(source)](auto) {});
  metrics().device_copies++;
  at::Tensor staging = empty_memory_format(dense.sizes(), dense.scalar_type(), std::nullopt,
                                           dst.device(), std::nullopt, std::nullopt);
  device_storage(staging).assign(std::move(moved), to_element_type(dense.scalar_type()));
  device_copy(dst, staging);
}

at::Tensor& copy_kernel(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  // As CPU: not into an expanded tensor, nor from memory it shares in part.
  if (self.is_privateuseone()) {
    at::assert_no_internal_overlap(self);
    at::assert_no_partial_overlap(self, src);
  }
  if (self.numel() == 0) {
    if (self.is_cpu() && src.is_privateuseone()) empty_read_sync_point(src);
    return self;
  }
  TORCH_CHECK(self.is_privateuseone() || self.is_cpu(), "torch_tpu: cannot copy into ",
              self.device());
  if (self.is_privateuseone() && src.is_privateuseone() && self.device() != src.device()) {
    copy_between_devices(self, src);
  } else if (self.is_privateuseone() && src.is_privateuseone()) {
    device_copy(self, src);
  } else if (self.is_privateuseone()) {
    TORCH_CHECK(src.is_cpu(), "torch_tpu: cannot copy from ", src.device(), " to tpu");
    upload_into(self, src, non_blocking);
  } else if (self.scalar_type() == src.scalar_type() && self.sizes().equals(src.sizes()) &&
             self.is_contiguous() && !self.is_conj() && !self.is_neg()) {
    download(src, self.data_ptr());  // straight into the destination: no second host copy
  } else {
    // tpu -> cpu: download densely in the source dtype, then let CPU copy_ convert/stride.
    at::Tensor host = at::empty(src.sizes(), src.options().device(c10::kCPU));
    download(src, host.data_ptr());
    self.copy_(host);
  }
  return self;
}

at::Tensor copy_from_kernel(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor out = dst;
  copy_kernel(out, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize_kernel(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  return copy_from_kernel(self, dst, false);
}

// equal(self, other) -> bool: the same sizes and every element equal (NaN is not), read back.
bool equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. ",
              "Got: ", self.device(), " and ", other.device());
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
  download(self.reshape({}), host.data_ptr());
  return host.item();
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  // As ATen: the same sizes keep the strides (softmax's out= resizes a strided view to its own
  // sizes before copying into it), unless a memory format asks for a restride.
  if (self.sizes().equals(size) && !memory_format) return self;
  for (int64_t s : size) {
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  }
  // ATen's computation, which refuses a size whose bytes overflow.
  const std::size_t nbytes =
      at::detail::computeStorageNbytesContiguous(size, self.element_size(), self.storage_offset());
  const auto old_nbytes = static_cast<int64_t>(self.storage().nbytes());
  if (nbytes > self.storage().nbytes()) {
    // Grow: a new storage that keeps the old contents at the front.
    at::Tensor old_host;
    // Values still pending in DeferAndFuse are kept too (they were dropped as never written).
    const DeviceStorage::Contents old = device_storage(self).contents();
    if (self.storage().nbytes() > 0 && (old.buffer || old.pending)) {
      at::Tensor old_view = at::detail::empty_generic(
          {0}, device_allocator(), c10::DispatchKeySet(kKeys), self.scalar_type(), std::nullopt);
      old_view.unsafeGetTensorImpl()->set_storage_keep_dtype(self.storage());
      old_view.unsafeGetTensorImpl()->set_sizes_contiguous({storage_elements(self)});
      old_host = old_view.cpu();
    }
    c10::DeviceGuard guard(self.device());
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, device_allocator(), true);
    self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(storage));
    if (old_host.defined()) {
      at::Tensor head = at::detail::empty_generic(
          {0}, device_allocator(), c10::DispatchKeySet(kKeys), self.scalar_type(), std::nullopt);
      head.unsafeGetTensorImpl()->set_storage_keep_dtype(self.storage());
      head.unsafeGetTensorImpl()->set_sizes_contiguous({old_host.numel()});
      head.copy_(old_host);
    }
  }
  auto format = memory_format.value_or(c10::MemoryFormat::Contiguous);
  self.unsafeGetTensorImpl()->set_sizes_contiguous(size);
  if (format != c10::MemoryFormat::Contiguous) {
    self.unsafeGetTensorImpl()->empty_tensor_restride(format);
  }
  if (fill_uninitialized()) at::native::fill_resize_deterministic_(self, old_nbytes);
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(source));
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t numel = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_source_storage_offset(self, std::move(source), 0, {numel}, {1});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_source_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(),
                                   source.strides());
}

// Module.to("tpu") swaps each parameter's data in place (param.data = moved) only when the two
// tensor types are "shallow-copy compatible"; c10 knows that only for built-in backends, so
// without this, moving a model would make new Parameters and break weight tying.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.is_privateuseone());
  };
  return dense(self) && dense(from);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format_op));
  m.impl("empty_strided", TORCH_FN(empty_strided_op));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("copy_", TORCH_FN(copy_kernel));
  m.impl("_copy_from", TORCH_FN(copy_from_kernel));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize_kernel));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("equal", TORCH_FN(equal));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("is_set_to", TORCH_FN(at::native::is_set_to));  // metadata only, as on CPU
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
}

}  // namespace
}  // namespace torch_tpu::aten
