// A Work over host-group operations whose results reach their tpu tensors when it is waited
// on. Point-to-point ops need it: a send completes only once its peer has posted the matching
// receive, so neither side may block when it issues one (batch_isend_irecv posts both first).
#pragma once

#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "csrc/distributed/host_staging.h"

namespace torch_tpu::distributed {

struct StagedPart {
  c10::intrusive_ptr<c10d::Work> host_work;
  std::shared_ptr<HostStaging> staging;
};

class StagedWork final : public c10d::Work {
 public:
  StagedWork(int rank, std::vector<StagedPart> parts, std::vector<at::Tensor> results);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return results_; }
  // Waits for every host operation, then writes the results back (once). Rethrows a failure.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // Completed when it is returned: it waits first, as the results only exist after that.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<StagedPart> parts_;
  std::vector<at::Tensor> results_;
};

}  // namespace torch_tpu::distributed
