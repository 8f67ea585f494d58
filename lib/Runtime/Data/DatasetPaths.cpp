//===- DatasetPaths.cpp - find the files of a Megatron dataset ------------===//
#include "moe/Runtime/Data/TokenDataset.h"

namespace moe::rt::data {

namespace {

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string stem(const std::string &path) {
  return path.substr(0, path.size() - 4);
}

} // namespace

MegatronPaths megatronPathsFor(const std::string &path) {
  std::string prefix = path;
  if (endsWith(path, ".bin") || endsWith(path, ".idx"))
    prefix = stem(path);
  return {prefix + ".bin", prefix + ".idx"};
}

std::optional<MegatronPaths> detectMegatron(const std::string &path) {
  if (io::isRegularFile(path + ".idx"))
    return MegatronPaths{path + ".bin", path + ".idx"};
  if (endsWith(path, ".bin") && io::isRegularFile(stem(path) + ".idx"))
    return MegatronPaths{path, stem(path) + ".idx"};
  if (endsWith(path, ".idx"))
    return MegatronPaths{stem(path) + ".bin", path};
  return std::nullopt;
}

} // namespace moe::rt::data
