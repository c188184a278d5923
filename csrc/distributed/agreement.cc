#include "csrc/distributed/agreement.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>

#include "csrc/dispatch/flight_recorder.h"

namespace torch_tpu::distributed {
namespace {

constexpr int64_t kNoNumel = -1;

std::string describe(const int64_t* row) {
  std::ostringstream out;
  out << c10d::opTypeToString(static_cast<c10d::OpType>(row[0])) << " of "
      << c10::toString(static_cast<c10::ScalarType>(row[1]));
  if (row[2] != kNoNumel) out << "[" << row[2] << " elements]";
  return out.str();
}

}  // namespace

namespace {
std::atomic<bool>& check_flag() {
  static std::atomic<bool> enabled = [] {
    const char* value = std::getenv("TORCH_TPU_DIST_CHECK");
    return value == nullptr || std::string(value) != "0";
  }();
  return enabled;
}
}  // namespace

bool agreement_check_enabled() { return check_flag().load(std::memory_order_relaxed); }

void set_agreement_check(bool enabled) { check_flag().store(enabled); }

Agreement::Agreement(c10d::Backend& host, const char* collective, c10d::OpType op,
                     const std::vector<at::Tensor>& tensors, bool compare_numel)
    : host_(host), collective_(collective) {
  if (!agreement_check_enabled()) return;
  int64_t numel = 0;
  for (const auto& t : tensors) numel += t.numel();
  const auto dtype = tensors.empty() ? c10::kFloat : tensors.front().scalar_type();
  mine_.push_back(at::tensor(
      {static_cast<int64_t>(op), static_cast<int64_t>(dtype), compare_numel ? numel : kNoNumel},
      at::kLong));
  all_.resize(1);
  for (int r = 0; r < host.getSize(); ++r) all_[0].push_back(at::empty({3}, at::kLong));
  work_ = host.allgather(all_, mine_);
}

Agreement::~Agreement() {
  if (!work_) return;
  try {
    work_->wait();
  } catch (const std::exception&) {  // already failing: the first error is the one reported
  }
}

void Agreement::verify() {
  if (!work_) return;
  auto work = std::move(work_);
  try {
    work->wait();
  } catch (const std::exception& error) {
    // The peer never came (a timeout) or is gone: what this rank ran up to it is in the record.
    const std::string message =
        std::string("tpu_dist: ") + collective_ + " failed: " + error.what();
    TORCH_CHECK(false, message, flight::dump_note(message));
  }
  const int64_t* own = mine_[0].const_data_ptr<int64_t>();
  for (int r = 0; r < host_.getSize(); ++r) {
    const int64_t* other = all_[0][r].const_data_ptr<int64_t>();
    TORCH_CHECK(std::equal(own, own + 3, other), "tpu_dist: ", collective_,
                ": the ranks' calls differ: rank ", host_.getRank(), " runs ", describe(own),
                ", rank ", r, " runs ", describe(other));
  }
}

}  // namespace torch_tpu::distributed
