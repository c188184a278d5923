#include "csrc/device/stderr_capture.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace torch_tpu {

StderrCapture::StderrCapture() {
  std::fflush(stderr);
  FILE* file = std::tmpfile();
  if (file == nullptr) return;
  capture_fd_ = dup(fileno(file));
  std::fclose(file);  // the duplicate keeps the (already unlinked) file open
  saved_fd_ = dup(STDERR_FILENO);
  if (capture_fd_ < 0 || saved_fd_ < 0 || dup2(capture_fd_, STDERR_FILENO) < 0) restore();
}

StderrCapture::~StderrCapture() { restore(); }

std::string StderrCapture::restore() {
  std::string text;
  if (saved_fd_ >= 0) {
    std::fflush(stderr);
    dup2(saved_fd_, STDERR_FILENO);
    close(saved_fd_);
    saved_fd_ = -1;
  }
  if (capture_fd_ >= 0) {
    char chunk[4096];
    ssize_t got = 0;
    lseek(capture_fd_, 0, SEEK_SET);
    while ((got = read(capture_fd_, chunk, sizeof(chunk))) > 0) text.append(chunk, got);
    close(capture_fd_);
    capture_fd_ = -1;
  }
  return text;
}

void StderrCapture::replay() {
  std::string text = restore();
  if (!text.empty()) {
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
}

bool plugin_logs_requested() {
  const char* level = std::getenv("TORCH_TPU_LOG_LEVEL");
  return level != nullptr && *level != '\0' && std::string(level) != "off";
}

}  // namespace torch_tpu
