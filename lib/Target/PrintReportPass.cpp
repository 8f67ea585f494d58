//===- PrintReportPass.cpp - moe-print-report -----------------------------===//
#include "moe/Target/CostModel.h"
#include "moe/Target/Hardware.h"
#include "moe/Target/ModelStatistics.h"
#include "moe/Target/Passes.h"
#include "moe/Target/ShardingReport.h"
#include "moe/Transforms/Pipeline.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

namespace mlir::moe {
#define GEN_PASS_DEF_PRINTREPORT
#include "moe/Target/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
struct PrintReportPass
    : public mlir::moe::impl::PrintReportBase<PrintReportPass> {
  using PrintReportBase::PrintReportBase;

  void runOnOperation() override {
    markAllAnalysesPreserved();
    if (failed(print()))
      signalPassFailure();
  }

  LogicalResult print() {
    ModuleOp module = getOperation();
    if (!llvm::is_contained({"sharding", "collectives", "memory", "cost"},
                            report.getValue()))
      return module.emitError() << "unknown report '" << report
                                << "': expected sharding, collectives, "
                                   "memory or cost";
    FailureOr<func::FuncOp> step =
        lookupFunction(module, function, "to report on");
    if (failed(step))
      return failure();
    llvm::raw_ostream &os = llvm::outs();
    if (report == "sharding")
      return printShardingReport(module, *step, os);
    if (report == "collectives") {
      if (getMesh(module))
        printCollectivesReport(*step, os);
      return success();
    }
    if (report == "memory") {
      printMemoryReport(computeModelStatistics(module, *step), os);
      return success();
    }
    if (cluster.empty())
      return module.emitError() << "the cost report needs a cluster file";
    llvm::Expected<ClusterSpec> spec = loadCluster(cluster);
    if (!spec)
      return module.emitError() << llvm::toString(spec.takeError());
    FailureOr<std::optional<RecordedPipeline>> pipeline =
        recordedPipeline(module);
    if (failed(pipeline))
      return failure();
    printCostReport(estimateStepCost(module, *step, *spec,
                                     *pipeline ? &(*pipeline)->schedule
                                               : nullptr),
                    *spec, os);
    return success();
  }
};
} // namespace
