// tpu_dist: the torch.distributed backend for tpu tensors. A C++ c10d::Backend, so that
// DTensor's functional collectives (which call these methods directly) reach it too.
//
// Collectives on tpu tensors run through one of two engines: the XLA engine (XlaGroup) where
// the PJRT client spans the group's processes, else the host-staged engine over a CPU process
// group (Gloo), which also takes what the XLA engine does not. Collectives on CPU tensors go
// to that group directly, so one tpu_dist group serves both devices, object collectives
// included.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

#include "csrc/distributed/staged_work.h"
#include "csrc/distributed/xla_group.h"

namespace torch_tpu::distributed {

class TpuBackend final : public c10d::Backend {
 public:
  // `host` is the CPU process group over the same ranks (Gloo), built by the creator.
  // `xla_assignment` (each rank's PJRT device id, in rank order) turns the XLA engine on.
  TpuBackend(int rank, int size, c10::intrusive_ptr<c10d::Backend> host,
             std::chrono::milliseconds timeout, std::vector<int> xla_assignment = {});

  const std::string getBackendName() const override { return "tpu_dist"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

 private:
  // Completes a staged call; inside a coalescing block, its results join the block's.
  c10::intrusive_ptr<c10d::Work> finish(HostStaging& stage,
                                        const c10::intrusive_ptr<c10d::Work>& host_work,
                                        std::vector<at::Tensor> results);
  // Completes a call the XLA engine ran (synchronously).
  c10::intrusive_ptr<c10d::Work> finish_xla(std::vector<at::Tensor> results);

  c10::intrusive_ptr<c10d::Backend> host_;
  std::optional<XlaGroup> xla_;
  std::chrono::milliseconds timeout_;
  // Coalescing: each collective of the block completes when issued (the host engine is
  // synchronous), so the block's Work only has to hand back their results.
  // Point-to-point ops are completed lazily (see StagedWork): they join the block as parts.
  c10::intrusive_ptr<c10d::Work> point_to_point(std::shared_ptr<HostStaging> stage,
                                                c10::intrusive_ptr<c10d::Work> host_work,
                                                std::vector<at::Tensor> results);

  bool coalescing_ = false;
  std::vector<at::Tensor> coalesced_results_;
  std::vector<StagedPart> coalesced_parts_;
};

}  // namespace torch_tpu::distributed
