//===- SimtEmulator.h - CUDA thread blocks on host threads ------*- C++ -*-===//
//
// Runs kernel bodies written against the Simt interface of
// lib/Runtime/Cuda/FlashAttentionBlocks.h on the CPU, so their indexing,
// tiling, masking and synchronisation are tested where there is no GPU.
// Each CUDA thread is a host thread; __syncthreads and __syncwarp are
// barriers; a shuffle goes through the block's exchange slots.
//
// WMMA fragments hold their whole 16x16 tile in every lane (a layout is
// the hardware's business, and the bodies only touch fragments through
// whole-tile operations). A warp-collective store is made by lane 0 alone
// and late, so a lane that reads a stored tile without syncWarp() first
// sees stale data, as it may on the device.
//
// What a device would catch and a plain host run would not:
// - shared memory starts filled with 0xff bytes (NaN as fp32 and BF16), so
//   a tile read before it is written poisons the results;
// - a guard band after the block's shared memory must stay untouched.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_CUDA_SIMTEMULATOR_H
#define MOE_UNITTESTS_CUDA_SIMTEMULATOR_H

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/Cpu/Kernels.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace moe::rt::cuda::testing {

/// A reusable barrier for a fixed number of threads.
class Barrier {
public:
  explicit Barrier(int parties) : parties(parties) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t generation = this->generation;
    if (++arrived == parties) {
      arrived = 0;
      ++this->generation;
      released.notify_all();
      return;
    }
    released.wait(lock, [&] { return this->generation != generation; });
  }

private:
  std::mutex mutex;
  std::condition_variable released;
  int parties, arrived = 0;
  uint64_t generation = 0;
};

/// What the threads of one emulated block share.
struct EmulatedBlock {
  static constexpr size_t kGuardBytes = 4096;
  static constexpr unsigned char kPoison = 0xff;

  EmulatedBlock(int threads, size_t sharedBytes)
      : sharedBytes(sharedBytes), block(threads), exchange(threads) {
    size_t total = (sharedBytes + kGuardBytes + 127) / 128 * 128;
    memory.reset(static_cast<unsigned char *>(std::aligned_alloc(128, total)));
    std::memset(memory.get(), kPoison, total);
    for (int w = 0; w < (threads + 31) / 32; ++w)
      warps.push_back(std::make_unique<Barrier>(32));
  }

  /// The guard band past the shared memory is as it was filled.
  bool guardIntact() const {
    for (size_t i = 0; i < kGuardBytes; ++i)
      if (memory.get()[sharedBytes + i] != kPoison)
        return false;
    return true;
  }

  struct Free {
    void operator()(unsigned char *p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> memory;
  size_t sharedBytes;
  Barrier block;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> exchange;
};

/// The Simt of one emulated CUDA thread.
struct HostSimt {
  EmulatedBlock *state;
  int tid;
  int64_t bx, by, bz, gx;

  template <typename T> struct Tile {
    static constexpr int num_elements = 256;
    T x[256];
  };
  struct FragA : Tile<uint16_t> {};
  struct FragBRow : Tile<uint16_t> {};
  struct FragBCol : Tile<uint16_t> {};
  struct FragC : Tile<float> {};

  int thread() const { return tid; }
  int64_t blockX() const { return bx; }
  int64_t blockY() const { return by; }
  int64_t blockZ() const { return bz; }
  int64_t gridX() const { return gx; }
  unsigned char *shared() const { return state->memory.get(); }
  void syncThreads() const { state->block.wait(); }
  void syncWarp() const { state->warps[tid / 32]->wait(); }

  float shfl(float v, int lane) const {
    int base = tid / 32 * 32;
    syncWarp();
    state->exchange[tid] = v;
    syncWarp();
    float got = state->exchange[base + lane];
    syncWarp();
    return got;
  }
  float shflXor(float v, int mask) const { return shfl(v, (tid % 32) ^ mask); }

  /// A operand and accumulators: element (r, c) at p[r * ld + c].
  void load(FragA &f, const uint16_t *p, unsigned ld) const {
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        f.x[r * 16 + c] = p[r * ld + c];
  }
  /// B operand (k, n) at p[k * ld + n] (row-major) or p[n * ld + k].
  void load(FragBRow &f, const uint16_t *p, unsigned ld) const {
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 16; ++n)
        f.x[k * 16 + n] = p[k * ld + n];
  }
  void load(FragBCol &f, const uint16_t *p, unsigned ld) const {
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 16; ++n)
        f.x[k * 16 + n] = p[n * ld + k];
  }
  void loadAcc(FragC &f, const float *p, unsigned ld) const {
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        f.x[r * 16 + c] = p[r * ld + c];
  }
  /// Warp-collective: every lane arrives (so none still reads the old
  /// tile), then lane 0 writes the tile late, after the others have run
  /// on: a lane that reads it without syncWarp() first sees what was there.
  void storeAcc(float *p, const FragC &f, unsigned ld) const {
    syncWarp();
    if (tid % 32 != 0)
      return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        p[r * ld + c] = f.x[r * 16 + c];
  }
  void zero(FragC &f) const {
    for (float &x : f.x)
      x = 0.0f;
  }
  void scale(FragC &f, float factor) const {
    for (float &x : f.x)
      x *= factor;
  }
  template <typename FragB>
  void mma(FragC &c, const FragA &a, const FragB &b) const {
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float sum = c.x[m * 16 + n];
        for (int k = 0; k < 16; ++k)
          sum += fromBf16(a.x[m * 16 + k]) * fromBf16(b.x[k * 16 + n]);
        c.x[m * 16 + n] = sum;
      }
  }

  float value(const float *p) const { return *p; }
  float value(const uint16_t *p) const { return fromBf16(*p); }
  uint16_t toBf16(float x) const {
    uint16_t bits;
    cpu::castToBf16(&x, &bits, 1);
    return bits;
  }
  float fromBf16(uint16_t bits) const {
    float x;
    cpu::castFromBf16(&bits, &x, 1);
    return x;
  }
  uint8_t encodeFp8(float value, int format) const {
    return cpu::encodeFp8(value, static_cast<cpu::Fp8Format>(format));
  }
  float decodeFp8(uint8_t code, int format) const {
    return cpu::decodeFp8(code, static_cast<cpu::Fp8Format>(format));
  }
  void copy16(uint16_t *to, const uint16_t *from) const {
    if (reinterpret_cast<uintptr_t>(to) % 16 ||
        reinterpret_cast<uintptr_t>(from) % 16)
      throw std::logic_error("copy16 on a pointer that is not 16-byte aligned");
    std::memcpy(to, from, 16);
  }
};

/// Runs body(const HostSimt &) for every thread of every block of a
/// grid (x, y, z), one block at a time, each with `sharedBytes` of fresh
/// (poisoned) shared memory. Throws if a block wrote past its shared
/// memory.
template <typename Body>
void runEmulatedGrid(int64_t gx, int64_t gy, int64_t gz, int threads,
                     size_t sharedBytes, Body body) {
  for (int64_t z = 0; z < gz; ++z)
    for (int64_t y = 0; y < gy; ++y)
      for (int64_t x = 0; x < gx; ++x) {
        EmulatedBlock block(threads, sharedBytes);
        std::vector<std::thread> lanes;
        lanes.reserve(threads);
        for (int t = 0; t < threads; ++t)
          lanes.emplace_back([&, t] {
            body(HostSimt{&block, t, x, y, z, gx});
          });
        for (std::thread &lane : lanes)
          lane.join();
        if (!block.guardIntact())
          throw std::logic_error("block (" + std::to_string(x) + ", " +
                                 std::to_string(y) + ", " + std::to_string(z) +
                                 ") wrote past its shared memory");
      }
}

} // namespace moe::rt::cuda::testing

#endif // MOE_UNITTESTS_CUDA_SIMTEMULATOR_H
