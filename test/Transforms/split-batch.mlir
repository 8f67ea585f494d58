// RUN: moe-opt %models/tiny.mlir --moe-split-batch="microbatches=4" | FileCheck %s --check-prefix=SPLIT
// RUN: moe-opt %models/tiny.mlir --moe-split-batch="batch=64 microbatches=2" | FileCheck %s --check-prefix=GLOBAL
// RUN: moe-opt %s --split-input-file --moe-split-batch="microbatches=3" --verify-diagnostics

// The step is one microbatch's: batch 8 / 4.
// SPLIT: module attributes {moe.microbatches = 4 : i64}
// SPLIT: moe.transformer @tiny {{.*}}batch = 2
// --plan's global batch replaces the model's first.
// GLOBAL: moe.transformer @tiny {{.*}}batch = 32

// expected-error @+1 {{--microbatches 3 does not divide the batch of 8 sequences}}
moe.transformer @m {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 8}

// -----

// expected-error @+1 {{--microbatches needs the model's batch (moe.transformer)}}
module {
}
