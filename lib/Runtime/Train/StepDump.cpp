//===- StepDump.cpp - record one training step for the reference ----------===//
#include "moe/Runtime/Train/StepDump.h"
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/Train/Weights.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include <algorithm>
#include <filesystem>

namespace moe::rt::train {

/// The opcode of the last instruction before `end` that writes `buffer`.
static std::optional<Opcode> producerOf(const Program &program, uint32_t buffer,
                                        size_t end) {
  for (size_t i = end; i-- > 0;) {
    const Instruction &inst = program.instructions[i];
    if (std::find(inst.results.begin(), inst.results.end(), buffer) !=
        inst.results.end())
      return inst.opcode;
  }
  return std::nullopt;
}

LossPartsProbe::LossPartsProbe(const Executor &executor) : executor(executor) {
  const Program &program = executor.program();
  for (size_t i = program.instructions.size(); i-- > 0;) {
    const Instruction &inst = program.instructions[i];
    if (std::find(inst.results.begin(), inst.results.end(), program.loss) ==
        inst.results.end())
      continue;
    // moec writes loss = weighted_sum(ce, aux_0, ..., aux_n); anything else
    // has no parts we could name.
    if (inst.opcode != Opcode::WeightedSum)
      return;
    for (size_t o = 0; o < inst.operands.size(); ++o) {
      Opcode expected = o == 0 ? Opcode::CrossEntropy : Opcode::AuxLoss;
      if (producerOf(program, inst.operands[o], i) != expected)
        return;
    }
    lossInstruction = i;
    return;
  }
}

void LossPartsProbe::before(size_t index) {
  if (!lossInstruction || index != *lossInstruction)
    return;
  const Instruction &inst = executor.program().instructions[index];
  double aux = 0;
  for (size_t i = 1; i < inst.operands.size(); ++i)
    aux += *executor.data(inst.operands[i]);
  ceSum += *executor.data(inst.operands[0]);
  auxSum += inst.operands.size() > 1 ? aux / (inst.operands.size() - 1) : 0;
  ++count;
  result.ce = static_cast<float>(ceSum / count);
  result.aux = static_cast<float>(auxSum / count);
  result.known = true;
}

/// Writes `text` and a newline atomically, like the safetensors files next
/// to it, so that an interrupted dump never leaves a truncated JSON file.
/// commit() reports errors of the final flush and close too.
static absl::Status writeText(const std::string &path,
                              const std::string &text) {
  absl::StatusOr<io::AtomicFile> file = io::AtomicFile::create(path);
  if (!file.ok())
    return file.status();
  if (absl::Status s = file->write(text + "\n"); !s.ok())
    return s;
  return file->commit();
}

static absl::Status writeState(const std::string &dir, const Executor &executor,
                               const std::string &suffix) {
  if (absl::Status s = saveWeights(executor, dir + "/params" + suffix +
                                                 ".safetensors",
                                   WeightSet::Parameters);
      !s.ok())
    return s;
  return saveWeights(executor, dir + "/optim_state" + suffix + ".safetensors",
                     WeightSet::OptimizerState);
}

absl::StatusOr<StepDump> StepDump::begin(const std::string &dir,
                                         const Executor &executor,
                                         int64_t step, const int32_t *tokens,
                                         const int32_t *targets) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", error.message()));
  const Program &program = executor.program();
  nlohmann::json config = nlohmann::json::parse(
      program.model.configJson.empty() ? "{}" : program.model.configJson,
      nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object())
    return absl::InvalidArgumentError(
        "the artifact's model configuration is not a JSON object");
  config["step"] = step;
  if (absl::Status s = writeText(dir + "/config.json", config.dump(2));
      !s.ok())
    return s;

  std::vector<int64_t> shape = program.buffers[program.tokens].shape;
  std::vector<io::TensorView> batch = {{"tokens", "I32", shape, tokens},
                                       {"targets", "I32", shape, targets}};
  if (absl::Status s = io::writeSafetensors(dir + "/batch.safetensors", batch);
      !s.ok())
    return s;
  if (absl::Status s = writeState(dir, executor, ""); !s.ok())
    return s;
  return StepDump(dir, executor);
}

void StepDump::before(size_t index, const Instruction &inst) {
  if (inst.opcode != Opcode::AdamW)
    return;
  const Buffer &grad = executor->program().buffers[inst.operands[1]];
  const float *data = executor->data(inst.operands[1]);
  grads.emplace_back(inst.operands[0],
                     std::vector<float>(data, data + grad.numElements()));
}

absl::Status StepDump::finish(float loss, float gradNorm, float lr,
                              const LossParts &parts) {
  if (absl::Status s = writeState(dir, *executor, "_after"); !s.ok())
    return s;
  std::vector<io::TensorView> views;
  for (const auto &[param, values] : grads) {
    const Buffer &buffer = executor->program().buffers[param];
    appendExportViews(buffer.name, buffer.shape, values.data(), views);
  }
  if (absl::Status s = io::writeSafetensors(dir + "/grads.safetensors", views);
      !s.ok())
    return s;
  nlohmann::json metrics = {{"loss", loss}, {"grad_norm", gradNorm}, {"lr", lr}};
  if (parts.known) {
    metrics["ce"] = parts.ce;
    metrics["aux"] = parts.aux;
  }
  return writeText(dir + "/metrics.json", metrics.dump(2));
}

} // namespace moe::rt::train
