// IteratorState's text form (include/ferry/client.h):
//   ferry-iterator-state 1
//   job NAME
//   consumer NAME
//   first_open E
//   done E S            (one line per done split)
//   partial E S B...    (one line per partly yielded split: its yielded batches)
#include <algorithm>
#include <sstream>

#include "ferry/client.h"

namespace ferry {

std::string IteratorState::Serialize() const {
  std::ostringstream o;
  o << "ferry-iterator-state 1\njob " << job << "\nconsumer " << consumer << "\nfirst_open " << first_open << "\n";
  if (config != 0) o << "config " << std::hex << config << std::dec << "\n";
  for (const auto& [e, sp] : done) o << "done " << e << " " << sp << "\n";
  for (const auto& [k, bs] : partial) {
    o << "partial " << k.epoch << " " << k.split;
    for (int64_t b : bs) o << " " << b;
    o << "\n";
  }
  return o.str();
}

Status IteratorState::Unyield(const BatchProvenance& p, int64_t splits_per_epoch) {
  if (p.batches_in_split <= 0 || p.batch_in_split < 0 || p.batch_in_split >= p.batches_in_split)
    return Status::InvalidArgument("unyield: not a batch of a split");
  if (p.epoch < first_open) {
    // The batch closed its epoch (the last one of it): reopen it, all else done.
    if (p.epoch + 1 != first_open) return Status::InvalidArgument("unyield: the batch's epoch closed long ago");
    first_open = p.epoch;
    for (int64_t s = 0; s < splits_per_epoch; ++s) done.insert({p.epoch, s});
  }
  const SplitId k{p.epoch, p.split};
  if (done.erase(k) > 0) {
    std::set<int64_t>& rest = partial[k];
    for (int64_t b = 0; b < p.batches_in_split; ++b) {
      if (b != p.batch_in_split) rest.insert(b);
    }
    if (rest.empty()) partial.erase(k);
    return Status::OK();
  }
  auto it = partial.find(k);
  if (it == partial.end() || it->second.erase(p.batch_in_split) == 0)
    return Status::InvalidArgument("unyield: the batch was not yielded");
  if (it->second.empty()) partial.erase(it);
  return Status::OK();
}

Result<std::vector<int64_t>> IteratorState::YieldedBatches(const JobSpec& job, int64_t rank, uint64_t epoch) const {
  if (!job.ranked() || rank < 0 || rank >= job.num_consumers)
    return Status::InvalidArgument("yielded batches: not a rank of a ranked job");
  std::vector<int64_t> out;
  if (epoch < first_open) {
    for (int64_t j = 0; j < job.RankBatches(); ++j) out.push_back(j);
    return out;
  }
  auto check = [&](int64_t s) -> Status {
    if (s < 0 || s >= job.SplitsPerEpoch() || job.SplitRank(s) != rank)
      return Status::InvalidArgument("yielded batches: split " + std::to_string(s) + " is not rank " +
                                     std::to_string(rank) + "'s (a state of another job or rank?)");
    return Status::OK();
  };
  for (const auto& [e, s] : done) {
    if (e != epoch) continue;
    FERRY_RETURN_IF_ERROR(check(s));
    const auto [first, end] = job.SplitBatches(s);
    for (int64_t j = first; j < end; ++j) out.push_back(j);
  }
  for (const auto& [k, batches] : partial) {
    if (k.epoch != epoch) continue;
    FERRY_RETURN_IF_ERROR(check(k.split));
    const auto [first, end] = job.SplitBatches(k.split);
    for (int64_t b : batches) {
      if (first + b >= end) return Status::InvalidArgument("yielded batches: no batch " + std::to_string(b));
      out.push_back(first + b);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<IteratorState> IteratorState::Parse(const std::string& text) {
  std::istringstream in(text);
  std::string line, word;
  IteratorState st;
  if (!std::getline(in, line) || line != "ferry-iterator-state 1")
    return Status::InvalidArgument("not a ferry iterator state (bad first line)");
  auto bad = [&] { return Status::InvalidArgument("iterator state: bad line '" + line + "'"); };
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream l(line);
    l >> word;
    if (word == "job") {
      l >> st.job;
    } else if (word == "consumer") {
      l >> st.consumer;
    } else if (word == "first_open") {
      if (!(l >> st.first_open)) return bad();
    } else if (word == "config") {
      if (!(l >> std::hex >> st.config)) return bad();
    } else if (word == "done") {
      uint64_t e;
      int64_t sp;
      if (!(l >> e >> sp)) return bad();
      st.done.insert({e, sp});
    } else if (word == "partial") {
      uint64_t e;
      int64_t sp, b;
      if (!(l >> e >> sp)) return bad();
      auto& bs = st.partial[{e, sp}];
      while (l >> b) bs.insert(b);
    } else {
      return Status::InvalidArgument("iterator state: unknown line '" + line + "'");
    }
    if (l.fail() && !l.eof()) return bad();
  }
  if (st.job.empty() || st.consumer.empty()) return Status::InvalidArgument("iterator state: no job or consumer");
  // A state is a file a person may edit: an epoch past any run's is refused here (the
  // dispatcher checks again, for peers that are not this client).
  uint64_t last = st.first_open;
  for (const SplitId& d : st.done) last = std::max(last, d.epoch);
  for (const auto& [k, bs] : st.partial) last = std::max(last, k.epoch);
  if (last > kMaxEpoch)
    return Status::InvalidArgument("iterator state: epoch " + std::to_string(last) +
                                   " is past the largest epoch number, " + std::to_string(kMaxEpoch));
  return st;
}

}  // namespace ferry
