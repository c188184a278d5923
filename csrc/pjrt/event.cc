#include "csrc/pjrt/event.h"

#include <memory>

namespace torch_tpu::pjrt {

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    api_ = other.api_;
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

Event::~Event() { reset(); }

void Event::reset() {
  if (event_ == nullptr) return;
  auto args = make_args<PJRT_Event_Destroy_Args>();
  args.event = event_;
  api_->PJRT_Event_Destroy(&args);
  event_ = nullptr;
}

void Event::await(const char* what) {
  if (event_ == nullptr) return;
  auto args = make_args<PJRT_Event_Await_Args>();
  args.event = event_;
  check(api_, api_->PJRT_Event_Await(&args), what);
}

bool Event::is_ready() const {
  if (event_ == nullptr) return true;
  auto args = make_args<PJRT_Event_IsReady_Args>();
  args.event = event_;
  check(api_, api_->PJRT_Event_IsReady(&args), "PJRT_Event_IsReady");
  return args.is_ready;
}

namespace {
struct CallbackState {
  const PJRT_Api* api;
  std::function<void(std::optional<Error>)> callback;
};

void on_ready_trampoline(PJRT_Error* error, void* user_arg) {
  std::unique_ptr<CallbackState> state(static_cast<CallbackState*>(user_arg));
  if (error != nullptr) {
    state->callback(to_exception(state->api, error, "asynchronous PJRT work"));
  } else {
    state->callback(std::nullopt);
  }
}
}  // namespace

void Event::on_ready(std::function<void(std::optional<Error>)> callback) {
  if (event_ == nullptr) {
    callback(std::nullopt);
    return;
  }
  auto* state = new CallbackState{api_, std::move(callback)};
  auto args = make_args<PJRT_Event_OnReady_Args>();
  args.event = event_;
  args.callback = &on_ready_trampoline;
  args.user_arg = state;
  PJRT_Error* error = api_->PJRT_Event_OnReady(&args);
  if (error != nullptr) {
    delete state;
    check(api_, error, "PJRT_Event_OnReady");
  }
}

}  // namespace torch_tpu::pjrt
