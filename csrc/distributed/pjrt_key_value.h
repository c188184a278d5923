// The key-value store a PJRT client spanning several processes starts up through (the CUDA
// plugin exchanges each node's devices and NCCL ids in it), served by a c10d store: under
// torchrun, the agent's TCPStore that the process group rendezvous uses too.
#pragma once

#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "csrc/pjrt/client.h"

namespace torch_tpu::distributed {

class PjrtKeyValueStore {
 public:
  explicit PjrtKeyValueStore(c10::intrusive_ptr<c10d::Store> store);

  // The C callbacks PJRT_Client_Create takes; they call back into this object, which must
  // outlive the client.
  pjrt::KeyValueCallbacks callbacks();

  // The same callbacks as the plugin calls them, for tests: a failure the callback reports
  // through PJRT's error function raises c10::Error naming its code.
  std::string get(const std::string& key, int timeout_ms);
  std::optional<std::string> try_get(const std::string& key);
  void put(const std::string& key, const std::string& value);

  c10d::Store& store() const { return *store_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace torch_tpu::distributed
