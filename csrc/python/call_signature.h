// What decides whether a compiled graph's recording can be replayed for a call: every
// argument's kind, dtype and layout, which arguments share storage, plain Python values, and
// the default dtype. Kept as machine words, not text: a replayed call pays for building and
// hashing its signature, and a graph of 100 arguments would spend more on formatting numbers
// than on the rest of the replay.
#pragma once

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_tpu {

struct CallSignature {
  std::vector<int64_t> words;
  bool operator==(const CallSignature& other) const = default;
};

struct CallSignatureHash {
  size_t operator()(const CallSignature& signature) const;
};

// Writes the signature of a call with `args` into `signature` (whose words are reused, so that
// a caller keeping one per thread allocates nothing), and fills `tensors` with the tensor
// arguments (undefined at other positions). False, with `why` set, for an argument a replay
// cannot describe (a list, an object) or a CPU tensor: the graph may read its value on the
// host (a step count's .item()), which a replay would not see change.
bool call_signature(const pybind11::args& args, std::vector<at::Tensor>& tensors, std::string& why,
                    CallSignature& signature);

}  // namespace torch_tpu
