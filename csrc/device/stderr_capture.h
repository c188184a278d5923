// Holds back what the PJRT plugin writes to stderr while it starts. The CPU plugin prints
// absl's "All log messages before absl::InitializeLog()" preamble and an INFO line on every
// start; importing torch must print nothing. The text is shown when the start fails, or always
// when TORCH_TPU_LOG_LEVEL asks for the plugin's logs.
#pragma once

#include <string>

namespace torch_tpu {

class StderrCapture {
 public:
  StderrCapture();   // starts capturing file descriptor 2 (a no-op where that is not possible)
  ~StderrCapture();  // restores stderr, dropping the text unless replay() already showed it
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Restores stderr and writes the captured text to it.
  void replay();

 private:
  std::string restore();
  int saved_fd_ = -1;
  int capture_fd_ = -1;
};

// Whether the plugin's logs were asked for (TORCH_TPU_LOG_LEVEL set to anything but "off").
bool plugin_logs_requested();

}  // namespace torch_tpu
