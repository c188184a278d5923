#include "csrc/distributed/pjrt_key_value.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <vector>

namespace torch_tpu::distributed {
namespace {

c10d::Store& store_of(void* user_arg) { return static_cast<PjrtKeyValueStore*>(user_arg)->store(); }

void delete_value(char* value) { delete[] value; }

// Hands `key`'s value to the plugin in the get callbacks' out fields; the plugin frees it with
// the deleter.
template <typename Args>
void hand_over(c10d::Store& store, const std::string& key, Args* args) {
  const std::vector<uint8_t> value = store.get(key);
  char* out = new char[value.size() + 1];
  std::memcpy(out, value.data(), value.size());
  out[value.size()] = '\0';
  args->value = out;
  args->value_size = value.size();
  args->value_deleter_callback = delete_value;
}

// Runs `body` and turns any exception into the plugin's error: a callback must not throw
// across the C boundary. A store timeout is DEADLINE_EXCEEDED, as the plugin expects of a
// blocking get that gives up.
template <typename Body>
PJRT_Error* reporting(PJRT_CallbackError* error, Body&& body) {
  auto report = [&](PJRT_Error_Code code, const std::string& message) {
    return (*error)(code, message.data(), message.size());
  };
  try {
    return body();
  } catch (const c10::DistStoreError& e) {
    return report(PJRT_Error_Code_DEADLINE_EXCEEDED, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return report(PJRT_Error_Code_UNAVAILABLE, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return report(PJRT_Error_Code_INTERNAL, e.what());
  }
}

PJRT_Error* get_callback(PJRT_KeyValueGetCallback_Args* args) {
  return reporting(args->callback_error, [&]() -> PJRT_Error* {
    c10d::Store& store = store_of(args->user_arg);
    const std::string key(args->key, args->key_size);
    // A non-positive timeout leaves the store's own (the process group's) in force.
    if (args->timeout_in_ms > 0) {
      store.wait({key}, std::chrono::milliseconds(args->timeout_in_ms));
    } else {
      store.wait({key});
    }
    hand_over(store, key, args);
    return nullptr;
  });
}

PJRT_Error* try_get_callback(PJRT_KeyValueTryGetCallback_Args* args) {
  return reporting(args->callback_error, [&]() -> PJRT_Error* {
    c10d::Store& store = store_of(args->user_arg);
    const std::string key(args->key, args->key_size);
    if (!store.check({key})) {
      const std::string message = "key '" + key + "' is not in the store";
      return (*args->callback_error)(PJRT_Error_Code_NOT_FOUND, message.data(), message.size());
    }
    hand_over(store, key, args);
    return nullptr;
  });
}

PJRT_Error* put_callback(PJRT_KeyValuePutCallback_Args* args) {
  return reporting(args->callback_error, [&]() -> PJRT_Error* {
    const auto* bytes = reinterpret_cast<const uint8_t*>(args->value);
    store_of(args->user_arg)
        .set(std::string(args->key, args->key_size),
             std::vector<uint8_t>(bytes, bytes + args->value_size));
    return nullptr;
  });
}

// The error function the tests hand the callbacks, in place of the plugin's: it keeps the
// code and message, and returns a marker that is not null.
struct CallbackFailure {
  PJRT_Error_Code code = PJRT_Error_Code_OK;
  std::string message;
};
thread_local CallbackFailure last_failure;

PJRT_Error* record_failure(PJRT_Error_Code code, const char* message, size_t size) {
  last_failure = {code, std::string(message, size)};
  return reinterpret_cast<PJRT_Error*>(&last_failure);
}

const char* code_name(PJRT_Error_Code code) {
  switch (code) {
    case PJRT_Error_Code_DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case PJRT_Error_Code_NOT_FOUND:
      return "NOT_FOUND";
    case PJRT_Error_Code_UNAVAILABLE:
      return "UNAVAILABLE";
    default:
      return "INTERNAL";
  }
}

[[noreturn]] void raise_failure(const char* callback) {
  TORCH_CHECK(false, "tpu_dist key-value ", callback, ": ", code_name(last_failure.code), ": ",
              last_failure.message);
}

std::string take_value(char* value, size_t size, void (*deleter)(char*)) {
  std::string out(value, size);
  deleter(value);
  return out;
}

}  // namespace

PjrtKeyValueStore::PjrtKeyValueStore(c10::intrusive_ptr<c10d::Store> store)
    : store_(std::move(store)) {
  TORCH_CHECK(store_, "tpu_dist: the PJRT key-value store needs a c10d store");
}

pjrt::KeyValueCallbacks PjrtKeyValueStore::callbacks() {
  return {get_callback, try_get_callback, put_callback, this};
}

std::string PjrtKeyValueStore::get(const std::string& key, int timeout_ms) {
  PJRT_CallbackError error = record_failure;
  auto args = pjrt::make_args<PJRT_KeyValueGetCallback_Args>();
  args.key = key.data();
  args.key_size = key.size();
  args.timeout_in_ms = timeout_ms;
  args.callback_error = &error;
  args.user_arg = this;
  if (get_callback(&args) != nullptr) raise_failure("get");
  return take_value(args.value, args.value_size, args.value_deleter_callback);
}

std::optional<std::string> PjrtKeyValueStore::try_get(const std::string& key) {
  PJRT_CallbackError error = record_failure;
  auto args = pjrt::make_args<PJRT_KeyValueTryGetCallback_Args>();
  args.key = key.data();
  args.key_size = key.size();
  args.callback_error = &error;
  args.user_arg = this;
  if (try_get_callback(&args) != nullptr) {
    if (last_failure.code == PJRT_Error_Code_NOT_FOUND) return std::nullopt;
    raise_failure("try_get");
  }
  return take_value(args.value, args.value_size, args.value_deleter_callback);
}

void PjrtKeyValueStore::put(const std::string& key, const std::string& value) {
  PJRT_CallbackError error = record_failure;
  auto args = pjrt::make_args<PJRT_KeyValuePutCallback_Args>();
  args.key = key.data();
  args.key_size = key.size();
  args.value = value.data();
  args.value_size = value.size();
  args.callback_error = &error;
  args.user_arg = this;
  if (put_callback(&args) != nullptr) raise_failure("put");
}

}  // namespace torch_tpu::distributed
