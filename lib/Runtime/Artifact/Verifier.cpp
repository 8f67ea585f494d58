//===- Verifier.cpp - semantic checks of a decoded program ----------------===//
//
// verifyProgram runs the checks from the outside in: each buffer on its own,
// then the mesh and the splits over it (MeshRules.cpp), then the program's
// input/output fields, then each instruction on its own
// (InstructionRules.cpp), then the dataflow between instructions
// (Dataflow.cpp). Each stage may rely on the earlier ones, e.g. instruction
// rules multiply dims without overflow checks because buffers were checked.
// This file also holds the message helpers shared by all stages.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/ExpertNames.h"

#include "VerifierSupport.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace moe::rt {
namespace verifier {

std::string formatShape(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string formatAxes(const AxisList &axes) {
  return absl::StrCat("{", absl::StrJoin(axes, ","), "}");
}

std::string formatSplit(const std::vector<AxisList> &split) {
  if (split.empty())
    return "unsplit";
  std::vector<std::string> dims;
  for (const AxisList &axes : split)
    dims.push_back(formatAxes(axes));
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

std::string kindName(BufferKind kind) {
  switch (kind) {
  case BufferKind::Parameter:
    return "parameter";
  case BufferKind::OptimizerState:
    return "optimizer state";
  case BufferKind::Input:
    return "input";
  case BufferKind::Temporary:
    return "temporary";
  case BufferKind::WorkingCopy:
    return "working copy";
  }
  return absl::StrCat("kind ", static_cast<int>(kind));
}

std::string withArticle(BufferKind kind) {
  bool vowel = kind == BufferKind::OptimizerState || kind == BufferKind::Input;
  return absl::StrCat(vowel ? "an " : "a ", kindName(kind));
}

std::string describeBuffer(const Program &program, uint32_t index) {
  const std::string &name = program.buffers[index].name;
  if (name.empty())
    return absl::StrCat("buffer ", index);
  return absl::StrCat("buffer ", index, " '", name, "'");
}

absl::Status bufferError(const Program &program, uint32_t index,
                         absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(describeBuffer(program, index), ": ", message));
}

absl::Status instructionError(const Program &program, size_t index,
                              absl::string_view message) {
  const Instruction &instruction = program.instructions[index];
  std::string text =
      absl::StrCat("instruction ", index, " (", opcodeName(instruction.opcode),
                   "): ", message);
  if (!instruction.location.empty())
    absl::StrAppend(&text, " (at ", instruction.location, ")");
  return absl::InvalidArgumentError(text);
}

} // namespace verifier

namespace {

using namespace verifier;

/// Whether `block` is a block of rows of `whole` (ZeRO-1's master of a
/// whole working copy): dimension 0 split over more axes after whole's
/// own, the other dimensions as whole's.
bool isRowBlockOf(const Program &program, const Buffer &block,
                  const Buffer &whole) {
  size_t rank = whole.shape.size();
  if (rank == 0 || block.shape.size() != rank)
    return false;
  std::vector<AxisList> mine = block.split, theirs = whole.split;
  mine.resize(rank);
  theirs.resize(rank);
  for (size_t d = 1; d < rank; ++d)
    if (mine[d] != theirs[d] || block.shape[d] != whole.shape[d])
      return false;
  if (mine[0].size() <= theirs[0].size() ||
      !std::equal(theirs[0].begin(), theirs[0].end(), mine[0].begin()))
    return false;
  AxisList extra(mine[0].begin() + theirs[0].size(), mine[0].end());
  return block.shape[0] * program.partsOf(extra) == whole.shape[0];
}

/// A working copy (mixed precision) is the BF16 image of one f32 weight:
/// the runtime rounds the master into it, so the master must exist, be a
/// parameter and have the copy's shape and split, or (ZeRO-1) be a block of
/// its rows that ShardedAdamW gathers.
absl::Status verifyWorkingCopy(const Program &program, uint32_t index) {
  const Buffer &buffer = program.buffers[index];
  if (buffer.dtype != DType::BF16)
    return bufferError(program, index,
                       absl::StrCat("a working copy must be bf16, found ",
                                    dtypeName(buffer.dtype)));
  if (buffer.master >= program.buffers.size())
    return bufferError(program, index,
                       absl::StrCat("the master buffer ", buffer.master,
                                    " is out of range (", program.buffers.size(),
                                    " buffers)"));
  const Buffer &master = program.buffers[buffer.master];
  if (master.kind != BufferKind::Parameter)
    return bufferError(
        program, index,
        absl::StrCat("the master ", describeBuffer(program, buffer.master),
                     " must be a parameter, found ", withArticle(master.kind)));
  bool sameBlock = master.shape == buffer.shape && master.split == buffer.split;
  if (!sameBlock && isRowBlockOf(program, master, buffer)) {
    // Only the update that gathers the copy can fill it from a block.
    bool gathered = std::any_of(
        program.instructions.begin(), program.instructions.end(),
        [&](const Instruction &inst) {
          return inst.opcode == Opcode::ShardedAdamW &&
                 inst.operands.size() >
                     ops::ShardedAdamWView::kWorkingOperand &&
                 inst.operands[ops::ShardedAdamWView::kWorkingOperand] == index;
        });
    if (!gathered)
      return bufferError(
          program, index,
          absl::StrCat("its master ", describeBuffer(program, buffer.master),
                       " is a block of its rows, but no ShardedAdamW "
                       "gathers it"));
    sameBlock = true;
  }
  if (!sameBlock)
    return bufferError(
        program, index,
        absl::StrCat("shape ", formatShape(buffer.shape), " split ",
                     formatSplit(buffer.split), " differs from its master ",
                     describeBuffer(program, buffer.master), "'s ",
                     formatShape(master.shape), " split ",
                     formatSplit(master.split)));
  for (uint32_t other = 0; other < index; ++other)
    if (program.buffers[other].kind == BufferKind::WorkingCopy &&
        program.buffers[other].master == buffer.master)
      return bufferError(program, index,
                         absl::StrCat("the master ",
                                      describeBuffer(program, buffer.master),
                                      " already has the working copy ",
                                      describeBuffer(program, other)));
  return absl::OkStatus();
}

/// Kind, dtype, shape and init of one buffer, and its place in the arena.
absl::Status verifyBuffer(const Program &program, uint32_t index) {
  const Buffer &buffer = program.buffers[index];
  if (static_cast<uint8_t>(buffer.kind) >
      static_cast<uint8_t>(BufferKind::WorkingCopy))
    return bufferError(
        program, index,
        absl::StrCat("unknown buffer kind ", static_cast<int>(buffer.kind)));
  if (!dtypeInfo(buffer.dtype))
    return bufferError(program, index,
                       absl::StrCat("unknown dtype ",
                                    static_cast<int>(buffer.dtype), " (known: ",
                                    knownDTypeNames(), ")"));
  if (static_cast<uint8_t>(buffer.init) > static_cast<uint8_t>(Init::Normal))
    return bufferError(
        program, index,
        absl::StrCat("unknown init ", static_cast<int>(buffer.init)));

  // Sizes are later computed as plain products (Buffer::sizeInBytes), so
  // the element count times the dtype's size must fit in int64.
  const int64_t elementBytes = static_cast<int64_t>(dtypeBytes(buffer.dtype));
  int64_t count = 1;
  for (size_t d = 0; d < buffer.shape.size(); ++d) {
    int64_t dim = buffer.shape[d];
    if (dim < 0)
      return bufferError(program, index,
                         absl::StrCat("dimension ", d, " of shape ",
                                      formatShape(buffer.shape),
                                      " is negative"));
    if (__builtin_mul_overflow(count, dim, &count) ||
        count > std::numeric_limits<int64_t>::max() / elementBytes)
      return bufferError(program, index,
                         absl::StrCat("element count of shape ",
                                      formatShape(buffer.shape), " overflows"));
  }

  // The kernels see a buffer as a matrix of rows (all dimensions but the
  // last) by its last dimension, and hand those sizes to 32-bit BLAS
  // (lib/Runtime/Cpu/Linear.cpp). Rows saturate just above the limit, so a
  // zero dimension still gives 0 rows however large the others are.
  constexpr int64_t kMaxGemmDim = std::numeric_limits<int32_t>::max();
  if (!buffer.shape.empty()) {
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < buffer.shape.size(); ++d) {
      int64_t dim = buffer.shape[d];
      rows =
          dim != 0 && rows > kMaxGemmDim / dim ? kMaxGemmDim + 1 : rows * dim;
    }
    if (rows > kMaxGemmDim)
      return bufferError(
          program, index,
          absl::StrCat("shape ", formatShape(buffer.shape),
                       " has more rows (all but the last dimension) than the ",
                       kMaxGemmDim, " a GEMM can address"));
    if (buffer.shape.back() > kMaxGemmDim)
      return bufferError(
          program, index,
          absl::StrCat("last dimension of shape ", formatShape(buffer.shape),
                       " exceeds the ", kMaxGemmDim, " a GEMM can address"));
  }

  bool persistent = buffer.kind == BufferKind::Parameter ||
                    buffer.kind == BufferKind::OptimizerState;
  if (persistent && buffer.dtype != DType::F32)
    return bufferError(program, index,
                       absl::StrCat(withArticle(buffer.kind),
                                    " must be f32, found ",
                                    dtypeName(buffer.dtype)));

  if (buffer.kind == BufferKind::WorkingCopy)
    MOE_VERIFY_OK(verifyWorkingCopy(program, index));
  else if (buffer.master != 0)
    return bufferError(program, index,
                       absl::StrCat(withArticle(buffer.kind),
                                    " has a master (buffer ", buffer.master,
                                    "), which only a working copy has"));

  if (buffer.kind == BufferKind::Temporary) {
    if (buffer.offset % kArenaAlignment != 0)
      return bufferError(program, index,
                         absl::StrCat("arena offset ", buffer.offset,
                                      " is not ", kArenaAlignment,
                                      "-byte aligned"));
    uint64_t size = buffer.sizeInBytes();
    if (size > program.arenaBytes || buffer.offset > program.arenaBytes - size)
      return bufferError(program, index,
                         absl::StrCat("arena range [", buffer.offset, ", ",
                                      buffer.offset, " + ", size,
                                      ") exceeds the arena of ",
                                      program.arenaBytes, " bytes"));
  }

  // Which initialisations make sense: parameters must be given values,
  // optimizer state starts at zero, inputs and temporaries are written by
  // the runtime and the instructions respectively.
  bool initValid = false;
  switch (buffer.kind) {
  case BufferKind::Parameter:
    initValid = buffer.init != Init::None;
    break;
  case BufferKind::OptimizerState:
    initValid = buffer.init == Init::None || buffer.init == Init::Zeros;
    break;
  case BufferKind::Input:
  case BufferKind::Temporary:
  // A working copy is derived from its master, never initialised.
  case BufferKind::WorkingCopy:
    initValid = buffer.init == Init::None;
    break;
  }
  if (!initValid) {
    static constexpr const char *kInitNames[] = {"none", "zeros", "ones",
                                                 "normal"};
    return bufferError(
        program, index,
        absl::StrCat("init '", kInitNames[static_cast<int>(buffer.init)],
                     "' is not valid for ", withArticle(buffer.kind)));
  }
  // moe.transformer and moe.param bound init_std the same way: a standard
  // deviation above 1 is no initialisation a transformer trains from (the
  // first losses overflow), so it is a damaged or mistyped value.
  if (buffer.init == Init::Normal &&
      !(std::isfinite(buffer.initStd) && buffer.initStd > 0 &&
        buffer.initStd <= kMaxInitStd))
    return bufferError(
        program, index,
        absl::StrCat("normal init needs 0 < init_std <= ", kMaxInitStd,
                     ", found ", buffer.initStd));
  if (buffer.init != Init::Normal && buffer.initStd != 0)
    return bufferError(program, index,
                       absl::StrCat("init_std ", buffer.initStd,
                                    " is given, but only a normal init has "
                                    "one"));
  return absl::OkStatus();
}

/// Parameter and optimizer-state names are the keys of saved weights and
/// checkpoints, and HF loads them as module paths: dot-separated segments
/// of letters, digits and underscores, one of which may be the stacked
/// experts' "{e}".
absl::Status verifyTensorName(const Program &program, uint32_t index) {
  absl::string_view name = program.buffers[index].name;
  constexpr size_t kMaxNameLength = 1024;
  if (name.size() > kMaxNameLength)
    return bufferError(program, index,
                       absl::StrCat("the name is ", name.size(),
                                    " characters long, more than the ",
                                    kMaxNameLength, " allowed"));
  auto invalid = [&](absl::string_view why) {
    return bufferError(program, index,
                       absl::StrCat("the name is not a tensor name (", why,
                                    "): expected dot-separated segments of "
                                    "letters, digits and '_', such as "
                                    "model.layers.0.mlp.up_proj.weight"));
  };
  for (absl::string_view segment : absl::StrSplit(name, '.')) {
    if (segment.empty())
      return invalid("an empty segment");
    if (segment == "{e}")
      continue;
    for (char c : segment)
      if (!absl::ascii_isalnum(c) && c != '_')
        return invalid(absl::StrCat("character '", absl::CHexEscape({&c, 1}),
                                    "' in segment '",
                                    absl::CHexEscape(segment), "'"));
  }
  return absl::OkStatus();
}

/// A parameter or optimizer state named with "{e}" is a stack of experts
/// along dimension 0, saved as one tensor per expert with "{e}" replaced by
/// its index (lib/Runtime/Train/Weights.cpp). That needs exactly one "{e}",
/// a dimension 0 to split, and per-expert names no other buffer has.
absl::Status verifyStackedName(const Program &program, uint32_t index) {
  const Buffer &buffer = program.buffers[index];
  absl::string_view name = buffer.name;
  size_t first = name.find(kExpertPlaceholder);
  if (first == absl::string_view::npos)
    return absl::OkStatus();
  if (name.find(kExpertPlaceholder, first + 1) != absl::string_view::npos)
    return bufferError(program, index,
                       "a stacked-expert name must hold \"{e}\" only once");
  if (buffer.shape.size() < 2 || buffer.shape[0] == 0)
    return bufferError(
        program, index,
        absl::StrCat("a stacked-expert buffer needs rank >= 2 and experts "
                     "along a non-empty dimension 0, found shape ",
                     formatShape(buffer.shape)));
  for (uint32_t other = 0; other < program.buffers.size(); ++other) {
    const Buffer &named = program.buffers[other];
    if (named.kind == BufferKind::Temporary)
      continue;
    int64_t expert = expertIndexOf(named.name, buffer.name);
    if (expert >= 0 && expert < buffer.shape[0])
      return bufferError(program, index,
                         absl::StrCat("the name of expert ", expert, " ('",
                                      named.name,
                                      "') is already used by buffer ", other));
  }
  return absl::OkStatus();
}

/// Names of persistent and input buffers are how checkpoints and the
/// runtime find them, so they must exist and be unique among themselves.
absl::Status verifyBufferNames(const Program &program) {
  std::unordered_map<std::string, uint32_t> seen;
  for (uint32_t index = 0; index < program.buffers.size(); ++index) {
    const Buffer &buffer = program.buffers[index];
    if (buffer.kind == BufferKind::Temporary)
      continue;
    if (buffer.name.empty())
      return bufferError(
          program, index,
          absl::StrCat(withArticle(buffer.kind), " needs a name"));
    auto [it, inserted] = seen.emplace(buffer.name, index);
    if (!inserted)
      return bufferError(
          program, index,
          absl::StrCat("name is already used by buffer ", it->second));
  }
  for (uint32_t index = 0; index < program.buffers.size(); ++index) {
    BufferKind kind = program.buffers[index].kind;
    if (kind == BufferKind::Parameter || kind == BufferKind::OptimizerState) {
      MOE_VERIFY_OK(verifyTensorName(program, index));
      MOE_VERIFY_OK(verifyStackedName(program, index));
    }
  }
  return absl::OkStatus();
}

/// The step's inputs and reported outputs named by the Program table.
absl::Status verifyProgramFields(const Program &program) {
  const ModelInfo &model = program.model;
  if (model.batch <= 0 || model.seq <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("model info: batch (", model.batch, ") and seq (",
                     model.seq, ") must be positive"));

  struct Field {
    const char *name;
    uint32_t index;
    BufferKind kind;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const Field fields[] = {
      {"tokens",
       program.tokens,
       BufferKind::Input,
       DType::I32,
       {model.batch, model.seq}},
      {"targets",
       program.targets,
       BufferKind::Input,
       DType::I32,
       {model.batch, model.seq}},
      {"step", program.step, BufferKind::Input, DType::I32, {}},
      // Outputs are produced by instructions, so they live in the arena.
      {"loss", program.loss, BufferKind::Temporary, DType::F32, {}},
      {"grad_norm", program.gradNorm, BufferKind::Temporary, DType::F32, {}},
      {"lr", program.lr, BufferKind::Temporary, DType::F32, {}},
  };
  for (const Field &field : fields) {
    if (field.index >= program.buffers.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "program field '", field.name, "': buffer index ", field.index,
          " is out of range (", program.buffers.size(), " buffers)"));
    const Buffer &buffer = program.buffers[field.index];
    if (buffer.kind != field.kind || buffer.dtype != field.dtype ||
        buffer.shape != field.shape)
      return absl::InvalidArgumentError(absl::StrCat(
          "program field '", field.name, "' (",
          describeBuffer(program, field.index), "): expected ",
          kindName(field.kind), " ", dtypeName(field.dtype), " ",
          formatShape(field.shape), ", found ", kindName(buffer.kind), " ",
          dtypeName(buffer.dtype), " ", formatShape(buffer.shape)));
  }
  if (program.tokens == program.targets || program.tokens == program.step ||
      program.targets == program.step)
    return absl::InvalidArgumentError(
        absl::StrCat("program fields 'tokens' (", program.tokens,
                     "), 'targets' (", program.targets, ") and 'step' (",
                     program.step, ") must be distinct buffers"));
  // Document masking's positions (3.7): one more input like the tokens.
  if (program.positions != -1) {
    int64_t p = program.positions;
    if (p < 0 || p >= static_cast<int64_t>(program.buffers.size()))
      return absl::InvalidArgumentError(absl::StrCat(
          "program field 'positions': buffer index ", p, " is out of range (",
          program.buffers.size(), " buffers)"));
    const Buffer &buffer = program.buffers[p];
    std::vector<int64_t> shape = {model.batch, model.seq};
    if (buffer.kind != BufferKind::Input || buffer.dtype != DType::I32 ||
        buffer.shape != shape)
      return absl::InvalidArgumentError(absl::StrCat(
          "program field 'positions' (", describeBuffer(program, p),
          "): expected ", kindName(BufferKind::Input), " i32 ",
          formatShape(shape), ", found ", kindName(buffer.kind), " ",
          dtypeName(buffer.dtype), " ", formatShape(buffer.shape)));
    if (p == program.tokens || p == program.targets || p == program.step)
      return absl::InvalidArgumentError(absl::StrCat(
          "program field 'positions' (", p,
          ") must be a buffer of its own, not the tokens, targets or step"));
  }

  // The runtime fills exactly these inputs each step; any other input
  // buffer would be read without ever being written.
  for (uint32_t index = 0; index < program.buffers.size(); ++index) {
    if (program.buffers[index].kind == BufferKind::Input &&
        index != program.tokens && index != program.targets &&
        index != program.step && index != program.positions)
      return bufferError(program, index,
                         "an input that is not the program's tokens, "
                         "targets, positions or step is never fed by the "
                         "runtime");
  }
  return absl::OkStatus();
}

} // namespace

absl::Status verifyProgram(const Program &program) {
  if (program.buffers.size() > std::numeric_limits<uint32_t>::max())
    return absl::InvalidArgumentError(
        absl::StrCat("too many buffers (", program.buffers.size(), ")"));
  for (uint32_t index = 0; index < program.buffers.size(); ++index)
    MOE_VERIFY_OK(verifyBuffer(program, index));
  MOE_VERIFY_OK(verifyMesh(program));
  MOE_VERIFY_OK(verifyBufferNames(program));
  MOE_VERIFY_OK(verifyProgramFields(program));
  for (size_t index = 0; index < program.instructions.size(); ++index)
    MOE_VERIFY_OK(verifyInstruction(program, index));
  // The arena check of the dataflow reads the pipeline's stage tags.
  MOE_VERIFY_OK(verifyPipeline(program));
  return verifyDataflow(program);
}

} // namespace moe::rt
