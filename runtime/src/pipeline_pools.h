// The pipeline runner's pools (not installed): the slots the memory plan
// placed at the top of the arena for one kind of in-flight value (stashed
// activations, received and sent activations and gradients, tied
// gradients), and which micro-batch holds each.
#ifndef DSRT_SRC_PIPELINE_POOLS_H
#define DSRT_SRC_PIPELINE_POOLS_H

#include "dsrt/stream.h"
#include "pipeline_plan.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsrt {
namespace pipeline {

class SlotPool {
public:
  SlotPool(const PipelinePool &plan, SlotLayout layout, std::string name)
      : plan_(plan), layout_(std::move(layout)), name_(std::move(name)),
        owner_(static_cast<size_t>(plan.slots), -1),
        transfer_(static_cast<size_t>(plan.slots)) {}

  const SlotLayout &layout() const { return layout_; }
  int64_t offset(int64_t slot) const { return plan_.offset + slot * plan_.slot_bytes; }

  // The lowest free slot, for micro-batch `mb`.
  int64_t allocate(MemoryMonitor &memory, int64_t mb) {
    std::string held;
    for (size_t i = 0; i < owner_.size(); ++i) {
      if (owner_[i] == mb)
        throw Error("pipeline schedule: the " + name_ + " already holds micro-batch " +
                    std::to_string(mb));
      held += (held.empty() ? "" : ", ") + std::to_string(owner_[i]);
    }
    for (size_t i = 0; i < owner_.size(); ++i) {
      if (owner_[i] >= 0) continue;
      owner_[i] = mb;
      memory.acquire(offset(static_cast<int64_t>(i)), plan_.slot_bytes);
      return static_cast<int64_t>(i);
    }
    throw Error("memory plan violated: the " + name_ + " has " + std::to_string(plan_.slots) +
                " slots, all in use (micro-batches " + held + "), when micro-batch " +
                std::to_string(mb) + " needs one");
  }
  // The slot micro-batch `mb` holds; throws naming `why` when none.
  int64_t find(int64_t mb, const std::string &why) const {
    for (size_t i = 0; i < owner_.size(); ++i)
      if (owner_[i] == mb) return static_cast<int64_t>(i);
    throw Error("pipeline schedule: " + why + ", but the " + name_ +
                " holds nothing of micro-batch " + std::to_string(mb));
  }
  void release(MemoryMonitor &memory, int64_t slot) {
    owner_[static_cast<size_t>(slot)] = -1;
    memory.release(offset(slot));
  }
  Tensor tensor(uint8_t *arena, int64_t slot, size_t i) const {
    const ValueInfo &value = layout_.tensors[i].value;
    return Tensor{arena + offset(slot) + value.offset, value.dtype, value.shape};
  }
  // The transfers run on a stream of their own (PipelineExecutor): `done`
  // marks the end of the last one that read or wrote `slot` there.
  void transferred(int64_t slot, const Event &done) {
    transfer_[static_cast<size_t>(slot)] = done;
  }
  // Makes later work on `stream` wait for the slot's last transfer: a
  // computation that reads what it received, or writes what it will send
  // into the slot a send may still be reading. No host wait.
  void wait_transfer(int64_t slot, Stream &stream) {
    Event &done = transfer_[static_cast<size_t>(slot)];
    if (done.recorded()) done.wait(stream);
  }
  // Micro-batches still held (none at the end of a step).
  std::string held() const {
    std::string out;
    for (int64_t mb : owner_)
      if (mb >= 0) out += (out.empty() ? "" : ", ") + std::to_string(mb);
    return out;
  }
  const std::string &name() const { return name_; }

private:
  const PipelinePool &plan_;
  SlotLayout layout_;
  std::string name_;
  std::vector<int64_t> owner_;
  std::vector<Event> transfer_;
};

}  // namespace pipeline
}  // namespace dsrt

#endif  // DSRT_SRC_PIPELINE_POOLS_H
