// Streams and events of the cpu backend. Work runs to completion, in order,
// when it is enqueued, so a stream is always synchronized and an event is
// reached as soon as it is recorded.
#include "dsrt/stream.h"

#include "dsrt/tensor.h"

#include <string>

namespace dsrt {

Stream::Stream(Backend backend, int threads) : backend_(backend), threads_(threads) {
  if (backend == Backend::Cuda)
    throw Error("dsrt::Stream: not implemented: this libdsrt has no cuda backend; "
                "use Backend::Cpu");
  if (threads < 0)
    throw Error("dsrt::Stream: thread count " + std::to_string(threads) +
                " must be >= 0 (0 means all available)");
}

void Stream::synchronize() {}

void Event::record(Stream &) { recorded_ = true; }

// The recorded work has already completed on the cpu backend, so later work
// on `stream` is ordered after it without waiting.
void Event::wait(Stream &) {}

void Event::synchronize() {}

}  // namespace dsrt
