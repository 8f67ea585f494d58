//===- ExpectVerify.h - expectations on verifyProgram -----------*- C++ -*-===//
//
// Shared by the verifier's test files: each breaks one rule of a valid
// hand-built program and checks the message names what is wrong.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_ARTIFACT_EXPECTVERIFY_H
#define MOE_UNITTESTS_ARTIFACT_EXPECTVERIFY_H

#include "TestProgram.h"

#include "moe/Runtime/Artifact/Reader.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <initializer_list>
#include <string>

namespace moe::rt::testing {

/// Expects `program` to fail verification with all of `parts` in the error.
inline void expectError(const Program &program,
                        std::initializer_list<const char *> parts) {
  absl::Status status = verifyProgram(program);
  ASSERT_FALSE(status.ok())
      << "expected an error containing " << *parts.begin();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  for (const char *part : parts)
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(part));
  // Messages are lowercase fragments, composable into longer ones.
  EXPECT_NE(status.message().back(), '.') << status.message();
}

inline void expectValid(const Program &program) {
  absl::Status status = verifyProgram(program);
  EXPECT_TRUE(status.ok()) << status;
}

inline Buffer &buffer(Program &program, const char *name) {
  return program.buffers[bufferNamed(program, name)];
}

inline Instruction &instruction(Program &program, Opcode opcode,
                                size_t nth = 0) {
  return program.instructions[instructionWith(program, opcode, nth)];
}

} // namespace moe::rt::testing

#endif // MOE_UNITTESTS_ARTIFACT_EXPECTVERIFY_H
