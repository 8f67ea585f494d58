//===- ProcessMemory.cpp - how much memory this process holds -------------===//

#include "moe/Runtime/IO/ProcessMemory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace moe::rt::io {

uint64_t residentBytes() {
  std::FILE *statm = std::fopen("/proc/self/statm", "r");
  if (!statm)
    return 0;
  unsigned long long size = 0, resident = 0;
  int read = std::fscanf(statm, "%llu %llu", &size, &resident);
  std::fclose(statm);
  long page = sysconf(_SC_PAGESIZE);
  if (read != 2 || page <= 0)
    return 0;
  return resident * static_cast<uint64_t>(page);
}

uint64_t peakResidentBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0 || usage.ru_maxrss < 0)
    return 0;
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024; // in KiB on Linux
}

} // namespace moe::rt::io
