#include "cli/progress.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace coda::cli {

namespace {

std::atomic<bool> g_interrupted{false};  // a signal handler can only reach a global
void on_signal(int) {
  if (g_interrupted.exchange(true)) std::_Exit(130);
}

}  // namespace

ProgressLine::ProgressLine(std::string label) : label_(std::move(label)), tty_(::isatty(STDERR_FILENO) != 0) {}

void ProgressLine::update(int64_t done, int64_t total, const std::string& detail) {
  if (total <= 0) return;
  if (tty_) {
    if (done == last_done_ && drawn_) return;
    last_done_ = done;
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(kWidth * done / total);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld %s\x1b[K", label_.c_str(), bar.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), detail.c_str());
    drawn_ = true;
  } else {
    const int tenth = static_cast<int>(10 * done / total);
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
    std::fprintf(stderr, "%s: %lld/%lld %s\n", label_.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), detail.c_str());
  }
  std::fflush(stderr);
}

void ProgressLine::finish() {
  if (tty_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

InterruptFlag::InterruptFlag() {
  g_interrupted = false;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

InterruptFlag::~InterruptFlag() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

std::atomic<bool>* InterruptFlag::flag() {
  return &g_interrupted;
}

}  // namespace coda::cli
