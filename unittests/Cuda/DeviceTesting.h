//===- DeviceTesting.h - device memory for the CUDA kernel tests -*- C++ -*-===//
//
// The kernel tests run each CUDA kernel and its CPU twin on the same random
// inputs and compare. They need a GPU: their main() exits 77 (skipped, for
// ctest) when there is none.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_CUDA_DEVICETESTING_H
#define MOE_UNITTESTS_CUDA_DEVICETESTING_H

#include "gtest/gtest.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace moe::rt::cuda::testing {

/// A device array of T, freed on destruction; copies to and from vectors.
template <typename T> class DeviceArray {
public:
  explicit DeviceArray(size_t count) : count(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&data),
                         std::max<size_t>(count, 1) * sizeof(T)),
              cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T> &values)
      : DeviceArray(values.size()) {
    EXPECT_EQ(cudaMemcpy(data, values.data(), count * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;

  T *get() { return data; }
  const T *get() const { return data; }
  /// The contents, after everything enqueued before has finished.
  std::vector<T> read() const {
    std::vector<T> values(count);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(values.data(), data, count * sizeof(T),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return values;
  }

private:
  T *data = nullptr;
  size_t count;
};

/// The bits of a float (exact comparisons that also tell NaNs apart).
inline uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// n draws of normal(0, std), reproducible from `seed`.
inline std::vector<float> randomValues(size_t n, uint32_t seed,
                                       float std = 1.0f) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, std);
  std::vector<float> values(n);
  for (float &v : values)
    v = normal(generator);
  return values;
}

/// Every element within atol + rtol * |expected|; reports the first few
/// that are not.
inline void expectClose(const std::vector<float> &actual,
                        const std::vector<float> &expected, float rtol,
                        float atol, const char *what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < actual.size() && reported < 5; ++i) {
    float tolerance = atol + rtol * std::fabs(expected[i]);
    if (!(std::fabs(actual[i] - expected[i]) <= tolerance)) {
      ADD_FAILURE() << what << "[" << i << "] is " << actual[i]
                    << ", expected " << expected[i] << " (tolerance "
                    << tolerance << ")";
      ++reported;
    }
  }
}

} // namespace moe::rt::cuda::testing

#endif // MOE_UNITTESTS_CUDA_DEVICETESTING_H
