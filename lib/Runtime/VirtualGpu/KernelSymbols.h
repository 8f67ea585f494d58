//===- KernelSymbols.h - a kernel's name from its address -------*- C++ -*-===//
//
// Private to lib/Runtime/VirtualGpu. A launch knows its kernel only as a
// function pointer; its symbol, demangled and without the parameter list
// ("moe::rt::cuda::(anonymous namespace)::addKernel<float>"), names it in
// faults and in the launch log, and is what ptxas's resource report and the
// kernel coverage script call the same kernel. Kernels are mostly local
// symbols (anonymous namespaces, static), which dladdr cannot name, so the
// name is read from the ELF symbol table of the file that holds the code.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_KERNELSYMBOLS_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_KERNELSYMBOLS_H

#include <string>

namespace moe::rt::virtual_gpu {

/// The demangled name of the function at `address`, without parameters;
/// "kernel at 0x..." when no symbol table names it (a stripped binary).
const std::string &kernelSymbol(const void *address);

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_KERNELSYMBOLS_H
