//===- MemoryPlanChecks.h - what any memory plan must satisfy ---*- C++ -*-===//
#ifndef MOE_UNITTESTS_COMPILER_MEMORYPLANCHECKS_H
#define MOE_UNITTESTS_COMPILER_MEMORYPLANCHECKS_H

#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "gtest/gtest.h"

#include <set>
#include <vector>

namespace mlir::moe::testing {

/// The pipeline ranks running `op` under `ranks` ranks: its stage's, or all
/// (-1 or untagged).
inline std::set<int64_t> ranksRunning(mlir::Operation *op, int64_t ranks) {
  auto stage =
      op->getAttrOfType<mlir::IntegerAttr>(mlir::moe::kPipelineStageAttrName);
  if (ranks == 1 || !stage || stage.getInt() < 0) {
    std::set<int64_t> all;
    for (int64_t rank = 0; rank < ranks; ++rank)
      all.insert(rank);
    return all;
  }
  return {stage.getInt() % ranks};
}

/// Every pair of arena tensors that are live at one op on a pipeline rank
/// holding both must not share bytes; offsets are 64-byte aligned and
/// inside the arena. (A rank holds a value when it writes or reads it; the
/// global norm reads only its own rank's gradients.)
inline void expectNoLiveOverlap(mlir::func::FuncOp step) {
  mlir::Block &body = step.getBody().front();
  llvm::DenseMap<mlir::Operation *, size_t> index;
  for (auto [i, op] : llvm::enumerate(body))
    index[&op] = i;
  auto ranksAttr = step->getAttrOfType<mlir::IntegerAttr>(
      mlir::moe::kPipelineRanksAttrName);
  int64_t ranks = ranksAttr ? ranksAttr.getInt() : 1;
  struct Live {
    size_t begin, end;
    uint64_t offset, bytes;
    std::set<int64_t> ranks;
  };
  std::vector<Live> lives;
  for (mlir::Operation &op : body) {
    auto offsets =
        op.getAttrOfType<mlir::DenseI64ArrayAttr>(mlir::moe::kOffsetsAttrName);
    if (!offsets)
      continue;
    for (auto [i, result] : llvm::enumerate(op.getResults())) {
      Live live{index[&op], index[&op], static_cast<uint64_t>(offsets[i]),
                mlir::moe::tensorBytes(result.getType()),
                ranksRunning(&op, ranks)};
      for (mlir::Operation *user : result.getUsers()) {
        live.end = std::max(live.end, index[user]);
        if (!mlir::isa<mlir::func::ReturnOp, mlir::moe::GlobalNormOp>(user))
          for (int64_t rank : ranksRunning(user, ranks))
            live.ranks.insert(rank);
      }
      lives.push_back(live);
    }
  }
  uint64_t arena = step->getAttrOfType<mlir::IntegerAttr>(
                           mlir::moe::kArenaBytesAttrName)
                       .getInt();
  for (size_t a = 0; a < lives.size(); ++a) {
    EXPECT_EQ(lives[a].offset % 64, 0u);
    EXPECT_LE(lives[a].offset + lives[a].bytes, arena);
    for (size_t b = a + 1; b < lives.size(); ++b) {
      bool liveTogether = lives[a].begin <= lives[b].end &&
                          lives[b].begin <= lives[a].end;
      bool shareRank = false;
      for (int64_t rank : lives[a].ranks)
        shareRank |= lives[b].ranks.count(rank) > 0;
      bool shareBytes = lives[a].offset < lives[b].offset + lives[b].bytes &&
                        lives[b].offset < lives[a].offset + lives[a].bytes;
      ASSERT_FALSE(liveTogether && shareRank && shareBytes)
          << "tensors born at ops " << lives[a].begin << " and "
          << lives[b].begin << " overlap";
    }
  }
}

} // namespace mlir::moe::testing

#endif // MOE_UNITTESTS_COMPILER_MEMORYPLANCHECKS_H
