//===- Capabilities.h - refusing what a backend cannot run ------*- C++ -*-===//
//
// The load-time check of an artifact against the capability record of the
// backend that is to run it (moe/Runtime/Capabilities.h): before a device
// is opened, an artifact needing a capability the backend lacks is refused,
// naming the capability, what the artifact needs and what the backend has.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ARTIFACT_CAPABILITIES_H
#define MOE_RUNTIME_ARTIFACT_CAPABILITIES_H

#include "moe/Runtime/Program.h"

#include "absl/status/status.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace moe::rt {

/// How the run asks the backend to run the program (moe-run's options).
struct RunRequest {
  /// moe-run --expert-chunks.
  int64_t expertChunks = 1;
  /// moe-run --async-collectives.
  bool asyncCollectives = false;
};

/// OK when `backend` ("cpu", "cuda") runs `program` (compiled for
/// program.target) as `request` asks; else an error naming the capability,
/// starting with `origin` ("artifact 'x.moebin'").
absl::Status checkCapabilities(const Program &program,
                               const std::string &origin,
                               std::string_view backend,
                               const RunRequest &request = {});

} // namespace moe::rt

#endif // MOE_RUNTIME_ARTIFACT_CAPABILITIES_H
