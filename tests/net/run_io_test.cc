// OnIo, how the metrics thread reads what the io thread owns: the value, or the
// fallback when the read throws, without the exception stopping the io loop or
// reaching the caller.
#include "net/run_io.h"

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace ferry::net {
namespace {

TEST(RunIoTest, AReadThatThrowsGivesTheFallbackAndTheLoopGoesOn) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread t([&] { RunIo(io, "test"); });
  EXPECT_EQ(OnIo<int>(io, [] { return 7; }, -1), 7);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(OnIo<int>(io, []() -> int { throw std::runtime_error("broken"); }, -1), -1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "at once, not after the timeout";
  EXPECT_EQ(OnIo<int>(io, [] { return 8; }, -1), 8) << "the io loop still runs";
  work.reset();
  io.stop();
  t.join();
}

}  // namespace
}  // namespace ferry::net
