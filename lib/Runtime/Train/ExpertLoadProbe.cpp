//===- ExpertLoadProbe.cpp - per-layer expert load for the metrics --------===//

#include "moe/Runtime/Train/ExpertLoadProbe.h"

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Cpu/Kernels.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include <algorithm>

namespace moe::rt::train {
namespace {
/// "7" for a counter named "model.layers.7.<...>" (moec's HF names), else
/// the counter's ordinal among the program's.
std::string layerOf(const std::string &name, size_t ordinal) {
  constexpr absl::string_view prefix = "model.layers.";
  if (absl::StartsWith(name, prefix)) {
    size_t end = name.find('.', prefix.size());
    if (end != std::string::npos && end > prefix.size())
      return name.substr(prefix.size(), end - prefix.size());
  }
  return absl::StrCat(ordinal);
}
} // namespace

ExpertLoadProbe::ExpertLoadProbe(StepState source) : state(std::move(source)) {
  const Program &program = state.program();
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    if (inst.opcode != Opcode::ExpertLoadUpdate)
      continue;
    ops::ExpertLoadUpdateView update(inst);
    counters.push_back(
        {i, layerOf(program.buffers[update.load()].name, counters.size()),
         update.bias().has_value()});
  }
  slots.assign(counters.size() * kSlotsPerCounter, 0.0);
}

void ExpertLoadProbe::before(size_t index) {
  auto it =
      std::find_if(counters.begin(), counters.end(),
                   [&](const Counter &c) { return c.instruction == index; });
  if (it == counters.end())
    return;
  ops::ExpertLoadUpdateView update(state.program().instructions[index]);
  absl::StatusOr<std::vector<float>> load = state.values(update.load());
  if (!load.ok())
    return;
  double *slot = &slots[(it - counters.begin()) * kSlotsPerCounter];
  cpu::ExpertLoadStats stats =
      cpu::expertLoadStats(load->data(), static_cast<int64_t>(load->size()));
  slot[0] = stats.min;
  slot[1] = stats.max;
  slot[2] = stats.cv;
  if (std::optional<uint32_t> bias = update.bias())
    if (absl::StatusOr<std::vector<float>> values = state.values(*bias);
        values.ok() && !values->empty()) {
      auto [lo, hi] = std::minmax_element(values->begin(), values->end());
      slot[3] = static_cast<double>(*hi) - *lo;
    }
  slot[4] = 1.0;
}

std::vector<std::pair<std::string, double>> ExpertLoadProbe::metrics() const {
  std::vector<std::pair<std::string, double>> out;
  for (size_t c = 0; c < counters.size(); ++c) {
    const double *slot = &slots[c * kSlotsPerCounter];
    if (slot[4] <= 0.0)
      continue;
    const std::string &layer = counters[c].layer;
    out.emplace_back("load_min." + layer, slot[0]);
    out.emplace_back("load_max." + layer, slot[1]);
    out.emplace_back("load_cv." + layer, slot[2]);
    if (counters[c].biased)
      out.emplace_back("bias_range." + layer, slot[3]);
  }
  return out;
}

} // namespace moe::rt::train
