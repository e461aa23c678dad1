#include "client/worker_stream.h"

#include <algorithm>

#include "net/address.h"

namespace ferry::client {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using wire::InFrame;
using wire::MessageType;

Status ListingCheck::Check(const std::string& worker, const wire::BatchListing& l) {
  if (l.fingerprint == 0) return Status::OK();  // not sent
  MutexLock lock(&mu_);
  if (first_.empty()) {
    first_ = worker;
    seen_ = l;
    return Status::OK();
  }
  if (l.fingerprint == seen_.fingerprint && l.samples == seen_.samples) return Status::OK();
  return Status::FailedPrecondition(
      "the workers list the dataset differently: worker " + first_ + " lists " + std::to_string(seen_.samples) +
      " samples, worker " + worker + " lists " + std::to_string(l.samples) +
      (l.samples == seen_.samples ? " samples of other files" : " samples") +
      ": every worker must see the same files at the dataset's path");
}

WorkerStream::WorkerStream(asio::io_context& io, StreamHost* host, const StreamConfig* config, size_t index,
                           std::string address)
    : io_(io),
      host_(host),
      config_(config),
      index_(index),
      address_(std::move(address)),
      timer_(io),
      backoff_(config->retry),
      resume_epoch_(config->open.first_epoch) {}

void WorkerStream::Grant(uint32_t n) {
  if (conn_ && streaming_) conn_->Send(wire::EncodeCredit(n));
  else owed_credits_ += n;  // granted after a reconnect, with the OpenStream credits
}

void WorkerStream::Shutdown() {
  done_ = true;
  timer_.cancel();
  if (resolver_) resolver_->cancel();
  if (connecting_) {
    boost::system::error_code ec;
    connecting_->close(ec);
  }
  if (conn_) conn_->Close();
}

void WorkerStream::Connect() {
  if (done_) return;
  auto hp = net::SplitHostPort(address_);
  if (!hp.ok()) return Permanent(hp.status());
  auto self = shared_from_this();
  resolver_ = std::make_shared<tcp::resolver>(io_);
  resolver_->async_resolve(
      hp->first, std::to_string(hp->second),
      [self](const boost::system::error_code& ec, tcp::resolver::results_type results) {
        if (self->done_) return;
        if (ec) return self->Transient(Status::Unavailable("cannot resolve " + self->address_ + ": " + ec.message()));
        self->connecting_ = std::make_shared<tcp::socket>(self->io_);
        asio::async_connect(*self->connecting_, results,
                            [self](const boost::system::error_code& ec2, const tcp::endpoint&) {
                              if (self->done_) return;
                              if (ec2) {
                                // A worker we streamed from now refuses connections: its
                                // process is gone. Tell the dispatcher, so that its splits
                                // move on now.
                                if (ec2 == asio::error::connection_refused && self->streamed_)
                                  self->host_->OnUnreachable(self->address_);
                                return self->Transient(Status::Unavailable("cannot connect to " + self->address_ +
                                                                           ": " + ec2.message()));
                              }
                              auto socket = std::move(self->connecting_);
                              self->Connected(std::move(*socket));
                            });
      });
}

void WorkerStream::Connected(tcp::socket socket) {
  if (done_) return;
  conn_ = std::make_shared<net::FrameConnection>(std::move(socket), config_->limits, config_->buffers, config_->tls);
  handshake_.emplace(config_->token, wire::Role::kClient, config_->open.consumer_id, "worker " + address_);
  state_ = State::kChallenge;
  streaming_ = false;
  listing_checked_ = false;  // a restarted worker may list otherwise
  auto self = shared_from_this();
  auto conn = conn_;
  if (auto hp = net::SplitHostPort(address_); hp.ok()) conn_->ExpectPeerHost(hp->first);
  conn_->StartTls(/*server=*/false, [self, conn](const Status& tls) {
    if (conn != self->conn_ || self->done_) return;  // a stale connection
    // A refused certificate, or a worker without TLS, does not get better by retrying.
    if (tls.code() == StatusCode::kUnauthenticated) return self->Permanent(tls);
    if (!tls.ok()) return self->Transient(tls);
    conn->StartReading([self, conn](const Status& s, InFrame f) {
      if (conn != self->conn_) return;  // a stale connection
      self->OnFrame(s, std::move(f));
    });
  });
}

void WorkerStream::OnFrame(const Status& s, InFrame f) {
  if (done_) return;
  if (s.code() == StatusCode::kUnauthenticated) return Permanent(s);  // TLS refused us
  if (!s.ok() && state_ == State::kChallenge && !config_->tls) {
    // Closed before the worker said anything: a TLS worker does that to a plain client
    // (after its handshake timeout). Say so; the retries end with this message.
    return Transient(Status(s.code(), s.message() + " (the worker closed the connection before its challenge: if it "
                                                    "serves TLS, give this client a CA, tls_ca / --tls-ca)")
                         .WithContext("worker " + address_));
  }
  if (!s.ok()) return Transient(s.WithContext("worker " + address_));
  if (f.header.type == MessageType::kError) {
    auto e = wire::DecodeError(f);
    const Status st = e.ok() ? e->status : e.status();
    if (st.IsTransient()) return Transient(st.WithContext("worker " + address_));
    // Another stream of this consumer took over (dispatcher mode): stand down.
    if (config_->dispatched && st.code() == StatusCode::kCancelled) return Retire();
    return Permanent(st.WithContext("worker " + address_));
  }
  switch (state_) {
    case State::kChallenge: {
      auto hello = handshake_->OnChallenge(f);
      if (!hello.ok()) return Permanent(hello.status());
      conn_->Send(std::move(*hello));
      state_ = State::kHelloOk;
      return;
    }
    case State::kHelloOk: {
      Status ok = handshake_->OnHelloOk(f);
      if (!ok.ok()) return Permanent(ok);
      return SendOpen();
    }
    case State::kStreaming:
      return OnStreamFrame(f);
  }
}

void WorkerStream::SendOpen() {
  wire::OpenStreamMsg m = config_->open;
  if (!config_->dispatched) {
    m.shard_index = uint32_t(index_);
    m.resume_epoch = resume_epoch_;
    m.resume_batches_done = resume_batches_;
  }
  // Credits: the window less what this stream has in the client's queue.
  m.credits = uint32_t(std::max<int64_t>(0, int64_t(config_->open.credits) - host_->QueuedFrom(index_)));
  owed_credits_ = 0;
  conn_->Send(wire::EncodeOpenStream(m));
  state_ = State::kStreaming;
  streaming_ = true;
  streamed_ = true;
}

void WorkerStream::OnStreamFrame(const InFrame& f) {
  if (f.header.type == MessageType::kBatch) {
    std::vector<SkippedSample> skipped;
    wire::BatchListing listing;
    Result<Batch> b = wire::DecodeBatch(f, &skipped, listing_checked_ ? nullptr : &listing);
    if (!b.ok()) return Permanent(b.status().WithContext("worker " + address_));
    if (!listing_checked_) {
      if (Status st = config_->listing->Check(address_, listing); !st.ok()) return Permanent(st);
      listing_checked_ = true;
    }
    backoff_.Succeeded();  // progress: the back-off starts over
    resume_epoch_ = b->provenance.epoch;
    resume_batches_ = b->provenance.batch_in_epoch + 1;
    host_->OnBatch(index_, std::move(*b), std::move(skipped));
    return;
  }
  if (f.header.type == MessageType::kEndOfEpoch && !config_->splits) {
    auto e = wire::DecodeEndOfEpoch(f);
    if (!e.ok()) return Permanent(e.status());
    resume_epoch_ = e->epoch + 1;
    resume_batches_ = 0;
    host_->OnEpochDone(index_, e->epoch);
    if (e->last) {
      done_ = true;
      conn_->Close();
      host_->OnStreamEnd(index_);
    }
    return;
  }
  Permanent(Status::InvalidArgument(std::string("unexpected ") + wire::MessageTypeName(f.header.type) +
                                    " from worker " + address_));
}

void WorkerStream::Transient(const Status& s) {
  if (done_) return;
  streaming_ = false;
  if (conn_) conn_->Close();
  conn_.reset();
  const auto delay = backoff_.Failed();
  if (!delay) {
    // Dispatcher mode: the worker is gone; the dispatcher leases its splits to others,
    // and lists it again should it come back.
    if (config_->dispatched) return Retire();
    return Permanent(Status(s.code(), s.message() + " (gave up after " +
                                          std::to_string(config_->retry.max_failures) + " retries)"));
  }
  if (config_->reconnects) ++*config_->reconnects;
  auto self = shared_from_this();
  timer_.expires_after(*delay);
  timer_.async_wait([self](const boost::system::error_code& ec) {
    if (!ec) self->Connect();
  });
}

void WorkerStream::Retire() {
  Shutdown();
  host_->OnRetired(index_);
}

void WorkerStream::Permanent(const Status& s) {
  if (done_) return;
  done_ = true;
  if (conn_) conn_->Close();
  host_->OnFailed(s);
}

}  // namespace ferry::client
