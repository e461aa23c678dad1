// OutFrame's implementation, shared by the codec and the batch message builder.
#ifndef FERRY_WIRE_OUT_FRAME_H_
#define FERRY_WIRE_OUT_FRAME_H_

#include <capnp/message.h>

#include <memory>
#include <vector>

#include "wire/message.h"

namespace ferry::wire {

class OutFrame::Impl {
 public:
  // `keep` holds anything else the segments point into.
  Impl(MessageType type, std::unique_ptr<capnp::MessageBuilder> builder, std::shared_ptr<void> keep = nullptr);
  MessageType type() const { return type_; }
  const std::vector<ByteRange>& ranges() const { return ranges_; }
  size_t size() const { return size_; }

 private:
  void Seal();
  MessageType type_;
  std::shared_ptr<void> keep_;  // declared first: must outlive builder_ (external segments)
  std::unique_ptr<capnp::MessageBuilder> builder_;
  uint8_t header_[kFrameHeaderSize];
  std::vector<uint32_t> table_;
  std::vector<ByteRange> ranges_;
  size_t size_ = 0;
};

}  // namespace ferry::wire

#endif  // FERRY_WIRE_OUT_FRAME_H_
