//===- AdamwBatches.cpp - AdamW instructions one launch updates -----------===//
#include "AdamwBatches.h"

#include "moe/Runtime/Artifact/OpViews.h"

#include <set>

namespace moe::rt::cuda {
namespace {

/// Whether `b` may join a batch led by `a`: the same scalars and
/// hyper-parameters but the weight decay (each tensor has its own).
bool sharesScalars(const ops::AdamWView &a, const ops::AdamWView &b) {
  return a.lr() == b.lr() && a.gradScale() == b.gradScale() &&
         a.step() == b.step() && a.beta1() == b.beta1() &&
         a.beta2() == b.beta2() && a.eps() == b.eps();
}

} // namespace

std::vector<int64_t> adamwBatches(const Program &program) {
  const std::vector<Instruction> &instructions = program.instructions;
  std::vector<int64_t> batchOf(instructions.size(), -1);
  size_t index = 0;
  while (index < instructions.size()) {
    if (instructions[index].opcode != Opcode::AdamW) {
      ++index;
      continue;
    }
    ops::AdamWView first(instructions[index]);
    // Every buffer a member reads or writes: a later member touching one
    // of them would see it updated too early (or update it twice).
    std::set<uint32_t> touched;
    auto disjoint = [&](const Instruction &inst) {
      for (const std::vector<uint32_t> *list : {&inst.operands, &inst.results})
        for (uint32_t b : *list)
          if (touched.count(b))
            return false;
      return true;
    };
    auto touch = [&](const Instruction &inst) {
      ops::AdamWView op(inst);
      // The shared scalars are read by every member: not a conflict.
      for (uint32_t b : inst.operands)
        if (b != op.lr() && b != op.gradScale() && b != op.step())
          touched.insert(b);
      touched.insert(inst.results.begin(), inst.results.end());
    };
    touch(instructions[index]);
    size_t end = index + 1;
    while (end < instructions.size() &&
           instructions[end].opcode == Opcode::AdamW &&
           sharesScalars(first, ops::AdamWView(instructions[end])) &&
           disjoint(instructions[end])) {
      touch(instructions[end]);
      ++end;
    }
    if (end - index > 1)
      for (size_t member = index; member < end; ++member)
        batchOf[member] = static_cast<int64_t>(index);
    index = end;
  }
  return batchOf;
}

} // namespace moe::rt::cuda
