// A study file in Optuna's JournalStorage format (JSON lines of operations, Optuna 3.1's op codes:
// 0 create study, 2 set study user attr, 4 create trial, 5 set trial param, 6 set trial state and
// values, 8 set trial user attr), so `optuna.load_study(storage=JournalStorage(JournalFileStorage(F)))`
// and optuna-dashboard open a `coda tune` study. The file is append-only: every trial is written as
// it completes (one write, then fsync; a line torn by a crash is cut off at the next open), and replaying the file rebuilds the study, which is how `coda tune` resumes after
// an interruption. Lines other tools add with op codes coda does not use are kept and skipped.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "lab/search_space.h"

namespace coda::lab {

struct StudyTrial {
  int number = 0;
  bool complete = false;
  std::map<std::string, double> params;
  std::vector<double> values;
  nlohmann::json user_attrs = nlohmann::json::object();
};

class JournalStudy {
 public:
  // Replays `path` when it exists (its study must have `n_objectives` directions), else creates it
  // with a study named `name`, all objectives minimised, and `objective_names` as a user attribute.
  static Expected<JournalStudy> open(const std::string& path, const std::string& name,
                                     const std::vector<std::string>& objective_names);
  const std::vector<StudyTrial>& trials() const { return trials_; }
  // Appends one completed trial (create, params, user attributes, values) in one write and fsyncs
  // it. `datetime_start`: when the trial began (now_iso() taken then), so Optuna shows its duration.
  Status add_trial(const SearchSpace& space, const std::map<std::string, double>& params,
                   const std::vector<double>& values, const nlohmann::json& user_attrs,
                   const std::string& datetime_start = "");
  // The local time as Optuna's journal writes it (ISO 8601 with microseconds).
  static std::string now_iso();
  const std::string& name() const { return name_; }

 private:
  Status append(const std::vector<nlohmann::ordered_json>& ops);
  // Cuts a torn last line off the file (or ends a whole last line that lost its newline), as open()
  // found it, and says so on stderr.
  Status repair();
  std::string path_, name_, worker_;
  size_t repair_bytes_ = std::string::npos;  // npos: the file needs no repair
  bool repair_newline_ = false;
  std::string repair_note_;
  int next_trial_id_ = 0;
  std::vector<StudyTrial> trials_;
};

}  // namespace coda::lab
