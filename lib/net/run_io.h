// RunIo: io_context::run() for a daemon's io thread, where an exception thrown by a
// handler (std::bad_alloc under memory pressure, a Cap'n Proto exception from a bug)
// must not terminate the process: it is logged and the loop goes on, as Asio's
// documentation advises. The connection whose handler threw is left to its own
// deadline or its peer; every other connection keeps being served.
#ifndef FERRY_NET_RUN_IO_H_
#define FERRY_NET_RUN_IO_H_

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <exception>
#include <future>
#include <memory>

#include "core/log.h"

namespace ferry::net {

inline void RunIo(boost::asio::io_context& io, const char* what) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      LogWarn("%s: a handler failed, going on: %s", what, e.what());
    } catch (...) {
      LogWarn("%s: a handler failed with an unknown exception, going on", what);
    }
  }
}

// Runs `f` on `io`'s thread and returns its result, or `fallback` after 2 s (an io
// thread busy or stopped): how another thread (the metrics server's) reads state the
// io thread owns. An exception from `f` stays on the io thread's side (logged, and
// `fallback` returned): it neither stops the io loop nor reaches the caller.
template <typename T, typename F>
T OnIo(boost::asio::io_context& io, F f, T fallback) {
  auto p = std::make_shared<std::promise<T>>();
  auto result = p->get_future();
  boost::asio::post(io, [p, f] {
    try {
      p->set_value(f());
    } catch (const std::exception& e) {
      LogWarn("a status read on the io thread failed: %s", e.what());
      p->set_exception(std::current_exception());
    } catch (...) {
      p->set_exception(std::current_exception());
    }
  });
  if (result.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return fallback;
  try {
    return result.get();
  } catch (...) {
    return fallback;
  }
}

}  // namespace ferry::net

#endif  // FERRY_NET_RUN_IO_H_
