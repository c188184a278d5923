#include "csrc/dispatch/reinterpret.h"

#include <c10/util/Exception.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "csrc/device/runtime.h"
#include "csrc/dispatch/cache_entry.h"
#include "csrc/dispatch/disk_cache.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/pjrt/executable.h"

namespace torch_tpu {
namespace {

using hlo::ElementType;
using hlo::Value;

// Complex numbers are laid out as (real, imaginary) pairs; StableHLO cannot bitcast them, so
// they are split into and built from their parts.
Value split_complex(hlo::Builder& b, const Value& flat) {
  const int64_t n = flat.shape[0];
  Value re = b.reshape(b.real(flat), {n, 1});
  Value im = b.reshape(b.imag(flat), {n, 1});
  return b.reshape(b.concatenate({re, im}, 1), {2 * n});
}

Value join_complex(hlo::Builder& b, const Value& parts) {
  const int64_t n = parts.shape[0] / 2;
  Value pairs = b.reshape(parts, {n, 2});
  Value re = b.reshape(b.slice(pairs, {0, 0}, {n, 1}, {1, 1}), {n});
  Value im = b.reshape(b.slice(pairs, {0, 1}, {n, 2}, {1, 1}), {n});
  return b.complex(re, im);
}

// Real to real of any widths, by bitcasts (booleans travel as bytes).
Value reinterpret_real(hlo::Builder& b, Value flat, ElementType to) {
  if (flat.type == to) return flat;
  if (flat.type == ElementType::Pred) flat = b.convert(flat, ElementType::U8);
  const ElementType target = to == ElementType::Pred ? ElementType::U8 : to;
  const int from_bytes = hlo::byte_size(flat.type), to_bytes = hlo::byte_size(target);
  const int64_t n = flat.shape[0];
  Value out;
  if (from_bytes == to_bytes) {
    out = b.bitcast_convert(flat, target);
  } else if (from_bytes > to_bytes) {
    out = b.reshape(b.bitcast_convert(flat, target), {n * (from_bytes / to_bytes)});
  } else {
    const int64_t ratio = to_bytes / from_bytes;
    out = b.bitcast_convert(b.reshape(flat, {n / ratio, ratio}), target);
  }
  if (to == ElementType::Pred) {
    out = b.ne(out, b.constant_int(0, ElementType::U8, out.shape));
  }
  return out;
}

}  // namespace

Value reinterpret_value(hlo::Builder& b, const Value& flat, ElementType to) {
  Value value = flat;
  if (hlo::is_complex(value.type)) value = split_complex(b, value);
  if (!hlo::is_complex(to)) return reinterpret_real(b, value, to);
  return join_complex(b, reinterpret_real(b, value, hlo::component_type(to)));
}

std::shared_ptr<const CacheEntry> reinterpret_entry(ElementType from, ElementType to,
                                                    int64_t nbytes) {
  static std::mutex mutex;
  static auto& entries =
      *new std::map<std::tuple<ElementType, ElementType, int64_t>, std::shared_ptr<CacheEntry>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<CacheEntry>& entry = entries[std::make_tuple(from, to, nbytes)];
  if (entry) return entry;
  hlo::Builder b;
  const Value flat = b.parameter({nbytes / hlo::byte_size(from)}, from);
  const Value result = reinterpret_value(b, flat, to);
  entry = std::make_shared<CacheEntry>();
  entry->id = next_entry_id();
  entry->op_name = "torch_tpu::reinterpret";
  entry->function = b.function("main", true, {result});
  entry->param_types.push_back(hlo::boundary_tensor_type(flat.shape, flat.type));
  entry->result_types.push_back(hlo::boundary_tensor_type(result.shape, result.type));
  return entry;
}

std::shared_ptr<pjrt::Buffer> reinterpret_buffer(std::shared_ptr<pjrt::Buffer> buffer,
                                                 ElementType from, ElementType to, int64_t nbytes,
                                                 int device) {
  const int64_t from_elements = nbytes / hlo::byte_size(from);
  // Compiled once per (from, to, length); kept for the process like the plugin's runtime.
  static std::mutex mutex;
  static std::map<std::tuple<ElementType, ElementType, int64_t>, pjrt::Executable*> executables;
  pjrt::Executable* executable = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto key = std::make_tuple(from, to, from_elements);
    auto found = executables.find(key);
    if (found == executables.end()) {
      hlo::Builder b;
      Value flat = b.parameter({from_elements}, from);
      Value result = reinterpret_value(b, flat, to);
      executable = compile_with_cache(b.module({result}), false).release();
      executables.emplace(key, executable);
    } else {
      executable = found->second;
    }
  }
  metrics().executions++;
  PJRT_Buffer* const arguments[] = {buffer->raw()};
  pjrt::ExecuteResult result = executable->execute(arguments, Runtime::get().device(device));
  pending_started();
  auto reads = std::make_shared<pjrt::InFlightReads>(
      std::vector<std::shared_ptr<pjrt::Buffer>>{std::move(buffer)});
  result.done.on_ready([reads = std::move(reads)](auto error) mutable {
    reads.reset();
    if (error) record_async_error("reinterpreting a storage as another dtype", error->what());
    pending_finished();
  });
  return std::make_shared<pjrt::Buffer>(std::move(result.outputs[0]));
}

}  // namespace torch_tpu
