// kjit::DeviceBuffer on a device: the memory is there, usable and aligned; a move hands it over
// and leaves the source empty; a move-assignment frees what the target held; free() empties.
#include <kjit/device.hpp>
#include <kjit/device_buffer.hpp>
#include <kjit/error.hpp>

#include "runtime/driver.hpp"
#include "tools/testing/gpu.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace {

using kjit::DeviceBuffer;
namespace kt = kjit::testing;

class DeviceBufferGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
    kt::use_device(0);
  }
};

std::vector<uint8_t> read_back(const DeviceBuffer& b) {
  std::vector<uint8_t> host(b.bytes());
  KJIT_CU(cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(b.data()), host.size()));
  return host;
}

TEST_F(DeviceBufferGpu, HoldsUsableAlignedMemory) {
  DeviceBuffer b(0, 4096);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.bytes(), 4096u);
  EXPECT_EQ(b.device(), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 256, 0u);
  KJIT_CU(cuMemsetD8(reinterpret_cast<CUdeviceptr>(b.data()), 0x5a, b.bytes()));
  for (uint8_t v : read_back(b)) ASSERT_EQ(v, 0x5a);
}

TEST_F(DeviceBufferGpu, MoveHandsTheMemoryOver) {
  DeviceBuffer a(0, 1024);
  void* p = a.data();
  DeviceBuffer b(std::move(a));
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.bytes(), 0u);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.bytes(), 1024u);
  DeviceBuffer c(0, 512);
  c = std::move(b);  // frees c's 512 bytes
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(c.data(), p);
  KJIT_CU(cuMemsetD8(reinterpret_cast<CUdeviceptr>(c.data()), 1, c.bytes()));
}

TEST_F(DeviceBufferGpu, FreeEmptiesAndIsIdempotent) {
  DeviceBuffer b(0, 256);
  b.free();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.device(), -1);
  EXPECT_NO_THROW(b.free());
}

TEST_F(DeviceBufferGpu, ManyAllocationsDoNotLeak) {
  // 64 x 4 GiB: more than any GPU holds, so it fits only when each buffer is freed as it goes.
  for (int i = 0; i < 64; ++i) {
    DeviceBuffer b(0, size_t{4} << 30);
    ASSERT_FALSE(b.empty());
  }
}

TEST_F(DeviceBufferGpu, OrdinalOutOfRangeIsInvalidArgument) {
  EXPECT_THROW(DeviceBuffer(-1, 64), kjit::InvalidArgument);
}

}  // namespace
