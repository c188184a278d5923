#include "csrc/distributed/staged_work.h"

#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>

namespace torch_tpu::distributed {

StagedWork::StagedWork(int rank, std::vector<StagedPart> parts, std::vector<at::Tensor> results)
    : c10d::Work(rank, c10d::OpType::COALESCED),
      parts_(std::move(parts)),
      results_(std::move(results)) {}

bool StagedWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool StagedWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr StagedWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

bool StagedWork::wait(std::chrono::milliseconds /*timeout: the host group's own applies*/) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!completed_) {
    try {
      for (auto& part : parts_) part.staging->wait_and_write_back(part.host_work);
    } catch (...) {
      exception_ = std::current_exception();
    }
    completed_ = true;
    parts_.clear();  // the host buffers are no longer needed
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> StagedWork::getFuture() {
  wait();
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  future->markCompleted(c10::IValue(c10::List<at::Tensor>(results_)));
  return future;
}

}  // namespace torch_tpu::distributed
