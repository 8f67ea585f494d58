//===- RuntimeTest.cpp - the virtual GPU's CUDA runtime subset ------------===//
//
// The emulated CUDA runtime against its documented semantics, and against
// the strictness the emulation adds: poisoned memory, guard bands, eager
// reuse, communication streams that run as late as is legal. Tests that
// leave a sticky error behind, or need no device selected, run in a child
// process (EXPECT_EXIT), which starts with fresh state.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Runtime.h"

#include "absl/synchronization/notification.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace moe::rt::virtual_gpu {
namespace {

/// Holds a stream's later work back until opened (or destroyed), so a test
/// can order streams without timing.
class Gate {
public:
  explicit Gate(cudaStream_t stream) {
    EXPECT_EQ(enqueue(stream, "gate", [open = open] {
                open->WaitForNotification();
              }),
              cudaSuccess);
  }
  ~Gate() { openNow(); }
  void openNow() {
    if (!open->HasBeenNotified())
      open->Notify();
  }

private:
  std::shared_ptr<absl::Notification> open =
      std::make_shared<absl::Notification>();
};

class RuntimeTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(selectDevice("h100").ok());
    ASSERT_EQ(stickyError(), cudaSuccess);
    cudaGetLastError();
    // As the backend does: the pool keeps what is freed.
    cudaMemPool_t pool;
    ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
    uint64_t keepEverything = UINT64_MAX;
    ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                      &keepEverything),
              cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
              cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking),
              cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(t), cudaSuccess);
  }

  /// The device bytes at `p`, once `stream`'s work has run.
  std::vector<uint8_t> read(const void *p, size_t bytes,
                            cudaStream_t stream) {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(cudaMemcpyAsync(out.data(), p, bytes, cudaMemcpyDeviceToHost,
                              stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return out;
  }

  cudaStream_t s = nullptr, t = nullptr;
};

bool allBytes(const std::vector<uint8_t> &bytes, uint8_t value) {
  for (uint8_t byte : bytes)
    if (byte != value)
      return false;
  return true;
}

TEST(RuntimeDeviceTest, ModelsHaveTheirDocumentedProperties) {
  struct Expected {
    const char *name, *marketing;
    int major, minor, multiprocessors;
    uint64_t memory;
    size_t optin, perMultiprocessor;
  };
  const uint64_t gib = uint64_t{1} << 30;
  for (const Expected &expected :
       {Expected{"a100", "A100", 8, 0, 108, 80 * gib, 163 * 1024,
                 164 * 1024},
        Expected{"h100", "H100", 9, 0, 132, 80 * gib, 227 * 1024,
                 228 * 1024},
        Expected{"h200", "H200", 9, 0, 132, 141 * gib, 227 * 1024,
                 228 * 1024}}) {
    SCOPED_TRACE(expected.name);
    ASSERT_TRUE(selectDevice(expected.name).ok());
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    EXPECT_EQ(count, 1);
    cudaDeviceProp properties;
    std::memset(&properties, 0x5a, sizeof(properties));
    ASSERT_EQ(cudaGetDeviceProperties(&properties, 0), cudaSuccess);
    std::string name = properties.name;
    EXPECT_NE(name.find(expected.marketing), std::string::npos) << name;
    EXPECT_NE(name.find("(virtual)"), std::string::npos) << name;
    EXPECT_EQ(properties.major, expected.major);
    EXPECT_EQ(properties.minor, expected.minor);
    EXPECT_EQ(properties.multiProcessorCount, expected.multiprocessors);
    EXPECT_EQ(properties.totalGlobalMem, expected.memory);
    EXPECT_EQ(properties.sharedMemPerBlock, 48u * 1024);
    EXPECT_EQ(properties.sharedMemPerBlockOptin, expected.optin);
    EXPECT_EQ(properties.sharedMemPerMultiprocessor,
              expected.perMultiprocessor);
    EXPECT_EQ(properties.regsPerBlock, 65536);
    EXPECT_EQ(properties.regsPerMultiprocessor, 65536);
    EXPECT_EQ(properties.maxThreadsPerBlock, 1024);
    EXPECT_EQ(properties.maxThreadsDim[0], 1024);
    EXPECT_EQ(properties.maxThreadsDim[2], 64);
    EXPECT_EQ(properties.maxGridSize[0], 2147483647);
    EXPECT_EQ(properties.maxGridSize[1], 65535);
    EXPECT_EQ(properties.warpSize, 32);
    EXPECT_EQ(properties.maxThreadsPerMultiProcessor, 2048);
    EXPECT_EQ(properties.memoryPoolsSupported, 1);
    // The rest is zeroed, not left as it was.
    EXPECT_EQ(properties.pciBusID, 0);
    EXPECT_EQ(properties.reserved[0], 0);
  }
  EXPECT_EQ(cudaGetDeviceProperties(nullptr, 0), cudaErrorInvalidValue);
  cudaDeviceProp properties;
  EXPECT_EQ(cudaGetDeviceProperties(&properties, 1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  cudaGetLastError();
}

TEST(RuntimeDeviceTest, UnknownModelListsTheKnownOnes) {
  absl::Status status = selectDevice("v100");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("v100"), std::string::npos);
  EXPECT_NE(status.message().find("a100, h100, h200"), std::string::npos);
  EXPECT_EQ(findDeviceModel("h200")->multiprocessors, 132);
  EXPECT_EQ(findDeviceModel("H100"), nullptr);
}

TEST(RuntimeDeviceTest, WithoutADeviceEveryCallAnswersNoDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // In a child: this process may have selected a device already.
  EXPECT_EXIT(
      {
        unsetenv("MOE_VIRTUAL_GPU");
        int count = 7;
        void *p = nullptr;
        cudaStream_t stream = nullptr;
        bool ok = cudaGetDeviceCount(&count) == cudaErrorNoDevice &&
                  count == 0 &&
                  cudaGetLastError() == cudaErrorNoDevice &&
                  cudaGetLastError() == cudaSuccess &&
                  cudaMalloc(&p, 16) == cudaErrorNoDevice &&
                  cudaStreamCreate(&stream) == cudaErrorNoDevice &&
                  enqueue(nullptr, "work", [] {}) == cudaErrorNoDevice &&
                  selectedDevice() == nullptr;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(RuntimeDeviceTest, TheEnvironmentNamesTheDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("MOE_VIRTUAL_GPU", "a100", 1);
        cudaDeviceProp properties;
        bool ok = cudaGetDeviceProperties(&properties, 0) == cudaSuccess &&
                  properties.multiProcessorCount == 108;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(RuntimeTest, WorkOnAStreamRunsInOrder) {
  std::vector<int> ran;
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(enqueue(s, "append", [&ran, i] { ran.push_back(i); }),
              cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(ran[i], i);
  // Copies keep their order too: up, across, down.
  uint8_t *a, *b;
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void **>(&a), 64, s),
            cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void **>(&b), 64, s),
            cudaSuccess);
  std::vector<uint8_t> up(64);
  for (int i = 0; i < 64; ++i)
    up[i] = static_cast<uint8_t>(i);
  ASSERT_EQ(cudaMemcpyAsync(a, up.data(), 64, cudaMemcpyHostToDevice, s),
            cudaSuccess);
  // The source was staged at the call.
  up.assign(64, 0);
  ASSERT_EQ(cudaMemcpyAsync(b, a, 64, cudaMemcpyDeviceToDevice, s),
            cudaSuccess);
  std::vector<uint8_t> down = read(b, 64, s);
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(down[i], i);
  EXPECT_EQ(cudaFreeAsync(a, s), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(b, s), cudaSuccess);
}

TEST_F(RuntimeTest, CommunicationStreamRunsAsLateAsIsLegal) {
  void *data;
  ASSERT_EQ(cudaMalloc(&data, 256), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(data, 0, 256, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  markCommunicationStream(t);
  cudaEvent_t arrived;
  ASSERT_EQ(cudaEventCreateWithFlags(&arrived, cudaEventDisableTiming),
            cudaSuccess);
  // The "collective" writes 7s; a consumer that does not wait reads the
  // old zeros, every time.
  ASSERT_EQ(cudaMemsetAsync(data, 7, 256, t), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(arrived, t), cudaSuccess);
  EXPECT_TRUE(allBytes(read(data, 256, s), 0));
  // One that waits sees the data.
  ASSERT_EQ(cudaStreamWaitEvent(s, arrived, 0), cudaSuccess);
  EXPECT_TRUE(allBytes(read(data, 256, s), 7));
  EXPECT_EQ(cudaEventDestroy(arrived), cudaSuccess);
  EXPECT_EQ(cudaFree(data), cudaSuccess);
}

TEST_F(RuntimeTest, StreamWaitsForTheRecordMostRecentAtTheCall) {
  cudaEvent_t event;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  // Never recorded: complete, orders nothing.
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);
  {
    Gate gate(s);
    ASSERT_EQ(cudaStreamWaitEvent(t, event, 0), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(t), cudaSuccess);
  }
  int *value;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&value), sizeof(int)),
            cudaSuccess);
  int one = 1, two = 2;
  ASSERT_EQ(cudaMemcpyAsync(value, &one, sizeof(int), cudaMemcpyHostToDevice,
                            s),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, s), cudaSuccess);
  // t waits for the first record; the second, behind a closed gate, is
  // made after the call and does not hold t back.
  ASSERT_EQ(cudaStreamWaitEvent(t, event, 0), cudaSuccess);
  Gate gate(s);
  ASSERT_EQ(cudaMemcpyAsync(value, &two, sizeof(int), cudaMemcpyHostToDevice,
                            s),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, s), cudaSuccess);
  std::vector<uint8_t> seen = read(value, sizeof(int), t);
  int first;
  std::memcpy(&first, seen.data(), sizeof(int));
  EXPECT_EQ(first, 1);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  // A wait made now is for the second record, still behind the gate.
  ASSERT_EQ(cudaStreamWaitEvent(t, event, 0), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(t), cudaErrorNotReady);
  gate.openNow();
  seen = read(value, sizeof(int), t);
  int second;
  std::memcpy(&second, seen.data(), sizeof(int));
  EXPECT_EQ(second, 2);
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaFree(value), cudaSuccess);
  cudaGetLastError();
}

TEST_F(RuntimeTest, LegacyStreamSynchronisesWithBlockingStreamsOnly) {
  cudaStream_t blocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  {
    Gate gate(blocking);
    ASSERT_EQ(enqueue(nullptr, "legacy work", [] {}), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
    gate.openNow();
    EXPECT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  }
  {
    // s does not block: the legacy stream runs past its closed gate.
    Gate gate(s);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  }
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(RuntimeTest, DestroyedStreamFinishesItsWorkAndIsGone) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto ran = std::make_shared<absl::Notification>();
  {
    Gate gate(stream);
    ASSERT_EQ(enqueue(stream, "late", [ran] { ran->Notify(); }),
              cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }
  ran->WaitForNotification();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(enqueue(stream, "after", [] {}), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, 4), cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST_F(RuntimeTest, MemoryIsPoisonedWhenAllocatedAndWhenFreed) {
  void *p;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_TRUE(allBytes(read(p, 1000, s), 0xff));
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  void *q;
  ASSERT_EQ(cudaMallocAsync(&q, 3000, s), cudaSuccess);
  EXPECT_TRUE(allBytes(read(q, 3000, s), 0xff));
  ASSERT_EQ(cudaMemsetAsync(q, 0, 3000, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(q, s), cudaSuccess);
  void *again;
  ASSERT_EQ(cudaMallocAsync(&again, 3000, s), cudaSuccess);
  EXPECT_EQ(again, q);
  EXPECT_TRUE(allBytes(read(again, 3000, s), 0xff));
  EXPECT_EQ(cudaFreeAsync(again, s), cudaSuccess);
}

TEST_F(RuntimeTest, SameStreamReusesTheMostRecentlyFreedBlockAtOnce) {
  // A size class no other test uses: 37 granules.
  const size_t bytes = 37 * 256;
  void *a, *b;
  ASSERT_EQ(cudaMallocAsync(&a, bytes, s), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&b, bytes, s), cudaSuccess);
  Gate gate(s);
  ASSERT_EQ(cudaFreeAsync(a, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(b, s), cudaSuccess);
  // Neither free has run (the gate is closed); stream order makes reuse
  // legal on s.
  void *first, *second;
  ASSERT_EQ(cudaMallocAsync(&first, bytes - 10, s), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&second, bytes, s), cudaSuccess);
  EXPECT_EQ(first, b);
  EXPECT_EQ(second, a);
  gate.openNow();
  EXPECT_TRUE(allBytes(read(first, bytes - 10, s), 0xff));
  EXPECT_TRUE(checkDeviceRange(first, bytes - 10, "first").ok());
  EXPECT_EQ(cudaFreeAsync(first, s), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(second, s), cudaSuccess);
}

TEST_F(RuntimeTest, OtherStreamsReuseABlockOnlyAfterItsFreeRan) {
  const size_t bytes = 41 * 256;
  void *p;
  ASSERT_EQ(cudaMallocAsync(&p, bytes, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  void *early;
  {
    Gate gate(s);
    ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
    ASSERT_EQ(cudaMallocAsync(&early, bytes, t), cudaSuccess);
    EXPECT_NE(early, p);
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  absl::Status freed = checkDeviceRange(p, 16, "the kernel's input");
  EXPECT_FALSE(freed.ok());
  EXPECT_NE(freed.message().find("the kernel's input"), std::string::npos);
  EXPECT_NE(freed.message().find("freed by cudaFreeAsync on stream"),
            std::string::npos)
      << freed.message();
  void *late;
  ASSERT_EQ(cudaMallocAsync(&late, bytes, t), cudaSuccess);
  EXPECT_EQ(late, p);
  EXPECT_EQ(cudaFreeAsync(early, t), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(late, t), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(t), cudaSuccess);
}

TEST_F(RuntimeTest, DeviceRangesAreChecked) {
  void *p;
  ASSERT_EQ(cudaMalloc(&p, 100), cudaSuccess);
  auto *bytes = static_cast<uint8_t *>(p);
  EXPECT_TRUE(checkDeviceRange(bytes + 10, 90, "x").ok());
  absl::Status past = checkDeviceRange(bytes + 10, 91, "the output");
  EXPECT_FALSE(past.ok());
  EXPECT_NE(past.message().find("1 bytes past the end of the 100-byte "
                                "allocation"),
            std::string::npos)
      << past.message();
  int host[4];
  absl::Status notDevice = checkDeviceRange(host, sizeof(host), "the input");
  EXPECT_NE(notDevice.message().find("is not device memory"),
            std::string::npos)
      << notDevice.message();
  // What the call can tell, it refuses at once.
  EXPECT_EQ(cudaMemsetAsync(host, 0, sizeof(host), s),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(p, host, 101, cudaMemcpyHostToDevice, s),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(host, p, 16, cudaMemcpyHostToDevice, s),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(bytes, bytes + 8, 16, cudaMemcpyDeviceToDevice,
                            s),
            cudaErrorInvalidValue);
  // 7: no kind, but within the enum's values (UBSan holds tests to that).
  EXPECT_EQ(cudaMemcpyAsync(p, host, 16, static_cast<cudaMemcpyKind>(7), s),
            cudaErrorInvalidMemcpyDirection);
  // cudaMemcpyDefault tells the sides from the pointers.
  int values[4] = {1, 2, 3, 4}, back[4] = {};
  EXPECT_EQ(cudaMemcpyAsync(p, values, sizeof(values), cudaMemcpyDefault, s),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(back, p, sizeof(back), cudaMemcpyDefault, s),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(back[3], 4);
  EXPECT_EQ(cudaFree(host), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(bytes + 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeAsync(p, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  absl::Status freed = checkDeviceRange(p, 4, "the input");
  EXPECT_NE(freed.message().find("freed by cudaFree"), std::string::npos)
      << freed.message();
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  cudaGetLastError();
}

TEST_F(RuntimeTest, TwoDimensionalCopiesAndSetsKeepThePitch) {
  const size_t pitch = 64, width = 10, height = 4;
  void *p;
  ASSERT_EQ(cudaMalloc(&p, pitch * height), cudaSuccess);
  ASSERT_EQ(cudaMemset2DAsync(p, pitch, 3, width, height, s), cudaSuccess);
  std::vector<uint8_t> rows = read(p, pitch * height, s);
  for (size_t i = 0; i < pitch * height; ++i)
    EXPECT_EQ(rows[i], i % pitch < width ? 3 : 0xff) << i;
  std::vector<uint8_t> source(12 * height);
  for (size_t i = 0; i < source.size(); ++i)
    source[i] = static_cast<uint8_t>(i);
  ASSERT_EQ(cudaMemcpy2DAsync(p, pitch, source.data(), 12, width, height,
                              cudaMemcpyHostToDevice, s),
            cudaSuccess);
  std::vector<uint8_t> back(16 * height, 0);
  ASSERT_EQ(cudaMemcpy2DAsync(back.data(), 16, p, pitch, width, height,
                              cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (size_t row = 0; row < height; ++row)
    for (size_t column = 0; column < 16; ++column)
      EXPECT_EQ(back[row * 16 + column],
                column < width ? source[row * 12 + column] : 0)
          << row << "," << column;
  EXPECT_EQ(cudaMemset2DAsync(p, pitch, 0, pitch + 1, 2, s),
            cudaErrorInvalidPitchValue);
  // The last row would run past the allocation.
  EXPECT_EQ(cudaMemset2DAsync(p, pitch, 0, width, height + 1, s),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  cudaGetLastError();
}

TEST_F(RuntimeTest, CopiesToPageableMemoryReturnOnceTheyRan) {
  uint8_t *data;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&data), 256), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(data, 0, 256, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // Both streams hold their work back until someone waits for it: a copy
  // that returned before it ran would find the old zeros, every time.
  markCommunicationStream(s);
  markCommunicationStream(t);
  cudaEvent_t produced;
  ASSERT_EQ(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming),
            cudaSuccess);
  // The producer is on s; the copy on t waits for it through the event.
  ASSERT_EQ(cudaMemsetAsync(data, 7, 256, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(produced, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(t, produced, 0), cudaSuccess);
  std::vector<uint8_t> pageable(256, 0);
  ASSERT_EQ(
      cudaMemcpyAsync(pageable.data(), data, 256, cudaMemcpyDeviceToHost, t),
      cudaSuccess);
  EXPECT_TRUE(allBytes(pageable, 7));
  // The two-dimensional form, and the kind inferred from the pointers.
  ASSERT_EQ(cudaMemsetAsync(data, 9, 256, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(produced, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(t, produced, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpy2DAsync(pageable.data(), 128, data, 128, 128, 2,
                              cudaMemcpyDefault, t),
            cudaSuccess);
  EXPECT_TRUE(allBytes(pageable, 9));
  EXPECT_EQ(cudaEventDestroy(produced), cudaSuccess);
  EXPECT_EQ(cudaFree(data), cudaSuccess);
}

TEST_F(RuntimeTest, CopiesToPinnedMemoryAreAsynchronous) {
  uint8_t *data, *pinned;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&data), 256), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void **>(&pinned), 256),
            cudaSuccess);
  // As the device's, new pinned memory is poison.
  EXPECT_TRUE(allBytes(std::vector<uint8_t>(pinned, pinned + 256), 0xff));
  cudaEvent_t produced;
  ASSERT_EQ(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming),
            cudaSuccess);
  {
    // The producer is behind a closed gate: the copies return before it
    // runs (a copy that waited for it would never return).
    Gate gate(s);
    ASSERT_EQ(cudaMemsetAsync(data, 7, 256, s), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(produced, s), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(t, produced, 0), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(pinned, data, 128, cudaMemcpyDeviceToHost, t),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy2DAsync(pinned + 128, 64, data, 64, 64, 2,
                                cudaMemcpyDefault, t),
              cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(t), cudaErrorNotReady);
    EXPECT_TRUE(allBytes(std::vector<uint8_t>(pinned, pinned + 256), 0xff));
    gate.openNow();
    ASSERT_EQ(cudaStreamSynchronize(t), cudaSuccess);
    EXPECT_TRUE(allBytes(std::vector<uint8_t>(pinned, pinned + 256), 7));
  }
  // The synchronous form waits whatever the memory.
  ASSERT_EQ(cudaMemsetAsync(data, 9, 256, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(pinned, data, 256, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(allBytes(std::vector<uint8_t>(pinned, pinned + 256), 9));
  EXPECT_EQ(cudaEventDestroy(produced), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(nullptr), cudaSuccess);
  int onTheStack = 0;
  EXPECT_EQ(cudaFreeHost(&onTheStack), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(data), cudaSuccess);
  cudaGetLastError();
}

TEST_F(RuntimeTest, PinnedSourcesAreReadWhenTheCopyRuns) {
  uint8_t *data, *pinned;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&data), 64), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void **>(&pinned), 64,
                          cudaHostAllocPortable),
            cudaSuccess);
  {
    // The DMA reads pinned memory when it runs: what the host writes
    // before that is what the device gets.
    Gate gate(s);
    std::memset(pinned, 1, 64);
    ASSERT_EQ(cudaMemcpyAsync(data, pinned, 64, cudaMemcpyHostToDevice, s),
              cudaSuccess);
    std::memset(pinned, 2, 64);
  }
  EXPECT_TRUE(allBytes(read(data, 64, s), 2));
  // From pageable memory the call stages the source.
  {
    Gate gate(s);
    std::vector<uint8_t> pageable(64, 3);
    ASSERT_EQ(
        cudaMemcpyAsync(data, pageable.data(), 64, cudaMemcpyHostToDevice, s),
        cudaSuccess);
    pageable.assign(64, 4);
  }
  EXPECT_TRUE(allBytes(read(data, 64, s), 3));
  // cudaMemcpy from pinned memory returns once the copy ran.
  std::memset(pinned, 5, 64);
  ASSERT_EQ(cudaMemcpy(data, pinned, 64, cudaMemcpyHostToDevice), cudaSuccess);
  std::memset(pinned, 6, 64);
  EXPECT_TRUE(allBytes(read(data, 64, s), 5));
  // Mapped memory would be device memory too, which is not emulated.
  void *mapped;
  EXPECT_EQ(cudaHostAlloc(&mapped, 64, cudaHostAllocMapped),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(data), cudaSuccess);
  cudaGetLastError();
}

TEST_F(RuntimeTest, EventsTimeTheirRecords) {
  cudaEvent_t start, end, untimed;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&end, cudaEventBlockingSync),
            cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming),
            cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end),
            cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaEventRecord(start, s), cudaSuccess);
  {
    Gate gate(s);
    ASSERT_EQ(cudaEventRecord(end, s), cudaSuccess);
    EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  }
  ASSERT_EQ(cudaEventRecord(untimed, s), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(untimed), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(nullptr, start, end), cudaErrorInvalidValue);
  for (cudaEvent_t event : {start, end, untimed})
    EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  cudaGetLastError();
}

TEST_F(RuntimeTest, MemoryPoolKeepsItsBooks) {
  cudaMemPool_t pool;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  uint64_t keepEverything = UINT64_MAX;
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                    &keepEverything),
            cudaSuccess);
  auto get = [&](cudaMemPoolAttr attr) {
    uint64_t value = 0;
    EXPECT_EQ(cudaMemPoolGetAttribute(pool, attr, &value), cudaSuccess);
    return value;
  };
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  uint64_t used = get(cudaMemPoolAttrUsedMemCurrent);
  uint64_t reserved = get(cudaMemPoolAttrReservedMemCurrent);
  const size_t bytes = 43 * 256;
  void *blocks[3];
  for (void *&block : blocks)
    ASSERT_EQ(cudaMallocAsync(&block, bytes, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(get(cudaMemPoolAttrUsedMemCurrent), used + 3 * bytes);
  EXPECT_EQ(get(cudaMemPoolAttrReservedMemCurrent), reserved + 3 * bytes);
  EXPECT_GE(get(cudaMemPoolAttrUsedMemHigh), used + 3 * bytes);
  for (void *block : blocks)
    ASSERT_EQ(cudaFreeAsync(block, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // Freed, kept by the pool above a threshold of everything.
  EXPECT_EQ(get(cudaMemPoolAttrUsedMemCurrent), used);
  EXPECT_EQ(get(cudaMemPoolAttrReservedMemCurrent), reserved + 3 * bytes);
  uint64_t zero = 0, one = 1;
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero),
            cudaSuccess);
  EXPECT_EQ(get(cudaMemPoolAttrUsedMemHigh), used);
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &one),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent,
                                    &zero),
            cudaErrorInvalidValue);
  // A threshold of 0 hands the free blocks back at the next
  // synchronisation.
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                    &zero),
            cudaSuccess);
  EXPECT_EQ(get(cudaMemPoolAttrReleaseThreshold), 0u);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(get(cudaMemPoolAttrReservedMemCurrent), used);
  EXPECT_EQ(cudaMemPoolGetAttribute(nullptr, cudaMemPoolAttrUsedMemHigh,
                                    &one),
            cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST_F(RuntimeTest, DynamicSharedMemoryOptInIsLimitedByTheModel) {
  static int kernelA, kernelB;
  EXPECT_EQ(dynamicSharedLimit(&kernelA), 48u * 1024);
  EXPECT_EQ(cudaFuncSetAttribute(&kernelA,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 227 * 1024),
            cudaSuccess);
  EXPECT_EQ(dynamicSharedLimit(&kernelA), 227u * 1024);
  EXPECT_EQ(cudaFuncSetAttribute(&kernelB,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 227 * 1024 + 1),
            cudaErrorInvalidValue);
  EXPECT_EQ(dynamicSharedLimit(&kernelB), 48u * 1024);
  ASSERT_TRUE(selectDevice("a100").ok());
  EXPECT_EQ(cudaFuncSetAttribute(&kernelB,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 164 * 1024),
            cudaErrorInvalidValue);
  ASSERT_TRUE(selectDevice("h100").ok());
  cudaGetLastError();
}

TEST_F(RuntimeTest, ErrorsHaveTheirDocumentedNames) {
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue),
               "cudaErrorInvalidValue");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorNoDevice),
               "no CUDA-capable device is detected");
  EXPECT_STREQ(cudaGetErrorString(static_cast<cudaError_t>(12345)),
               "unrecognized error code");
  EXPECT_STREQ(cudaGetErrorName(static_cast<cudaError_t>(12345)),
               "unrecognized error code");
}

TEST_F(RuntimeTest, CallErrorsAreNotSticky) {
  int host;
  EXPECT_EQ(cudaFree(&host), cudaErrorInvalidValue);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void *p;
  EXPECT_EQ(cudaMalloc(&p, 8), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  setLastError(cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(RuntimeTest, FaultsInStreamWorkAreSticky) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // t uses memory whose allocation, on s, has not run yet: on a
        // device a race, here a fault every time.
        void *p;
        bool ok;
        {
          Gate gate(s);
          ok = cudaMallocAsync(&p, 512, s) == cudaSuccess &&
               cudaMemsetAsync(p, 0, 512, t) == cudaSuccess &&
               cudaStreamSynchronize(t) == cudaErrorIllegalAddress;
        }
        void *q;
        ok = ok && cudaGetLastError() == cudaErrorIllegalAddress &&
             cudaGetLastError() == cudaErrorIllegalAddress &&
             cudaMalloc(&q, 8) == cudaErrorIllegalAddress &&
             enqueue(s, "after", [] {}) == cudaErrorIllegalAddress;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "virtual gpu: cudaMemsetAsync: 0x[0-9a-f]+ lies in the 512-byte "
      "allocation .* not allocated yet in stream order");
}

TEST_F(RuntimeTest, WritingPastTheEndIsFoundAtTheFree) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        void *p;
        bool ok = cudaMalloc(&p, 100) == cudaSuccess;
        // A kernel's stray write, one byte past the end.
        auto *bytes = static_cast<uint8_t *>(p);
        ok = ok && enqueue(s, "stray write", [bytes] { bytes[100] = 0; }) ==
                       cudaSuccess;
        ok = ok && cudaFree(p) == cudaErrorIllegalAddress;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "virtual gpu: the 100-byte allocation at 0x[0-9a-f]+ \\(cudaMalloc #1, "
      "called from .*\\) was written past its end: byte 100 of it changed "
      "\\(found at cudaFree\\)");
}

TEST_F(RuntimeTest, CopiesIntoFreedPinnedMemoryFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // cudaFreeHost is not documented to wait for the copies that use
        // the memory: one still pending when it is freed finds it freed.
        void *data;
        void *pinned;
        bool ok = cudaMalloc(&data, 64) == cudaSuccess &&
                  cudaMallocHost(&pinned, 64) == cudaSuccess;
        {
          Gate gate(s);
          ok = ok &&
               cudaMemcpyAsync(pinned, data, 64, cudaMemcpyDeviceToHost, s) ==
                   cudaSuccess &&
               cudaFreeHost(pinned) == cudaSuccess;
        }
        ok = ok && cudaStreamSynchronize(s) == cudaErrorIllegalAddress;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "virtual gpu: cudaMemcpyAsync: 0x[0-9a-f]+ lies in the 64-byte pinned "
      "allocation at 0x[0-9a-f]+ \\(cudaMallocHost #[0-9]+\\), freed by "
      "cudaFreeHost before the copy ran");
}

TEST_F(RuntimeTest, ExitingWithWorkPendingDoesNotHang) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // A collective whose peer never comes, with work queued behind it
        // and on another stream: exit skips what it can and does not wait
        // for the rest.
        auto *started = new absl::Notification;
        auto *never = new absl::Notification;
        bool ok = enqueue(s, "stuck", [started, never] {
                    started->Notify();
                    never->WaitForNotification();
                  }) == cudaSuccess;
        started->WaitForNotification();
        void *p;
        ok = ok && cudaMallocAsync(&p, 64, s) == cudaSuccess &&
             cudaMemsetAsync(p, 0, 64, s) == cudaSuccess &&
             enqueue(t, "queued", [] {}) == cudaSuccess;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

} // namespace
} // namespace moe::rt::virtual_gpu
