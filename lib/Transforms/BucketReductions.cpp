//===- BucketReductions.cpp - gradient reductions in buckets --------------===//
//
// A collective call costs a latency (tens of microseconds over NCCL or MPI)
// whatever its size, and a step reduces every weight gradient: hundreds of
// calls for a deep model, most of them small (norm weights, routers).
// DDP and FSDP reduce gradients in buckets instead; so does this pass, on
// the scheduled step, where each reduction sits right after the op that
// makes its operand (moe-schedule-collectives).
//
// A bucket holds the gradients of one pipeline unit (the embedding, a layer,
// the head: the names of the parameters they update say which), as FSDP2
// reduces one module's gradients in one call: it is complete when the
// backward pass leaves the layer, so it runs under the next layer's
// backward, and a layer larger than the bucket size fills several.
//
// Walking the step in order, a reduction joins the open bucket of its kind
// (all-reduce, or reduce-scatter along dimension 0), mesh, axes, element
// type and unit when the bucket stays within its bytes and no result of the
// bucket is read before it: the bucket runs where its last member was, so an
// earlier member's reader must come later. Otherwise that bucket closes and
// the reduction opens the next one of its kind. A bucket of one stays the
// reduction it was.
//
// Every rank runs the same program, so the ranks still call each group in
// one order. The sums are elementwise, so the results are those of the
// separate reductions, bit for bit.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipeline.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"

namespace mlir::moe {
#define GEN_PASS_DEF_BUCKETREDUCTIONS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// What reductions must share to go in one message.
struct BucketKey {
  bool scatter;
  FlatSymbolRefAttr mesh;
  ArrayAttr axes;
  Type element;
  /// The pipeline unit of the parameter the gradient updates (none: not a
  /// parameter's, or a module without its layer count).
  std::optional<unsigned> unit;

  bool operator==(const BucketKey &other) const {
    return scatter == other.scatter && mesh == other.mesh &&
           axes == other.axes && element == other.element && unit == other.unit;
  }
};

/// The pipeline unit of the parameter whose update reads `value`, directly
/// or through casts (a gradient reduced in BF16).
std::optional<unsigned> unitOfGradient(Value value,
                                       std::optional<unsigned> layers) {
  if (!layers)
    return std::nullopt;
  for (Operation *user : value.getUsers()) {
    if (auto update = dyn_cast<AdamWUpdateOp>(user))
      return pipelineUnitOfName(update.getParam(), *layers);
    if (isa<CastOp>(user))
      if (std::optional<unsigned> unit =
              unitOfGradient(user->getResult(0), layers))
        return unit;
  }
  return std::nullopt;
}

/// The key of a reduction that can go in a bucket: an all-reduce, or a
/// reduce-scatter along dimension 0 (whose blocks are contiguous).
std::optional<BucketKey> keyOf(Operation *op, std::optional<unsigned> layers) {
  auto element = [](Value input) {
    return getElementTypeOrSelf(input.getType());
  };
  if (!isa<AllReduceOp, ReduceScatterOp>(op))
    return std::nullopt;
  std::optional<unsigned> unit = unitOfGradient(op->getResult(0), layers);
  if (auto reduce = dyn_cast<AllReduceOp>(op))
    return BucketKey{false, reduce.getMeshAttr(), reduce.getAxes(),
                     element(reduce.getInput()), unit};
  auto scatter = dyn_cast<ReduceScatterOp>(op);
  if (scatter && scatter.getDim() == 0)
    return BucketKey{true, scatter.getMeshAttr(), scatter.getAxes(),
                     element(scatter.getInput()), unit};
  return std::nullopt;
}

/// The first op of `body` that reads `op`'s result (null: none).
Operation *firstReader(Block &body, Operation *op) {
  Operation *first = nullptr;
  for (Operation *user : op->getResult(0).getUsers()) {
    Operation *inBody = body.findAncestorOpInBlock(*user);
    if (inBody && (!first || inBody->isBeforeInBlock(first)))
      first = inBody;
  }
  return first;
}

/// Replaces the reductions of `bucket` (two or more, in program order) by
/// one moe.reduce_bucket where the last one was.
void replaceByBucket(ArrayRef<Operation *> bucket, const BucketKey &key) {
  Operation *last = bucket.back();
  OpBuilder builder(last);
  SmallVector<Value> inputs;
  SmallVector<Type> types;
  SmallVector<Location> locations;
  for (Operation *op : bucket) {
    inputs.push_back(op->getOperand(0));
    types.push_back(op->getResult(0).getType());
    locations.push_back(op->getLoc());
  }
  auto replacement = builder.create<ReduceBucketOp>(
      builder.getFusedLoc(locations), TypeRange(types), ValueRange(inputs),
      key.mesh, key.axes, key.scatter ? builder.getUnitAttr() : UnitAttr());
  for (auto [op, result] : llvm::zip(bucket, replacement.getResults())) {
    op->getResult(0).replaceAllUsesWith(result);
    op->erase();
  }
}

} // namespace

unsigned mlir::moe::bucketReductions(func::FuncOp step, uint64_t bucketBytes) {
  if (bucketBytes == 0)
    return 0;
  Block &body = step.getBody().front();
  auto model = step->getParentOfType<ModuleOp>()->getAttrOfType<DictionaryAttr>(
      kModelAttrName);
  std::optional<unsigned> layers;
  if (auto count = model ? model.getAs<IntegerAttr>("layers") : IntegerAttr())
    layers = static_cast<unsigned>(count.getInt());
  struct Bucket {
    BucketKey key;
    SmallVector<Operation *> members;
    uint64_t bytes = 0;
    /// The first reader of a member's result (null: none yet).
    Operation *deadline = nullptr;
  };
  // One open bucket per key: the tensor-parallel and data-parallel
  // gradients of a layer interleave, and fill a bucket each; the next
  // layer's open their own.
  SmallVector<Bucket> open, closed;
  auto close = [&](Bucket &bucket) {
    if (bucket.members.size() > 1)
      closed.push_back(std::move(bucket));
  };
  for (Operation &op : body) {
    std::optional<BucketKey> key = keyOf(&op, layers);
    if (!key)
      continue;
    uint64_t bytes = tensorBytes(op.getOperand(0).getType());
    auto *bucket = llvm::find_if(
        open, [&](const Bucket &candidate) { return candidate.key == *key; });
    bool joins = bucket != open.end() && bucket->bytes + bytes <= bucketBytes &&
                 (!bucket->deadline || op.isBeforeInBlock(bucket->deadline));
    if (bucket == open.end()) {
      bucket = &open.emplace_back(Bucket{*key, {}, 0, nullptr});
    } else if (!joins) {
      close(*bucket);
      *bucket = Bucket{*key, {}, 0, nullptr};
    }
    bucket->members.push_back(&op);
    bucket->bytes += bytes;
    if (Operation *reader = firstReader(body, &op))
      if (!bucket->deadline || reader->isBeforeInBlock(bucket->deadline))
        bucket->deadline = reader;
  }
  for (Bucket &bucket : open)
    close(bucket);
  unsigned buckets = 0;
  for (Bucket &bucket : closed) {
    replaceByBucket(bucket.members, bucket.key);
    ++buckets;
  }
  return buckets;
}

namespace {
struct BucketReductionsPass
    : public mlir::moe::impl::BucketReductionsBase<BucketReductionsPass> {
  using BucketReductionsBase::BucketReductionsBase;
  void runOnOperation() override {
    FailureOr<func::FuncOp> step =
        lookupFunction(getOperation(), function, "to bucket the reductions of");
    if (failed(step))
      return signalPassFailure();
    bucketReductions(*step, bucketBytes);
  }
};
} // namespace
