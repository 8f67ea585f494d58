//===- ThreadEngineTest.cpp - CUDA thread blocks as fibers ----------------===//
//
// Kernels written here in CUDA C++ (through the kernel shim, as the
// backend's .cu files are built for the virtual GPU) run on the thread
// engine: indices, barriers, shuffles, votes, atomics, shared memory, the
// launch limits, and the faults a device would have (a divergent barrier, a
// shuffle naming an absent lane, a write past shared memory, a kernel
// reading freed memory).
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/KernelShim.h"

#include "VirtualGpu/KernelLaunch.h"
#include "VirtualGpu/Runtime.h"
#include "../../lib/Runtime/Cuda/SharedMemory.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace moe::rt::virtual_gpu {
namespace {

// --- kernels -----------------------------------------------------------------

__global__ void indexKernel(int *seen) {
  unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned perBlock = blockDim.x * blockDim.y * blockDim.z;
  atomicAdd(&seen[block * perBlock + thread], 1);
}

/// Reverses each block's 256 values through shared memory.
__global__ void reverseKernel(const float *in, float *out, bool synchronise) {
  MOE_BLOCK_SHARED(float, tile, 256);
  unsigned t = threadIdx.x;
  tile[t] = in[blockIdx.x * 256 + t];
  if (synchronise)
    __syncthreads();
  out[blockIdx.x * 256 + t] = tile[255 - t];
}

/// The first 32 threads skip the barrier.
__global__ void divergentBarrierKernel(float *out) {
  if (threadIdx.x < 32)
    return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

/// Each warp's sum by a butterfly of shuffles, and a ballot of odd lanes.
__global__ void warpSumKernel(const float *in, float *sums, unsigned *votes) {
  float v = in[threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  unsigned vote = __ballot_sync(0xffffffffu, threadIdx.x % 2);
  if (threadIdx.x % 32 == 0) {
    sums[threadIdx.x / 32] = v;
    votes[threadIdx.x / 32] = vote;
  }
}

/// Lanes 0..15 only shuffle among themselves (a legal partial mask).
__global__ void halfWarpKernel(const float *in, float *out) {
  if (threadIdx.x >= 16)
    return;
  out[threadIdx.x] = __shfl_sync(0x0000ffffu, in[threadIdx.x], 15 - threadIdx.x);
}

/// A full-mask shuffle after some lanes have left: undefined on a device.
__global__ void divergentShuffleKernel(float *out) {
  if (threadIdx.x == 7)
    return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void readUninitialisedSharedKernel(unsigned *out) {
  MOE_BLOCK_SHARED(unsigned, words, 64);
  out[threadIdx.x] = words[threadIdx.x];
}

__global__ void overflowSharedKernel(float *out) {
  MOE_DYNAMIC_SHARED(float, values, 16);
  values[threadIdx.x + 64] = 1.0f; // 64 floats were asked for
  out[threadIdx.x] = 0.0f;
}

__global__ void dynamicSharedKernel(float *out, int count) {
  MOE_DYNAMIC_SHARED(float, values, 16);
  for (int i = threadIdx.x; i < count; i += blockDim.x)
    values[i] = static_cast<float>(i);
  __syncthreads();
  float sum = 0;
  for (int i = 0; i < count; ++i)
    sum += values[i];
  out[threadIdx.x] = sum;
}

__global__ void countKernel(int *counter) { atomicAdd(counter, 1); }

__global__ void copyKernel(const float *in, float *out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += blockDim.x * gridDim.x)
    out[i] = in[i];
}

// --- helpers -----------------------------------------------------------------

class ThreadEngineTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(selectDevice("h100").ok());
    ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  }
  void TearDown() override { cudaDeviceReset(); }

  template <typename T> T *device(const std::vector<T> &values) {
    T *p = nullptr;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&p), values.size() * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, values.data(), values.size() * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    return p;
  }
  template <typename T> std::vector<T> host(const T *p, size_t n) {
    std::vector<T> values(n);
    EXPECT_EQ(cudaMemcpy(values.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return values;
  }
};

// --- tests -------------------------------------------------------------------

TEST_F(ThreadEngineTest, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  dim3 grid(3, 2, 2), block(8, 4, 2);
  size_t n = 12 * 64;
  int *seen = device(std::vector<int>(n, 0));
  launchKernel("index", indexKernel, grid, block, 0, nullptr, seen);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int count : host(seen, n))
    EXPECT_EQ(count, 1);
}

TEST_F(ThreadEngineTest, BarrierOrdersSharedMemory) {
  std::vector<float> values(4 * 256);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i);
  float *in = device(values);
  float *out = device(std::vector<float>(values.size(), 0.0f));
  launchKernel("reverse", reverseKernel, dim3(4), dim3(256), 0, nullptr, in,
               out, true);
  std::vector<float> got = host(out, values.size());
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 256; ++t)
      ASSERT_EQ(got[b * 256 + t], values[b * 256 + 255 - t]);
}

TEST_F(ThreadEngineTest, MissingBarrierReadsPoison) {
  // Without __syncthreads, a thread reads its partner's slot before the
  // partner wrote it: shared memory starts poisoned (NaN), so it shows.
  std::vector<float> values(256, 1.0f);
  float *in = device(values);
  float *out = device(std::vector<float>(256, 0.0f));
  launchKernel("reverse", reverseKernel, dim3(1), dim3(256), 0, nullptr, in,
               out, false);
  std::vector<float> got = host(out, 256);
  int poisoned = 0;
  for (float v : got)
    poisoned += std::isnan(v);
  EXPECT_GT(poisoned, 0);
}

TEST_F(ThreadEngineTest, DivergentBarrierFaults) {
  float *out = device(std::vector<float>(256, 0.0f));
  launchKernel("divergent barrier", divergentBarrierKernel, dim3(1), dim3(256),
               0, nullptr, out);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  // Sticky, as on a device.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
}

TEST_F(ThreadEngineTest, ShufflesAndBallots) {
  std::vector<float> values(64);
  for (int i = 0; i < 64; ++i)
    values[i] = static_cast<float>(i);
  float *in = device(values);
  float *sums = device(std::vector<float>(2, 0.0f));
  unsigned *votes = device(std::vector<unsigned>(2, 0));
  launchKernel("warp sum", warpSumKernel, dim3(1), dim3(64), 0, nullptr, in,
               sums, votes);
  std::vector<float> got = host(sums, 2);
  EXPECT_EQ(got[0], 31.0f * 32 / 2);
  EXPECT_EQ(got[1], (32.0f + 63.0f) * 32 / 2);
  for (unsigned vote : host(votes, 2))
    EXPECT_EQ(vote, 0xaaaaaaaau);
}

TEST_F(ThreadEngineTest, PartialMaskShuffle) {
  std::vector<float> values(32);
  for (int i = 0; i < 32; ++i)
    values[i] = static_cast<float>(i);
  float *in = device(values);
  float *out = device(std::vector<float>(32, -1.0f));
  launchKernel("half warp", halfWarpKernel, dim3(1), dim3(32), 0, nullptr, in,
               out);
  std::vector<float> got = host(out, 32);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(got[i], 15.0f - i);
}

TEST_F(ThreadEngineTest, ShuffleAfterDivergenceFaults) {
  float *out = device(std::vector<float>(32, 0.0f));
  launchKernel("divergent shuffle", divergentShuffleKernel, dim3(1), dim3(32),
               0, nullptr, out);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
}

TEST_F(ThreadEngineTest, SharedMemoryStartsPoisoned) {
  unsigned *out = device(std::vector<unsigned>(64, 0));
  launchKernel("uninitialised shared", readUninitialisedSharedKernel, dim3(1),
               dim3(64), 0, nullptr, out);
  for (unsigned word : host(out, 64))
    EXPECT_EQ(word, 0xffffffffu);
}

TEST_F(ThreadEngineTest, WritePastSharedMemoryFaults) {
  float *out = device(std::vector<float>(64, 0.0f));
  launchKernel("overflow", overflowSharedKernel, dim3(1), dim3(64),
               64 * sizeof(float), nullptr, out);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
}

TEST_F(ThreadEngineTest, LaunchLimits) {
  float *out = device(std::vector<float>(2048, 0.0f));
  launchKernel("too many threads", copyKernel, dim3(1), dim3(1025), 0, nullptr,
               out, out, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess); // not sticky
  launchKernel("block.z", copyKernel, dim3(1), dim3(1, 1, 65), 0, nullptr, out,
               out, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launchKernel("grid.y", copyKernel, dim3(1, 65536), dim3(32), 0, nullptr, out,
               out, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);

  // Above 48 KiB of dynamic shared memory only after opting in, and never
  // above the device's opt-in limit (227 KiB on the H100).
  int count = 60 * 1024 / 4;
  launchKernel("60 KiB", dynamicSharedKernel, dim3(1), dim3(128), count * 4,
               nullptr, out, count);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void *>(&dynamicSharedKernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 count * 4),
            cudaSuccess);
  launchKernel("60 KiB", dynamicSharedKernel, dim3(1), dim3(128), count * 4,
               nullptr, out, count);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> got = host(out, 128);
  float expected = 0;
  for (int i = 0; i < count; ++i)
    expected += static_cast<float>(i);
  EXPECT_EQ(got[0], expected);
  EXPECT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void *>(&dynamicSharedKernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 * 1024),
            cudaErrorInvalidValue);
}

TEST_F(ThreadEngineTest, KernelReadingFreedMemoryFaults) {
  float *in = device(std::vector<float>(256, 1.0f));
  float *out = device(std::vector<float>(256, 0.0f));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  void *scratch = nullptr;
  ASSERT_EQ(cudaMallocAsync(&scratch, 1024, stream), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(scratch, stream), cudaSuccess);
  launchKernel("copy", copyKernel, dim3(1), dim3(256), 0, stream,
               static_cast<const float *>(scratch), out, 256);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorIllegalAddress);
  (void)in;
}

TEST_F(ThreadEngineTest, AtomicsAreAtomicAcrossStreams) {
  // Two streams run on two OS threads: their increments of one counter must
  // all land, as real atomics make them.
  int *counter = device(std::vector<int>(1, 0));
  cudaStream_t streams[2];
  for (cudaStream_t &stream : streams)
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              cudaSuccess);
  for (cudaStream_t stream : streams)
    launchKernel("count", countKernel, dim3(64), dim3(128), 0, stream, counter);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(host(counter, 1)[0], 2 * 64 * 128);
}

} // namespace
} // namespace moe::rt::virtual_gpu
