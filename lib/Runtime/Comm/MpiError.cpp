//===- MpiError.cpp - MPI error codes as absl::Status ---------------------===//
#include "MpiSupport.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::comm::detail {

/// Errors that mean the caller passed something MPI rejects, as opposed to
/// a failure of the library, the network or a peer.
static bool isArgumentError(int errorClass) {
  switch (errorClass) {
  case MPI_ERR_BUFFER:
  case MPI_ERR_COUNT:
  case MPI_ERR_TYPE:
  case MPI_ERR_TAG:
  case MPI_ERR_RANK:
  case MPI_ERR_ROOT:
  case MPI_ERR_ARG:
  case MPI_ERR_TRUNCATE:
    return true;
  default:
    return false;
  }
}

absl::Status mpiError(int code, const char *call) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    length = 0;
  std::string message(text, length);
  if (message.empty())
    message = absl::StrCat("MPI error code ", code);
  int errorClass = MPI_ERR_OTHER;
  if (MPI_Error_class(code, &errorClass) != MPI_SUCCESS)
    errorClass = MPI_ERR_OTHER;
  std::string full = absl::StrCat(call, " failed: ", message);
  if (isArgumentError(errorClass))
    return absl::InvalidArgumentError(full);
  return absl::InternalError(full);
}

MPI_Datatype mpiType(DType type) {
  switch (type) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::BF16:
    // MPI has no bfloat16; the layer only moves the bits (its sums are its
    // own), so any 2-byte type carries them.
    return MPI_UINT16_T;
  default:
    return MPI_INT32_T;
  }
}

} // namespace moe::rt::comm::detail
