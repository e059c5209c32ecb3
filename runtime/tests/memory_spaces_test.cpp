// The plan's memory spaces at run time (runner.h): a program's host and file
// spaces get arenas of the plan's sizes, persistent values are stored into,
// read back from and zeroed in their own space, each space's monitor sees
// its slots, a value planned outside its arena is refused, and the file
// space's file is gone when the arenas go; transfers copy between the
// spaces, are counted, and a run that moves other bytes than its plan is
// stopped. Single process; runs in
// dsrt_async_tests.
#include "dsrt/backend.h"
#include "dsrt/memory.h"
#include "dsrt/program.h"
#include "runner.h"
#include "train_common.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

using dsrt::DType;
using dsrt::Program;
using dsrt::ProgramInfo;
using dsrt::Shape;
using dsrt::Space;
using dsrt::Tensor;
using dsrt::ValueInfo;

std::string temporary_directory() {
  char path[] = "/tmp/dsrt-spaces-XXXXXX";
  const char *made = mkdtemp(path);
  EXPECT_NE(made, nullptr);
  return made ? made : "";
}

bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A program whose plan has a 64-byte device arena, a 128-byte host arena and
// a 4096-byte file arena (file slots are whole 4096-byte blocks), with
// parameter "h" (host) and states "s" (file, 40 floats at offset 0) and "d"
// (device).
struct SpacesProgram {
  ProgramInfo info;
  Program program;
  std::vector<float> h_data = std::vector<float>(24, 2.5f);

  SpacesProgram() {
    dsrt::set_memory_plan(info, 64, 64, 64, 64);
    dsrt::set_space_plan(info, Space::Host, 128, 128);
    dsrt::set_space_plan(info, Space::File, 4096, 4096);
    dsrt::add_param_data(info, "h", Tensor{h_data.data(), DType::F32, Shape{24}}, 0, true);
    dsrt::add_state(info, "s", DType::F32, Shape{40}, 0, dsrt::ValueRole::OptimizerState, "h");
    dsrt::add_state(info, "d", DType::F32, Shape{4}, 0, dsrt::ValueRole::Accumulator, "h");
    dsrt::place_in_space(info, "h", Space::Host);
    dsrt::place_in_space(info, "s", Space::File);
    program.info = &info;
    program.stream = dsrt::Stream(dsrt::backend().kind());
    program.comm = dsrt::Stream(dsrt::backend().kind());
  }
};

TEST(MemorySpaces, ValuesLiveInTheirSpacesArenas) {
  const std::string dir = temporary_directory();
  SpacesProgram sp;
  Program &p = sp.program;
  std::string file;
  {
    dsrt::runner::SpaceArenas spaces;
    std::vector<uint8_t> device(64);
    p.arena = device.data();
    dsrt::runner::allocate_spaces(p, spaces, dir, 3);
    ASSERT_NE(p.host_arena, nullptr);
    ASSERT_NE(p.file_arena, nullptr);
    EXPECT_EQ(dsrt::memory_kind_of(p.host_arena), dsrt::MemoryKind::PinnedHost);
    EXPECT_EQ(p.file_arena->size(), 4096);
    file = spaces.file_path;
    EXPECT_TRUE(exists(file));
    EXPECT_NE(file.find("-3.bin"), std::string::npos) << file;

    dsrt::runner::load_params(p, "");
    for (const ValueInfo &state : sp.info.states) {
      dsrt::runner::acquire_persistent(p, state);
      dsrt::runner::zero_persistent(p, state);
    }
    // Each space's monitor holds its own slots, rounded to the alignment.
    EXPECT_EQ(p.host_memory.high_water_mark(), 128);
    EXPECT_EQ(p.file_memory.high_water_mark(), 4096);  // s: 160 bytes in a whole block
    EXPECT_EQ(p.memory.high_water_mark(), 64);

    std::vector<std::vector<uint8_t>> keep;
    const Tensor h = dsrt::runner::persistent_tensor(p, sp.info.params[0], keep);
    EXPECT_EQ(h.data, p.host_arena);
    for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(static_cast<float *>(h.data)[i], 2.5f);

    // A value stored in the file space reads back from the file.
    std::vector<float> values(40);
    for (int i = 0; i < 40; ++i) values[i] = static_cast<float>(i) - 7.0f;
    dsrt::runner::store_persistent(p, sp.info.states[0], values.data(), 160);
    const Tensor s = dsrt::runner::persistent_tensor(p, sp.info.states[0], keep);
    EXPECT_NE(s.data, nullptr);
    for (int i = 0; i < 40; ++i) EXPECT_EQ(static_cast<float *>(s.data)[i], values[i]);
    dsrt::runner::zero_persistent(p, sp.info.states[0]);
    const Tensor zero = dsrt::runner::persistent_tensor(p, sp.info.states[0], keep);
    for (int i = 0; i < 40; ++i) EXPECT_EQ(static_cast<float *>(zero.data)[i], 0.0f);
  }
  EXPECT_FALSE(exists(file)) << "the file space's file outlived its arenas";
  rmdir(dir.c_str());
}

// offload_param.pin_memory false: the host arena is ordinary host memory,
// counted under that kind, and nothing else about it changes.
TEST(MemorySpaces, HostArenaPinnedOrNot) {
  for (bool pinned : {true, false}) {
    const std::string dir = temporary_directory();
    SpacesProgram sp;
    dsrt::set_host_space_pinned(sp.info, pinned);
    Program &p = sp.program;
    const dsrt::MemoryKind kind =
        pinned ? dsrt::MemoryKind::PinnedHost : dsrt::MemoryKind::Host;
    const dsrt::MemoryUsage before = dsrt::memory_usage(kind);
    {
      dsrt::runner::SpaceArenas spaces;
      std::vector<uint8_t> device(64);
      p.arena = device.data();
      dsrt::runner::allocate_spaces(p, spaces, dir, 0);
      ASSERT_NE(p.host_arena, nullptr);
      EXPECT_EQ(dsrt::memory_kind_of(p.host_arena), kind) << "pinned " << pinned;
      EXPECT_EQ(dsrt::memory_usage(kind).arenas, before.arenas + 1) << "pinned " << pinned;
      dsrt::runner::load_params(p, "");
      std::vector<std::vector<uint8_t>> keep;
      const Tensor h = dsrt::runner::persistent_tensor(p, sp.info.params[0], keep);
      EXPECT_EQ(h.data, p.host_arena);
      EXPECT_EQ(static_cast<float *>(h.data)[23], 2.5f);
    }
    EXPECT_EQ(dsrt::memory_usage(kind).arenas, before.arenas);
    rmdir(dir.c_str());
  }
}

TEST(MemorySpaces, RefusesWhatThePlanCannotHold) {
  SpacesProgram sp;
  Program &p = sp.program;
  // A value whose slot runs past its space's arena.
  ValueInfo outside{"far", DType::F32, Shape{40}, 64, Space::File};
  EXPECT_THROW(
      {
        try {
          dsrt::runner::acquire_persistent(p, outside);
        } catch (const dsrt::Error &e) {
          EXPECT_NE(std::string(e.what()).find("'far'"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("file arena of 4096 bytes"), std::string::npos)
              << e.what();
          throw;
        }
      },
      dsrt::Error);
  // A file space in a directory that does not exist.
  dsrt::runner::SpaceArenas spaces;
  EXPECT_THROW(dsrt::runner::allocate_spaces(p, spaces, "/nonexistent/dsrt-spaces", 0),
               dsrt::Error);
  // Description errors: naming no value, or the device space's plan.
  EXPECT_THROW(dsrt::place_in_space(sp.info, "nobody", Space::Host), dsrt::Error);
  EXPECT_THROW(dsrt::set_space_plan(sp.info, Space::Device, 64, 0), dsrt::Error);
  EXPECT_THROW(dsrt::set_space_plan(sp.info, Space::Host, 64, 128), dsrt::Error);
}

// A file state larger than the zero buffer (1 MiB) is zeroed as one range of
// the versioned store, so that its write-behinds, which write it whole,
// replace it (zeroing it piece by piece made every later write of the state
// fail: "must be a whole range written before or overlap none").
TEST(MemorySpaces, ALargeFileStateIsZeroedAsOneRange) {
  const std::string dir = temporary_directory();
  const int64_t n = 700000;  // 2.8 MB: two whole zero buffers and a part
  const int64_t slot = (4 * n + 4095) / 4096 * 4096;
  ProgramInfo info;
  dsrt::set_memory_plan(info, 64, 64, 64, 64);
  dsrt::set_space_plan(info, Space::File, slot, slot);
  dsrt::add_state(info, "m", DType::F32, Shape{n}, 0, dsrt::ValueRole::OptimizerState, "");
  dsrt::place_in_space(info, "m", Space::File);
  Program p;
  p.info = &info;
  p.stream = dsrt::Stream(dsrt::backend().kind());
  p.comm = dsrt::Stream(dsrt::backend().kind());
  {
    dsrt::runner::SpaceArenas spaces;
    dsrt::runner::allocate_spaces(p, spaces, dir, 0);
    const ValueInfo &m = info.states[0];
    dsrt::runner::acquire_persistent(p, m);
    std::vector<float> values(n, 3.0f);
    dsrt::runner::store_persistent(p, m, values.data(), 4 * n);  // not zero before
    dsrt::runner::zero_persistent(p, m);
    std::vector<std::vector<uint8_t>> keep;
    const Tensor zero = dsrt::runner::persistent_tensor(p, m, keep);
    for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(static_cast<float *>(zero.data)[i], 0.0f) << i;
    EXPECT_EQ(static_cast<float *>(zero.data)[n - 1], 0.0f);
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000);
    ASSERT_NO_THROW(p.file_arena->write_async(p.stream, m.offset, values.data(), 4 * n).wait());
    const Tensor back = dsrt::runner::persistent_tensor(p, m, keep);
    for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(static_cast<float *>(back.data)[i], values[i]) << i;
    EXPECT_EQ(static_cast<float *>(back.data)[n - 1], values[n - 1]);
  }
  rmdir(dir.c_str());
}

// The config's aio block reaches the file space's I/O engine, and the file
// is versioned (two copies on disk) and removed with the spaces.
TEST(MemorySpaces, TheFileSpaceUsesTheAioSettings) {
  SpacesProgram sp;
  dsrt::set_file_space_io(sp.info, 65536, 4, 2, true, false);
  const dsrt::FileIOOptions &io = sp.info.file_io;
  EXPECT_EQ(io.block_size, 65536);
  EXPECT_EQ(io.queue_depth, 4);
  EXPECT_EQ(io.intra_op_parallelism, 2);
  EXPECT_TRUE(io.single_submit);
  EXPECT_FALSE(io.overlap_events);
  EXPECT_THROW(dsrt::set_file_space_io(sp.info, 1000, 4, 2, true, false), dsrt::Error);
  EXPECT_THROW(dsrt::set_file_space_io(sp.info, 65536, int64_t(1) << 40, 2, true, false),
               dsrt::Error);
  EXPECT_THROW(dsrt::set_file_space_io(sp.info, 65536, 4, 0, true, false), dsrt::Error);
  const char *tmp = std::getenv("TMPDIR");
  const std::string dir = tmp && *tmp ? tmp : "/tmp";
  std::string path;
  {
    dsrt::runner::SpaceArenas spaces;
    dsrt::runner::allocate_spaces(sp.program, spaces, dir, 7);
    ASSERT_NE(sp.program.file_arena, nullptr);
    path = sp.program.file_arena->path();
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 2 * 4096);  // 4096 bytes, one block, two copies
  }
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0) << path << " outlived its spaces";
}

}  // namespace

TEST(MemorySpaces, TransfersCopyBetweenSpacesAndAreChecked) {
  const std::string dir = temporary_directory();
  SpacesProgram sp;
  Program &p = sp.program;
  {
    dsrt::runner::SpaceArenas spaces;
    std::vector<uint8_t> device(64);
    p.arena = device.data();
    dsrt::runner::allocate_spaces(p, spaces, dir, 0);
    dsrt::begin_function(sp.info, "optimizer_step", 64, 64);
    dsrt::set_transfer_bytes(sp.info, Space::Device, Space::Host, 16);
    dsrt::set_transfer_bytes(sp.info, Space::Host, Space::File, 16);
    dsrt::set_transfer_bytes(sp.info, Space::File, Space::Host, 16);
    const dsrt::FunctionInfo &function = sp.info.functions.back();

    int64_t before[dsrt::kNumSpaces][dsrt::kNumSpaces];
    for (int from = 0; from < dsrt::kNumSpaces; ++from)
      for (int to = 0; to < dsrt::kNumSpaces; ++to)
        before[from][to] =
            dsrt::transferred_bytes(static_cast<Space>(from), static_cast<Space>(to));
    float *d = reinterpret_cast<float *>(device.data());
    for (int i = 0; i < 4; ++i) d[i] = 1.5f + static_cast<float>(i);
    const Tensor on_device = dsrt::view(p.arena, 0, DType::F32, Shape{4});
    const Tensor on_host = dsrt::view(dsrt::host_arena(p), 64, DType::F32, Shape{4});
    const Tensor back = dsrt::view(dsrt::host_arena(p), 96, DType::F32, Shape{4});
    dsrt::Stream &comm = dsrt::comm_stream(p);
    dsrt::transfer(comm, on_device, on_host, Space::Device, Space::Host);
    dsrt::transfer(comm, on_host, dsrt::file_slot(p, 128), Space::Host, Space::File);
    dsrt::transfer(comm, dsrt::file_slot(p, 128), back, Space::File, Space::Host);
    dsrt::collectives_done(p);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(static_cast<float *>(back.data)[i], d[i]);
    EXPECT_NO_THROW(dsrt::runner::check_transfers(function, before));

    // One copy more than planned stops the run, naming what moved.
    dsrt::transfer(comm, on_device, on_host, Space::Device, Space::Host);
    try {
      dsrt::runner::check_transfers(function, before);
      ADD_FAILURE() << "an unplanned transfer was not noticed";
    } catch (const dsrt::Error &e) {
      EXPECT_NE(std::string(e.what()).find("optimizer_step moved 32 bytes from device to host "
                                           "memory but the plan is 16 bytes"),
                std::string::npos)
          << e.what();
    }
    // A file slot is only ever on the file side.
    EXPECT_THROW(dsrt::transfer(comm, dsrt::file_slot(p, 0), back, Space::Host, Space::Device),
                 dsrt::Error);
    EXPECT_THROW(dsrt::transfer(comm, on_host, back, Space::Host, Space::Host), dsrt::Error);
  }
  rmdir(dir.c_str());
}
