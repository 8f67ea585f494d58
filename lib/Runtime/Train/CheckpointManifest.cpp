//===- CheckpointManifest.cpp - write, verify and read manifest.json ------===//
//
// The reader trusts nothing in the file: a manifest is small and edited by
// hand more easily than a shard, and a wrong step, mesh or shape would
// resume on the wrong state without a word. Every field is read with its
// type checked, unknown fields are refused, and each refusal names the
// field with the value found and the value expected.
//
//===----------------------------------------------------------------------===//
#include "CheckpointManifest.h"

#include "moe/Runtime/Comm/Mesh.h"
#include "moe/Runtime/IO/Checksum.h"
#include "moe/Runtime/IO/File.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

namespace moe::rt::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char *kFormat = "moe-checkpoint";
constexpr int64_t kVersion = 2;
constexpr const char *kChecksumField = "manifest_checksum";

/// The checksum of a manifest without its manifest_checksum field.
std::string checksumOf(const Json &unsealed) {
  return io::formatChecksum(io::contentChecksum(
      unsealed.dump(-1, ' ', false, Json::error_handler_t::replace)));
}

std::string formatShape(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string formatSplit(const std::vector<AxisList> &split) {
  std::vector<std::string> dims;
  for (const AxisList &axes : split)
    dims.push_back(absl::StrCat("[", absl::StrJoin(axes, ", "), "]"));
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

/// Reads typed fields of the manifest; every error names the checkpoint
/// and the field ("buffers[3].shape").
class FieldReader {
public:
  explicit FieldReader(const std::string &directory) : directory_(directory) {}

  absl::Status fail(const std::string &what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", directory_, ": ", what));
  }
  absl::Status failField(const std::string &field,
                         const std::string &what) const {
    return fail(absl::StrCat("manifest field '", field, "' ", what));
  }

  /// `object` (field `where`, "" for the manifest) is an object holding
  /// exactly the fields `known`.
  absl::Status expectFields(const Json &object, const std::string &where,
                            const std::vector<std::string> &known) const {
    if (!object.is_object())
      return where.empty() ? fail("manifest.json is not a json object")
                           : failField(where, "is not a json object");
    for (const std::string &key : known)
      if (!object.contains(key))
        return where.empty()
                   ? fail(absl::StrCat("manifest.json has no field '", key,
                                       "'"))
                   : failField(where, absl::StrCat("has no field '", key, "'"));
    for (const auto &item : object.items())
      if (std::find(known.begin(), known.end(), item.key()) == known.end())
        return fail(absl::StrCat(
            "manifest.json has an unknown field '", join(where, item.key()),
            "' (known: ", absl::StrJoin(known, ", "), ")"));
    return absl::OkStatus();
  }

  static std::string join(const std::string &where, const std::string &key) {
    return where.empty() ? key : absl::StrCat(where, ".", key);
  }
  static std::string at(const std::string &where, size_t index) {
    return absl::StrCat(where, "[", index, "]");
  }

  absl::Status readInt(const Json &value, const std::string &field,
                       int64_t &out) const {
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() &&
         value.get<uint64_t>() >
             static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
      return failField(field, absl::StrCat("is ", value.dump(),
                                           ", expected an integer"));
    out = value.get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status readCount(const Json &value, const std::string &field,
                         int64_t &out) const {
    if (absl::Status status = readInt(value, field, out); !status.ok())
      return status;
    if (out < 0)
      return failField(field,
                       absl::StrCat("is ", out, ", expected at least 0"));
    return absl::OkStatus();
  }
  absl::Status readUnsigned(const Json &value, const std::string &field,
                            uint64_t &out) const {
    if (!value.is_number_unsigned())
      return failField(field, absl::StrCat("is ", value.dump(),
                                           ", expected an unsigned integer"));
    out = value.get<uint64_t>();
    return absl::OkStatus();
  }
  absl::Status readString(const Json &value, const std::string &field,
                          std::string &out) const {
    if (!value.is_string())
      return failField(field,
                       absl::StrCat("is ", value.dump(), ", expected a string"));
    out = value.get<std::string>();
    return absl::OkStatus();
  }
  absl::Status readCounts(const Json &value, const std::string &field,
                          std::vector<int64_t> &out) const {
    if (!value.is_array())
      return failField(field, absl::StrCat("is ", value.dump(),
                                           ", expected an array of integers"));
    out.assign(value.size(), 0);
    for (size_t i = 0; i < value.size(); ++i)
      if (absl::Status status = readCount(value[i], at(field, i), out[i]);
          !status.ok())
        return status;
    return absl::OkStatus();
  }
  absl::Status readStrings(const Json &value, const std::string &field,
                           AxisList &out) const {
    if (!value.is_array())
      return failField(field, absl::StrCat("is ", value.dump(),
                                           ", expected an array of strings"));
    out.assign(value.size(), "");
    for (size_t i = 0; i < value.size(); ++i)
      if (absl::Status status = readString(value[i], at(field, i), out[i]);
          !status.ok())
        return status;
    return absl::OkStatus();
  }
  absl::Status readArray(const Json &value, const std::string &field) const {
    if (!value.is_array())
      return failField(field,
                       absl::StrCat("is ", value.dump(), ", expected an array"));
    return absl::OkStatus();
  }

private:
  std::string directory_;
};

/// The text of manifest.json without blocking on a FIFO, parsed.
absl::StatusOr<Json> parseManifestFile(const FieldReader &reader,
                                       const std::string &path) {
  absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path, "manifest");
  if (!file.ok()) {
    if (file.status().code() == absl::StatusCode::kNotFound)
      return reader.fail("no manifest.json (an incomplete checkpoint?)");
    return reader.fail(std::string(file.status().message()));
  }
  Json manifest = Json::parse(file->data(), file->data() + file->size(),
                              nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded())
    return reader.fail("manifest.json is not valid json");
  if (!manifest.is_object())
    return reader.fail("manifest.json is not a json object");
  return manifest;
}

/// The format and version, then the checksum: before any other field is
/// read, so an edited manifest is refused as such.
absl::Status verifySeal(const FieldReader &reader, Json &manifest) {
  if (manifest.value("format", Json()) != kFormat)
    return reader.fail(absl::StrCat(
        "manifest.json is not a moe checkpoint manifest (format ",
        manifest.value("format", Json()).dump(), ", expected \"", kFormat,
        "\")"));
  if (manifest.value("version", Json()) != kVersion)
    return reader.fail(absl::StrCat(
        "manifest field 'version' is ", manifest.value("version", Json()).dump(),
        ", this moe-run reads version ", kVersion,
        " (version 1 manifests have no checksum)"));
  auto sealed = manifest.find(kChecksumField);
  if (sealed == manifest.end())
    return reader.fail(
        absl::StrCat("manifest.json has no field '", kChecksumField, "'"));
  std::string recorded;
  if (absl::Status status = reader.readString(*sealed, kChecksumField, recorded);
      !status.ok())
    return status;
  manifest.erase(sealed);
  std::string actual = checksumOf(manifest);
  if (recorded != actual)
    return reader.fail(absl::StrCat(
        "manifest.json does not match its ", kChecksumField,
        " (edited or damaged): the field says ", recorded,
        ", the content hashes to ", actual));
  return absl::OkStatus();
}

absl::Status readMesh(const FieldReader &reader, const Json &mesh,
                      CheckpointManifest &out) {
  if (absl::Status s = reader.expectFields(mesh, "mesh", {"axes", "shape"});
      !s.ok())
    return s;
  if (absl::Status s = reader.readStrings(mesh["axes"], "mesh.axes",
                                          out.meshAxes);
      !s.ok())
    return s;
  // Sizes are read as integers so that validate() names a bad one.
  if (absl::Status s = reader.readArray(mesh["shape"], "mesh.shape"); !s.ok())
    return s;
  out.meshShape.assign(mesh["shape"].size(), 0);
  for (size_t i = 0; i < out.meshShape.size(); ++i)
    if (absl::Status s = reader.readInt(mesh["shape"][i],
                                        FieldReader::at("mesh.shape", i),
                                        out.meshShape[i]);
        !s.ok())
      return s;
  comm::Mesh saved{out.meshAxes, out.meshShape};
  if (absl::Status s = saved.validate(); !s.ok())
    return reader.failField("mesh", absl::StrCat("is not a valid mesh: ",
                                                 s.message()));
  return absl::OkStatus();
}

/// One entry of "buffers", with its split checked against the mesh and its
/// global_shape against shape and split.
absl::Status readBuffer(const FieldReader &reader, const Json &entry,
                        const std::string &field,
                        const CheckpointManifest &manifest,
                        ManifestBuffer &out) {
  if (absl::Status s = reader.expectFields(
          entry, field, {"global_shape", "name", "shape", "split"});
      !s.ok())
    return s;
  if (absl::Status s = reader.readString(entry["name"],
                                         FieldReader::join(field, "name"),
                                         out.name);
      !s.ok())
    return s;
  std::string where = absl::StrCat(field, " ('", out.name, "')");
  if (absl::Status s = reader.readCounts(entry["global_shape"],
                                         FieldReader::join(field,
                                                           "global_shape"),
                                         out.globalShape);
      !s.ok())
    return s;
  if (absl::Status s = reader.readCounts(
          entry["shape"], FieldReader::join(field, "shape"), out.shape);
      !s.ok())
    return s;
  const Json &split = entry["split"];
  std::string splitField = FieldReader::join(field, "split");
  if (absl::Status s = reader.readArray(split, splitField); !s.ok())
    return s;
  out.split.assign(split.size(), {});
  for (size_t d = 0; d < split.size(); ++d)
    if (absl::Status s = reader.readStrings(
            split[d], FieldReader::at(splitField, d), out.split[d]);
        !s.ok())
      return s;

  // The split names axes of the saving mesh, each once, one entry per
  // dimension (or none: not split).
  comm::Mesh mesh{manifest.meshAxes, manifest.meshShape};
  if (!out.split.empty() && out.split.size() != out.shape.size())
    return reader.fail(absl::StrCat(
        "manifest field '", splitField, "' of ", where, " is ",
        formatSplit(out.split), ": ", out.split.size(),
        " entries for shape ", formatShape(out.shape),
        ", expected one per dimension"));
  std::set<std::string> used;
  std::vector<int64_t> global = out.shape;
  for (size_t d = 0; d < out.split.size(); ++d)
    for (const std::string &axis : out.split[d]) {
      absl::StatusOr<int> index = mesh.axisIndex(axis);
      if (!index.ok())
        return reader.fail(absl::StrCat(
            "manifest field '", splitField, "' of ", where, " names axis '",
            axis, "', which is not an axis of the saving mesh ",
            mesh.toString()));
      if (!used.insert(axis).second)
        return reader.fail(absl::StrCat("manifest field '", splitField,
                                        "' of ", where, " uses axis '", axis,
                                        "' twice"));
      if (__builtin_mul_overflow(global[d], manifest.meshShape[*index],
                                 &global[d]))
        return reader.fail(absl::StrCat("manifest field '", splitField,
                                        "' of ", where,
                                        " makes a dimension overflow int64"));
    }
  int64_t elements = 1;
  for (int64_t dim : global)
    if (__builtin_mul_overflow(elements, dim, &elements))
      return reader.fail(absl::StrCat("manifest field '",
                                      FieldReader::join(field, "shape"),
                                      "' of ", where,
                                      " has more elements than int64 counts"));
  if (global != out.globalShape)
    return reader.fail(absl::StrCat(
        "manifest field '", FieldReader::join(field, "global_shape"), "' of ",
        where, " is ", formatShape(out.globalShape), ", but shape ",
        formatShape(out.shape), " split ", formatSplit(out.split),
        " on the saving mesh ", mesh.toString(), " is ", formatShape(global)));
  return absl::OkStatus();
}

/// One entry of "shards": rank `rank` of the saving mesh, under its name.
absl::Status readShard(const FieldReader &reader, const Json &entry,
                       const std::string &field, int64_t rank,
                       ManifestShard &out) {
  if (absl::Status s = reader.expectFields(entry, field,
                                           {"bytes", "checksum", "file", "rank"});
      !s.ok())
    return s;
  if (absl::Status s = reader.readInt(entry["rank"],
                                      FieldReader::join(field, "rank"),
                                      out.rank);
      !s.ok())
    return s;
  if (absl::Status s = reader.readString(entry["file"],
                                         FieldReader::join(field, "file"),
                                         out.file);
      !s.ok())
    return s;
  if (absl::Status s = reader.readUnsigned(entry["bytes"],
                                           FieldReader::join(field, "bytes"),
                                           out.bytes);
      !s.ok())
    return s;
  if (absl::Status s = reader.readString(entry["checksum"],
                                         FieldReader::join(field, "checksum"),
                                         out.checksum);
      !s.ok())
    return s;
  if (out.rank != rank)
    return reader.failField(FieldReader::join(field, "rank"),
                            absl::StrCat("is ", out.rank, ", expected ", rank,
                                         " (the shards are ranks 0..n-1 of "
                                         "the saving mesh, in order)"));
  if (out.file != shardFileName(rank))
    return reader.failField(FieldReader::join(field, "file"),
                            absl::StrCat("is '", out.file, "', expected '",
                                         shardFileName(rank), "' (rank ",
                                         rank, "'s shard)"));
  return absl::OkStatus();
}

} // namespace

std::string checkpointDirectoryName(int64_t steps) {
  return absl::StrFormat("step-%08d", steps);
}

std::string shardFileName(int64_t rank) {
  return absl::StrFormat("rank-%05d.safetensors", rank);
}

std::string encodeManifest(const CheckpointManifest &manifest) {
  Json buffers = Json::array();
  for (const ManifestBuffer &buffer : manifest.buffers)
    buffers.push_back({{"name", buffer.name},
                       {"global_shape", buffer.globalShape},
                       {"shape", buffer.shape},
                       {"split", buffer.split}});
  Json shards = Json::array();
  for (const ManifestShard &shard : manifest.shards)
    shards.push_back({{"rank", shard.rank},
                      {"file", shard.file},
                      {"bytes", shard.bytes},
                      {"checksum", shard.checksum}});
  Json json = {{"format", kFormat},
               {"version", kVersion},
               {"model", manifest.model},
               {"step", manifest.step},
               {"data_seed", manifest.dataSeed},
               {"mesh",
                {{"axes", manifest.meshAxes}, {"shape", manifest.meshShape}}},
               {"buffers", buffers},
               {"shards", shards}};
  json[kChecksumField] = checksumOf(json);
  return json.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

absl::StatusOr<CheckpointManifest>
readManifest(const std::string &directory) {
  FieldReader reader(directory);
  absl::StatusOr<Json> parsed =
      parseManifestFile(reader, (fs::path(directory) / "manifest.json").string());
  if (!parsed.ok())
    return parsed.status();
  Json &json = *parsed;
  if (absl::Status s = verifySeal(reader, json); !s.ok())
    return s;
  if (absl::Status s = reader.expectFields(
          json, "",
          {"buffers", "data_seed", "format", "mesh", "model", "shards", "step",
           "version"});
      !s.ok())
    return s;

  CheckpointManifest manifest;
  if (absl::Status s = reader.readString(json["model"], "model", manifest.model);
      !s.ok())
    return s;
  if (absl::Status s = reader.readCount(json["step"], "step", manifest.step);
      !s.ok())
    return s;
  if (absl::Status s =
          reader.readUnsigned(json["data_seed"], "data_seed", manifest.dataSeed);
      !s.ok())
    return s;
  // The directory is named after the step it holds; findCheckpoint picks
  // the newest by that name. A symbolic link ("latest") is followed.
  std::error_code error;
  fs::path resolved = fs::weakly_canonical(directory, error);
  if (error)
    resolved = fs::path(directory).lexically_normal();
  if (!resolved.has_filename())
    resolved = resolved.parent_path();
  std::string name = resolved.filename().string();
  if (name != checkpointDirectoryName(manifest.step))
    return reader.failField(
        "step", absl::StrCat("is ", manifest.step, " but the directory is '",
                             name, "' (expected '",
                             checkpointDirectoryName(manifest.step), "')"));
  if (absl::Status s = readMesh(reader, json["mesh"], manifest); !s.ok())
    return s;

  const Json &buffers = json["buffers"];
  if (absl::Status s = reader.readArray(buffers, "buffers"); !s.ok())
    return s;
  std::map<std::string, size_t> seen;
  manifest.buffers.resize(buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b) {
    std::string field = FieldReader::at("buffers", b);
    if (absl::Status s =
            readBuffer(reader, buffers[b], field, manifest, manifest.buffers[b]);
        !s.ok())
      return s;
    auto [previous, inserted] = seen.emplace(manifest.buffers[b].name, b);
    if (!inserted)
      return reader.failField(
          FieldReader::join(field, "name"),
          absl::StrCat("is '", manifest.buffers[b].name, "', the name of ",
                       FieldReader::at("buffers", previous->second), " too"));
  }

  const Json &shards = json["shards"];
  if (absl::Status s = reader.readArray(shards, "shards"); !s.ok())
    return s;
  int64_t ranks = comm::Mesh{manifest.meshAxes, manifest.meshShape}.size();
  if (static_cast<int64_t>(shards.size()) != ranks)
    return reader.failField(
        "shards", absl::StrCat("lists ", shards.size(), " shards, the saving mesh ",
                               comm::Mesh{manifest.meshAxes, manifest.meshShape}
                                   .toString(),
                               " has ", ranks, " ranks"));
  manifest.shards.resize(shards.size());
  for (size_t r = 0; r < shards.size(); ++r)
    if (absl::Status s = readShard(reader, shards[r], FieldReader::at("shards", r),
                                   static_cast<int64_t>(r), manifest.shards[r]);
        !s.ok())
      return s;
  return manifest;
}

Program savedLayout(const CheckpointManifest &manifest) {
  Program saved;
  saved.meshAxes = manifest.meshAxes;
  saved.meshShape = manifest.meshShape;
  for (const ManifestBuffer &entry : manifest.buffers) {
    Buffer buffer;
    buffer.name = entry.name;
    buffer.kind = BufferKind::Parameter;
    buffer.shape = entry.shape;
    buffer.split = entry.split;
    saved.buffers.push_back(std::move(buffer));
  }
  return saved;
}

} // namespace moe::rt::train
