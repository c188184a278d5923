#include "csrc/dispatch/fatal_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "csrc/dispatch/flight_recorder.h"

namespace torch_tpu::flight {
namespace {

constexpr std::array<int, 5> kSignals = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
std::array<struct sigaction, 32> previous{};  // by signal number
char directory[512];  // the dump folder, fixed at installation (no allocation in the handler)

// Appends `text` to the NUL-terminated `out` of `size` bytes.
void append(char* out, size_t size, std::string_view text) {
  const size_t used = std::strlen(out);
  const size_t n = std::min(text.size(), size - 1 - used);
  std::memcpy(out + used, text.data(), n);
  out[used + n] = '\0';
}

void append_number(char* out, size_t size, long value) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  append(out, size, std::string_view(digits, static_cast<size_t>(end - digits)));
}

std::string_view signal_name(int signal) {
  switch (signal) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGABRT:
      return "SIGABRT";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
  }
  return "a fatal signal";
}

// mkdir -p with system calls only.
void make_directories(char* path) {
  for (char* at = path + 1; *at != '\0'; ++at) {
    if (*at != '/') continue;
    *at = '\0';
    ::mkdir(path, 0755);
    *at = '/';
  }
  ::mkdir(path, 0755);
}

void on_fatal_signal(int signal, siginfo_t* /*info*/, void* /*context*/) {
  static std::atomic<bool> dumped{false};
  if (!dumped.exchange(true)) {
    char path[640] = {};
    append(path, sizeof(path), directory);
    make_directories(path);
    append(path, sizeof(path), "/flight-record-");
    append_number(path, sizeof(path), static_cast<long>(::getpid()));
    append(path, sizeof(path), "-");
    append(path, sizeof(path), signal_name(signal));
    append(path, sizeof(path), ".txt");
    char reason[64] = {};
    append(reason, sizeof(reason), "fatal signal ");
    append(reason, sizeof(reason), signal_name(signal));
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      write_record(fd, reason);
      ::close(fd);
      char note[768] = {};
      append(note, sizeof(note), "torch_tpu: ");
      append(note, sizeof(note), reason);
      append(note, sizeof(note), "; the last ops dispatched are in ");
      append(note, sizeof(note), path);
      append(note, sizeof(note), "\n");
      [[maybe_unused]] const ssize_t wrote = ::write(STDERR_FILENO, note, std::strlen(note));
    }
  }
  // The signal goes on as if we had not been here: the previous handler (or the default action)
  // takes it once this one returns.
  ::sigaction(signal, &previous[signal], nullptr);
  ::raise(signal);
}

}  // namespace

void install_fatal_signal_dump() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    if (capacity() == 0) return;
    const std::string folder = dump_directory();
    std::strncpy(directory, folder.c_str(), sizeof(directory) - 1);
    struct sigaction action{};
    action.sa_sigaction = on_fatal_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (int signal : kSignals) ::sigaction(signal, &action, &previous[signal]);
  });
}

}  // namespace torch_tpu::flight
