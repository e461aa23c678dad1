// Weighted mixtures (JobSpec::mixture): an epoch of `mixture_epoch` draws from several
// datasets, each source read without replacement.
//
// Glossary
//   counts     source k's draws an epoch: its weight's share of mixture_epoch, by
//              largest remainders (they add up to the epoch; the same every epoch). A
//              fixed count, not a coin per draw: the realized shares are the weights'
//              to within one draw, which is what a mixture's weights are asked to mean
//              (Grain's mixing does the same), and a source's draws before epoch e are
//              e * count, so any epoch's order is computed alone (resume, a worker
//              joining late).
//   draw t     source k's t-th draw since epoch 0: t = e * count + c for the c-th
//              position of epoch e that is k's. Its pass is t / size, its place in that
//              pass t % size, and the pass's order a permutation drawn from (seed, k,
//              pass) (the identity without shuffle). A pass that is not finished at an
//              epoch's end goes on in the next: each source's pass is exactly once.
//   interleave which positions of an epoch are whose: the counts' multiset in an order
//              drawn from (seed, epoch); without shuffle, each source's draws evenly
//              spaced (a smooth weighted round robin).
//   draw id    what the epoch's order holds at a position: the concatenated index of
//              the sample drawn (sources one after the other, in the mixture's order)
//              plus T * (pass mod M), T the sources' total and M the most passes that
//              fit below 2^62. The pass makes a sample's augmentation differ between
//              its passes (augmentation is keyed by the id); Dataset::SampleIndex() turns
//              an id back into the sample a batch reports.
#ifndef FERRY_DATA_MIXTURE_H_
#define FERRY_DATA_MIXTURE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "ferry/job.h"
#include "ferry/status.h"

namespace ferry {

// Each source's draws an epoch (largest remainders of weight / sum * mixture_epoch; ties
// to the earlier source). REQUIRES: job.mixed().
std::vector<int64_t> MixtureCounts(const JobSpec& job);

// The draw ids of `epoch`'s full order. REQUIRES: job.mixed(), every source's
// num_samples > 0 (the listing's).
std::vector<int64_t> MixtureOrder(const JobSpec& job, uint64_t epoch);

// Which source a draw id of `job` came from, and the sample within that source.
struct MixtureDraw {
  int source = 0;
  int64_t index = 0;  // within the source
};
MixtureDraw DecodeDraw(const JobSpec& job, int64_t draw_id);

// The datasets of a mixture as one: indices are draw ids (of any pass); size() is the
// sources' total; labels are each source's own (a mixture of classification sources
// should share their classes: classes() are the first source's when every source
// names the same ones, else none). `parts` in the job's mixture order.
std::unique_ptr<Dataset> MakeMixtureDataset(std::vector<std::shared_ptr<const Dataset>> parts);

}  // namespace ferry

#endif  // FERRY_DATA_MIXTURE_H_
