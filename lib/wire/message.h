// Frames as the codecs hand them to the transport and take them back: an OutFrame
// is a message ready to send (header, segment table and segments, as byte ranges
// into memory it owns: nothing is flattened or copied), and an InFrame is a received
// header with its body in one 64-byte-aligned buffer.
#ifndef FERRY_WIRE_MESSAGE_H_
#define FERRY_WIRE_MESSAGE_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "ferry/buffer.h"
#include "wire/frame.h"

namespace ferry::wire {

// A contiguous byte range, for scatter-gather writes.
struct ByteRange {
  const void* data;
  size_t size;
};

class OutFrame {
 public:
  class Impl;
  OutFrame();
  explicit OutFrame(std::unique_ptr<Impl> impl);
  OutFrame(OutFrame&&) noexcept;
  OutFrame& operator=(OutFrame&&) noexcept;
  ~OutFrame();

  MessageType type() const;
  const std::vector<ByteRange>& ranges() const;
  size_t size() const;  // total bytes on the wire
  Impl* impl() const { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

// The body holds the standard Cap'n Proto stream framing from data() on.
struct InFrame {
  FrameHeader header;
  std::shared_ptr<InBuffer> body;
};

}  // namespace ferry::wire

#endif  // FERRY_WIRE_MESSAGE_H_
