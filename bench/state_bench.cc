// ferry-state-bench: what a journal compaction costs the dispatcher's deciding thread,
// for a state the size of `ferry-bench dispatcher-load --jobs 1000 --splits 1000`
// (a thousand jobs, a thousand splits each, eight workers leasing each, half the
// splits acknowledged). Each figure is the time one call holds the calling thread:
//   BM_Snapshot          DispatcherState::Snapshot(), the list of updates a snapshot holds
//   BM_StartCompaction   Journal::StartCompaction() (the snapshot taken, its writing handed
//                        off); and BM_Compact, the whole compaction written synchronously
//                        (what the deciding thread paid for each before the writing moved
//                        to a thread of its own).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <string>
#include <vector>

#include "dispatch/journal.h"
#include "dispatch/state.h"

namespace ferry::dispatch {
namespace {

DispatcherState& BigState(int jobs, int splits) {
  static DispatcherState* s = nullptr;
  static int built_jobs = -1, built_splits = -1;
  if (s != nullptr && built_jobs == jobs && built_splits == splits) return *s;
  delete s;
  s = new DispatcherState;
  const int workers = 8 * jobs;
  for (int w = 0; w < workers; ++w) (void)s->Apply(RegisterWorker{"worker-" + std::to_string(w), "10.0.0.1:7000"});
  for (int j = 0; j < jobs; ++j) {
    const std::string name = "job-" + std::to_string(j);
    JobSpec spec;
    spec.dataset = "/data/imagenet/train";
    spec.batch_size = 256;
    spec.batches_per_split = 1;
    spec.num_samples = int64_t(splits) * 256;
    spec.epochs = 1;
    (void)s->Apply(CreateJob{name, spec});
    (void)s->Apply(AddConsumer{name, "trainer-" + std::to_string(j) + "-rank-0"});
  }
  // Each job's eight workers lease its splits in turn; the first half are acknowledged
  // and the next 32 held (a worker leases up to 4 ahead), the rest pending.
  for (int j = 0; j < jobs; ++j) {
    const std::string name = "job-" + std::to_string(j), consumer = "trainer-" + std::to_string(j) + "-rank-0";
    for (int k = 0; k < splits / 2 + 32 && k < splits; ++k) {
      const SplitId ref{0, k};
      (void)s->Apply(LeaseSplits{name, "worker-" + std::to_string(8 * j + k % 8), {{ref, consumer}}});
      if (k < splits / 2) (void)s->Apply(AckSplits{name, consumer, {ref}});
    }
  }
  built_jobs = jobs;
  built_splits = splits;
  return *s;
}

void BM_Snapshot(benchmark::State& st) {
  const DispatcherState& s = BigState(int(st.range(0)), int(st.range(1)));
  size_t n = 0;
  for (auto _ : st) {
    std::vector<Update> snap = s.Snapshot();
    n = snap.size();
    benchmark::DoNotOptimize(snap);
  }
  st.counters["updates"] = double(n);
}

void CompactBench(benchmark::State& st, bool background) {
  const DispatcherState& s = BigState(int(st.range(0)), int(st.range(1)));
  const std::string dir = std::filesystem::temp_directory_path() / "ferry-state-bench";
  std::filesystem::remove_all(dir);
  std::vector<Update> replay;
  auto j = Journal::Open(dir, &replay);
  if (!j.ok()) {
    st.SkipWithError(j.status().ToString().c_str());
    return;
  }
  for (auto _ : st) {
    if (background) {
      (*j)->StartCompaction(s);
      st.PauseTiming();
      (void)(*j)->FinishCompaction(/*wait=*/true);
      st.ResumeTiming();
    } else {
      (void)(*j)->Compact(s);
    }
  }
  j->reset();
  std::filesystem::remove_all(dir);
}

void BM_StartCompaction(benchmark::State& st) { CompactBench(st, true); }
void BM_Compact(benchmark::State& st) { CompactBench(st, false); }

BENCHMARK(BM_Snapshot)->Args({1000, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StartCompaction)->Args({1000, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Compact)->Args({1000, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ferry::dispatch

BENCHMARK_MAIN();
