//===- NcclTesting.h - device buffers and waits for NCCL's tests -*- C++
//-*-===//
//
// What the virtual GPU's NCCL tests share (NcclTest.cpp, one rank;
// NcclRanksTest.cpp and NcclBackendTest.cpp, several): typed device buffers
// filled and read over a stream, waits that give up at a deadline instead
// of hanging, and the main of a test program run on every rank of a job.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_VIRTUALGPU_NCCLTESTING_H
#define MOE_UNITTESTS_VIRTUALGPU_NCCLTESTING_H

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Comm/Mesh.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace moe::rt::virtual_gpu::testing {

/// `count` elements of T in device memory (poisoned until written).
template <typename T> class DeviceArray {
public:
  explicit DeviceArray(size_t count) : count(count) {
    EXPECT_EQ(cudaMalloc(&data, count * sizeof(T)), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;

  T *get() const { return static_cast<T *>(data); }
  void upload(const std::vector<T> &values, cudaStream_t stream) {
    if (values.empty())
      return;
    EXPECT_EQ(cudaMemcpyAsync(data, values.data(), values.size() * sizeof(T),
                              cudaMemcpyHostToDevice, stream),
              cudaSuccess);
  }
  /// The contents once `stream`'s earlier work has run.
  std::vector<T> download(cudaStream_t stream) const {
    std::vector<T> values(count);
    EXPECT_EQ(cudaMemcpyAsync(values.data(), data, count * sizeof(T),
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return values;
  }

private:
  void *data = nullptr;
  size_t count;
};

/// Polls `stream` until its work has run (true) or `limit` passed (false).
inline bool finishesWithin(cudaStream_t stream, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    cudaError_t state = cudaStreamQuery(stream);
    if (state != cudaErrorNotReady)
      return state == cudaSuccess;
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// Polls `comm` until it is no longer ncclInProgress; its state then.
inline ncclResult_t settled(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress)
    if (ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
        asked != ncclSuccess)
      return asked;
  return state;
}

/// The main of a test program of every rank: the world (MPI under a
/// launcher, else one rank), `everyone` the group of all its ranks
/// ("{dp} of dp=N") while the tests run; only rank 0 reports in full.
inline int runOnEveryRank(int argc, char **argv, const char *program,
                          comm::Group *&everyone) {
  absl::StatusOr<std::unique_ptr<comm::World>> world =
      comm::World::start(&argc, &argv);
  if (!world.ok()) {
    std::fprintf(stderr, "%s: %s\n", program,
                 std::string(world.status().message()).c_str());
    return 1;
  }
  comm::Mesh line{{"dp"}, {(*world)->size()}};
  absl::StatusOr<std::unique_ptr<comm::Group>> all =
      (*world)->group(line, {"dp"});
  if (!all.ok()) {
    std::fprintf(stderr, "%s: %s\n", program,
                 std::string(all.status().message()).c_str());
    return 1;
  }
  everyone = all->get();
  ::testing::InitGoogleTest(&argc, argv);
  if ((*world)->rank() != 0)
    GTEST_FLAG_SET(brief, true);
  int failed = RUN_ALL_TESTS();
  everyone = nullptr;
  return failed;
}

} // namespace moe::rt::virtual_gpu::testing

#endif // MOE_UNITTESTS_VIRTUALGPU_NCCLTESTING_H
