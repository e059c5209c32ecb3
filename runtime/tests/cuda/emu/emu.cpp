// The CUDA emulation's execution model (docs/runtime.md, "The CUDA
// emulation"): a launch runs its blocks one after another on the calling
// host thread, and the threads of a block as cooperative fibers (stacks
// allocated once; on x86-64 a switch saves the callee-saved registers and
// the FP control words, elsewhere it is ucontext's swapcontext, which also
// makes a system call for the signal mask) that switch only at a block
// barrier or a warp operation. __syncthreads waits for every thread of the block that has not
// exited; a shuffle or vote waits for the lanes of the caller's warp that
// are in its mask, exist (a partial last warp has fewer) and have not
// exited. When no thread can go on, the launch is a deadlock on a GPU too:
// the emulation says which kernel and block and where its threads wait,
// and aborts.
#include "prelude.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

extern "C" {
// The fake runtime's last error (fake_cudart.cpp, built for the emulation).
void dsrt_fake_cuda_set_error(cudaError_t error);
// The dynamic shared memory a launch of `kernel` may have: its
// cudaFuncAttributeMaxDynamicSharedMemorySize, 48 KiB if it has none.
size_t dsrt_fake_cuda_max_dynamic_shared(const void *kernel);
// The `__shared__` section's bounds (the linker defines them).
extern char __start_dsemu_shared[] __attribute__((weak));
extern char __stop_dsemu_shared[] __attribute__((weak));
}

#if defined(__x86_64__)
// dsemu_switch(save, to): saves the callee-saved registers, MXCSR and the
// x87 control word on the current stack, stores the stack pointer in
// *save, and resumes the context whose stack pointer is `to`.
extern "C" void dsemu_switch(void **save, void *to);
asm(R"(
  .text
  .globl dsemu_switch
  .type dsemu_switch, @function
dsemu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size dsemu_switch, .-dsemu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#define DSEMU_FAST_SWITCH 1
#endif

namespace dsemu {

uint3 thread_idx, block_idx;
dim3 block_dim, grid_dim;

namespace {

constexpr size_t kStackBytes = 128 * 1024;
constexpr int kMaxThreads = 1024;

enum class State { Runnable, AtBarrier, AtWarp, Done };

struct Fiber {
#if DSEMU_FAST_SWITCH
  void *sp = nullptr;
#else
  ucontext_t context;
#endif
  char *stack = nullptr;
  uint3 idx;
  unsigned linear = 0;
  State state = State::Done;
  unsigned warp_ops = 0;  // warp operations so far: its parity picks the buffer
};

struct Warp {
  unsigned present = 0;  // lanes that exist
  unsigned exited = 0;
  unsigned arrived[2] = {0, 0};
  unsigned mask[2] = {0, 0};
  unsigned took[2] = {0, 0};
  uint64_t values[2][32];
};

struct Emulator {
  std::mutex mutex;  // one launch at a time
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
#if DSEMU_FAST_SWITCH
  void *scheduler = nullptr;
#else
  ucontext_t scheduler;
#endif
  Fiber *current = nullptr;
  int threads = 0, live = 0, at_barrier = 0;
  const char *kernel = "";
  void (*body)(void *) = nullptr;
  void *arg = nullptr;
  std::vector<unsigned char> dynamic;  // extern __shared__
  std::vector<void *> fresh;           // static __shared__ filled in this block

  Emulator() {
    fibers.resize(kMaxThreads);
    const size_t bytes = kStackBytes * kMaxThreads;
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                   MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "dsemu: cannot map %zu bytes of fiber stacks\n", bytes);
      std::abort();
    }
    for (int i = 0; i < kMaxThreads; ++i) {
      fibers[i].stack = static_cast<char *>(p) + size_t(i) * kStackBytes;
#if !DSEMU_FAST_SWITCH
      getcontext(&fibers[i].context);
#endif
    }
  }
};

Emulator &emu() {
  static Emulator *e = new Emulator;  // never destroyed
  return *e;
}

[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "dsemu: kernel %s, block (%u, %u, %u): %s\n", emu().kernel, block_idx.x,
               block_idx.y, block_idx.z, what.c_str());
  std::fflush(stderr);
  std::abort();
}

// The order in which runnable threads resume and blocks run
// ($DSRT_EMU_SCHEDULE): ascending (the default) resumes the first runnable
// thread after the one that stops (from thread 0 at a block's start) and
// runs the blocks in order; reverse resumes the first before it (from the
// last thread) and runs the blocks last first; random:SEED takes the
// threads in a random permutation, drawn anew at a block's start and at
// every barrier, resuming the first runnable one after the thread that
// stops in it, and runs the blocks in a random permutation, all drawn from
// SEED, the kernel's name and the block, so that a run repeats (and a case
// run by itself fails as it did among the others). In both other orders a
// thread that completes a barrier also switches away (its successor chosen
// as at any switch), so that no thread keeps its place across a barrier:
// which thread reads shared memory before another has written it changes
// with the order. The lane that completes a warp operation goes on in
// every order: were it to wait, every other warp would run to its next
// warp operation first, which, like a barrier, would hide a missing one.
enum class Order { Ascending, Reverse, Random };
struct Schedule {
  Order order = Order::Ascending;
  uint64_t seed = 0;
  uint64_t state = 0;  // the random order's generator, per block
  std::vector<int> perm, pos;  // the random order of the block's threads, and its inverse
};

bool parse_schedule(const char *text, Schedule &s) {
  const std::string v = text ? text : "";
  s = Schedule{};
  if (v.empty() || v == "ascending")
    return true;
  if (v == "reverse") {
    s.order = Order::Reverse;
    return true;
  }
  if (v.rfind("random:", 0) == 0 && v.size() > 7 && v[7] >= '0' && v[7] <= '9') {
    char *end = nullptr;
    s.seed = std::strtoull(v.c_str() + 7, &end, 10);
    s.order = Order::Random;
    return *end == '\0';
  }
  return false;
}

Schedule &schedule() {
  static Schedule s = [] {
    Schedule r;
    const char *v = std::getenv("DSRT_EMU_SCHEDULE");
    if (!parse_schedule(v, r)) {
      std::fprintf(stderr,
                   "dsemu: DSRT_EMU_SCHEDULE=%s: expected ascending, reverse or random:SEED "
                   "(SEED a decimal integer)\n",
                   v);
      std::abort();
    }
    return r;
  }();
  return s;
}

// splitmix64: the random order's generator.
uint64_t mix(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t kernel_hash(const char *name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (; *name; ++name)
    h = (h ^ static_cast<unsigned char>(*name)) * 0x100000001b3ull;
  return h;
}

// A new random order of the block's threads (Fisher-Yates), drawn at a
// block's start and whenever a barrier releases its threads.
void shuffle_threads(Schedule &s, int n) {
  s.perm.resize(n);
  s.pos.resize(n);
  for (int i = 0; i < n; ++i)
    s.perm[i] = i;
  for (int i = n - 1; i > 0; --i)
    std::swap(s.perm[i], s.perm[mix(s.state) % uint64_t(i + 1)]);
  for (int i = 0; i < n; ++i)
    s.pos[s.perm[i]] = i;
}

// The next runnable fiber other than `from` in the schedule's order, after
// `from` (when null: the first of a block or after every thread stopped);
// null when there is none.
Fiber *next_runnable(const Fiber *from) {
  Emulator &e = emu();
  Schedule &s = schedule();
  const int n = e.threads;
  int start = 0, step = 1;
  switch (s.order) {
  case Order::Ascending:
    start = from ? static_cast<int>(from->linear) + 1 : 0;
    break;
  case Order::Reverse:
    start = from ? static_cast<int>(from->linear) - 1 + n : n - 1;
    step = n - 1;  // -1 modulo n
    break;
  case Order::Random:
    start = from ? s.pos[from->linear] + 1 : 0;
    break;
  }
  for (int k = 0; k < n; ++k) {
    const int i = static_cast<int>((start + int64_t(k) * step) % n);
    Fiber &f = e.fibers[s.order == Order::Random ? s.perm[i] : i];
    if (f.state == State::Runnable && &f != from)
      return &f;
  }
  return nullptr;
}

#if DSEMU_FAST_SWITCH
// Leaves the running fiber (its stack pointer saved in *save) for the next
// runnable one, or for the scheduler when none is.
void switch_away(void **save) {
  Emulator &e = emu();
  Fiber *next = next_runnable(e.current);
  if (!next) {
    dsemu_switch(save, e.scheduler);
    return;
  }
  e.current = next;
  thread_idx = next->idx;
  dsemu_switch(save, next->sp);
}
#endif

void yield() {
  Emulator &e = emu();
  Fiber *f = e.current;
#if DSEMU_FAST_SWITCH
  // Fibers pass control to each other directly; the scheduler runs only
  // when none can go on.
  switch_away(&f->sp);
#else
  swapcontext(&f->context, &e.scheduler);
#endif
  // Resumed: whoever resumed it set current and thread_idx to this fiber's.
}

void resume(Fiber &f) {
  Emulator &e = emu();
#if DSEMU_FAST_SWITCH
  dsemu_switch(&e.scheduler, f.sp);
#else
  swapcontext(&e.scheduler, &f.context);
#endif
}

void release_barrier() {
  Emulator &e = emu();
  for (int i = 0; i < e.threads; ++i)
    if (e.fibers[i].state == State::AtBarrier)
      e.fibers[i].state = State::Runnable;
  e.at_barrier = 0;
  if (schedule().order == Order::Random)
    shuffle_threads(schedule(), e.threads);
}

// Completes warp operation `b` of warp `w` if every lane it waits for has
// arrived.
bool try_release_warp(int w, int b) {
  Emulator &e = emu();
  Warp &warp = e.warps[w];
  if (!warp.arrived[b])
    return false;
  const unsigned expected = warp.mask[b] & warp.present & ~warp.exited;
  if ((warp.arrived[b] & expected) != expected)
    return false;
  warp.took[b] = warp.arrived[b];
  for (int l = 0; l < 32; ++l)
    if (!(warp.took[b] >> l & 1u))
      warp.values[b][l] = ~uint64_t(0);
  for (int l = 0; l < 32; ++l) {
    if (!(warp.arrived[b] >> l & 1u))
      continue;
    Fiber &f = e.fibers[w * 32 + l];
    if (f.state == State::AtWarp && ((f.warp_ops - 1) & 1u) == unsigned(b))
      f.state = State::Runnable;
  }
  warp.arrived[b] = 0;
  return true;
}

void fiber_main() {
  Emulator &e = emu();
  e.body(e.arg);
  Fiber *f = e.current;
  f->state = State::Done;
  --e.live;
  const int w = static_cast<int>(f->linear / 32);
  e.warps[w].exited |= 1u << (f->linear % 32);
  try_release_warp(w, 0);
  try_release_warp(w, 1);
  if (e.at_barrier > 0 && e.at_barrier == e.live)
    release_barrier();
#if DSEMU_FAST_SWITCH
  void *unused;
  switch_away(&unused);
#else
  setcontext(&e.scheduler);
#endif
}

// Makes `f` start in fiber_main when it is first resumed.
void start_fiber(Fiber &f) {
#if DSEMU_FAST_SWITCH
  // dsemu_switch's frame: the FP control words, r15 ... rbx, rbp, then
  // fiber_main as the return address, 16-byte aligned as after a call.
  uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStackBytes) & ~uintptr_t(15);
  uint64_t *frame = reinterpret_cast<uint64_t *>(top - 16);
  frame[0] = reinterpret_cast<uint64_t>(&fiber_main);
  frame[1] = 0;
  uint64_t *regs = frame - 7;  // control words, r15, r14, r13, r12, rbx, rbp
  for (int i = 1; i < 7; ++i)
    regs[i] = 0;
  const uint32_t mxcsr = 0x1f80;  // round to nearest, exceptions masked
  const uint16_t fpucw = 0x037f;
  std::memcpy(regs, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char *>(regs) + 4, &fpucw, 2);
  f.sp = regs;
#else
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiber_main, 0);
#endif
}

// The i-th block a launch of `blocks` runs (linear: x + gridDim.x (y +
// gridDim.y z)) in the schedule's order; in the random order an affine
// permutation a i + c modulo blocks, a prime to blocks, both drawn from the
// seed and the kernel's name.
struct BlockOrder {
  Order order;
  uint64_t blocks, a = 1, c = 0;
  BlockOrder(uint64_t n, const char *kernel) : order(schedule().order), blocks(n) {
    if (order != Order::Random || n < 2)
      return;
    uint64_t state = schedule().seed ^ kernel_hash(kernel);
    a = 1 + mix(state) % (n - 1);
    while (std::gcd(a, n) != 1)
      a = a % (n - 1) + 1;
    c = mix(state) % n;
  }
  uint64_t operator()(uint64_t i) const {
    switch (order) {
    case Order::Reverse:
      return blocks - 1 - i;
    case Order::Random:
      return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * i + c) % blocks);
    default:
      return i;
    }
  }
};

std::string where_threads_wait() {
  Emulator &e = emu();
  int barrier = 0;
  std::string warps;
  for (int i = 0; i < e.threads; ++i) {
    const Fiber &f = e.fibers[i];
    if (f.state == State::AtBarrier)
      ++barrier;
    if (f.state == State::AtWarp) {
      if (!warps.empty())
        warps += ", ";
      warps += std::to_string(f.linear);
    }
  }
  return std::to_string(barrier) + " threads wait at __syncthreads, threads [" + warps +
         "] at a warp operation, " + std::to_string(e.live) + " have not exited";
}

void run_block(uint64_t block) {
  Emulator &e = emu();
  Schedule &s = schedule();
  if (s.order == Order::Random) {
    s.state = s.seed ^ kernel_hash(e.kernel) ^ (block * 0xd1342543de82ef95ull);
    shuffle_threads(s, e.threads);
  }
  e.live = e.threads;
  e.at_barrier = 0;
  for (auto &w : e.warps)
    w = Warp{};
  for (int i = 0; i < e.threads; ++i) {
    Fiber &f = e.fibers[i];
    f.linear = static_cast<unsigned>(i);
    f.idx = uint3{i % block_dim.x, (i / block_dim.x) % block_dim.y,
                  i / (block_dim.x * block_dim.y)};
    f.state = State::Runnable;
    f.warp_ops = 0;
    e.warps[i / 32].present |= 1u << (i % 32);
    start_fiber(f);
  }
  // `__shared__` memory starts as garbage on a GPU: all-ones bytes here.
  const uintptr_t shared_begin = reinterpret_cast<uintptr_t>(__start_dsemu_shared);
  const uintptr_t shared_end = reinterpret_cast<uintptr_t>(__stop_dsemu_shared);
  if (shared_begin && shared_end > shared_begin)
    std::memset(__start_dsemu_shared, 0xff, shared_end - shared_begin);
  if (!e.dynamic.empty())
    std::memset(e.dynamic.data(), 0xff, e.dynamic.size());
  e.fresh.clear();
  while (e.live > 0) {
    Fiber *f = next_runnable(nullptr);
    if (!f)
      die("deadlock: " + where_threads_wait());
    e.current = f;
    thread_idx = f->idx;
    resume(*f);
  }
  e.current = nullptr;
}

}  // namespace

unsigned lane() { return emu().current->linear % 32; }

void sync_block() {
  Emulator &e = emu();
  Fiber *f = e.current;
  f->state = State::AtBarrier;
  ++e.at_barrier;
  if (e.at_barrier == e.live) {
    release_barrier();
    if (schedule().order != Order::Ascending)
      yield();  // runnable: resumed in its turn
    return;
  }
  yield();
}

const uint64_t *warp_exchange(unsigned mask, uint64_t value, unsigned *took_part) {
  Emulator &e = emu();
  Fiber *f = e.current;
  const unsigned l = f->linear % 32;
  const int w = static_cast<int>(f->linear / 32);
  if (!(mask >> l & 1u))
    die("thread " + std::to_string(f->linear) + " calls a warp operation whose mask 0x" +
        [&] {
          char buf[16];
          std::snprintf(buf, sizeof buf, "%08x", mask);
          return std::string(buf);
        }() + " leaves out its own lane");
  Warp &warp = e.warps[w];
  const int b = static_cast<int>(f->warp_ops++ & 1u);
  if (!warp.arrived[b])
    warp.mask[b] = mask;
  else if (warp.mask[b] != mask)
    die("the lanes of warp " + std::to_string(w) + " meet at a warp operation with different masks");
  warp.values[b][l] = value;
  warp.arrived[b] |= 1u << l;
  f->state = State::AtWarp;
  if (!try_release_warp(w, b))
    yield();
  f->state = State::Runnable;
  *took_part = warp.took[b];
  return warp.values[b];
}

void *dynamic_shared() { return emu().dynamic.data(); }

void require_aligned(const void *p, size_t alignment, const char *what) {
  if (reinterpret_cast<uintptr_t>(p) % alignment == 0)
    return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "thread (%u, %u, %u): %s %p is not %zu-byte aligned",
                thread_idx.x, thread_idx.y, thread_idx.z, what, p, alignment);
  die(std::string(buf) + " (a GPU faults: misaligned address)");
}

void fresh_shared(void *p, size_t bytes) {
  Emulator &e = emu();
  for (void *q : e.fresh)
    if (q == p)
      return;
  e.fresh.push_back(p);
  std::memset(p, 0xff, bytes);
}

bool set_schedule(const char *order) {
  Emulator &e = emu();
  std::lock_guard<std::mutex> lock(e.mutex);
  Schedule s;
  if (!parse_schedule(order, s))
    return false;
  schedule() = s;
  return true;
}

void run(const char *kernel, const Config &c, void (*body)(void *), void *arg) {
  Emulator &e = emu();
  std::lock_guard<std::mutex> lock(e.mutex);
  const unsigned long long threads = 1ull * c.block.x * c.block.y * c.block.z;
  if (threads == 0 || threads > kMaxThreads || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 ||
      c.grid.z == 0 || c.grid.y > 65535 || c.grid.z > 65535 || c.shared > 227 * 1024) {
    std::fprintf(stderr,
                 "dsemu: launch of %s with an invalid configuration: grid %ux%ux%u, block "
                 "%ux%ux%u, %zu bytes of dynamic shared memory\n",
                 kernel, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.shared);
    dsrt_fake_cuda_set_error(cudaErrorInvalidConfiguration);
    return;
  }
  // Past 48 KiB only as far as the kernel opted in (cudaFuncSetAttribute);
  // a launch that does not name its kernel has no attribute.
  const size_t opted = c.kernel ? dsrt_fake_cuda_max_dynamic_shared(c.kernel) : 48 * 1024;
  if (c.shared > opted) {
    std::fprintf(stderr,
                 "dsemu: launch of %s with %zu bytes of dynamic shared memory, more than the "
                 "%zu its cudaFuncAttributeMaxDynamicSharedMemorySize allows\n",
                 kernel, c.shared, opted);
    dsrt_fake_cuda_set_error(cudaErrorInvalidValue);
    return;
  }
  e.kernel = kernel;
  e.body = body;
  e.arg = arg;
  e.threads = static_cast<int>(threads);
  e.warps.assign((threads + 31) / 32, Warp{});
  e.dynamic.assign(c.shared, 0xff);
  grid_dim = c.grid;
  block_dim = c.block;
  const uint64_t blocks = uint64_t(c.grid.x) * c.grid.y * c.grid.z;
  const BlockOrder order(blocks, kernel);
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t b = order(i);
    block_idx = uint3{static_cast<unsigned>(b % c.grid.x),
                      static_cast<unsigned>(b / c.grid.x % c.grid.y),
                      static_cast<unsigned>(b / (uint64_t(c.grid.x) * c.grid.y))};
    run_block(b);
  }
}

}  // namespace dsemu
