// The MPI ring transport's collectives: ring reduce-scatter, all-gather
// and all-reduce, the pipelined broadcast chain and the barrier, each after
// the header exchange. Reduction order and byte counts: docs/runtime.md.
#include "mpi_ring.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace dsrt {
namespace detail {

namespace {

//===--- reductions --------------------------------------------------------===//

template <typename T> struct Accum {
  using type = typename Elem<T>::compute;  // f32 for floats, the integer type otherwise
};

template <typename A> inline A combine(A a, A b, ReduceOp op) {
  if (op == ReduceOp::Max) {
    if constexpr (std::is_floating_point_v<A>) {
      if (a != a)
        return a;
      if (b != b)
        return b;
    }
    return a < b ? b : a;
  }
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));  // wraps
  } else {
    return a + b;
  }
}

// Average divides once, at the end; integer averages truncate, as
// reduce(mean) does.
template <typename A> inline A finish(A v, ReduceOp op, int ranks) {
  return op == ReduceOp::Mean ? v / static_cast<A>(ranks) : v;
}

template <typename T> inline typename Accum<T>::type load(T v) { return Elem<T>::load(v); }
template <typename T> inline T store(typename Accum<T>::type v) {
  if constexpr (std::is_integral_v<T>)
    return v;
  else
    return Elem<T>::store(v);
}

}  // namespace

void CommEngine::run_collective(Call &c, const std::string &local) {
  const std::string title = op_title(c);
  const std::string what = title + " (collective #" + std::to_string(c.seq) + " on rank " +
                           std::to_string(rank) + " of " + std::to_string(size) + ")";
  const int N = size, r = rank;
  const DType dtype = c.op == CommOp::Barrier ? DType::F32 : c.in.dtype;

  // Header exchange with every other rank.
  std::vector<Header> all(N);
  all[r] = make_header(c, c.op, dtype, c.count, r, local);
  {
    Transfers t(*this, c, what);
    for (int p = 0; p < N; ++p)
      if (p != r) {
        t.recv(c.op, &all[p], kCommHeaderBytes, p, kTagCollHeader, true);
        t.send(c.op, &all[r], kCommHeaderBytes, p, kTagCollHeader, true);
      }
    t.wait();
  }
  check_headers(title, all, r, local);

  const int next = mod(r + 1, N), prev = mod(r - 1, N);
  auto chunk = [&](int64_t j) { return ring_chunk(c.count, N, mod(j, N)); };
  Transfers t(*this, c, what);

  // Reduce-scatter: at step k rank r sends its partial of chunk r-1-k to
  // r+1 and receives r-1's partial of chunk r-2-k, adding its own value. So
  // chunk j is summed along the ring starting at rank j+1 and ending at rank
  // j, which holds the result after N-1 steps. Partials travel in the
  // element type, as NCCL's ring sends them: each hop adds in the
  // accumulation type (f32 for 16-bit floats) and rounds once before
  // sending on. Returns this rank's result, unrounded, in the accumulation
  // type.
  auto reduce_scatter = [&](auto tag) -> const void * {
    using T = typename decltype(tag)::type;
    using A = typename Accum<T>::type;
    const T *in = static_cast<const T *>(c.in.data);
    const size_t max_chunk = static_cast<size_t>(chunk(0).size);
    for (auto &s : stage_)
      if (s.size() < max_chunk * sizeof(A))
        s.resize(max_chunk * sizeof(A));
    if (N == 1) {
      A *acc = reinterpret_cast<A *>(stage_[0].data());
      for (int64_t i = 0, n = c.count; i < n; ++i)
        acc[i] = load(in[i]);
      return acc;
    }
    T *send = reinterpret_cast<T *>(stage_[0].data());
    T *recv = reinterpret_cast<T *>(stage_[1].data());
    Chunk first = chunk(r - 1);
    std::copy(in + first.begin, in + first.begin + first.size, send);
    for (int k = 0;; ++k) {
      Chunk cs = chunk(r - 1 - k), cr = chunk(r - 2 - k);
      if (cr.size)
        t.recv(c.op, recv, cr.size * int64_t(sizeof(T)), prev, kTagCollData);
      if (cs.size)
        t.send(c.op, send, cs.size * int64_t(sizeof(T)), next, kTagCollData);
      t.wait();
      t.clear();
      if (k == N - 2) {
        // The last step: the chunk is this rank's own; its send buffer is
        // free and holds the sum until store_result rounds it.
        A *acc = reinterpret_cast<A *>(send);
        for (int64_t i = 0; i < cr.size; ++i)
          acc[i] = combine(load(recv[i]), load(in[cr.begin + i]), c.reduce);
        return acc;
      }
      for (int64_t i = 0; i < cr.size; ++i)
        recv[i] = store<T>(combine(load(recv[i]), load(in[cr.begin + i]), c.reduce));
      std::swap(send, recv);
    }
  };
  // Rounds this rank's reduced chunk (f32 for 16-bit floats) into `out`.
  auto store_result = [&](auto tag, const void *acc, void *out) {
    using T = typename decltype(tag)::type;
    using A = typename Accum<T>::type;
    const A *a = static_cast<const A *>(acc);
    T *o = static_cast<T *>(out);
    for (int64_t i = 0, n = chunk(r).size; i < n; ++i)
      o[i] = store<T>(finish(a[i], c.reduce, N));
  };
  // All-gather in place: at step k rank r sends chunk r-k to r+1 and
  // receives chunk r-1-k from r-1.
  auto all_gather = [&](uint8_t *out, size_t esize) {
    for (int k = 0; k < N - 1; ++k) {
      Chunk cs = chunk(r - k), cr = chunk(r - 1 - k);
      if (cr.size)
        t.recv(c.op, out + cr.begin * esize, cr.size * int64_t(esize), prev, kTagCollData);
      if (cs.size)
        t.send(c.op, out + cs.begin * esize, cs.size * int64_t(esize), next, kTagCollData);
      t.wait();
      t.clear();
    }
  };

  switch (c.op) {
  case CommOp::AllReduce:
    dispatch_numeric("all_reduce", dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const void *acc = reduce_scatter(tag);
      store_result(tag, acc, static_cast<T *>(c.out.data) + chunk(r).begin);
      all_gather(static_cast<uint8_t *>(c.out.data), sizeof(T));
    });
    break;
  case CommOp::ReduceScatter:
    dispatch_numeric("reduce_scatter", dtype, [&](auto tag) {
      const void *acc = reduce_scatter(tag);
      store_result(tag, acc, c.out.data);
    });
    break;
  case CommOp::AllGather: {
    size_t esize = dtype_size(dtype);
    uint8_t *out = static_cast<uint8_t *>(c.out.data);
    uint8_t *mine = out + chunk(r).begin * esize;
    if (mine != c.in.data && c.in.nbytes())
      std::memcpy(mine, c.in.data, c.in.nbytes());
    all_gather(out, esize);
    break;
  }
  case CommOp::Broadcast: {
    // A pipelined chain root, root+1, ..., root-1: each rank forwards a
    // slice as soon as it has received it.
    const int pos = mod(r - c.root, N);
    if (N == 1)
      break;
    uint8_t *buf = static_cast<uint8_t *>(c.in.data);
    const int64_t bytes = static_cast<int64_t>(c.in.nbytes());
    const int64_t slice = std::clamp<int64_t>(c.options.broadcast_slice_bytes, 1, kMaxMessage);
    const int64_t slices = (bytes + slice - 1) / slice;
    auto slice_size = [&](int64_t s) { return std::min(slice, bytes - s * slice); };
    if (pos == 0) {
      for (int64_t s = 0; s < slices; ++s)
        t.send(c.op, buf + s * slice, slice_size(s), next, kTagCollData);
      t.wait();
    } else {
      for (int64_t s = 0; s < slices; ++s)
        t.recv(c.op, buf + s * slice, slice_size(s), prev, kTagCollData);
      const bool forward = pos < N - 1;
      int64_t forwarded = 0;  // slices go on in order, whatever order MPI reports
      t.wait([&](size_t) {
        while (forward && forwarded < slices && t.done(static_cast<size_t>(forwarded))) {
          t.send(c.op, buf + forwarded * slice, slice_size(forwarded), next, kTagCollData);
          ++forwarded;
        }
      });
    }
    break;
  }
  case CommOp::Barrier:
    break;  // the header exchange was the barrier
  default:
    throw Error(title + ": not a collective");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  counters_[static_cast<int>(c.op)].calls += 1;
}

}  // namespace detail
}  // namespace dsrt
