// OutFrame: a Cap'n Proto message sealed into the ranges of one frame.
#include "wire/message.h"

#include "wire/out_frame.h"

namespace ferry::wire {


OutFrame::Impl::Impl(MessageType type, std::unique_ptr<capnp::MessageBuilder> builder, std::shared_ptr<void> keep)
    : type_(type), keep_(std::move(keep)), builder_(std::move(builder)) {
  Seal();
}

void OutFrame::Impl::Seal() {
  const kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments = builder_->getSegmentsForOutput();
  // Standard stream framing: (count - 1), sizes, padding to a word.
  table_.assign((segments.size() + 2) & ~size_t{1}, 0);
  table_[0] = uint32_t(segments.size() - 1);
  size_t body = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    table_[i + 1] = uint32_t(segments[i].size());
    body += segments[i].size() * sizeof(capnp::word);
  }
  const size_t table_bytes = table_.size() * sizeof(uint32_t);
  EncodeFrameHeader(type_, table_bytes + body, header_);
  ranges_.clear();
  ranges_.push_back({header_, kFrameHeaderSize});
  ranges_.push_back({table_.data(), table_bytes});
  for (const auto& s : segments) ranges_.push_back({s.begin(), s.size() * sizeof(capnp::word)});
  size_ = kFrameHeaderSize + table_bytes + body;
}

OutFrame::OutFrame() = default;
OutFrame::OutFrame(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OutFrame::OutFrame(OutFrame&&) noexcept = default;
OutFrame& OutFrame::operator=(OutFrame&&) noexcept = default;
OutFrame::~OutFrame() = default;
MessageType OutFrame::type() const { return impl_ ? impl_->type() : MessageType::kInvalid; }
const std::vector<ByteRange>& OutFrame::ranges() const {
  static const std::vector<ByteRange> kEmpty;
  return impl_ ? impl_->ranges() : kEmpty;
}
size_t OutFrame::size() const { return impl_ ? impl_->size() : 0; }

}  // namespace ferry::wire
