#include "csrc/python/call_signature.h"

#include <c10/core/DefaultDtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <bit>
#include <utility>

#include "csrc/device/storage.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

// Each argument's words start with its kind.
enum Kind : int64_t { kTensor = 1, kNone, kBool, kInt, kFloat, kLongInt };

void append_repr(std::vector<int64_t>& words, PyObject* object) {
  const std::string text = py::repr(py::handle(object)).cast<std::string>();
  words.push_back(static_cast<int64_t>(text.size()));
  for (char c : text) words.push_back(c);
}

}  // namespace

size_t CallSignatureHash::operator()(const CallSignature& signature) const {
  uint64_t hash = 1469598103934665603ULL;
  for (int64_t word : signature.words) {
    hash ^= static_cast<uint64_t>(word);
    hash *= 1099511628211ULL;
    hash ^= hash >> 29;
  }
  return static_cast<size_t>(hash);
}

bool call_signature(const py::args& args, std::vector<at::Tensor>& tensors, std::string& why,
                    CallSignature& signature) {
  std::vector<int64_t>& words = signature.words;
  words.clear();
  words.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  // (storage, argument) of every tensor, and where its "shares storage with" word lies.
  thread_local std::vector<std::pair<const DeviceStorage*, size_t>> storages;
  thread_local std::vector<size_t> alias_word;
  storages.clear();
  alias_word.assign(args.size(), 0);
  tensors.assign(args.size(), at::Tensor());
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject* object = args[i].ptr();
    if (THPVariable_Check(object)) {
      const at::Tensor& tensor = THPVariable_Unpack(object);
      if (tensor.device().type() != c10::DeviceType::PrivateUse1 || !tensor.has_storage()) {
        why = "argument " + std::to_string(i) + " is a " + tensor.device().str() +
              " tensor (an optimizer's step counter on the CPU, say)";
        return false;
      }
      tensors[i] = tensor;
      words.push_back(kTensor);
      words.push_back(static_cast<int64_t>(tensor.scalar_type()) | (tensor.is_conj() << 8) |
                      (tensor.is_neg() << 9));
      words.push_back(tensor.device().index());
      words.push_back(tensor.dim());
      for (int64_t size : tensor.sizes()) words.push_back(size);
      for (int64_t stride : tensor.strides()) words.push_back(stride);
      words.push_back(tensor.storage_offset());
      words.push_back(static_cast<int64_t>(tensor.storage().nbytes()));
      alias_word[i] = words.size();
      words.push_back(-1);  // the first argument sharing this one's storage, filled below
      storages.emplace_back(&device_storage(tensor), i);
    } else if (object == Py_None) {
      words.push_back(kNone);
    } else if (PyBool_Check(object)) {
      words.push_back(kBool);
      words.push_back(object == Py_True);
    } else if (PyLong_Check(object)) {
      int overflow = 0;
      const long long value = PyLong_AsLongLongAndOverflow(object, &overflow);
      words.push_back(overflow == 0 ? kInt : kLongInt);
      words.push_back(reinterpret_cast<intptr_t>(Py_TYPE(object)));
      if (overflow == 0) {
        words.push_back(value);
      } else {
        append_repr(words, object);
      }
    } else if (PyFloat_Check(object)) {
      words.push_back(kFloat);
      words.push_back(reinterpret_cast<intptr_t>(Py_TYPE(object)));
      words.push_back(std::bit_cast<int64_t>(PyFloat_AS_DOUBLE(object)));
    } else {
      why = "argument " + std::to_string(i) + " is a " + Py_TYPE(object)->tp_name;
      return false;
    }
  }
  // Arguments sharing a storage: sorted by storage, each run's first argument is the lowest.
  std::sort(storages.begin(), storages.end());
  for (size_t start = 0; start < storages.size();) {
    size_t end = start + 1;
    while (end < storages.size() && storages[end].first == storages[start].first) {
      words[alias_word[storages[end].second]] = static_cast<int64_t>(storages[start].second);
      ++end;
    }
    start = end;
  }
  return true;
}

}  // namespace torch_tpu
