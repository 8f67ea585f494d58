// RUN: moe-opt %s --allow-unregistered-dialect --split-input-file --moe-plan-memory="function=chain" --verify-diagnostics | FileCheck %s

// Each value takes its dtype's bytes per element (include/moe/Runtime/DType.h):
// 32 bf16 are 64 bytes, 3x7 f8E4M3FN 21, 5 i64 40 and 3 f16 6; each offset
// is 64-byte aligned.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: moe.arena_bytes = 256 : i64, moe.peak_live_bytes = 131 : i64
func.func @chain(%x: tensor<16xf32>) -> tensor<16xf32> {
  // CHECK: "test.make"() {moe.offsets = array<i64: 0>} : () -> tensor<32xbf16>
  %a = "test.make"() : () -> tensor<32xbf16>
  // CHECK: "test.make"() {moe.offsets = array<i64: 64>} : () -> tensor<3x7xf8E4M3FN>
  %b = "test.make"() : () -> tensor<3x7xf8E4M3FN>
  // CHECK: "test.make"() {moe.offsets = array<i64: 128>} : () -> tensor<5xi64>
  %c = "test.make"() : () -> tensor<5xi64>
  // CHECK: "test.make"() {moe.offsets = array<i64: 192>} : () -> tensor<3xf16>
  %d = "test.make"() : () -> tensor<3xf16>
  "test.use"(%a, %b, %c, %d) : (tensor<32xbf16>, tensor<3x7xf8E4M3FN>, tensor<5xi64>, tensor<3xf16>) -> ()
  return %x : tensor<16xf32>
}

// -----

func.func @chain(%x: tensor<16xf32>) -> tensor<16xf32> {
  // expected-error @+1 {{'test.make' op result 0 has type 'tensor<4xf64>', whose element type is no artifact dtype (known: f32, i32, bf16, f16, f8E4M3FN, f8E5M2, i64)}}
  %a = "test.make"() : () -> tensor<4xf64>
  return %x : tensor<16xf32>
}

// -----

func.func @chain(%x: tensor<16xf32>) -> tensor<16xf32> {
  // expected-error @+1 {{'test.make' op result 1 has type 'tensor<2xui32>', whose element type is no artifact dtype}}
  %a:2 = "test.make"() : () -> (tensor<2xf32>, tensor<2xui32>)
  return %x : tensor<16xf32>
}
