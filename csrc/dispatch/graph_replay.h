// A compiled graph's call replays its fused executable. The first call with a given input
// signature runs the FX graph in record mode (every op dispatched and deferred into one fused
// graph) and notes what that graph read and wrote (a ReplayPlan); later calls with the same
// signature gather the same inputs, run the executable once (or join the pending graph as one
// op) and build the outputs, without dispatching the ops again. Anything the plan cannot
// reproduce (a host read inside the graph, an op run outside the fused graph, an output the
// graph did not make) keeps that signature on the recording path. The Python side (keying
// calls by signature, calling the graph) is torch_tpu._C._GraphReplay (csrc/python).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/host_timers.h"

namespace torch_tpu {

struct ReplayPlan;

// False under TORCH_TPU_GRAPH_REPLAY=0: every call records.
bool replay_enabled();

// One call's recording: the fused graph it captures, and what must not change outside that
// graph (host reads, other executions, argument storages swapped) for it to be replayable.
class ReplayRecording {
 public:
  // Runs a graph pending from eager code first: it is not part of this one.
  explicit ReplayRecording(const std::vector<at::Tensor>& args);
  ~ReplayRecording();
  ReplayRecording(const ReplayRecording&) = delete;
  ReplayRecording& operator=(const ReplayRecording&) = delete;

  // Ends the capture; the plan for replaying the call whose results were `outputs` (undefined
  // where the call returned a constant), or nullptr with `why` set. `outputs` is nullopt where
  // the caller found the results unreplayable, with `why` already set.
  std::shared_ptr<const ReplayPlan> finish(const std::optional<std::vector<at::Tensor>>& outputs,
                                           std::string& why);

 private:
  const std::vector<at::Tensor>& args_;
  int64_t downloads_, syncs_, executions_;
  uint64_t first_new_serial_;
  std::vector<const pjrt::Buffer*> buffers_before_;
  FusedRun run_;
  bool capturing_ = true;
};

// The plan run on this call's arguments; its outputs, undefined where the recording returned
// a constant.
std::vector<at::Tensor> replay(const ReplayPlan& plan, const std::vector<at::Tensor>& args,
                               HostLaps& laps);

}  // namespace torch_tpu
