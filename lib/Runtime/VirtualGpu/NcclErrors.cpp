//===- NcclErrors.cpp - NCCL's error strings and operation names ----------===//
//
// ncclGetErrorString, ncclGetLastError and the names the emulation's
// messages give types, reductions and operations.
//
//===----------------------------------------------------------------------===//
#include "NcclState.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::virtual_gpu::nccl {
namespace {

struct LastError {
  std::mutex mutex;
  std::string message;
};

LastError &lastError() {
  static LastError *last = new LastError();
  return *last;
}

/// ncclGetLastError's answer stays valid until this thread asks again.
const char *keptForCaller(std::string message) {
  thread_local std::string kept;
  kept = std::move(message);
  return kept.c_str();
}

} // namespace

ncclResult_t reportError(ncclResult_t code, const std::string &message) {
  LastError &last = lastError();
  std::lock_guard<std::mutex> lock(last.mutex);
  last.message = message;
  return code;
}

std::string typeName(ncclDataType_t type) {
  switch (type) {
  case ncclInt8:
    return "int8";
  case ncclUint8:
    return "uint8";
  case ncclInt32:
    return "int32";
  case ncclUint32:
    return "uint32";
  case ncclInt64:
    return "int64";
  case ncclUint64:
    return "uint64";
  case ncclFloat16:
    return "float16";
  case ncclFloat32:
    return "float";
  case ncclFloat64:
    return "double";
  case ncclBfloat16:
    return "bfloat16";
  case ncclFloat8e4m3:
    return "float8e4m3";
  case ncclFloat8e5m2:
    return "float8e5m2";
  default:
    return absl::StrCat("type ", static_cast<int>(type));
  }
}

std::string redOpName(ncclRedOp_t op) {
  switch (op) {
  case ncclSum:
    return "sum";
  case ncclProd:
    return "prod";
  case ncclMax:
    return "max";
  case ncclMin:
    return "min";
  case ncclAvg:
    return "avg";
  default:
    return absl::StrCat("op ", static_cast<int>(op));
  }
}

std::string describe(const Op &op) {
  std::string type = typeName(op.type);
  switch (op.kind) {
  case OpKind::AllReduce:
    return absl::StrCat("allReduce(", type, ", ", op.count, ", ",
                        redOpName(op.redOp), ")");
  case OpKind::AllGather:
    return absl::StrCat("allGather(", type, ", ", op.count, ")");
  case OpKind::ReduceScatter:
    return absl::StrCat("reduceScatter(", type, ", ", op.count, ", ",
                        redOpName(op.redOp), ")");
  case OpKind::Send:
    return absl::StrCat("send(", type, ", ", op.count, ") to rank ", op.peer);
  case OpKind::Receive:
    return absl::StrCat("recv(", type, ", ", op.count, ") from rank ", op.peer);
  }
  return "unknown operation";
}

std::string identify(const Op &op, const Communicator &comm) {
  if (isCollective(op.kind))
    return absl::StrCat("collective ", op.sequence, " on ", comm.name);
  bool sends = op.kind == OpKind::Send;
  return absl::StrCat("send ", op.sequence, " from rank ",
                      sends ? comm.rank : op.peer, " to rank ",
                      sends ? op.peer : comm.rank, " on ", comm.name);
}

} // namespace moe::rt::virtual_gpu::nccl

using namespace moe::rt::virtual_gpu::nccl;

extern "C" const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

extern "C" const char *ncclGetLastError(ncclComm_t handle) {
  // A communicator's asynchronous error is its own; the rest is the
  // process's last error (NCCL documents `comm` as unused).
  if (handle)
    if (std::shared_ptr<Communicator> comm = findCommunicator(handle)) {
      std::string own = comm->lastError();
      if (!own.empty())
        return keptForCaller(std::move(own));
    }
  LastError &last = lastError();
  std::lock_guard<std::mutex> lock(last.mutex);
  return keptForCaller(last.message);
}
