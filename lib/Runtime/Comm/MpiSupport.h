//===- MpiSupport.h - MPI errors as Status, the MPI transport ---*- C++ -*-===//
//
// The only header of the layer that includes mpi.h; the public API does not,
// so code that uses a Group never needs MPI's headers.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_COMM_MPISUPPORT_H
#define MOE_LIB_RUNTIME_COMM_MPISUPPORT_H

#include "Probe.h"
#include "Transport.h"

#include "absl/status/status.h"

#include <mpi.h>

namespace moe::rt::comm::detail {

/// `call` failed with MPI error `code`: a Status carrying MPI_Error_string's
/// text, with an absl code from the MPI error class.
absl::Status mpiError(int code, const char *call);

/// MPI_FLOAT or MPI_INT32_T.
MPI_Datatype mpiType(DType type);

/// A transport over `comm` (collectives and the user's messages) and
/// `internal` (the layer's own messages). It frees both communicators when
/// destroyed, unless MPI is finalised by then, except MPI_COMM_WORLD.
std::unique_ptr<Transport> makeMpiTransport(MPI_Comm comm, MPI_Comm internal);

/// The probes of a stuck wait (Probe.h) over `comm`, a communicator of the
/// whole world used for nothing else; the prober frees it unless MPI is
/// finalised by then.
std::unique_ptr<Prober> makeMpiProber(MPI_Comm comm);

} // namespace moe::rt::comm::detail

#endif // MOE_LIB_RUNTIME_COMM_MPISUPPORT_H
