// Shared by the codecs: build a frame from a message, and decode a frame's body
// under traversal and nesting limits, turning any Cap'n Proto exception into
// InvalidArgument.
#ifndef FERRY_WIRE_DECODE_H_
#define FERRY_WIRE_DECODE_H_

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <memory>
#include <string>

#include "wire/message.h"
#include "wire/out_frame.h"

namespace ferry::wire::codec {

inline capnp::ReaderOptions ReaderLimits(size_t bytes) {
  capnp::ReaderOptions o;
  // A message never legitimately traverses more words than it holds (our encoders
  // share no subtrees), so this blocks amplification.
  o.traversalLimitInWords = bytes / sizeof(capnp::word) + 64;
  o.nestingLimit = 16;
  return o;
}

template <typename Fill>
OutFrame Build(MessageType type, Fill fill) {
  auto builder = std::make_unique<capnp::MallocMessageBuilder>(256);
  fill(*builder);
  return OutFrame(std::make_unique<OutFrame::Impl>(type, std::move(builder)));
}

template <typename Root, typename Fn>
auto Decode(const InFrame& f, MessageType want, Fn fn) -> decltype(fn(std::declval<typename Root::Reader>())) {
  if (f.header.type != want)
    return Status::InvalidArgument(std::string("expected ") + MessageTypeName(want) + ", got " +
                                   MessageTypeName(f.header.type));
  if (!f.body || f.body->size() % sizeof(capnp::word) != 0 ||
      (reinterpret_cast<uintptr_t>(f.body->data()) % alignof(capnp::word)) != 0)
    return Status::InvalidArgument("bad frame: body is not word-aligned");
  try {
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(f.body->data()), f.body->size() / sizeof(capnp::word)),
        ReaderLimits(f.body->size()));
    return fn(reader.getRoot<Root>());
  } catch (const kj::Exception& e) {
    return Status::InvalidArgument(std::string("malformed ") + MessageTypeName(want) + ": " +
                                   e.getDescription().cStr());
  }
}

inline std::string Str(capnp::Text::Reader t) { return std::string(t.cStr(), t.size()); }
inline std::string Str(capnp::Data::Reader d) { return std::string(reinterpret_cast<const char*>(d.begin()), d.size()); }

}  // namespace ferry::wire::codec

#endif  // FERRY_WIRE_DECODE_H_
