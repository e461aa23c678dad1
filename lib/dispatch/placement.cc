#include "dispatch/placement.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace ferry::dispatch {

std::string Placement::KeyOf(const JobState& j) {
  return j.content_key != 0 ? "content:" + std::to_string(j.content_key) : "job:" + j.name;
}

int Placement::Target(double weight, size_t candidates) const {
  const int k = std::max(1, int(std::ceil(double(per_job_) * std::min(weight, 1000.0) - 1e-9)));
  return int(std::min<size_t>(size_t(k), candidates));
}

void Placement::Update(const DispatcherState& state,
                       const std::function<bool(const std::string&, const std::string&)>& unfit) {
  if (!active()) return;
  struct Want {
    double weight = 0;
    std::vector<const JobState*> jobs;  // a content's lanes, or the one job
  };
  std::map<std::string, Want> want;
  for (const auto& [name, j] : state.jobs()) {
    if (j.finished() || j.spec.mode != ProcessingMode::kDistributedEpoch) continue;
    Want& w = want[KeyOf(j)];
    w.weight = std::max(w.weight, j.spec.weight);
    w.jobs.push_back(&j);
  }
  auto candidate = [&](const std::string& worker, const Want& w) {
    auto it = state.workers().find(worker);
    if (it == state.workers().end() || it->second.draining || it->second.ServesOnly()) return false;
    for (const JobState* j : w.jobs)
      if (unfit(worker, j->name)) return false;
    return true;
  };
  // Keys gone (finished, removed), and members that can no longer serve theirs.
  for (auto it = members_.begin(); it != members_.end();) {
    auto wt = want.find(it->first);
    for (auto m = it->second.begin(); m != it->second.end();) {
      if (wt != want.end() && candidate(*m, wt->second)) {
        ++m;
        continue;
      }
      if (auto k = keys_of_.find(*m); k != keys_of_.end()) {
        k->second.erase(it->first);
        if (k->second.empty()) keys_of_.erase(k);
      }
      m = it->second.erase(m);
    }
    it = wt == want.end() ? members_.erase(it) : std::next(it);
  }
  size_t candidates = 0;
  for (const auto& [id, w] : state.workers()) candidates += !w.draining && !w.ServesOnly() ? 1 : 0;
  bool short_of_workers = false;
  for (const auto& [key, w] : want) {
    auto it = members_.find(key);
    if (it == members_.end() || int(it->second.size()) < Target(w.weight, candidates)) short_of_workers = true;
  }
  if (!short_of_workers) return;
  // Fill: each short key from the candidates that hold the fewest keys (ties by id).
  std::set<std::pair<size_t, std::string>> by_load;
  for (const auto& [id, w] : state.workers()) {
    if (w.draining || w.ServesOnly()) continue;
    auto k = keys_of_.find(id);
    by_load.insert({k == keys_of_.end() ? 0 : k->second.size(), id});
  }
  for (const auto& [key, w] : want) {
    std::set<std::string>& members = members_[key];
    const size_t target = size_t(Target(w.weight, candidates));
    for (auto it = by_load.begin(); it != by_load.end() && members.size() < target;) {
      const std::string worker = it->second;
      if (members.count(worker) || !candidate(worker, w)) {
        ++it;
        continue;
      }
      members.insert(worker);
      keys_of_[worker].insert(key);
      const size_t load = it->first + 1;
      it = by_load.erase(it);
      by_load.insert({load, worker});  // after this one: met again, skipped as a member
    }
  }
}

std::set<std::string> Placement::JobsOf(const DispatcherState& state, const std::string& worker) const {
  std::set<std::string> out;
  auto it = keys_of_.find(worker);
  if (it == keys_of_.end()) return out;
  for (const std::string& key : it->second) {
    if (key.rfind("job:", 0) == 0) {
      out.insert(key.substr(4));
    } else {
      for (const std::string& lane : state.Lanes(std::stoull(key.substr(8)))) out.insert(lane);
    }
  }
  return out;
}

const std::set<std::string>& Placement::WorkersOf(const JobState& job) const {
  static const std::set<std::string> kNone;
  auto it = members_.find(KeyOf(job));
  return it == members_.end() ? kNone : it->second;
}

}  // namespace ferry::dispatch
