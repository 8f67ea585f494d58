//===- moe-opt.cpp - run any moe pass alone (lit tests) -------------------===//
//
// Runs moe passes and pipelines, among them the one `moec
// --dump-pass-pipeline` prints, whose moe-write-artifact writes the
// artifact moec would.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Target/CompilePipeline.h"
#include "moe/Target/Passes.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::moe::MoEDialect, mlir::func::FuncDialect>();
  mlir::moe::registerMoEPasses();
  mlir::moe::registerMoETargetPasses();
  mlir::moe::registerTrainingPipeline();
  mlir::moe::registerCompilePipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "moe optimizer driver\n", registry));
}
