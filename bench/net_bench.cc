// ferry-net-bench: what a connection's thread pays per small frame, the cost under a
// dispatcher's heartbeats (BENCHMARKS "One dispatcher, thousands of workers").
//
// BM_HeartbeatRoundTrips/N: N loopback connections on one thread, each a simulated
// worker that sends a Heartbeat (8 jobs it holds, its load) and, on the HeartbeatOk (8
// leases), the next one at once; both ends are FrameConnections on this thread, so the
// CPU time per round trip is two frames read, two written, and the kernel's loopback
// TCP for both (it runs on the sending thread). One iteration: 1,000 round trips.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "net/connection.h"
#include "net/listen.h"
#include "wire/control.h"

namespace ferry::net {
namespace {

struct Fleet {
  asio::io_context io;
  std::vector<std::shared_ptr<FrameConnection>> workers, servers;
  int64_t round_trips = 0;
  wire::OutFrame Beat(int i) const {
    wire::HeartbeatMsg m;
    m.worker_id = "worker-" + std::to_string(i);
    for (int j = 0; j < 8; ++j) m.have_jobs["job-" + std::to_string((i + j) % 1000)] = 0x1234567890abcdefull;
    m.load.samples = 123456;
    m.load.busy_ns = 987654321;
    return wire::EncodeHeartbeat(m);
  }
  wire::OutFrame Answer() const {
    wire::HeartbeatOkMsg ok;
    for (int j = 0; j < 8; ++j) ok.leases.push_back({"job-" + std::to_string(j), 1, 100 + j, "consumer-0"});
    return wire::EncodeHeartbeatOk(ok);
  }

  explicit Fleet(int n) {
    tcp::acceptor acceptor(io);
    if (!Listen(acceptor, "127.0.0.1:0").ok()) return;
    for (int i = 0; i < n; ++i) {
      tcp::socket client(io);
      client.connect(acceptor.local_endpoint());
      auto w = std::make_shared<FrameConnection>(std::move(client), wire::FrameLimits{}, DefaultBufferAllocator());
      auto s = std::make_shared<FrameConnection>(acceptor.accept(), wire::FrameLimits{}, DefaultBufferAllocator());
      const wire::OutFrame answer = Answer();
      s->StartReading([this, s = s.get()](const Status& st, wire::InFrame f) {
        if (st.ok() && f.header.type == wire::MessageType::kHeartbeat && wire::DecodeHeartbeat(f).ok()) s->Send(Answer());
      });
      w->StartReading([this, w = w.get(), i](const Status& st, wire::InFrame f) {
        if (!st.ok() || !wire::DecodeHeartbeatOk(f).ok()) return;
        ++round_trips;
        w->Send(Beat(i));
      });
      workers.push_back(w);
      servers.push_back(s);
    }
    for (int i = 0; i < n; ++i) workers[i]->Send(Beat(i));
  }
  ~Fleet() {
    for (auto& c : workers) c->Close();
    for (auto& c : servers) c->Close();
    io.poll();
  }
};

void BM_HeartbeatRoundTrips(benchmark::State& state) {
  Fleet fleet(int(state.range(0)));
  while (fleet.round_trips < 1000) fleet.io.run_one();  // warm: every connection going
  const int64_t trips0 = fleet.round_trips;
  for (auto _ : state) {
    const int64_t until = fleet.round_trips + 1000;
    while (fleet.round_trips < until) fleet.io.run_one();
  }
  state.counters["round_trips"] = benchmark::Counter(double(fleet.round_trips - trips0), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_HeartbeatRoundTrips)->Arg(1)->Arg(100)->Arg(1000);

}  // namespace
}  // namespace ferry::net

BENCHMARK_MAIN();
