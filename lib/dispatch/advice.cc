#include "dispatch/advice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ferry::dispatch {

namespace {

// Cumulative figures that went back: the peer restarted (a new process under the same
// name). Its old series says nothing about the new one.
bool WentBack(const wire::ConsumerLoad& before, const wire::ConsumerLoad& now) {
  return now.elapsed_ns < before.elapsed_ns || now.wait_ns < before.wait_ns || now.samples < before.samples;
}
bool WentBack(const wire::WorkerLoad& before, const wire::WorkerLoad& now) {
  return now.samples < before.samples || now.busy_ns < before.busy_ns;
}

bool Plausible(int64_t v) { return v >= 0 && v <= LoadTracker::kMaxFigure; }
bool Plausible(const wire::ConsumerLoad& l) {
  return Plausible(l.wait_ns) && Plausible(l.elapsed_ns) && Plausible(l.samples);
}
bool Plausible(const wire::WorkerLoad& l) {
  return Plausible(l.samples) && Plausible(l.busy_ns) && Plausible(l.read_ns) && Plausible(l.decode_ns) &&
         Plausible(l.augment_ns);
}

std::string Percent(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100.0 * f);
  return b;
}

}  // namespace

template <typename T>
void LoadTracker::Series<T>::Add(int64_t now_ms, const T& v) {
  if (!points.empty() && (WentBack(points.back().second, v) || now_ms < points.back().first)) points.clear();
  // The rates read only the oldest point of the window and the newest, so the points
  // between are kept a step apart: the newest is overwritten until it is a step past
  // the one before. A worker heartbeating every 100 ms holds about 21 points, not 100
  // (most of a registered worker's memory was these), and its heartbeat copies its
  // figures into a point it has, without allocating.
  if (points.size() >= 2 && now_ms - points[points.size() - 2].first < kStepMs) {
    points.back().first = now_ms;
    points.back().second = v;
  } else {
    points.emplace_back(now_ms, v);
  }
  // Keep one point at or before the window's start, as the base of the differences.
  while (points.size() >= 2 && points[1].first <= now_ms - kWindowMs) points.pop_front();
  while (points.size() > 512) points.pop_front();  // heartbeats every few ms: still bounded
}

void LoadTracker::Consumer(const std::string& job, const std::string& consumer, const wire::ConsumerLoad& load,
                           int64_t now_ms) {
  if (load.elapsed_ns <= 0 || !Plausible(load)) return;  // not started yet (nothing yielded), or nonsense
  consumers_[{job, consumer}].Add(now_ms, load);
  latest_ms_ = std::max(latest_ms_, now_ms);
}

void LoadTracker::Worker(const std::string& worker, const wire::WorkerLoad& load, int64_t now_ms) {
  if (!Plausible(load)) return;
  workers_[worker].Add(now_ms, load);
  latest_ms_ = std::max(latest_ms_, now_ms);
}

LoadTracker::WorkerRate LoadTracker::RateOf(const std::string& worker) const {
  WorkerRate r;
  auto it = workers_.find(worker);
  if (it == workers_.end() || it->second.points.size() < 2 || Stale(it->second)) return r;
  const auto& [t0, a] = it->second.points.front();
  const auto& [t1, b] = it->second.points.back();
  const double dt = double(t1 - t0) / 1e3;
  if (dt < 1.0) return r;
  const double samples = double(b.samples - a.samples), busy = double(b.busy_ns - a.busy_ns) / 1e9;
  r.known = true;
  r.rate = samples / dt;
  r.busy = std::min(1.0, busy / dt);
  r.capacity = busy > 0.05 && samples > 0 ? samples / busy : 0;
  r.read = double(b.read_ns - a.read_ns) / 1e9;
  r.decode = double(b.decode_ns - a.decode_ns) / 1e9;
  r.augment = double(b.augment_ns - a.augment_ns) / 1e9;
  // Per step: the mean cost per timed sample in the window (steps newly seen count from
  // zero; a peer's cumulative figures only grow, else the series restarted).
  for (const wire::OpCost& o : b.ops) {
    int64_t ns0 = 0, n0 = 0;
    for (const wire::OpCost& p : a.ops) {
      if (p.name == o.name) ns0 = p.ns, n0 = p.samples;
    }
    const int64_t dn = o.samples - n0, dns = o.ns - ns0;
    if (dn > 0 && dns >= 0 && Plausible(o.ns)) r.ops[o.name] += double(dns) / 1e9 / double(dn);
  }
  return r;
}

LoadTracker::Advice LoadTracker::AdviceFor(const std::string& job, const std::vector<std::string>& consumers,
                                           const std::vector<std::string>& workers,
                                           const std::string& storage) const {
  Advice a;
  // The job's share of the decode threads of its workers, whatever its consumers report.
  double job_ns = 0, all_ns = 0;
  for (const std::string& w : workers) {
    auto it = workers_.find(w);
    if (it == workers_.end() || it->second.points.size() < 2 || Stale(it->second)) continue;
    const wire::WorkerLoad& x = it->second.points.front().second;
    const wire::WorkerLoad& y = it->second.points.back().second;
    for (const wire::JobBusy& b : y.jobs) {
      int64_t before = 0;
      for (const wire::JobBusy& p : x.jobs) {
        if (p.name == b.name) before = p.ns;
      }
      if (b.ns < before) before = 0;  // its flow was forgotten and came back: counted from zero
      const double d = double(b.ns - before);
      all_ns += d;
      if (b.name == job) job_ns += d;
    }
  }
  if (all_ns > 0) a.thread_share = job_ns / all_ns;
  double wait = 0, elapsed = 0;
  for (const std::string& c : consumers) {
    auto it = consumers_.find({job, c});
    if (it == consumers_.end() || it->second.points.size() < 2 || Stale(it->second)) continue;
    const wire::ConsumerLoad& x = it->second.points.front().second;
    const wire::ConsumerLoad& y = it->second.points.back().second;
    const double e = double(y.elapsed_ns - x.elapsed_ns) / 1e9, w = double(y.wait_ns - x.wait_ns) / 1e9;
    if (e < 1.0) continue;
    // A trainer that does nothing between batches (a loader benchmark) would take any
    // rate: its compute time is floored at 2% of its time, so the advice stays finite.
    const double compute = std::max(e - w, 0.02 * e);
    a.demand += double(y.samples - x.samples) / compute;
    wait += w;
    elapsed += e;
    a.known = true;
  }
  if (!a.known) return a;
  a.input_wait = std::min(1.0, wait / elapsed);

  double capacity = 0, busy = 0, read = 0, decode = 0, augment = 0;
  std::map<std::string, double> ops;  // mean seconds per sample per step, summed over workers
  int known = 0;
  for (const std::string& w : workers) {
    const WorkerRate r = RateOf(w);
    if (!r.known || r.capacity <= 0) continue;
    capacity += r.capacity;
    busy += r.busy;
    read += r.read;
    decode += r.decode;
    augment += r.augment;
    for (const auto& [name, s] : r.ops) ops[name] += s;
    ++known;
  }
  double per_sample = 0;
  for (const auto& [name, s] : ops) per_sample += s;
  if (per_sample > 0) {
    for (const auto& [name, s] : ops) a.op_shares.emplace_back(name, s / per_sample);
    std::stable_sort(a.op_shares.begin(), a.op_shares.end(),
                     [](const auto& x, const auto& y) { return x.second > y.second; });
  }
  if (known > 0) {
    capacity /= known;
    busy /= known;
    // The smallest count whose capacity covers the demand (the 1e-9: a demand of
    // exactly 3 workers' capacity needs 3, not 4).
    const double need = std::ceil(a.demand / capacity - 1e-9);
    a.recommended_workers = need >= double(kMaxRecommended) ? kMaxRecommended : std::max<int64_t>(1, int64_t(need));
  }
  const bool bound = a.input_wait >= kInputBound;
  if (!bound) {
    a.limited_by = "the trainer (input wait " + Percent(a.input_wait) + ")";
  } else if (known == 0) {
    a.limited_by = "input (wait " + Percent(a.input_wait) + "); no worker reports production yet";
  } else if (busy < 0.7) {
    a.limited_by = "the path to the trainer (network, or splits to lease): workers busy " + Percent(busy) +
                   " while the trainer waits " + Percent(a.input_wait);
  } else {
    const double stages = read + decode + augment;
    std::string stage = "their capacity";
    if (stages > 0) {
      const double top = std::max({read, decode, augment});
      const std::string name = top == read ? "reads: " + storage : top == decode ? "decode" : "augment";
      stage = name + " (" + Percent(top / stages) + " of a sample's time)";
    }
    a.limited_by = "workers: " + stage + "; input wait " + Percent(a.input_wait);
    if (!a.op_shares.empty()) {
      // The costliest steps, by name: what an operator changes (a lighter op, more workers).
      std::string top;
      for (size_t k = 0; k < a.op_shares.size() && k < 3; ++k)
        top += (k ? ", " : "") + a.op_shares[k].first + " " + Percent(a.op_shares[k].second);
      a.limited_by += "; costliest steps: " + top;
    }
  }
  return a;
}

}  // namespace ferry::dispatch
