//===- Init.cpp - Counter-based parameter initialisation ------------------===//
//
// Element i of a parameter is a pure function of (seed, stream, i): two
// SplitMix64-finalised 64-bit words become two uniforms, and one Box-Muller
// draw turns them into a normal. No generator state is carried from element to
// element, so a shard that starts at firstIndex produces exactly the values
// the unsharded parameter has there, and creation order does not matter.
//
// The exact recipe (for any other backend that must reproduce it):
//   key  = mix(seed ^ mix(stream ^ 0x6a09e667f3bcc909))
//   r1   = mix(key + (2 i + 1) * 0x9e3779b97f4a7c15)
//   r2   = mix(key + (2 i + 2) * 0x9e3779b97f4a7c15)
//   u1   = ((r1 >> 11) + 1) * 2^-53          in (0, 1]
//   u2   = (r2 >> 11) * 2^-53                in [0, 1)
//   x[i] = float(std * sqrt(-2 ln u1) * cos(2 pi u2))   (all in double)
// where mix is SplitMix64's finaliser (Stafford variant 13).
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/IO/Checksum.h"

#include "ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe::rt::cpu {

namespace {
constexpr double kTwoPi = 6.28318530717958647692;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
} // namespace

uint64_t nameHash(const char *name) { return io::fnv1a64(name); }

namespace {
/// Elements [begin, end) of initNormal's run.
void initNormalRange(float *x, int64_t begin, int64_t end, double sigma,
                     uint64_t key, int64_t firstIndex) {
  for (int64_t k = begin; k < end; ++k) {
    uint64_t i = static_cast<uint64_t>(firstIndex + k);
    uint64_t r1 = mix(key + (2 * i + 1) * kGolden);
    uint64_t r2 = mix(key + (2 * i + 2) * kGolden);
    double u1 = static_cast<double>((r1 >> 11) + 1) * 0x1p-53;
    double u2 = static_cast<double>(r2 >> 11) * 0x1p-53;
    double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
    x[k] = static_cast<float>(sigma * z);
  }
}

} // namespace

void initNormal(float *x, int64_t n, float std, uint64_t seed, uint64_t stream,
                int64_t firstIndex) {
  // Hashing the stream first keeps (seed, stream) and (seed', stream') with
  // seed ^ stream == seed' ^ stream' apart.
  uint64_t key = mix(seed ^ mix(stream ^ 0x6a09e667f3bcc909ULL));
  double sigma = static_cast<double>(std);
  // Every element is a function of its index alone, so shares drawn on the
  // kernels' threads give exactly the values of one thread: a 1B-parameter
  // model initialises in seconds on a GPU node's host (issue 17), not the
  // minutes of one core.
  detail::forEachShare(n, detail::kElementGrain,
                       [&](int64_t begin, int64_t end) {
                         initNormalRange(x, begin, end, sigma, key, firstIndex);
                       });
}

void fill(float *x, float value, int64_t n) {
  detail::forEachShare(n, detail::kElementGrain,
                       [&](int64_t begin, int64_t end) {
                         std::fill(x + begin, x + end, value);
                       });
}

} // namespace moe::rt::cpu
