//===- NcclReduce.cpp - the emulation's reductions in rank order ----------===//
#include "NcclReduce.h"

#include "moe/Runtime/IO/Float16.h"

#include <cstdint>
#include <type_traits>

namespace moe::rt::virtual_gpu::nccl {
namespace {

/// Elements of type `Stored` as values of `Value`, the type they are
/// reduced in.
template <typename Stored, typename Value> struct Plain {
  static Value load(Stored bits) { return static_cast<Value>(bits); }
  static Stored store(Value value) { return static_cast<Stored>(value); }
};
struct Bf16 {
  static float load(uint16_t bits) { return io::bf16ToFloat(bits); }
  static uint16_t store(float value) { return io::floatToBf16(value); }
};
struct Half {
  static float load(uint16_t bits) { return io::f16ToFloat(bits); }
  static uint16_t store(float value) { return io::floatToF16(value); }
};

/// True for NaN only (and never for integers).
template <typename Value> bool isNan(Value v) { return v != v; }

/// The type integer sums and products wrap in; floats are their own.
template <typename Value, bool = std::is_integral_v<Value>> struct WrappingOf {
  using type = std::make_unsigned_t<Value>;
};
template <typename Value> struct WrappingOf<Value, false> {
  using type = Value;
};

/// a op b. Integer sums and products wrap (unsigned arithmetic).
template <typename Value> Value combine(ncclRedOp_t op, Value a, Value b) {
  using Wrapping = typename WrappingOf<Value>::type;
  switch (op) {
  case ncclSum:
  case ncclAvg:
    return static_cast<Value>(static_cast<Wrapping>(a) +
                              static_cast<Wrapping>(b));
  case ncclProd:
    return static_cast<Value>(static_cast<Wrapping>(a) *
                              static_cast<Wrapping>(b));
  case ncclMax:
    if (isNan(a))
      return a;
    return isNan(b) || b > a ? b : a;
  case ncclMin:
    if (isNan(a))
      return a;
    return isNan(b) || b < a ? b : a;
  default:
    return a;
  }
}

template <typename Stored, typename Codec>
void reduceAs(ncclRedOp_t op, const std::vector<const void *> &inputs,
              void *output, size_t count) {
  using Value = decltype(Codec::load(Stored()));
  Stored *out = static_cast<Stored *>(output);
  size_t ranks = inputs.size();
  for (size_t i = 0; i < count; ++i) {
    Value total = Codec::load(static_cast<const Stored *>(inputs[0])[i]);
    for (size_t r = 1; r < ranks; ++r)
      total = combine(op, total,
                      Codec::load(static_cast<const Stored *>(inputs[r])[i]));
    if (op == ncclAvg)
      total = static_cast<Value>(total / static_cast<Value>(ranks));
    out[i] = Codec::store(total);
  }
}

template <typename T>
void reducePlain(ncclRedOp_t op, const std::vector<const void *> &inputs,
                 void *output, size_t count) {
  reduceAs<T, Plain<T, T>>(op, inputs, output, count);
}

} // namespace

bool canReduce(ncclDataType_t type, ncclRedOp_t op) {
  if (op < ncclSum || op > ncclAvg)
    return false;
  switch (type) {
  case ncclInt8:
  case ncclUint8:
  case ncclInt32:
  case ncclUint32:
  case ncclInt64:
  case ncclUint64:
  case ncclFloat16:
  case ncclFloat32:
  case ncclFloat64:
  case ncclBfloat16:
    return true;
  default:
    return false;
  }
}

void reduceInRankOrder(ncclDataType_t type, ncclRedOp_t op,
                       const std::vector<const void *> &inputs, void *output,
                       size_t count) {
  switch (type) {
  case ncclInt8:
    return reducePlain<int8_t>(op, inputs, output, count);
  case ncclUint8:
    return reducePlain<uint8_t>(op, inputs, output, count);
  case ncclInt32:
    return reducePlain<int32_t>(op, inputs, output, count);
  case ncclUint32:
    return reducePlain<uint32_t>(op, inputs, output, count);
  case ncclInt64:
    return reducePlain<int64_t>(op, inputs, output, count);
  case ncclUint64:
    return reducePlain<uint64_t>(op, inputs, output, count);
  case ncclFloat32:
    return reducePlain<float>(op, inputs, output, count);
  case ncclFloat64:
    return reducePlain<double>(op, inputs, output, count);
  case ncclFloat16:
    return reduceAs<uint16_t, Half>(op, inputs, output, count);
  case ncclBfloat16:
    return reduceAs<uint16_t, Bf16>(op, inputs, output, count);
  default:
    return;
  }
}

} // namespace moe::rt::virtual_gpu::nccl
