//===- BackendModule.h - the entry point of a backend module ----*- C++ -*-===//
//
// A backend built as a shared module (dlopen'ed by createBackend) exports
// exactly two C symbols and nothing else: its ABI version, which must be
// the loader's (the module and moe-run come from one build: the Backend
// and Program types cross the boundary), and a function returning its
// factory. Everything else in the module, including its own static copy of
// the engine it links, is local to it (a version script hides it), so
// neither side's copy can bind to the other's.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_BACKEND_BACKENDMODULE_H
#define MOE_RUNTIME_BACKEND_BACKENDMODULE_H

#include "moe/Runtime/Backend/Backend.h"

/// Bumped whenever Backend, BackendOptions, Program or what they reach
/// changes layout in a way an older module would misread.
#define MOE_BACKEND_ABI_VERSION 3

/// The symbols a module defines, by name for dlsym.
#define MOE_BACKEND_ABI_SYMBOL "moe_backend_abi_version"
#define MOE_BACKEND_FACTORY_SYMBOL "moe_backend_factory"

extern "C" {
/// MOE_BACKEND_ABI_VERSION when the module was built.
typedef int (*MoeBackendAbiVersionFn)();
/// The module's backend factory.
typedef moe::rt::BackendFactory (*MoeBackendFactoryFn)();
}

#endif // MOE_RUNTIME_BACKEND_BACKENDMODULE_H
