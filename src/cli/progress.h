// Progress for long lab work: a bar redrawn in place on a terminal, a plain line every tenth of
// the way otherwise (logs stay readable); and Ctrl-C as a flag the work polls, so an interrupted
// run still writes what it measured.
#pragma once

#include <atomic>
#include <string>

namespace coda::cli {

class ProgressLine {
 public:
  explicit ProgressLine(std::string label);
  void update(int64_t done, int64_t total, const std::string& detail);
  void finish();

 private:
  std::string label_;
  bool tty_;
  int last_tenth_ = -1;
  int64_t last_done_ = -1;
  bool drawn_ = false;
};

// Installs a SIGINT/SIGTERM handler that sets the flag (a second Ctrl-C ends the process at once);
// the previous handlers come back when it goes out of scope.
class InterruptFlag {
 public:
  InterruptFlag();
  ~InterruptFlag();
  std::atomic<bool>* flag();
};

}  // namespace coda::cli
