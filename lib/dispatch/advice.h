// LoadTracker: the dispatcher's view of how fast each job is consumed and produced, and
// its advice: is the job input-bound, what limits it, and how many workers remove the
// stall (ferry_job_recommended_workers, ferry-ctl status).
//
// Inputs, cumulative figures that the peers send anyway:
//   consumers  with each AckSplits and GetJobStatus (wire::ConsumerLoad): time blocked
//              in Next(), wall time from the first Next() to the last, samples yielded;
//   workers    with each heartbeat (wire::WorkerLoad): samples produced, busy time
//              (some stream producing, not waiting for its consumer or for splits),
//              the read/decode/augment time summed over samples, and each pipeline
//              step's time over the samples timed step by step (so the advice names
//              the costliest op: "rand_augment 41%, decode 33%, ...").
// Each is kept as a short series, and the figures below are differences over the last
// kWindowMs (so a lost message loses nothing, and a trainer that changes pace is seen
// within a window). In memory only: a restarted dispatcher learns them again.
//
// The model: a consumer that waited w of its elapsed time e and yielded n samples
// computes for e - w, so without waiting it would take demand = n / (e - w) samples/s.
// A worker produced m samples in b busy seconds: its capacity is m / b, whatever its
// consumers took. The job needs ceil(sum of demands / mean capacity) workers. This
// holds while a worker serves one job at a time (its capacity is shared otherwise, and
// the advice then errs towards more workers).
#ifndef FERRY_DISPATCH_ADVICE_H_
#define FERRY_DISPATCH_ADVICE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "wire/control.h"

namespace ferry::dispatch {

class LoadTracker {
 public:
  static constexpr int64_t kWindowMs = 10000;
  static constexpr int64_t kStepMs = kWindowMs / 20;  // between the points kept (Series::Add)
  // Input wait over this fraction of the consumers' time makes a job input-bound.
  static constexpr double kInputBound = 0.10;
  // A figure past this (ns: 31 years; samples: 10^18) or below 0 is not a real peer's:
  // the load is ignored, so that no difference overflows and no advice is absurd.
  static constexpr int64_t kMaxFigure = int64_t(1) << 60;
  // Advice never names more workers than this.
  static constexpr int64_t kMaxRecommended = 100000;

  void Consumer(const std::string& job, const std::string& consumer, const wire::ConsumerLoad& load, int64_t now_ms);
  void Worker(const std::string& worker, const wire::WorkerLoad& load, int64_t now_ms);
  // Forgets the consumers not in `consumers` and the workers not in `workers` (gone,
  // collected): any container with count(id), e.g. the dispatcher state's worker map
  // (no set of 10,000 ids built for each sweep).
  template <typename Workers>
  void Keep(const std::set<std::pair<std::string, std::string>>& consumers, const Workers& workers) {
    std::erase_if(consumers_, [&](const auto& kv) { return consumers.count(kv.first) == 0; });
    std::erase_if(workers_, [&](const auto& kv) { return workers.count(kv.first) == 0; });
  }

  struct WorkerRate {
    bool known = false;     // a window of at least a second, with busy time
    double rate = 0;        // samples/s produced
    double capacity = 0;    // samples per busy second
    double busy = 0;        // fraction of the window busy
    double read = 0, decode = 0, augment = 0;  // stage seconds in the window
    // Each pipeline step's seconds per timed sample in the window (its mean cost), by
    // name ("read", "decode", an op's name, "output").
    std::map<std::string, double> ops;
  };
  WorkerRate RateOf(const std::string& worker) const;

  struct Advice {
    bool known = false;            // the consumers reported a window
    double input_wait = 0;         // fraction of the consumers' time waiting
    double demand = 0;             // samples/s the consumers would take
    int64_t recommended_workers = 0;  // 0: no worker capacity known yet
    std::string limited_by;        // in words
    // The pipeline steps' shares of a sample's time on the job's workers, costliest
    // first (from the workers' sampled op costs; empty until known).
    std::vector<std::pair<std::string, double>> op_shares;
    // The job's share of its workers' decode-thread time in the window (the workers'
    // fair schedulers: a share against its weight); -1 while no worker reports one.
    double thread_share = -1;
  };
  // `consumers`: the job's live consumers; `workers`: those that may serve it.
  // `storage` names where the job's samples are read from ("S3 (s3://bucket)",
  // "HTTPS (host)", "files"), for advice that reads are the limit.
  Advice AdviceFor(const std::string& job, const std::vector<std::string>& consumers,
                   const std::vector<std::string>& workers, const std::string& storage = "files") const;

 private:
  template <typename T>
  struct Series {
    std::deque<std::pair<int64_t, T>> points;  // (now_ms, cumulative figures)
    void Add(int64_t now_ms, const T& v);
  };
  // A series whose last point is a window older than the newest of any (a consumer or
  // worker gone silent, not yet declared gone) says nothing about now.
  template <typename T>
  bool Stale(const Series<T>& s) const {
    return s.points.empty() || s.points.back().first < latest_ms_ - kWindowMs;
  }
  std::map<std::pair<std::string, std::string>, Series<wire::ConsumerLoad>> consumers_;
  std::unordered_map<std::string, Series<wire::WorkerLoad>> workers_;  // (hashed: one lookup a heartbeat)
  int64_t latest_ms_ = 0;  // the newest point's time
};

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_ADVICE_H_
