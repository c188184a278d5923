// RAII over PJRT_Event: wait for, poll, or get called back on completion of async work.
#pragma once

#include <functional>
#include <optional>

#include "csrc/pjrt/c_api.h"
#include "csrc/pjrt/error.h"

namespace torch_tpu::pjrt {

class Event {
 public:
  Event() = default;
  Event(const PJRT_Api* api, PJRT_Event* event) : api_(api), event_(event) {}
  Event(Event&& other) noexcept { *this = std::move(other); }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  explicit operator bool() const { return event_ != nullptr; }
  // Blocks until the work is done; throws Error with the plugin's message if it failed.
  void await(const char* what = "PJRT_Event_Await");
  bool is_ready() const;
  // Runs `callback` once the event completes (possibly at once, possibly on a plugin thread);
  // the argument is the failure, if any. The Event itself may be destroyed afterwards.
  void on_ready(std::function<void(std::optional<Error>)> callback);

 private:
  void reset();
  const PJRT_Api* api_ = nullptr;
  PJRT_Event* event_ = nullptr;
};

}  // namespace torch_tpu::pjrt
