// RUN: moe-opt %models/tiny.mlir --moe-split-batch="microbatches=4" --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-plan-pipeline="stages=2 microbatches=4 schedule=zero-bubble" | FileCheck %s --check-prefix=RECORD
// RUN: moe-opt %models/tiny.mlir --moe-split-batch="microbatches=4" --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-plan-pipeline="stages=2 microbatches=4 schedule=zero-bubble report=true trace=%t.trace.json" --moe-split-pipeline-stages -o %t.split.mlir | FileCheck %s --check-prefix=REPORT
// RUN: FileCheck %s --check-prefix=SPLIT < %t.split.mlir
// RUN: test -s %t.trace.json
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-plan-pipeline="stages=2 schedule=2f2b" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-plan-pipeline="stages=8" 2>&1 | FileCheck %s --check-prefix=CUT
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-plan-pipeline="stages=2 virtual-stages=2 microbatches=3 schedule=interleaved-1f1b" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// RUN: not moe-opt %models/tiny.mlir --moe-plan-pipeline="function=missing" 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not moe-opt %models/tiny.mlir --moe-split-batch="microbatches=4" --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-plan-pipeline="stages=2 microbatches=4" --moe-split-pipeline-stages="ranks=2" 2>&1 | FileCheck %s --check-prefix=BESIDES
// RUN: moe-opt %s --split-input-file --moe-split-pipeline-stages --verify-diagnostics

// The cut of the tiny model (embedding, layer 0 | layer 1, head) and the
// schedule, recorded for the stage split and the writer.
// RECORD: module attributes {moe.microbatches = 4 : i64, moe.model = {{.*}}, moe.pipeline_schedule = {microbatches = 4 : i64, schedule = "zero-bubble", stages = 2 : i64, unit_stages = array<i64: 0, 0, 1, 1>, virtual_stages = 1 : i64}}

// REPORT: pipeline: 2 stages x 1 virtual (2 chunks) over 4 units
// REPORT: schedule zero-bubble, 4 microbatches: bubble

// The split takes the ranks, the slots and the weight-gradient phase from
// the record.
// SPLIT: func.func @train_step({{.*}}attributes {moe.pipeline_ranks = 2 : i64, moe.pipeline_slots = array<i64: 2, 2>}
// SPLIT: moe.linear_grad_weight {{.*}}moe.pipeline_phase = "weight"

// KIND: error: unknown pipeline schedule '2f2b': expected gpipe, 1f1b, interleaved-1f1b or zero-bubble
// CUT: error: cannot cut 4 units (embedding, layers, head) into 8 pipeline chunks (8 stages x 1 virtual stages)
// SCHEDULE: error: pipeline schedule: {{.+}}
// NOSTEP: error: no function named 'missing' to cut into pipeline stages
// BESIDES: error: ranks, slots and split-weight-gradients need unit-stages: without it they come from the module's moe.pipeline_schedule

// A malformed record is an error naming the field.

// expected-error @+1 {{moe.pipeline_schedule: expected 'schedule' to be gpipe, 1f1b, interleaved-1f1b or zero-bubble}}
module attributes {moe.model = {layers = 1 : i64}, moe.pipeline_schedule = {schedule = "2f2b", stages = 1 : i64, virtual_stages = 1 : i64, microbatches = 1 : i64, unit_stages = array<i64: 0, 0, 0>}} {
  func.func @train_step() {
    return
  }
}

// -----

// expected-error @+1 {{moe.pipeline_schedule: expected 'stages' in [1, 1048576]}}
module attributes {moe.model = {layers = 1 : i64}, moe.pipeline_schedule = {schedule = "1f1b", stages = 0 : i64, virtual_stages = 1 : i64, microbatches = 1 : i64, unit_stages = array<i64: 0, 0, 0>}} {
  func.func @train_step() {
    return
  }
}

// -----

// expected-error @+1 {{moe.pipeline_schedule: expected 'unit_stages', an array<i64: ...> of model stages in [0, 2)}}
module attributes {moe.model = {layers = 1 : i64}, moe.pipeline_schedule = {schedule = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64, microbatches = 2 : i64, unit_stages = array<i64: 0, 1, 2>}} {
  func.func @train_step() {
    return
  }
}

// -----

// expected-error @+1 {{moe.pipeline_schedule: expected no field 'ranks' (known: microbatches, schedule, stages, unit_stages, virtual_stages)}}
module attributes {moe.model = {layers = 1 : i64}, moe.pipeline_schedule = {schedule = "1f1b", stages = 1 : i64, virtual_stages = 1 : i64, microbatches = 1 : i64, unit_stages = array<i64: 0, 0, 0>, ranks = 2 : i64}} {
  func.func @train_step() {
    return
  }
}

// -----

// expected-error @+1 {{pipeline schedule: }}
module attributes {moe.model = {layers = 1 : i64}, moe.pipeline_schedule = {schedule = "interleaved-1f1b", stages = 2 : i64, virtual_stages = 2 : i64, microbatches = 3 : i64, unit_stages = array<i64: 0, 1, 2>}} {
  func.func @train_step() {
    return
  }
}
