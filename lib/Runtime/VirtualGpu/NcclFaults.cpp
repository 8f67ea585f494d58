//===- NcclFaults.cpp - faults injected into the NCCL emulation -----------===//
#include "NcclFaults.h"
#include "NcclState.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include <cstdlib>
#include <mutex>

namespace moe::rt::virtual_gpu::nccl {
namespace {

constexpr const char *kVariable = "MOE_VIRTUAL_GPU_NCCL_FAULTS";

absl::Status badSetting(absl::string_view spec, absl::string_view setting,
                        absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      kVariable, "='", spec, "': setting '", setting, "' ", why,
      " (expected in-progress=N, hang-rank=R, fail-rank=R, at=K)"));
}

/// The plan in force and this process's operations counted under it.
struct Faults {
  std::mutex mutex;
  std::string spec;
  FaultPlan plan;
  uint64_t operations = 0;
};

Faults &faults() {
  static Faults *state = new Faults();
  return *state;
}

} // namespace

absl::StatusOr<FaultPlan> parseFaultPlan(absl::string_view spec) {
  FaultPlan plan;
  for (absl::string_view setting :
       absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> keyValue =
        absl::StrSplit(setting, absl::MaxSplits('=', 1));
    int64_t value = 0;
    if (!absl::SimpleAtoi(keyValue.second, &value) || value < 0)
      return badSetting(spec, setting, "needs a count of 0 or more");
    if (keyValue.first == "in-progress") {
      plan.inProgress = static_cast<int>(value);
    } else if (keyValue.first == "hang-rank" || keyValue.first == "fail-rank") {
      InjectedFault fault = keyValue.first == "hang-rank" ? InjectedFault::Hang
                                                          : InjectedFault::Fail;
      plan.rankFaults.push_back({fault, static_cast<int>(value), 1});
    } else if (keyValue.first == "at") {
      if (plan.rankFaults.empty())
        return badSetting(spec, setting, "follows no hang-rank or fail-rank");
      if (value == 0)
        return badSetting(spec, setting, "counts operations from 1");
      plan.rankFaults.back().at = static_cast<uint64_t>(value);
    } else {
      return badSetting(spec, setting, "is unknown");
    }
  }
  return plan;
}

absl::Status reloadFaults() {
  const char *set = std::getenv(kVariable);
  std::string spec = set ? set : "";
  Faults &state = faults();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (spec == state.spec)
    return absl::OkStatus();
  absl::StatusOr<FaultPlan> plan = parseFaultPlan(spec);
  if (!plan.ok())
    return plan.status();
  state.spec = std::move(spec);
  state.plan = *std::move(plan);
  state.operations = 0;
  return absl::OkStatus();
}

int extraInProgressPolls() {
  Faults &state = faults();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.plan.inProgress;
}

InjectedFault nextOperationFault(std::string &why) {
  Faults &state = faults();
  std::lock_guard<std::mutex> lock(state.mutex);
  uint64_t operation = ++state.operations;
  int rank = processRank();
  for (const FaultPlan::RankFault &f : state.plan.rankFaults) {
    if (f.rank != rank || f.at != operation)
      continue;
    why = absl::StrCat(f.fault == InjectedFault::Hang ? "hang" : "fail",
                       "-rank=", rank, ",at=", operation, " in ", kVariable);
    return f.fault;
  }
  return InjectedFault::None;
}

} // namespace moe::rt::virtual_gpu::nccl
