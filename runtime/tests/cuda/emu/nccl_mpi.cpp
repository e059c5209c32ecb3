// NCCL's collectives over MPI, for the CUDA emulation (docs/runtime.md,
// "The CUDA emulation"): the fake runtime built with DSRT_FAKE_EMULATE and
// MPI (fake_cudart.cpp) hands each NCCL call here, which moves the bytes at
// once (device memory is host memory and every stream's work is done in
// call order), so that a cuda program runs on several ranks under mpirun.
//
// Each NCCL communicator is an MPI communicator of the same ranks in the
// same order, made in ncclCommInitRank: the unique id names the world rank
// that made it (ncclGetUniqueId) and a sequence number; every other member
// sends that rank its NCCL rank and world rank, it answers with the table,
// and the members build the communicator with MPI_Comm_create_group (only
// they take part, as only they call ncclCommInitRank). The id's maker must be
// one of the ranks (dsrt's bootstrap has rank 0 make it).
//
// Semantics as NCCL documents them: AllReduce, Reduce and ReduceScatter
// reduce in rank order (sum, prod, max, min, avg: the sum divided by the
// rank count), each partial result rounded to the element type; ReduceScatter
// leaves rank r block r of the reduced sendcount * nranks elements;
// AllGather puts rank r's block at r * sendcount; Broadcast copies root's
// send buffer into every rank's receive buffer; Send and Recv move count
// elements between two ranks. In-place calls (send == recv, or AllGather's
// send at the receive buffer's own block) are allowed. Between
// ncclGroupStart and ncclGroupEnd the calls are queued and run at the end
// of the outermost group: the point-to-point ones posted first (so that a
// group of sends and receives cannot deadlock), the collectives then in
// call order.
#include "nccl_mpi.h"
#include "fault.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace dsemu {
namespace nccl {
namespace {

constexpr uint32_t kMagic = 0x6e63636c;  // "nccl"
constexpr int kInitTag = 0x6e00;         // + the id's sequence number (mod 256)
constexpr int kP2PTag = 0x6f00;

struct Id {
  uint32_t magic, world_rank, sequence;
};

// MPI is initialized MPI_THREAD_SERIALIZED by dsrt; NCCL calls may come
// from more than one thread, so they take turns.
std::recursive_mutex &mpi_mutex() {
  static std::recursive_mutex m;
  return m;
}

[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "cuda emulation: NCCL: %s\n", what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void check(int status, const char *what) {
  if (status != MPI_SUCCESS) die(std::string(what) + " failed");
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: die("element type " + std::to_string(static_cast<int>(t)) + " is not emulated");
  }
}

int bytes_int(size_t count, ncclDataType_t t) {
  const size_t bytes = count * type_size(t);
  if (bytes > static_cast<size_t>(INT_MAX))
    die(std::to_string(bytes) + " bytes in one call: more than the emulation moves at once");
  return static_cast<int>(bytes);
}

template <typename T> float to_f(T v) { return static_cast<float>(v); }
template <typename T> T from_f(float v) { return static_cast<T>(v); }

// acc = op(acc, x) over n elements of type T, computed in C (f16 and bf16 in
// f32, rounded back).
template <typename T, typename C>
void combine_as(void *acc, const void *x, size_t n, ncclRedOp_t op) {
  T *a = static_cast<T *>(acc);
  const T *b = static_cast<const T *>(x);
  for (size_t i = 0; i < n; ++i) {
    const C u = static_cast<C>(a[i]), v = static_cast<C>(b[i]);
    C r;
    switch (op) {
    case ncclSum: case ncclAvg: r = u + v; break;
    case ncclProd: r = u * v; break;
    case ncclMax: r = u < v ? v : u; break;
    case ncclMin: r = v < u ? v : u; break;
    default: die("reduction " + std::to_string(static_cast<int>(op)) + " is not emulated");
    }
    a[i] = static_cast<T>(r);
  }
}

template <typename T, typename C> void divide_as(void *acc, size_t n, int by) {
  T *a = static_cast<T *>(acc);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<T>(static_cast<C>(a[i]) / static_cast<C>(by));
}

struct Half {  // __half with float conversions for combine_as
  __half h;
  Half(float f) : h(__float2half_rn(f)) {}
  operator float() const { return __half2float(h); }
};
struct BF16 {
  __nv_bfloat16 h;
  BF16(float f) : h(__float2bfloat16_rn(f)) {}
  operator float() const { return __bfloat162float(h); }
};
static_assert(sizeof(Half) == 2 && sizeof(BF16) == 2, "16-bit wrappers");

void combine(void *acc, const void *x, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
  case ncclInt8: return combine_as<int8_t, int64_t>(acc, x, n, op);
  case ncclUint8: return combine_as<uint8_t, uint64_t>(acc, x, n, op);
  case ncclInt32: return combine_as<int32_t, int64_t>(acc, x, n, op);
  case ncclUint32: return combine_as<uint32_t, uint64_t>(acc, x, n, op);
  case ncclInt64: return combine_as<int64_t, int64_t>(acc, x, n, op);
  case ncclUint64: return combine_as<uint64_t, uint64_t>(acc, x, n, op);
  case ncclFloat16: return combine_as<Half, float>(acc, x, n, op);
  case ncclBfloat16: return combine_as<BF16, float>(acc, x, n, op);
  case ncclFloat32: return combine_as<float, float>(acc, x, n, op);
  case ncclFloat64: return combine_as<double, double>(acc, x, n, op);
  default: type_size(t);  // dies
  }
}

void divide(void *acc, size_t n, ncclDataType_t t, int by) {
  switch (t) {
  case ncclInt8: return divide_as<int8_t, int64_t>(acc, n, by);
  case ncclUint8: return divide_as<uint8_t, uint64_t>(acc, n, by);
  case ncclInt32: return divide_as<int32_t, int64_t>(acc, n, by);
  case ncclUint32: return divide_as<uint32_t, uint64_t>(acc, n, by);
  case ncclInt64: return divide_as<int64_t, int64_t>(acc, n, by);
  case ncclUint64: return divide_as<uint64_t, uint64_t>(acc, n, by);
  case ncclFloat16: return divide_as<Half, float>(acc, n, by);
  case ncclBfloat16: return divide_as<BF16, float>(acc, n, by);
  case ncclFloat32: return divide_as<float, float>(acc, n, by);
  case ncclFloat64: return divide_as<double, double>(acc, n, by);
  default: type_size(t);
  }
}

// out = the reduction over ranks of blocks[r] (n elements each, rank order).
void reduce_blocks(void *out, const std::vector<const char *> &blocks, size_t n,
                   ncclDataType_t t, ncclRedOp_t op) {
  if (n == 0) return;
  std::vector<char> acc(blocks[0], blocks[0] + n * type_size(t));
  // DSRT_EMU_FAULT=nccl-drop: the last rank's contribution left out.
  const size_t kept = blocks.size() - (fault("nccl-drop") ? 1 : 0);
  if (kept == 0) std::fill(acc.begin(), acc.end(), char(0));
  for (size_t r = 1; r < kept; ++r) combine(acc.data(), blocks[r], n, t, op);
  if (op == ncclAvg) divide(acc.data(), n, t, static_cast<int>(blocks.size()));
  std::memcpy(out, acc.data(), acc.size());
}

// Every rank's `bytes` from `send`, rank order.
std::vector<char> all_gather_bytes(const Comm &c, const void *send, int bytes) {
  std::vector<char> all(static_cast<size_t>(bytes) * c.nranks);
  if (c.nranks == 1) {
    std::memcpy(all.data(), send, bytes);
    return all;
  }
  check(MPI_Allgather(send, bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, c.mpi),
        "MPI_Allgather");
  return all;
}

struct Group {
  int depth = 0;
  std::vector<std::function<void(std::vector<MPI_Request> &)>> p2p;
  std::vector<std::function<void()>> collectives;
};
Group &group() {
  static thread_local Group g;
  return g;
}

void run_or_queue(std::function<void()> collective) {
  Group &g = group();
  if (g.depth > 0) {
    g.collectives.push_back(std::move(collective));
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(mpi_mutex());
  collective();
}

}  // namespace

void unique_id(char *internal) {
  std::lock_guard<std::recursive_mutex> lock(mpi_mutex());
  static uint32_t sequence = 0;
  int world = 0, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &world);
  Id id{kMagic, static_cast<uint32_t>(world), sequence++};
  std::memset(internal, 0, NCCL_UNIQUE_ID_BYTES);
  std::memcpy(internal, &id, sizeof(id));
}

Comm *init(int nranks, const char *internal, int rank) {
  Id id;
  std::memcpy(&id, internal, sizeof(id));
  if (id.magic != kMagic) die("ncclCommInitRank: a unique id ncclGetUniqueId did not make");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    die("ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  Comm *c = new Comm{nranks, rank, MPI_COMM_NULL};
  if (nranks == 1) return c;
  std::lock_guard<std::recursive_mutex> lock(mpi_mutex());
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const int tag = kInitTag + static_cast<int>(id.sequence % 256);
  const int root = static_cast<int>(id.world_rank);
  // table[r]: the world rank of NCCL rank r.
  std::vector<int> table(nranks, -1);
  if (world == root) {
    table[rank] = world;
    for (int i = 1; i < nranks; ++i) {
      int pair[2];
      check(MPI_Recv(pair, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "MPI_Recv (ncclCommInitRank)");
      if (pair[0] < 0 || pair[0] >= nranks || table[pair[0]] != -1)
        die("ncclCommInitRank: NCCL rank " + std::to_string(pair[0]) + " given twice or out of " +
            std::to_string(nranks));
      table[pair[0]] = pair[1];
    }
    for (int r = 0; r < nranks; ++r)
      if (r != rank)
        check(MPI_Send(table.data(), nranks, MPI_INT, table[r], tag, MPI_COMM_WORLD),
              "MPI_Send (ncclCommInitRank)");
  } else {
    int pair[2] = {rank, world};
    check(MPI_Send(pair, 2, MPI_INT, root, tag, MPI_COMM_WORLD), "MPI_Send (ncclCommInitRank)");
    check(MPI_Recv(table.data(), nranks, MPI_INT, root, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "MPI_Recv (ncclCommInitRank)");
  }
  MPI_Group world_group, members;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, nranks, table.data(), &members);
  check(MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &c->mpi), "MPI_Comm_create_group");
  MPI_Group_free(&members);
  MPI_Group_free(&world_group);
  return c;
}

void destroy(Comm *c) {
  if (!c) return;
  if (c->mpi != MPI_COMM_NULL) {
    std::lock_guard<std::recursive_mutex> lock(mpi_mutex());
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&c->mpi);
  }
  delete c;
}

void group_start() { ++group().depth; }

void group_end() {
  Group &g = group();
  if (g.depth == 0) die("ncclGroupEnd without ncclGroupStart");
  if (--g.depth > 0) return;
  std::lock_guard<std::recursive_mutex> lock(mpi_mutex());
  std::vector<MPI_Request> requests;
  for (auto &post : g.p2p) post(requests);
  for (auto &run : g.collectives) run();
  if (!requests.empty())
    check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall (ncclSend/ncclRecv)");
  g.p2p.clear();
  g.collectives.clear();
}

void all_reduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                Comm *c) {
  run_or_queue([=] {
    const int bytes = bytes_int(count, t);
    std::vector<char> all = all_gather_bytes(*c, send, bytes);
    std::vector<const char *> blocks;
    for (int r = 0; r < c->nranks; ++r) blocks.push_back(all.data() + size_t(r) * bytes);
    reduce_blocks(recv, blocks, count, t, op);
  });
}

void reduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
            int root, Comm *c) {
  run_or_queue([=] {
    const int bytes = bytes_int(count, t);
    std::vector<char> all(size_t(bytes) * c->nranks);
    if (c->nranks == 1)
      std::memcpy(all.data(), send, bytes);
    else
      check(MPI_Gather(send, bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, root, c->mpi),
            "MPI_Gather (ncclReduce)");
    if (c->rank != root) return;
    std::vector<const char *> blocks;
    for (int r = 0; r < c->nranks; ++r) blocks.push_back(all.data() + size_t(r) * bytes);
    reduce_blocks(recv, blocks, count, t, op);
  });
}

void reduce_scatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
                    ncclRedOp_t op, Comm *c) {
  run_or_queue([=] {
    const int block = bytes_int(recvcount, t);
    const int whole = bytes_int(recvcount * c->nranks, t);
    std::vector<char> all = all_gather_bytes(*c, send, whole);
    std::vector<const char *> blocks;
    for (int r = 0; r < c->nranks; ++r)
      blocks.push_back(all.data() + size_t(r) * whole + size_t(c->rank) * block);
    reduce_blocks(recv, blocks, recvcount, t, op);
  });
}

void all_gather(const void *send, void *recv, size_t sendcount, ncclDataType_t t, Comm *c) {
  run_or_queue([=] {
    const int bytes = bytes_int(sendcount, t);
    std::vector<char> all = all_gather_bytes(*c, send, bytes);
    std::memcpy(recv, all.data(), all.size());
  });
}

void broadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
               Comm *c) {
  run_or_queue([=] {
    const int bytes = bytes_int(count, t);
    if (c->rank == root && send != recv) std::memmove(recv, send, bytes);
    if (c->nranks > 1)
      check(MPI_Bcast(recv, bytes, MPI_BYTE, root, c->mpi), "MPI_Bcast (ncclBroadcast)");
  });
}

namespace {
// Posts an MPI_Isend (to) or MPI_Irecv (from `peer`) in the current group,
// or in a group of its own.
void point_to_point(bool sending, void *buf, size_t count, ncclDataType_t t, int peer,
                    Comm *c) {
  const int bytes = bytes_int(count, t);
  if (peer < 0 || peer >= c->nranks || peer == c->rank)
    die(std::string(sending ? "ncclSend to" : "ncclRecv from") + " rank " +
        std::to_string(peer) + " of " + std::to_string(c->nranks));
  auto post = [=](std::vector<MPI_Request> &requests) {
    requests.emplace_back();
    check(sending ? MPI_Isend(buf, bytes, MPI_BYTE, peer, kP2PTag, c->mpi, &requests.back())
                  : MPI_Irecv(buf, bytes, MPI_BYTE, peer, kP2PTag, c->mpi, &requests.back()),
          sending ? "MPI_Isend" : "MPI_Irecv");
  };
  group_start();
  group().p2p.push_back(post);
  group_end();
}
}  // namespace

void send(const void *buf, size_t count, ncclDataType_t t, int peer, Comm *c) {
  point_to_point(true, const_cast<void *>(buf), count, t, peer, c);
}

void recv(void *buf, size_t count, ncclDataType_t t, int peer, Comm *c) {
  point_to_point(false, buf, count, t, peer, c);
}

}  // namespace nccl
}  // namespace dsemu
