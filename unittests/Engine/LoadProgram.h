//===- LoadProgram.h - an executor for a hand-built program -----*- C++ -*-===//
#ifndef MOE_UNITTESTS_ENGINE_LOADPROGRAM_H
#define MOE_UNITTESTS_ENGINE_LOADPROGRAM_H

#include "TestProgram.h"

#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Engine/Executor.h"

#include "gtest/gtest.h"

#include <memory>

namespace moe::rt::testing {

/// The executor of `program` after a trip through the file format, as
/// moe-run loads it; null (with a test failure) when either step fails.
inline std::unique_ptr<Executor> load(const Program &program) {
  std::vector<uint8_t> bytes = serialize(program);
  absl::StatusOr<Program> read =
      parseArtifact(bytes.data(), bytes.size(), "test");
  EXPECT_TRUE(read.ok()) << read.status();
  if (!read.ok())
    return nullptr;
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(*read));
  EXPECT_TRUE(executor.ok()) << executor.status();
  return executor.ok() ? std::move(*executor) : nullptr;
}

} // namespace moe::rt::testing

#endif // MOE_UNITTESTS_ENGINE_LOADPROGRAM_H
