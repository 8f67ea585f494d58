//===- StepDump.cpp - record one training step for the reference ----------===//
#include "moe/Runtime/Train/StepDump.h"
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/Train/Weights.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include <algorithm>
#include <cstring>
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

StepState::StepState(Backend &backend)
    : prog(&backend.program()),
      read([&backend](uint32_t buffer, void *host) {
        return backend.readBuffer(buffer, host);
      }),
      current([&backend]() -> absl::StatusOr<const WeightStore *> {
        if (absl::Status s = backend.pullWeights(); !s.ok())
          return s;
        return &backend.weights();
      }) {}

StepState::StepState(const Executor &executor)
    : prog(&executor.program()),
      read([&executor](uint32_t buffer, void *host) {
        const uint8_t *bytes = executor.bytes(buffer);
        if (!bytes)
          return absl::OutOfRangeError(
              absl::StrCat("no buffer %", buffer, " in the program"));
        std::memcpy(host, bytes,
                    executor.program().buffers[buffer].sizeInBytes());
        return absl::OkStatus();
      }),
      current([&executor]() -> absl::StatusOr<const WeightStore *> {
        return &executor;
      }) {}

absl::StatusOr<std::vector<float>> StepState::values(uint32_t buffer) const {
  const Buffer &b = prog->buffers[buffer];
  std::vector<float> values(static_cast<size_t>(b.numElements()));
  if (b.dtype == DType::F32) {
    if (absl::Status s = read(buffer, values.data()); !s.ok())
      return s;
    return values;
  }
  if (b.dtype != DType::BF16)
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer %", buffer, " '", b.name, "' is not a float buffer"));
  std::vector<uint16_t> bits(values.size());
  if (absl::Status s = read(buffer, bits.data()); !s.ok())
    return s;
  for (size_t i = 0; i < bits.size(); ++i) {
    uint32_t word = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&values[i], &word, sizeof(word));
  }
  return values;
}

absl::StatusOr<const WeightStore *> StepState::weights() const {
  return current();
}

LossPartsProbe::LossPartsProbe(StepState source) : state(std::move(source)) {
  const Program &program = state.program();
  for (size_t i = program.instructions.size(); i-- > 0;) {
    const Instruction &inst = program.instructions[i];
    if (std::find(inst.results.begin(), inst.results.end(), program.loss) ==
        inst.results.end())
      continue;
    // moec writes loss = weighted_sum(ce, router losses...); anything else
    // has no parts we could name.
    if (inst.opcode != Opcode::WeightedSum)
      return;
    std::vector<Term> kinds;
    for (size_t o = 0; o < inst.operands.size(); ++o) {
      std::optional<Opcode> producer = producerOf(program, inst.operands[o], i);
      if (o == 0) {
        if (producer != Opcode::CrossEntropy &&
            producer != Opcode::LinearCrossEntropy)
          return;
        kinds.push_back(Term::CrossEntropy);
      } else if (producer == Opcode::AuxLoss) {
        kinds.push_back(Term::Aux);
      } else if (producer == Opcode::SequenceAuxLoss) {
        kinds.push_back(Term::SequenceAux);
      } else if (producer == Opcode::ZLoss) {
        kinds.push_back(Term::ZLoss);
      } else {
        return;
      }
    }
    terms = std::move(kinds);
    result.hasSequenceAux =
        std::find(terms.begin(), terms.end(), Term::SequenceAux) != terms.end();
    result.hasZLoss =
        std::find(terms.begin(), terms.end(), Term::ZLoss) != terms.end();
    lossInstruction = i;
    return;
  }
}

void LossPartsProbe::before(size_t index) {
  if (!lossInstruction || index != *lossInstruction)
    return;
  const Instruction &inst = state.program().instructions[index];
  // Each kind's mean over its operands (the MoE layers); a scalar that
  // cannot be read leaves the parts unknown.
  double total[4] = {0, 0, 0, 0};
  int64_t counts[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < inst.operands.size(); ++i) {
    absl::StatusOr<std::vector<float>> values = state.values(inst.operands[i]);
    if (!values.ok() || values->empty()) {
      lossInstruction.reset();
      return;
    }
    size_t kind = static_cast<size_t>(terms[i]);
    total[kind] += values->front();
    ++counts[kind];
  }
  ++count;
  float means[4];
  for (size_t kind = 0; kind < 4; ++kind) {
    sums[kind] += counts[kind] > 0 ? total[kind] / counts[kind] : 0.0;
    means[kind] = static_cast<float>(sums[kind] / count);
  }
  result.ce = means[0];
  result.aux = means[1];
  result.sequenceAux = means[2];
  result.zLoss = means[3];
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

static absl::Status writeState(const std::string &dir, const StepState &state,
                               const std::string &suffix) {
  absl::StatusOr<const WeightStore *> weights = state.weights();
  if (!weights.ok())
    return weights.status();
  const WeightStore &store = **weights;
  if (absl::Status s = saveWeights(store, dir + "/params" + suffix +
                                                 ".safetensors",
                                   WeightSet::Parameters);
      !s.ok())
    return s;
  return saveWeights(store, dir + "/optim_state" + suffix + ".safetensors",
                     WeightSet::OptimizerState);
}

absl::StatusOr<StepDump> StepDump::begin(const std::string &dir,
                                         StepState state, int64_t step, const int32_t *tokens,
                                         const int32_t *targets) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", error.message()));
  const Program &program = state.program();
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
  if (absl::Status s = writeState(dir, state, ""); !s.ok())
    return s;
  return StepDump(dir, std::move(state));
}

void StepDump::before(size_t index, const Instruction &inst) {
  if (!isAdamW(inst.opcode))
    return;
  absl::StatusOr<std::vector<float>> grad = state.values(inst.operands[1]);
  if (!grad.ok()) {
    if (readFailure.ok())
      readFailure = grad.status();
    return;
  }
  grads.emplace_back(inst.operands[0], std::move(*grad));
}

absl::Status StepDump::finish(float loss, float gradNorm, float lr,
                              const LossParts &parts) {
  if (!readFailure.ok())
    return absl::Status(readFailure.code(),
                        absl::StrCat("dumping a step: a gradient: ",
                                     readFailure.message()));
  if (absl::Status s = writeState(dir, state, "_after"); !s.ok())
    return s;
  std::vector<io::TensorView> views;
  for (const auto &[param, values] : grads) {
    const Buffer &buffer = state.program().buffers[param];
    appendExportViews(buffer.name, buffer.shape, values.data(), views);
  }
  if (absl::Status s = io::writeSafetensors(dir + "/grads.safetensors", views);
      !s.ok())
    return s;
  nlohmann::json metrics = {{"loss", loss}, {"grad_norm", gradNorm}, {"lr", lr}};
  if (parts.known) {
    metrics["ce"] = parts.ce;
    metrics["aux"] = parts.aux;
    if (parts.hasSequenceAux)
      metrics["seq_aux"] = parts.sequenceAux;
    if (parts.hasZLoss)
      metrics["z_loss"] = parts.zLoss;
  }
  return writeText(dir + "/metrics.json", metrics.dump(2));
}

} // namespace moe::rt::train
