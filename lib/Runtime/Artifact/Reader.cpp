//===- Reader.cpp - load a .moebin artifact into a moe::rt::Program -------===//
//
// The layers of trust, in order: the file can be read and is not empty; it is
// large enough to hold a FlatBuffers header and carries the "MOEB"
// identifier; it ends in the checksum trailer (Seal.h) and every byte before
// the trailer matches its checksum; its version is one this runtime
// understands; the FlatBuffers verifier accepts every offset in it. Only
// then is it decoded into the runtime's own Program and handed to
// verifyProgram for the semantic checks.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Artifact/OpTableCheck.h"
#include "moe/Runtime/Capabilities.h"
#include "moe/Runtime/Artifact/Program_generated.h"
#include "moe/Runtime/Artifact/Seal.h"
#include "moe/Runtime/IO/File.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace moe::rt {
namespace {

namespace fb = moe::artifact;

/// The root offset plus the file identifier: anything shorter cannot even be
/// asked whether it is a moe artifact.
constexpr size_t kMinArtifactSize =
    sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength;

// The runtime's enums mirror the schema's value for value, so decoding is a
// cast; a schema change that breaks this must fail to compile.
static_assert(static_cast<int>(fb::Opcode::MAX) + 1 == kNumOpcodes);
static_assert(static_cast<int>(fb::BufferKind::MAX) ==
              static_cast<int>(BufferKind::WorkingCopy));
static_assert(static_cast<int>(fb::DType::MAX) + 1 == kNumDTypes);
static_assert(static_cast<int>(fb::DType::BF16) ==
                  static_cast<int>(DType::BF16) &&
              static_cast<int>(fb::DType::F8E4M3) ==
                  static_cast<int>(DType::F8E4M3) &&
              static_cast<int>(fb::DType::I64) == static_cast<int>(DType::I64));
static_assert(static_cast<int>(fb::Init::MAX) ==
              static_cast<int>(Init::Normal));

/// Every artifact written by a FlatBufferBuilder is a multiple of this.
constexpr size_t kArtifactSizeAlignment = 8;

// Vectors are copied as raw bytes: the FlatBuffers verifier checks the
// alignment of a vector's length, not of its elements, so in a damaged file
// the int64 elements of a shape may be misaligned and must not be loaded as
// int64 in place. The bytes are the host's layout on little-endian hosts.
static_assert(FLATBUFFERS_LITTLEENDIAN, "artifacts are little-endian");

template <typename T>
std::vector<T> toVector(const flatbuffers::Vector<T> *values) {
  if (!values)
    return {};
  std::vector<T> result(values->size());
  if (!result.empty())
    std::memcpy(result.data(), values->Data(), result.size() * sizeof(T));
  return result;
}

std::string toString(const flatbuffers::String *value) {
  return value ? value->str() : std::string();
}

/// A vector of strings; absent (a 1.0 file) reads as empty.
AxisList
toStrings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>
              *values) {
  AxisList result;
  if (!values)
    return result;
  result.reserve(values->size());
  for (const flatbuffers::String *value : *values)
    result.push_back(toString(value));
  return result;
}

/// A list of Axes tables (a buffer's split, the program's groups).
std::vector<AxisList>
toAxisLists(const flatbuffers::Vector<flatbuffers::Offset<fb::Axes>> *lists) {
  std::vector<AxisList> result;
  if (!lists)
    return result;
  result.reserve(lists->size());
  for (const fb::Axes *axes : *lists)
    result.push_back(toStrings(axes->names()));
  return result;
}

/// The (major, minor) version of a buffer with a valid identifier, or
/// nullopt if even the root table is damaged.
std::optional<std::pair<uint16_t, uint16_t>> readVersion(const uint8_t *data,
                                                         size_t size) {
  flatbuffers::Verifier verifier(data, size);
  if (!verifier.Verify<flatbuffers::uoffset_t>(0))
    return std::nullopt;
  // The generated table type inherits flatbuffers::Table privately; the
  // root is that Table, which exposes the per-field checks.
  const auto *table =
      reinterpret_cast<const flatbuffers::Table *>(fb::GetProgram(data));
  if (!table->VerifyTableStart(verifier) ||
      !table->VerifyField<uint16_t>(verifier, fb::Program::VT_VERSION_MAJOR,
                                    sizeof(uint16_t)) ||
      !table->VerifyField<uint16_t>(verifier, fb::Program::VT_VERSION_MINOR,
                                    sizeof(uint16_t)))
    return std::nullopt;
  return std::make_pair(
      table->GetField<uint16_t>(fb::Program::VT_VERSION_MAJOR, 0),
      table->GetField<uint16_t>(fb::Program::VT_VERSION_MINOR, 0));
}

absl::Status versionError(const std::string &origin, uint16_t major,
                          uint16_t minor) {
  return absl::FailedPreconditionError(absl::StrCat(
      "artifact '", origin, "' has version ", major, ".", minor,
      ", this runtime supports version ", kArtifactVersionMajor, ".",
      kOldestArtifactVersionMinor, " to ",
      kArtifactVersionMajor, ".", kArtifactVersionMinor,
      " (recompile with this moec)"));
}

ModelInfo decodeModel(const fb::ModelInfo &model) {
  ModelInfo info;
  info.name = toString(model.name());
  info.vocab = model.vocab();
  info.hidden = model.hidden();
  info.layers = model.layers();
  info.heads = model.heads();
  info.kvHeads = model.kv_heads();
  info.experts = model.experts();
  info.topK = model.top_k();
  info.ffn = model.ffn();
  info.batch = model.batch();
  info.seq = model.seq();
  info.totalParams = model.total_params();
  info.activeParams = model.active_params();
  info.flopsPerStep = model.flops_per_step();
  info.configJson = toString(model.config_json());
  return info;
}

Buffer decodeBuffer(const fb::Buffer &buffer) {
  Buffer result;
  result.name = toString(buffer.name());
  // Enum values are copied bit for bit; verifyProgram rejects the ones the
  // runtime does not know instead of the cast silently mapping them.
  result.kind = static_cast<BufferKind>(buffer.kind());
  result.dtype = static_cast<DType>(buffer.dtype());
  result.shape = toVector(buffer.shape());
  result.offset = buffer.offset();
  result.init = static_cast<Init>(buffer.init());
  result.initStd = buffer.init_std();
  result.weightDecay = buffer.weight_decay();
  result.split = toAxisLists(buffer.split());
  result.master = buffer.master();
  return result;
}

Instruction decodeInstruction(const fb::Instruction &instruction) {
  Instruction result;
  result.opcode = static_cast<Opcode>(instruction.opcode());
  result.operands = toVector(instruction.operands());
  result.results = toVector(instruction.results());
  result.intAttrs = toVector(instruction.int_attrs());
  result.floatAttrs = toVector(instruction.float_attrs());
  result.location = toString(instruction.location());
  return result;
}

/// Version 1.2's microbatches and stages. Enum values are copied as they
/// are; the verifier rejects the ones the schema does not define.
Pipeline decodePipeline(const fb::Pipeline &table) {
  Pipeline pipeline;
  pipeline.stages = table.stages();
  pipeline.virtualStages = table.virtual_stages();
  pipeline.microbatches = table.microbatches();
  if (table.schedule())
    pipeline.schedule = table.schedule()->str();
  pipeline.instructionStage = toVector(table.instruction_stage());
  if (const auto *phases = table.instruction_phase())
    for (fb::PipelinePhase phase : *phases)
      pipeline.instructionPhase.push_back(static_cast<PipelinePhase>(phase));
  if (const auto *ranks = table.ranks())
    for (const fb::PipelineRank *rank : *ranks) {
      std::vector<PipelineAction> &actions = pipeline.ranks.emplace_back();
      if (!rank->actions())
        continue;
      for (const fb::PipelineAction *action : *rank->actions())
        actions.push_back({static_cast<PipelineAction::Kind>(action->kind()),
                           action->chunk(), action->microbatch()});
    }
  return pipeline;
}

absl::StatusOr<Program> decodeProgram(const fb::Program &root,
                                      const std::string &origin) {
  Program program;
  program.versionMajor = root.version_major();
  program.versionMinor = root.version_minor();
  program.producer = toString(root.producer());
  // Batch and sequence length come from the model; without it the shapes of
  // the step's inputs cannot be checked.
  if (!root.model())
    return absl::InvalidArgumentError(
        absl::StrCat("artifact '", origin, "' has no model info"));
  program.model = decodeModel(*root.model());
  if (const auto *buffers = root.buffers()) {
    program.buffers.reserve(buffers->size());
    for (const fb::Buffer *buffer : *buffers)
      program.buffers.push_back(decodeBuffer(*buffer));
  }
  if (const auto *instructions = root.instructions()) {
    program.instructions.reserve(instructions->size());
    for (const fb::Instruction *instruction : *instructions)
      program.instructions.push_back(decodeInstruction(*instruction));
  }
  program.arenaBytes = root.arena_bytes();
  program.tokens = root.tokens();
  program.targets = root.targets();
  program.positions = root.positions();
  program.step = root.step();
  program.loss = root.loss();
  program.gradNorm = root.grad_norm();
  program.lr = root.lr();
  program.seed = root.seed();
  // Version 1.1; a 1.0 file has none of these and is a single-rank step.
  program.meshAxes = toStrings(root.mesh_axes());
  program.meshShape = toVector(root.mesh_shape());
  program.groups = toAxisLists(root.groups());
  program.batchAxes = toStrings(root.batch_axes());
  if (const fb::Pipeline *pipeline = root.pipeline())
    program.pipeline = decodePipeline(*pipeline);
  // Version 3.0: what the backends' capabilities are checked for.
  if (!root.target())
    return absl::InvalidArgumentError(
        absl::StrCat("artifact '", origin, "' names no target (known targets: ",
                     caps::targetList(), "); recompile it with this moec"));
  program.target = root.target()->str();
  if (!caps::targetCapabilities(program.target))
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact '", origin, "' names an unknown target '", program.target,
        "'; known targets: ", caps::targetList()));
  return program;
}

} // namespace

absl::StatusOr<Program> readArtifact(const std::string &path) {
  // Opened without blocking and refused unless a regular file (a FIFO with
  // no writer would otherwise block here forever).
  absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path, "artifact");
  if (!file.ok())
    return file.status();
  return parseArtifact(file->data(), file->size(), path);
}

absl::StatusOr<Program> parseArtifact(const uint8_t *data, size_t size,
                                      const std::string &origin) {
  if (size == 0)
    return absl::InvalidArgumentError(
        absl::StrCat("artifact '", origin, "' is empty"));
  if (size < kMinArtifactSize)
    return absl::InvalidArgumentError(
        absl::StrCat("artifact '", origin, "' is too small (", size,
                     " bytes) to be a moe artifact"));
  // FlatBuffers offsets are 32-bit; its verifier asserts on larger inputs.
  if (size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact '", origin, "' is too large (", size, " bytes)"));
  if (!fb::ProgramBufferHasIdentifier(data)) {
    std::string found(reinterpret_cast<const char *>(data) +
                          sizeof(flatbuffers::uoffset_t),
                      flatbuffers::kFileIdentifierLength);
    return absl::InvalidArgumentError(
        absl::StrCat("'", origin, "' is not a moe artifact (file identifier '",
                     absl::CHexEscape(found), "', expected '",
                     fb::ProgramIdentifier(), "')"));
  }

  // The checksum covers every byte before the trailer: nothing of a
  // damaged file is used. Without a trailer the file is either one of an
  // older major version (which never had one; say so) or cut short.
  std::optional<uint64_t> stored = artifact::storedChecksum(data, size);
  if (!stored) {
    if (std::optional<std::pair<uint16_t, uint16_t>> version =
            readVersion(data, size);
        version && version->first != kArtifactVersionMajor)
      return versionError(origin, version->first, version->second);
    return absl::DataLossError(absl::StrCat(
        "corrupt artifact '", origin,
        "': it does not end in the checksum trailer (truncated or damaged "
        "file)"));
  }
  size -= artifact::kSealSize;
  if (uint64_t computed = io::contentChecksum({data, size}); computed != *stored)
    return absl::DataLossError(absl::StrCat(
        "corrupt artifact '", origin,
        "': its content does not match its checksum (stored ",
        io::formatChecksum(*stored), ", computed ",
        io::formatChecksum(computed), "; the file is damaged)"));

  // FlatBufferBuilder::Finish pads a buffer to its largest scalar alignment,
  // which is 8 for every artifact (shapes are int64 vectors). Checking it
  // catches a file cut inside its trailing padding, which the FlatBuffers
  // verifier cannot see because no object lies there.
  if (size % kArtifactSizeAlignment != 0)
    return absl::DataLossError(
        absl::StrCat("corrupt artifact '", origin, "': its size (", size,
                     " bytes) is not a multiple of ", kArtifactSizeAlignment,
                     " (truncated or damaged file)"));

  // The file's int64/uint64 fields are read in place, so they must be
  // naturally aligned in memory, not only relative to the buffer start that
  // the verifier checks. Copy a misaligned input rather than rely on the
  // platform tolerating unaligned loads.
  std::vector<uint64_t> aligned;
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned.resize((size + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    std::memcpy(aligned.data(), data, size);
    data = reinterpret_cast<const uint8_t *>(aligned.data());
  }

  // The version is checked before the full verification so that a file of
  // another major version, whose layout may differ, is reported as such and
  // not as corrupt. Only the root table and its two version fields are
  // verified for this; they sit in the same slots in every version.
  if (std::optional<std::pair<uint16_t, uint16_t>> version =
          readVersion(data, size)) {
    auto [major, minor] = *version;
    if (major != kArtifactVersionMajor || minor > kArtifactVersionMinor ||
        minor < kOldestArtifactVersionMinor)
      return versionError(origin, major, minor);
  }

  // More tables than the default 1M cap: a large model has many buffers and
  // instructions, and the verifier's cost is bounded by the size anyway.
  flatbuffers::Verifier verifier(data, size, /*max_depth=*/64,
                                 /*max_tables=*/1u << 26);
  if (!fb::VerifyProgramBuffer(verifier))
    return absl::DataLossError(absl::StrCat(
        "corrupt artifact '", origin,
        "': the FlatBuffers verifier rejected it (truncated or damaged file)"));

  // The full verification covers what readVersion checks, so reaching here
  // means the version was read and accepted above.
  const fb::Program *root = fb::GetProgram(data);
  if (absl::Status status = artifact::checkOpcodeEntries(*root, origin);
      !status.ok())
    return status;
  absl::StatusOr<Program> program = decodeProgram(*root, origin);
  if (!program.ok())
    return program.status();
  if (absl::Status status = verifyProgram(*program); !status.ok())
    return absl::Status(status.code(), absl::StrCat("artifact '", origin,
                                                    "': ", status.message()));
  return std::move(*program);
}

} // namespace moe::rt
