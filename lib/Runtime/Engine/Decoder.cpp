//===- Decoder.cpp - one token at a time with a KV cache ------------------===//
#include "moe/Runtime/Engine/Decoder.h"

#include "AlignedBuffer.h"
#include "Dispatch.h"

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Engine/LossSlice.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cstring>
#include <map>
#include <utility>

namespace moe::rt::engine {
namespace {

/// The instructions that see other tokens than their own, which decoding
/// runs itself.
bool isRope(Opcode opcode) {
  return opcode == Opcode::Rope || opcode == Opcode::DocumentRope;
}
bool isAttention(Opcode opcode) {
  return opcode == Opcode::Attention || opcode == Opcode::AttentionValueDim ||
         opcode == Opcode::DocumentAttention;
}

// Attention, AttentionValueDim and DocumentAttention share the layout of
// their q, k, v operands, out and lse results and heads, kv_heads
// attributes.
static_assert(
    ops::AttentionView::kQOperand == ops::AttentionValueDimView::kQOperand &&
    ops::AttentionView::kQOperand == ops::DocumentAttentionView::kQOperand &&
    ops::AttentionView::kVOperand == ops::DocumentAttentionView::kVOperand &&
    ops::AttentionView::kLseResult == ops::DocumentAttentionView::kLseResult &&
    ops::AttentionView::kKvHeadsAttr ==
        ops::DocumentAttentionView::kKvHeadsAttr &&
    ops::AttentionView::kKvHeadsAttr ==
        ops::AttentionValueDimView::kKvHeadsAttr &&
    ops::AttentionView::kScaleFactorAttr ==
        ops::DocumentAttentionView::kScaleFactorAttr &&
    ops::AttentionView::kScaleFactorAttr ==
        ops::AttentionValueDimView::kScaleFactorAttr);
static_assert(ops::RopeView::kXOperand == ops::DocumentRopeView::kXOperand &&
              ops::RopeView::kYResult == ops::DocumentRopeView::kYResult &&
              ops::RopeView::kHeadsAttr == ops::DocumentRopeView::kHeadsAttr &&
              ops::RopeView::kThetaAttr == ops::DocumentRopeView::kThetaAttr &&
              ops::RopeView::kAttentionFactorAttr ==
                  ops::DocumentRopeView::kAttentionFactorAttr);

std::string shapeText(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

} // namespace

struct Decoder::State {
  Program program; // the step, its temporaries resized to one token
  std::vector<size_t> instructions;
  std::vector<uint8_t *> pointers;
  std::vector<AlignedBuffer> owned;
  std::vector<std::unique_ptr<comm::Group>> noGroups;
  std::vector<float> packScratch;
  /// The head: the fused one's input and output embedding, or the logits.
  std::optional<uint32_t> headX, headW, logits;
  int64_t hidden = 0;
  std::vector<float> logitsOut;
  /// Each attention instruction's keys and values so far, a row per token.
  std::map<size_t, std::pair<std::vector<float>, std::vector<float>>> cache;
};

Decoder::Decoder(std::unique_ptr<State> state) : state(std::move(state)) {}
Decoder::~Decoder() = default;

absl::Status Decoder::checkRanks(const Program &step) {
  if (step.numRanks() == 1 && step.groups.empty())
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "generate: the artifact is compiled for ", step.meshDescription(),
      "; decoding runs one rank's program without collectives (compile the "
      "model without --mesh and load the same weights)"));
}

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::create(Executor &executor) {
  const Program &step = executor.program();
  auto refused = [](const std::string &why) {
    return absl::InvalidArgumentError(absl::StrCat("generate: ", why));
  };
  if (absl::Status status = checkRanks(step); !status.ok())
    return status;

  // The LM head: the first instruction computing the loss from the logits.
  auto state = std::make_unique<State>();
  std::optional<size_t> head;
  for (size_t i = 0; i < step.instructions.size() && !head; ++i) {
    const Instruction &instruction = step.instructions[i];
    if (instruction.opcode == Opcode::LinearCrossEntropy) {
      ops::LinearCrossEntropyView view(instruction);
      state->headX = view.x();
      state->headW = view.w();
      head = i;
    } else if (instruction.opcode == Opcode::CrossEntropy) {
      state->logits = ops::CrossEntropyView(instruction).logits();
      head = i;
    }
  }
  if (!head)
    return refused("the artifact has no LM head (LinearCrossEntropy or "
                   "CrossEntropy) to read logits from");
  uint32_t headInput = state->headX ? *state->headX : *state->logits;
  LossSlice slice = dependencySlice(step, headInput, *head);

  const std::vector<int64_t> &tokenShape = step.buffers[step.tokens].shape;
  int64_t B = tokenShape[0], S = tokenShape[1];
  Program &program = state->program;
  program = step;
  std::vector<bool> used(step.buffers.size(), false);
  for (size_t i = 0; i < step.instructions.size(); ++i) {
    if (!slice.runs[i])
      continue;
    const Instruction &instruction = step.instructions[i];
    state->instructions.push_back(i);
    for (const std::vector<uint32_t> *list :
         {&instruction.operands, &instruction.results})
      for (uint32_t b : *list)
        used[b] = true;
    if (isAttention(instruction.opcode)) {
      // lse: [B, heads, S] -> [1, heads, 1].
      Buffer &lse =
          program.buffers[instruction.results[ops::AttentionView::kLseResult]];
      if (lse.shape.size() == 3 && lse.shape[0] == B && lse.shape[2] == S)
        lse.shape = {1, lse.shape[1], 1};
    }
  }
  used[headInput] = true;
  if (state->headW)
    used[*state->headW] = true;

  state->pointers.assign(program.buffers.size(), nullptr);
  for (uint32_t b = 0; b < program.buffers.size(); ++b) {
    if (!used[b])
      continue;
    Buffer &buffer = program.buffers[b];
    if (buffer.kind != BufferKind::Temporary &&
        buffer.kind != BufferKind::Input) {
      // Weights are read in place.
      state->pointers[b] =
          const_cast<uint8_t *>(std::as_const(executor).bytes(b));
      continue;
    }
    if (buffer.dtype != DType::F32 && buffer.dtype != DType::I32)
      return refused(absl::StrCat(
          "buffer '", buffer.name, "' is ", dtypeName(buffer.dtype),
          "; decoding runs fp32 programs (compile the model without "
          "--precision and load the same weights)"));
    bool perToken = buffer.shape.size() >= 2 && buffer.shape[0] == B &&
                    buffer.shape[1] == S;
    bool oneToken = buffer.shape.size() == 3 && buffer.shape[0] == 1 &&
                    buffer.shape[2] == 1; // an attention lse, resized above
    if (perToken) {
      buffer.shape[0] = 1;
      buffer.shape[1] = 1;
    } else if (!oneToken && !buffer.shape.empty()) {
      return refused(absl::StrCat("buffer '", buffer.name, "' ",
                                  shapeText(buffer.shape),
                                  " is not per token ([", B, ", ", S,
                                  ", ...]): it has no one-token form"));
    }
    absl::StatusOr<AlignedBuffer> storage =
        AlignedBuffer::allocate(std::max<uint64_t>(buffer.sizeInBytes(), 4),
                                absl::StrCat("decoding buffer ", buffer.name));
    if (!storage.ok())
      return storage.status();
    state->pointers[b] = storage->data();
    state->owned.push_back(std::move(*storage));
  }

  int64_t vocab = 0;
  if (state->headW) {
    const std::vector<int64_t> &w = program.buffers[*state->headW].shape;
    vocab = w[0];
    state->hidden = w[1];
    if (program.buffers[*state->headW].dtype != DType::F32)
      return refused("the LM head's weight is not fp32");
  } else {
    vocab = program.buffers[*state->logits].shape.back();
  }
  state->logitsOut.resize(vocab);
  auto decoder = std::unique_ptr<Decoder>(new Decoder(std::move(state)));
  decoder->vocabSize = vocab;
  decoder->maxLength = S;
  return decoder;
}

absl::StatusOr<absl::Span<const float>> Decoder::feed(int32_t token) {
  State &s = *state;
  const Program &program = s.program;
  if (fed >= maxLength)
    return absl::OutOfRangeError(absl::StrCat(
        "generate: the model was compiled for sequences of ", maxLength,
        " tokens, and all ", maxLength, " positions are used"));
  if (token < 0 || token >= vocabSize)
    return absl::InvalidArgumentError(
        absl::StrCat("generate: token ", token, " at position ", fed,
                     " is outside the vocabulary [0, ", vocabSize, ")"));
  std::memcpy(s.pointers[program.tokens], &token, sizeof(token));
  if (program.positions >= 0 && s.pointers[program.positions]) {
    int32_t position = static_cast<int32_t>(fed);
    std::memcpy(s.pointers[program.positions], &position, sizeof(position));
  }
  auto f32 = [&](uint32_t b) {
    return reinterpret_cast<float *>(s.pointers[b]);
  };
  auto width = [&](uint32_t b) { return program.buffers[b].shape.back(); };
  // The token's place in the sequence, for RoPE and attention.
  std::vector<cpu::SequenceRun> here = {{0, fed, 1}};
  StepContext context{program, s.pointers, s.noGroups, s.packScratch};
  for (size_t index : s.instructions) {
    const Instruction &instruction = program.instructions[index];
    if (isRope(instruction.opcode)) {
      ops::RopeView rope(instruction);
      cpu::ropeForward(f32(rope.x()), f32(rope.y()), 1, 1, rope.heads(),
                       width(rope.x()) / rope.heads(), rope.theta(), nullptr,
                       here, ropeScalingOf(rope));
      continue;
    }
    if (isAttention(instruction.opcode)) {
      ops::AttentionView attention(instruction);
      auto &[keys, values] = s.cache[index];
      keys.insert(keys.end(), f32(attention.k()),
                  f32(attention.k()) + width(attention.k()));
      values.insert(values.end(), f32(attention.v()),
                    f32(attention.v()) + width(attention.v()));
      int64_t heads = attention.heads();
      cpu::attentionBlockForward(
          f32(attention.q()), keys.data(), values.data(), f32(attention.out()),
          f32(attention.lse()), 1, 1, fed + 1, here, heads, attention.kvHeads(),
          width(attention.q()) / heads, width(attention.out()) / heads,
          nullptr, attention.scaleFactor().value_or(1.0f));
      continue;
    }
    if (absl::Status status = runInstruction(context, index); !status.ok())
      return absl::Status(
          status.code(),
          absl::StrCat("generate: position ", fed, ": ", status.message()));
  }
  if (s.headW)
    cpu::linearForward(f32(*s.headX), f32(*s.headW), s.logitsOut.data(), 1,
                       s.hidden, vocabSize);
  else
    std::memcpy(s.logitsOut.data(), f32(*s.logits), vocabSize * sizeof(float));
  ++fed;
  return absl::MakeConstSpan(s.logitsOut);
}

} // namespace moe::rt::engine
