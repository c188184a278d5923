// torch_tpu._C._GraphReplay: calls of a compiled graph keyed by their input signature, each
// recorded once and replayed after (the runtime: csrc/dispatch/graph_replay.h). This side
// reads the Python arguments and results: the signature, and which results are tensors and
// which constants.
#include "csrc/python/graph_replay.h"

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdio>
#include <cstdlib>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "csrc/dispatch/graph_replay.h"
#include "csrc/dispatch/host_timers.h"
#include "csrc/dispatch/mode.h"
#include "csrc/python/call_signature.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

constexpr size_t kMaxPlans = 8;  // signatures kept per graph, least recently used out

// A recorded call's results: a tuple or list of tensors and constants (None, bools, ints,
// floats), kept to rebuild the same kind of result from a replay's tensors.
struct Results {
  std::vector<at::Tensor> tensors;  // undefined where the result is a constant
  std::vector<py::object> constants;
  bool tuple = true;
};

// The results of `out`, or nullopt with `why` set where a replay cannot rebuild them.
std::optional<Results> results_of(const py::object& out, std::string& why) {
  if (!py::isinstance<py::tuple>(out) && !py::isinstance<py::list>(out)) {
    why = "the graph's result is not a tuple or list";
    return std::nullopt;
  }
  Results results;
  results.tuple = py::isinstance<py::tuple>(out);
  for (const py::handle item : py::reinterpret_borrow<py::sequence>(out)) {
    PyObject* object = item.ptr();
    if (object == Py_None || PyBool_Check(object) || PyLong_Check(object) ||
        PyFloat_Check(object)) {
      results.tensors.emplace_back();
      results.constants.push_back(py::reinterpret_borrow<py::object>(item));
    } else if (THPVariable_Check(object)) {
      results.tensors.push_back(THPVariable_Unpack(object));
      results.constants.emplace_back();
    } else {
      why = "an output is neither a tensor nor a constant";
      return std::nullopt;
    }
  }
  return results;
}

class GraphReplay {
 public:
  explicit GraphReplay(py::function fn) : fn_(std::move(fn)) {}

  py::object call(const py::args& args) {
    HostPhaseTimer total(HostPhase::ReplayTotal);
    HostLaps laps;
    std::vector<at::Tensor> tensors;
    // Built in a signature the thread reuses, so that a replay allocates no key; a recording
    // copies it first (the graph it runs may call other compiled graphs).
    thread_local CallSignature signature;
    bool keyed = false;
    // Inside another recording, the graph is part of that one's fused graph.
    if (replay_enabled() && !recording()) {
      std::string why;
      keyed = call_signature(args, tensors, why, signature);
      if (!keyed) note_unreplayable({}, why);
    }
    if (keyed) {
      if (auto found = plans_.find(signature); found != plans_.end()) {
        ages_.splice(ages_.begin(), ages_, found->second.age);
        ++replays_;
        laps.lap(HostPhase::ReplaySignature);
        return rebuild(found->second, replay(*found->second.plan, tensors, laps), laps);
      }
    }
    if (!keyed || unreplayable_.contains(signature)) return record(args);
    const CallSignature key = signature;

    py::object out;
    std::shared_ptr<const ReplayPlan> plan;
    std::optional<Results> results;
    std::string why;
    {
      ReplayRecording recording(tensors);
      {
        RecordScope scope;
        out = fn_(*args);
      }
      results = results_of(out, why);
      plan = recording.finish(
          results ? std::optional<std::vector<at::Tensor>>(results->tensors) : std::nullopt, why);
    }
    if (!plan) {
      note_unreplayable(key, why);
      return out;
    }
    ages_.push_front(key);
    plans_.emplace(
        key, Slot{std::move(plan), std::move(results->constants), results->tuple, ages_.begin()});
    if (plans_.size() > kMaxPlans) {
      plans_.erase(ages_.back());
      ages_.pop_back();
    }
    return out;
  }

  int64_t replays() const { return replays_; }

  std::vector<std::string> unreplayable_reasons() const {
    std::vector<std::string> reasons;
    for (const auto& [key, why] : unreplayable_) reasons.push_back(why);
    return reasons;
  }

 private:
  struct Slot {
    std::shared_ptr<const ReplayPlan> plan;
    std::vector<py::object> constants;  // by result position; null where it is a tensor
    bool tuple = true;
    std::list<CallSignature>::iterator age;
  };

  // The replay's result, shaped as the recording's was.
  static py::object rebuild(const Slot& slot, const std::vector<at::Tensor>& tensors,
                            HostLaps& laps) {
    py::list outputs;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].defined()) {
        outputs.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(tensors[i])));
      } else {
        outputs.append(slot.constants[i]);
      }
    }
    py::object result =
        slot.tuple ? py::object(py::tuple(outputs)) : py::object(std::move(outputs));
    laps.lap(HostPhase::ReplayOutputs);
    return result;
  }

  // Records why calls with this signature (an empty one for calls that have none) are not
  // replayed, and says so once under TORCH_TPU_DEBUG_REPLAY.
  void note_unreplayable(const CallSignature& key, const std::string& why) {
    if (!unreplayable_.emplace(key, why).second) return;
    if (std::getenv("TORCH_TPU_DEBUG_REPLAY") != nullptr) {
      std::fprintf(stderr, "torch_tpu: a compiled graph is recorded on every call: %s\n",
                   why.c_str());
    }
  }

  py::object record(const py::args& args) {
    RecordScope scope;
    return fn_(*args);
  }

  py::function fn_;
  std::unordered_map<CallSignature, Slot, CallSignatureHash> plans_;
  std::list<CallSignature> ages_;  // most recently used first
  std::unordered_map<CallSignature, std::string, CallSignatureHash> unreplayable_;  // -> why
  int64_t replays_ = 0;
};

}  // namespace

void bind_graph_replay(py::module& m) {
  py::class_<GraphReplay>(m, "_GraphReplay",
                          "fn(*args) run as one fused executable: recorded on the first call "
                          "with an input signature, replayed on later ones")
      .def(py::init<py::function>())
      .def("__call__", &GraphReplay::call)
      .def_property_readonly("replays", &GraphReplay::replays)
      .def_property_readonly("unreplayable_reasons", &GraphReplay::unreplayable_reasons,
                             "why each signature recorded on every call is not replayed");
}

}  // namespace torch_tpu
