#include "csrc/distributed/agreement.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <sstream>
#include <string>

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

bool agreement_check_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TORCH_TPU_DIST_CHECK");
    return value == nullptr || std::string(value) != "0";
  }();
  return enabled;
}

void check_agreement(c10d::Backend& host, const char* collective, c10d::OpType op,
                     const std::vector<at::Tensor>& tensors, bool compare_numel) {
  if (!agreement_check_enabled()) return;
  int64_t numel = 0;
  for (const auto& t : tensors) numel += t.numel();
  const auto dtype = tensors.empty() ? c10::kFloat : tensors.front().scalar_type();
  std::vector<at::Tensor> mine{at::tensor(
      {static_cast<int64_t>(op), static_cast<int64_t>(dtype), compare_numel ? numel : kNoNumel},
      at::kLong)};
  std::vector<std::vector<at::Tensor>> all(1);
  for (int r = 0; r < host.getSize(); ++r) all[0].push_back(at::empty({3}, at::kLong));
  try {
    host.allgather(all, mine)->wait();
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "tpu_dist: ", collective, " failed: ", error.what());
  }
  const int64_t* own = mine[0].const_data_ptr<int64_t>();
  for (int r = 0; r < host.getSize(); ++r) {
    const int64_t* other = all[0][r].const_data_ptr<int64_t>();
    TORCH_CHECK(std::equal(own, own + 3, other), "tpu_dist: ", collective,
                ": the ranks' calls differ: rank ", host.getRank(), " runs ", describe(own),
                ", rank ", r, " runs ", describe(other));
  }
}

}  // namespace torch_tpu::distributed
