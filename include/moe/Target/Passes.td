//===- Passes.td - moec's target passes --------------------*- tablegen -*-===//
//
// The passes that read a compiled step rather than rewrite it: the reports
// and the artifact writer. They live with the target library, which the
// transformations do not link.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_PASSES_TD
#define MOE_TARGET_PASSES_TD

include "mlir/Pass/PassBase.td"

def WriteArtifact : Pass<"moe-write-artifact", "ModuleOp"> {
  let summary = "write the planned training step as a .moebin artifact";
  let description = [{
    Writes `function` (a training step planned by moe-plan-memory) and the
    module's parameters to `output` in moe-run's artifact format, with
    `seed` seeding parameter initialisation; a step pipelined by
    moe-plan-pipeline runs over the schedule the module records. The IR is
    left as it is. The same bytes as `moec -o`: moec ends its pipeline with
    this pass. Fails, at the op, on a step the runtime cannot run, and when
    the file cannot be written.

    Example, the end of `moec model.mlir --dump-pass-pipeline`:

    ```
    moe-plan-memory,moe-write-artifact{function=train_step output=model.moebin seed=1234 target=cpu}
    ```
  }];
  let options = [
    Option<"output", "output", "std::string", "\"\"",
           "the artifact file ('-': stdout)">,
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step to write">,
    Option<"seed", "seed", "uint64_t", "1234",
           "parameter initialisation seed">,
    Option<"target", "target", "std::string", "\"cpu\"",
           "the moec --target the artifact records (cpu, a100, h100, h200); "
           "moe-run checks its backend's capabilities for it">,
  ];
}

def PrintReport : Pass<"moe-print-report", "ModuleOp"> {
  let summary = "print a report on the step to stdout";
  let description = [{
    Inspection, as `moec --report=...` prints it at the same points of its
    pipeline: `sharding` (after moe-propagate-sharding: how every parameter
    and tensor is split over the mesh, and why), `collectives` (after
    moe-partition: the collectives per rank and step; nothing without a
    mesh), `memory` (parameters, optimizer state and arena per rank) and
    `cost` (the predicted step time per rank on the cluster file
    `cluster`). The IR is left as it is. Fails without the function, and
    for `cost` without a readable cluster.

    Example: `--moe-print-report="report=memory"` after moe-plan-memory
    prints

    ```
    memory per rank (1 rank, fp32)
      parameters: 180800 total, 131648 active per token
      ...
    ```
  }];
  let options = [
    Option<"report", "report", "std::string", "\"\"",
           "sharding, collectives, memory or cost">,
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step to report on">,
    Option<"cluster", "cluster", "std::string", "\"\"",
           "cost: the cluster the step runs on (hardware/*.yaml)">,
  ];
}

#endif // MOE_TARGET_PASSES_TD
