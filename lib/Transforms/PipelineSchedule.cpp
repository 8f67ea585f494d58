//===- PipelineSchedule.cpp - moe-plan-pipeline: cut and schedule ---------===//
//
// The pipeline is chosen once, on the global step, and recorded on the
// module (kPipelineScheduleAttrName): moe-split-pipeline-stages tags the
// partitioned step from the record, and the artifact writer and the cost
// model rebuild the same schedule from it (buildSchedule is a function of
// the recorded kind and sizes).
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipeline.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mlir::moe {
#define GEN_PASS_DEF_PLANPIPELINE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;
namespace pp = ::moe::pipeline;

std::optional<pp::ScheduleKind> mlir::moe::parseScheduleKind(StringRef name) {
  for (pp::ScheduleKind kind :
       {pp::ScheduleKind::GPipe, pp::ScheduleKind::OneFOneB,
        pp::ScheduleKind::Interleaved1F1B, pp::ScheduleKind::ZeroBubble})
    if (name == pp::toString(kind))
      return kind;
  return std::nullopt;
}

void mlir::moe::recordPipeline(ModuleOp module, const pp::Schedule &schedule,
                               ArrayRef<unsigned> unitStages) {
  Builder builder(module.getContext());
  SmallVector<int64_t> stages(unitStages.begin(), unitStages.end());
  NamedAttribute fields[] = {
      builder.getNamedAttr("schedule",
                           builder.getStringAttr(pp::toString(schedule.kind))),
      builder.getNamedAttr("stages",
                           builder.getI64IntegerAttr(schedule.stages)),
      builder.getNamedAttr("virtual_stages",
                           builder.getI64IntegerAttr(schedule.virtualStages)),
      builder.getNamedAttr("microbatches",
                           builder.getI64IntegerAttr(schedule.microbatches)),
      builder.getNamedAttr("unit_stages", builder.getDenseI64ArrayAttr(stages)),
  };
  module->setAttr(kPipelineScheduleAttrName,
                  builder.getDictionaryAttr(fields));
}

FailureOr<std::optional<RecordedPipeline>>
mlir::moe::recordedPipeline(ModuleOp module) {
  Attribute attr = module->getAttr(kPipelineScheduleAttrName);
  if (!attr)
    return std::optional<RecordedPipeline>();
  auto record = dyn_cast<DictionaryAttr>(attr);
  auto fail = [&](const Twine &what) {
    return module.emitError()
           << kPipelineScheduleAttrName << ": expected " << what;
  };
  if (!record)
    return fail("a dictionary");
  auto kindName = record.getAs<StringAttr>("schedule");
  std::optional<pp::ScheduleKind> kind =
      kindName ? parseScheduleKind(kindName.getValue()) : std::nullopt;
  if (!kind)
    return fail("'schedule' to be gpipe, 1f1b, interleaved-1f1b or "
                "zero-bubble");
  RecordedPipeline recorded;
  struct Size {
    StringLiteral name;
    int *field;
  } sizes[] = {{"stages", &recorded.options.stages},
               {"virtual_stages", &recorded.options.virtualStages},
               {"microbatches", &recorded.options.microbatches}};
  for (const Size &size : sizes) {
    auto value = record.getAs<IntegerAttr>(size.name);
    if (!value || value.getValue().getSignificantBits() > 64 ||
        value.getInt() < 1 || value.getInt() > kMaxMeshRanks)
      return fail("'" + size.name + "' in [1, " + Twine(kMaxMeshRanks) + "]");
    *size.field = value.getInt();
  }
  auto unitStages = record.getAs<DenseI64ArrayAttr>("unit_stages");
  int64_t chunks =
      int64_t(recorded.options.stages) * recorded.options.virtualStages;
  if (!unitStages || llvm::any_of(unitStages.asArrayRef(), [&](int64_t s) {
        return s < 0 || s >= chunks;
      }))
    return fail("'unit_stages', an array<i64: ...> of model stages in [0, " +
                Twine(chunks) + ")");
  for (int64_t stage : unitStages.asArrayRef())
    recorded.unitStages.push_back(stage);
  for (const NamedAttribute &field : record)
    if (!llvm::is_contained({"schedule", "stages", "virtual_stages",
                             "microbatches", "unit_stages"},
                            field.getName().strref()))
      return fail("no field '" + field.getName().strref() +
                  "' (known: microbatches, schedule, stages, unit_stages, "
                  "virtual_stages)");
  pp::ErrorOr<pp::Schedule> schedule =
      pp::buildSchedule(*kind, recorded.options);
  if (!schedule)
    return module.emitError() << "pipeline schedule: " << schedule.getError();
  recorded.schedule = std::move(*schedule);
  return std::optional<RecordedPipeline>(std::move(recorded));
}

namespace {
struct PlanPipelinePass
    : public mlir::moe::impl::PlanPipelineBase<PlanPipelinePass> {
  using PlanPipelineBase::PlanPipelineBase;

  void runOnOperation() override {
    if (failed(plan()))
      signalPassFailure();
  }

  LogicalResult plan() {
    ModuleOp module = getOperation();
    std::optional<pp::ScheduleKind> kind = parseScheduleKind(schedule);
    if (!kind)
      return module.emitError()
             << "unknown pipeline schedule '" << schedule
             << "': expected gpipe, 1f1b, interleaved-1f1b or zero-bubble";
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to cut into pipeline stages");
    if (failed(step))
      return failure();
    FailureOr<std::vector<PipelineUnit>> units = pipelineUnits(module, *step);
    if (failed(units))
      return failure();
    FailureOr<PipelinePlan> cut =
        planPipeline(module, std::move(*units), stages, virtualStages);
    if (failed(cut))
      return failure();
    if (report)
      printPipelineReport(*cut, llvm::outs());
    pp::ScheduleOptions options;
    options.stages = stages;
    options.virtualStages = virtualStages;
    options.microbatches = microbatches;
    pp::ErrorOr<pp::Schedule> built = pp::buildSchedule(*kind, options);
    if (!built)
      return module.emitError() << "pipeline schedule: " << built.getError();
    if (failed(replay(*built, options)))
      return failure();
    // Model stage i is chunk i of the cut, in model order.
    std::vector<unsigned> unitStages;
    for (auto [stage, chunk] : llvm::enumerate(cut->chunks))
      for (unsigned unit = chunk.firstUnit; unit <= chunk.lastUnit; ++unit)
        unitStages.push_back(stage);
    recordPipeline(module, *built, unitStages);
    return success();
  }

  /// Simulates the schedule: prints its timeline and bubble with `report`,
  /// and writes the Chrome trace when asked.
  LogicalResult replay(const pp::Schedule &built,
                       const pp::ScheduleOptions &options) {
    ModuleOp module = getOperation();
    pp::ErrorOr<pp::Timeline> timeline = pp::simulate(built, options);
    if (!timeline)
      return module.emitError() << "pipeline schedule: " << timeline.getError();
    if (report)
      llvm::outs() << "schedule " << pp::toString(built.kind) << ", "
                   << options.microbatches << " microbatches: bubble "
                   << llvm::format("%.1f%%", 100 * timeline->bubbleFraction)
                   << " of the step\n"
                   << pp::toText(*timeline);
    if (trace.empty())
      return success();
    std::string error;
    auto file = openOutputFile(trace, &error);
    if (!file)
      return module.emitError() << "pipeline trace: " << error;
    file->os() << pp::toChromeTrace(*timeline);
    file->keep();
    return success();
  }
};
} // namespace
