//===- KernelSymbols.cpp - a kernel's name from its address ---------------===//
#include "VirtualGpu/KernelSymbols.h"

#include "absl/strings/str_cat.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

namespace moe::rt::virtual_gpu {

namespace {

/// The mangled name of the FUNC symbol at `offset` in the ELF file `path`
/// (its .symtab, else .dynsym), or "".
std::string symbolAt(const char *path, uint64_t offset) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return "";
  struct stat info;
  if (fstat(fd, &info) != 0 || info.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    close(fd);
    return "";
  }
  size_t size = static_cast<size_t>(info.st_size);
  void *mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (mapping == MAP_FAILED)
    return "";
  std::unique_ptr<void, std::function<void(void *)>> unmap(
      mapping, [size](void *p) { munmap(p, size); });
  const auto *bytes = static_cast<const unsigned char *>(mapping);
  const auto *header = static_cast<const Elf64_Ehdr *>(mapping);
  if (std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 ||
      header->e_ident[EI_CLASS] != ELFCLASS64 ||
      header->e_shoff + uint64_t{header->e_shnum} * sizeof(Elf64_Shdr) > size)
    return "";
  const auto *sections =
      reinterpret_cast<const Elf64_Shdr *>(bytes + header->e_shoff);
  for (uint32_t wanted : {SHT_SYMTAB, SHT_DYNSYM}) {
    for (int s = 0; s < header->e_shnum; ++s) {
      const Elf64_Shdr &table = sections[s];
      if (table.sh_type != wanted || table.sh_link >= header->e_shnum ||
          table.sh_offset + table.sh_size > size)
        continue;
      const Elf64_Shdr &names = sections[table.sh_link];
      if (names.sh_offset + names.sh_size > size)
        continue;
      const auto *symbols =
          reinterpret_cast<const Elf64_Sym *>(bytes + table.sh_offset);
      size_t count = table.sh_size / sizeof(Elf64_Sym);
      for (size_t i = 0; i < count; ++i) {
        const Elf64_Sym &symbol = symbols[i];
        if (ELF64_ST_TYPE(symbol.st_info) != STT_FUNC ||
            symbol.st_value != offset || symbol.st_name >= names.sh_size)
          continue;
        const char *name =
            reinterpret_cast<const char *>(bytes + names.sh_offset) +
            symbol.st_name;
        return std::string(name, strnlen(name, names.sh_size - symbol.st_name));
      }
    }
  }
  return "";
}

/// `mangled` demangled, without its parameter list.
std::string readable(const std::string &mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void *)> demangled(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
      std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  // Cut the parameter list: the last '(' at template depth 0 whose match
  // ends the name.
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')')
        ++depth;
      else if (name[i] == '(' && --depth == 0) {
        name.resize(i);
        break;
      }
    }
  }
  // A function template's demangled name starts with its return type,
  // which for a kernel is void.
  constexpr std::string_view kVoid = "void ";
  if (name.compare(0, kVoid.size(), kVoid) == 0)
    name.erase(0, kVoid.size());
  return name;
}

} // namespace

const std::string &kernelSymbol(const void *address) {
  static std::mutex mutex;
  static std::map<const void *, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = known.find(address);
  if (found != known.end())
    return found->second;
  std::string name;
  Dl_info info{};
  if (dladdr(address, &info) != 0) {
    if (info.dli_sname && info.dli_saddr == address)
      name = readable(info.dli_sname);
    else if (info.dli_fname) {
      // Symbol values are offsets from the load address in shared objects
      // and position-independent executables, absolute otherwise.
      auto offset = reinterpret_cast<uintptr_t>(address) -
                    reinterpret_cast<uintptr_t>(info.dli_fbase);
      std::string mangled = symbolAt(info.dli_fname, offset);
      if (mangled.empty())
        mangled = symbolAt(info.dli_fname, reinterpret_cast<uintptr_t>(address));
      if (!mangled.empty())
        name = readable(mangled);
    }
  }
  if (name.empty())
    name = absl::StrCat("kernel at ", absl::Hex(reinterpret_cast<uintptr_t>(address)));
  return known.emplace(address, std::move(name)).first->second;
}

} // namespace moe::rt::virtual_gpu
