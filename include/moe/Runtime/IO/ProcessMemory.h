//===- ProcessMemory.h - how much memory this process holds -----*- C++ -*-===//
//
// Resident memory as Linux counts it, to set what a run really holds against
// what the compiler planned (moe-run's closing memory line).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_PROCESSMEMORY_H
#define MOE_RUNTIME_IO_PROCESSMEMORY_H

#include <cstdint>

namespace moe::rt::io {

/// Bytes resident now (/proc/self/statm); 0 when unknown.
uint64_t residentBytes();
/// The most bytes resident at any time so far (getrusage's ru_maxrss); 0
/// when unknown.
uint64_t peakResidentBytes();

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_PROCESSMEMORY_H
