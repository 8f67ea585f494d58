//===- Registry.cpp - backends by name, device ones loaded on demand ------===//
//
// "cpu" is built in. "cuda" is lib/libmoe_backend_cuda.so, looked for next
// to the running executable (<prefix>/bin/moe-run -> <prefix>/lib/), the
// layout of the build tree and of an install: moe-run links no CUDA
// library, and only `--device cuda` loads the module (and, through it,
// cudart, cuBLASLt and NCCL). A module is loaded once per process and
// stays loaded: the backends it creates run its code.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Backend/BackendModule.h"
#include "moe/Runtime/Engine/HostWeights.h"

#include "absl/strings/str_cat.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>

namespace moe::rt {

namespace {

/// A backend that lives in a module: its name and its file's name.
struct ModuleBackend {
  const char *name;
  /// As a build option says it: "built without the CUDA backend".
  const char *title;
  const char *file;
};

constexpr ModuleBackend kModuleBackends[] = {
    {"cuda", "CUDA", "libmoe_backend_cuda.so"}};

/// The CUDA backend's sources built for the virtual GPU: loaded for
/// `--device cuda --virtual-gpu NAME` only, never in place of a GPU.
constexpr ModuleBackend kVirtualGpuBackend = {"cuda", "virtual GPU",
                                              "libmoe_backend_virtual_gpu.so"};

/// `path` without its last component ("/a/b" -> "/a").
std::string parentOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? "" : path.substr(0, slash);
}

/// Where the module `file` is expected: lib/ beside the running
/// executable's directory (bin/).
std::string modulePath(const char *file) {
  char exe[PATH_MAX];
  ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string prefix =
      length > 0
          ? parentOf(parentOf(std::string(exe, static_cast<size_t>(length))))
          : "..";
  return absl::StrCat(prefix, "/lib/", file);
}

absl::StatusOr<BackendFactory> loadModule(const ModuleBackend &backend) {
  std::string path = modulePath(backend.file);
  auto fail = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device ", backend.name, ": the ", backend.name,
        " backend module '", path, "' ", why));
  };
  if (access(path.c_str(), F_OK) != 0)
    return fail(absl::StrCat("is not there (this moe-run was built without "
                             "the ",
                             backend.title, " backend)"));
  // RTLD_LOCAL: the module's symbols stay out of the global scope (it
  // exports only its entry points anyway).
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return fail(absl::StrCat("does not load: ", dlerror()));
  auto version = reinterpret_cast<MoeBackendAbiVersionFn>(
      dlsym(handle, MOE_BACKEND_ABI_SYMBOL));
  auto factory = reinterpret_cast<MoeBackendFactoryFn>(
      dlsym(handle, MOE_BACKEND_FACTORY_SYMBOL));
  if (!version || !factory)
    return fail("is not a backend module (it lacks " MOE_BACKEND_ABI_SYMBOL
                " or " MOE_BACKEND_FACTORY_SYMBOL ")");
  if (version() != MOE_BACKEND_ABI_VERSION)
    return fail(absl::StrCat("has backend ABI version ", version(),
                             ", this moe-run ", MOE_BACKEND_ABI_VERSION,
                             ": rebuild them together"));
  return factory();
}

/// The factory of a module backend, loading the module on first use.
absl::StatusOr<BackendFactory> moduleFactory(const ModuleBackend &backend) {
  static std::mutex mutex;
  static std::vector<std::pair<std::string, BackendFactory>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto &[file, factory] : loaded)
    if (file == backend.file)
      return factory;
  absl::StatusOr<BackendFactory> factory = loadModule(backend);
  if (factory.ok())
    loaded.emplace_back(backend.file, *factory);
  return factory;
}

} // namespace

const std::vector<std::string> &backendNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = {"cpu"};
    for (const ModuleBackend &backend : kModuleBackends)
      all.push_back(backend.name);
    return all;
  }();
  return names;
}

absl::StatusOr<std::unique_ptr<Backend>>
createBackend(std::string_view name, std::shared_ptr<const Program> program,
              const BackendOptions &options) {
  if (name == "cpu") {
    if (!options.virtualGpu.empty())
      return absl::InvalidArgumentError(
          "--virtual-gpu runs the CUDA backend: it needs --device cuda");
    return createCpuBackend(std::move(program), options);
  }
  for (const ModuleBackend &backend : kModuleBackends) {
    if (name != backend.name)
      continue;
    absl::StatusOr<BackendFactory> factory = moduleFactory(
        options.virtualGpu.empty() ? backend : kVirtualGpuBackend);
    if (!factory.ok())
      return factory.status();
    return (*factory)(std::move(program), options);
  }
  std::string known;
  for (const std::string &each : backendNames())
    absl::StrAppend(&known, known.empty() ? "" : " or ", each);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", std::string(name), "': expected ",
                   known));
}

absl::Status checkBufferIndex(std::string_view backend, const Program &program,
                              uint32_t buffer) {
  if (buffer < program.buffers.size())
    return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat(
      std::string(backend), " backend: buffer ", buffer,
      " is out of range (the program has ", program.buffers.size(), ")"));
}

void fillPattern(void *bytes, uint64_t size, uint32_t pattern) {
  auto *out = static_cast<uint8_t *>(bytes);
  for (uint64_t at = 0; at < size; at += sizeof(pattern))
    std::memcpy(out + at, &pattern,
                std::min<uint64_t>(sizeof(pattern), size - at));
}

uint64_t hostBytesPerRank(std::string_view name, const Program &program) {
  if (name == "cpu")
    return Executor::bytesPerRank(program);
  return engine::hostWeightBytes(program);
}

} // namespace moe::rt
