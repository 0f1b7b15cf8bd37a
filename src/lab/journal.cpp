#include "lab/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <random>

namespace coda::lab {

namespace {

enum Op { kCreateStudy = 0, kSetStudyUserAttr = 2, kCreateTrial = 4, kSetTrialParam = 5, kSetTrialStateValues = 6,
          kSetTrialUserAttr = 8 };
constexpr int kStateComplete = 1, kMinimize = 1;

}  // namespace

std::string JournalStudy::now_iso() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char b[64];
  std::snprintf(b, sizeof b, "%04d-%02d-%02dT%02d:%02d:%02d.%06lld", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(us));
  return b;
}

Expected<JournalStudy> JournalStudy::open(const std::string& path, const std::string& name,
                                          const std::vector<std::string>& objective_names) {
  JournalStudy s;
  s.path_ = path;
  s.name_ = name;
  std::random_device rd;
  s.worker_ = "coda-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  std::ifstream in(path);
  if (!in) {
    nlohmann::ordered_json create{{"op_code", kCreateStudy}, {"worker_id", s.worker_}, {"study_name", name},
                                  {"directions", std::vector<int>(objective_names.size(), kMinimize)}};
    nlohmann::ordered_json names{{"op_code", kSetStudyUserAttr}, {"worker_id", s.worker_}, {"study_id", 0},
                                 {"user_attr", {{"objectives", objective_names}}}};
    CODA_RETURN_IF_ERROR(s.append({create, names}));
    return s;
  }
  std::map<int, size_t> by_id;  // trial_id -> index in trials_
  bool created = false;
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::vector<std::string> lines;
  for (size_t b = 0; b < all.size();) {
    const size_t e = all.find('\n', b);
    lines.push_back(all.substr(b, e == std::string::npos ? std::string::npos : e - b));
    b = e == std::string::npos ? all.size() : e + 1;
  }
  const bool ends_in_newline = all.empty() || all.back() == '\n';
  size_t good_bytes = 0;  // the file up to the end of the last operation read whole
  for (size_t n = 0; n < lines.size(); ++n) {
    const size_t line_end = good_bytes + lines[n].size() + 1;
    const bool last = n + 1 == lines.size();
    if (lines[n].empty()) {
      good_bytes = std::min(line_end, all.size());
      continue;
    }
    const std::string where = path + ":" + std::to_string(n + 1) + ": ";
    auto j = nlohmann::json::parse(lines[n], nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("op_code") || !j["op_code"].is_number_integer()) {
      // A line cut by a crash mid-write: the trial it began is lost. It is cut off the file before
      // anything is appended, or the next operation would be glued to the fragment and the file
      // would no longer load in Optuna (JSONDecodeError) or here.
      if (last && !ends_in_newline) {
        s.repair_bytes_ = good_bytes;
        s.repair_note_ = path + ": the last line (" + std::to_string(lines[n].size()) +
                         " bytes) was cut short by an interrupted write; it is removed before appending (the trial "
                         "it began is lost)";
        break;
      }
      return Error(where + "not an Optuna journal operation");
    }
    good_bytes = std::min(line_end, all.size());
    if (last && !ends_in_newline) {  // whole, but its newline was lost: the next line must not join it
      s.repair_bytes_ = all.size();
      s.repair_newline_ = true;
    }
    const int op = j["op_code"].get<int>();
    try {
      if (op == kCreateStudy) {
        if (created) return Error(where + "a second study; coda keeps one study per file");
        created = true;
        s.name_ = j.at("study_name").get<std::string>();
        if (j.at("directions").size() != objective_names.size())
          return Error(path + ": the study has " + std::to_string(j.at("directions").size()) + " objectives, not " +
                       std::to_string(objective_names.size()) + "; use a new --study file for other --objectives");
        for (const auto& d : j.at("directions"))
          if (d.get<int>() != kMinimize) return Error(path + ": coda minimises every objective; this study maximises one");
      } else if (op == kCreateTrial) {
        StudyTrial t;
        t.number = static_cast<int>(s.trials_.size());
        by_id[s.next_trial_id_++] = s.trials_.size();
        s.trials_.push_back(t);
      } else if (op == kSetTrialParam) {
        auto it = by_id.find(j.at("trial_id").get<int>());
        if (it == by_id.end()) return Error(where + "a parameter for an unknown trial");
        s.trials_[it->second].params[j.at("param_name").get<std::string>()] = j.at("param_value_internal").get<double>();
      } else if (op == kSetTrialUserAttr) {
        auto it = by_id.find(j.at("trial_id").get<int>());
        if (it == by_id.end()) return Error(where + "an attribute for an unknown trial");
        s.trials_[it->second].user_attrs.update(j.at("user_attr"));
      } else if (op == kSetTrialStateValues) {
        auto it = by_id.find(j.at("trial_id").get<int>());
        if (it == by_id.end()) return Error(where + "a state for an unknown trial");
        StudyTrial& t = s.trials_[it->second];
        if (j.at("state").get<int>() == kStateComplete && j.contains("values") && j["values"].is_array()) {
          t.complete = true;
          t.values = j["values"].get<std::vector<double>>();
        }
      }
    } catch (const nlohmann::json::exception& e) {
      return Error(where + "malformed operation: " + e.what());
    }
  }
  if (!created) return Error(path + ": no study in this file (is it an Optuna journal?)");
  if (s.repair_bytes_ != std::string::npos) CODA_RETURN_IF_ERROR(s.repair());
  return s;
}

Status JournalStudy::repair() {
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Error("cannot repair the study file " + path_ + ": " + std::strerror(errno));
  bool ok = ::ftruncate(fd, static_cast<off_t>(repair_bytes_)) == 0;
  if (ok && repair_newline_) ok = ::pwrite(fd, "\n", 1, static_cast<off_t>(repair_bytes_)) == 1;
  if (ok) ok = ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return Error("cannot repair the study file " + path_ + ": " + std::strerror(errno));
  if (!repair_note_.empty()) std::fprintf(stderr, "coda tune: %s\n", repair_note_.c_str());
  repair_bytes_ = std::string::npos;
  return Status::Ok();
}

Status JournalStudy::append(const std::vector<nlohmann::ordered_json>& ops) {
  std::string text;
  for (const auto& op : ops) text += op.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // One write(2) of the whole trial with O_APPEND, then fsync: a crash leaves whole lines, or one
  // torn last line that the next open() cuts off.
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Error("cannot write the study file " + path_ + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool ok = done == text.size() && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  return ok ? Status::Ok() : Status(Error("cannot write the study file " + path_ + ": " + std::strerror(err)));
}

Status JournalStudy::add_trial(const SearchSpace& space, const std::map<std::string, double>& params,
                               const std::vector<double>& values, const nlohmann::json& user_attrs,
                               const std::string& datetime_start) {
  const int id = next_trial_id_;
  std::vector<nlohmann::ordered_json> ops;
  ops.push_back({{"op_code", kCreateTrial},
                 {"worker_id", worker_},
                 {"study_id", 0},
                 {"datetime_start", datetime_start.empty() ? now_iso() : datetime_start}});
  for (const auto& p : space) {
    auto it = params.find(p.name);
    if (it == params.end()) continue;
    ops.push_back({{"op_code", kSetTrialParam}, {"worker_id", worker_}, {"trial_id", id}, {"param_name", p.name},
                   {"param_value_internal", it->second}, {"distribution", p.optuna_distribution()}});
  }
  for (const auto& [k, v] : user_attrs.items())
    ops.push_back({{"op_code", kSetTrialUserAttr}, {"worker_id", worker_}, {"trial_id", id}, {"user_attr", {{k, v}}}});
  ops.push_back({{"op_code", kSetTrialStateValues}, {"worker_id", worker_}, {"trial_id", id},
                 {"state", kStateComplete}, {"values", values}, {"datetime_complete", now_iso()}});
  CODA_RETURN_IF_ERROR(append(ops));
  ++next_trial_id_;
  StudyTrial t;
  t.number = static_cast<int>(trials_.size());
  t.complete = true;
  t.params = params;
  t.values = values;
  t.user_attrs = user_attrs;
  trials_.push_back(std::move(t));
  return Status::Ok();
}

}  // namespace coda::lab
