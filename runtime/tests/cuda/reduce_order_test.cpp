// The cuda backend's reduce sums each output in a fixed order, whatever
// the kernel: 256 slices (slice k: reduced elements k, k + 256, ... in
// order, in f64), then a tree halving the slices (slice k + h added to
// slice k, h = 128, 64, ..., 1), rounded once. The column kernel (x
// [rows, columns] summed over its rows: src/cuda/reduce.cu) must give
// exactly these bytes. The data make the order visible: each column holds
// pairs of +2^55 and -2^55 among small values, so which small values f64
// loses depends on the order; a sequential sum (the cpu backend's) differs
// from the expected result in some columns, which the test checks first.
// With at least 2048 rows and few tiles of columns the kernel splits each
// tile's slices among P blocks and a second pass runs the tree's last
// log2 P levels (reduce_column_parts): the same bytes again. With at most
// 256 rows, a thread's registers and warp shuffles: the same bytes too.
#include "dsrt/backend.h"
#include "dsrt/kernels.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace dsrt;

// The order above, in f64, for column c of a [rows, columns] matrix.
float tree_order_sum(const std::vector<float> &x, int64_t rows, int64_t columns, int64_t c) {
  double slice[256];
  for (int k = 0; k < 256; ++k) {
    double acc = 0.0;
    for (int64_t r = k; r < rows; r += 256)
      acc += x[r * columns + c];
    slice[k] = acc;
  }
  for (int half = 128; half > 0; half /= 2)
    for (int k = 0; k < half; ++k)
      slice[k] += slice[k + half];
  return static_cast<float>(slice[0]);
}

float sequential_sum(const std::vector<float> &x, int64_t rows, int64_t columns, int64_t c) {
  double acc = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    acc += x[r * columns + c];
  return static_cast<float>(acc);
}

// Small values k/64 (exact in bf16) and, per column, eight pairs of +-2^55
// at rows chosen by a fixed linear congruential sequence.
std::vector<float> cancelling_columns(int64_t rows, int64_t columns) {
  std::vector<float> x(rows * columns);
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (float &v : x)
    v = static_cast<float>(static_cast<int64_t>(next() % 129) - 64) / 64.0f;
  for (int64_t c = 0; c < columns; ++c)
    for (int pair = 0; pair < 8; ++pair) {
      x[(next() % rows) * columns + c] = 0x1p55f;
      x[(next() % rows) * columns + c] = -0x1p55f;
    }
  return x;
}

// x summed over its rows by dsrt::reduce into f32.
std::vector<float> reduce_rows(const std::vector<float> &x, DType dtype, int64_t rows,
                               int64_t columns) {
  std::vector<uint8_t> bytes(x.size() * dtype_size(dtype));
  if (dtype == DType::F32) {
    std::memcpy(bytes.data(), x.data(), bytes.size());
  } else {  // bf16: the upper half of f32 (the values are exact in bf16)
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &x[i], 4);
      const uint16_t half = static_cast<uint16_t>(bits >> 16);
      std::memcpy(bytes.data() + 2 * i, &half, 2);
    }
  }
  Stream stream(backend().kind(), 1);
  BackendInterface &b = backend(stream);
  void *dx = b.allocate(MemoryKind::Device, bytes.size(), 256);
  void *dy = b.allocate(MemoryKind::Device, columns * sizeof(float), 256);
  const int64_t axes[] = {0};
  const int64_t ws_bytes =
      reduce_workspace_bytes(ReduceOp::Sum, dtype, Shape{rows, columns}, axes, 1);
  void *ws = b.allocate(MemoryKind::Device, static_cast<size_t>(ws_bytes), 256);
  b.copy(stream, dx, bytes.data(), bytes.size());
  reduce(stream, ReduceOp::Sum, Tensor{dx, dtype, Shape{rows, columns}},
         Tensor{dy, DType::F32, Shape{columns}}, axes, 1, Workspace{ws, ws_bytes});
  std::vector<float> y(columns);
  b.copy(stream, y.data(), dy, y.size() * sizeof(float));
  stream.synchronize();
  b.deallocate(MemoryKind::Device, dx);
  b.deallocate(MemoryKind::Device, dy);
  b.deallocate(MemoryKind::Device, ws);
  return y;
}

void check_order(DType dtype, int64_t rows, int64_t columns) {
  const std::vector<float> x = cancelling_columns(rows, columns);
  int order_visible = 0;
  for (int64_t c = 0; c < columns; ++c)
    order_visible += tree_order_sum(x, rows, columns, c) != sequential_sum(x, rows, columns, c);
  ASSERT_GT(order_visible, 0) << "the data do not tell the orders apart";
  const std::vector<float> y = reduce_rows(x, dtype, rows, columns);
  for (int64_t c = 0; c < columns; ++c)
    EXPECT_EQ(y[c], tree_order_sum(x, rows, columns, c)) << "column " << c;
}

TEST(CudaReduceOrder, ColumnsF32) { check_order(DType::F32, 1000, 37); }
TEST(CudaReduceOrder, ColumnsBf16ToF32) { check_order(DType::BF16, 1000, 38); }
TEST(CudaReduceOrder, ColumnsBf16OddToF32) { check_order(DType::BF16, 900, 35); }
// Split into parts: 38 tiles of 8 f32 columns, 4 parts; 3 tiles of 16 bf16
// columns (the last partial), 32 parts.
TEST(CudaReduceOrder, PartsF32) { check_order(DType::F32, 4096, 300); }
TEST(CudaReduceOrder, PartsBf16OddToF32) { check_order(DType::BF16, 2100, 45); }
// At most 256 rows (reduce_few_rows_kernel): the halving tree over the
// power of two at or above the rows, in registers and warp shuffles, 1 to
// 8 lanes a column.
TEST(CudaReduceOrder, FewRowsBf16ToF32) { check_order(DType::BF16, 64, 770); }
TEST(CudaReduceOrder, FewRowsF32) { check_order(DType::F32, 200, 37); }
TEST(CudaReduceOrder, FewRowsBf16OddToF32) { check_order(DType::BF16, 33, 35); }
TEST(CudaReduceOrder, FewRowsF32Full) { check_order(DType::F32, 256, 41); }
TEST(CudaReduceOrder, FewRowsF32Short) { check_order(DType::F32, 24, 50); }

// The parts' accumulators come from the plan's workspace: without it the
// split column sum is refused, naming the bytes it needs (4 x 300 f64).
TEST(CudaReduceOrder, PartsNeedTheWorkspace) {
  Stream stream(backend().kind(), 1);
  BackendInterface &b = backend(stream);
  void *dx = b.allocate(MemoryKind::Device, 4096 * 300 * sizeof(float), 256);
  void *dy = b.allocate(MemoryKind::Device, 300 * sizeof(float), 256);
  const int64_t axes[] = {0};
  try {
    reduce(stream, ReduceOp::Sum, Tensor{dx, DType::F32, Shape{4096, 300}},
           Tensor{dy, DType::F32, Shape{300}}, axes, 1, Workspace{});
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("9600 bytes"), std::string::npos) << e.what();
  }
  stream.synchronize();
  b.deallocate(MemoryKind::Device, dx);
  b.deallocate(MemoryKind::Device, dy);
}

}  // namespace
