//===- SamePath.cpp - refusing an output that is an input -----------------===//
//
// Identity is the (device, inode) pair stat() gives, which sees through
// symlinks, `..`, bind mounts and hard links alike. A path that does not
// exist yet is placed by its existing ancestors: the nearest one is
// resolved (std::filesystem::weakly_canonical), and each directory above it
// is compared by identity.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/IO/SamePath.h"

#include "absl/strings/str_cat.h"

#include <filesystem>
#include <optional>
#include <sys/stat.h>

namespace moe::rt::io {

namespace {

namespace fs = std::filesystem;

struct Identity {
  dev_t device;
  ino_t inode;
  bool directory;
};

std::optional<Identity> identityOf(const std::string &path) {
  struct stat info;
  if (path.empty() || ::stat(path.c_str(), &info) != 0)
    return std::nullopt;
  return Identity{info.st_dev, info.st_ino, S_ISDIR(info.st_mode)};
}

bool operator==(const Identity &a, const Identity &b) {
  return a.device == b.device && a.inode == b.inode;
}

/// `path` made absolute, with the symlinks of its existing part resolved
/// where that succeeds (a symlink loop leaves it as written).
fs::path resolved(const std::string &path) {
  std::error_code error;
  fs::path absolute = fs::absolute(path, error);
  if (error)
    return fs::path(path);
  fs::path canonical = fs::weakly_canonical(absolute, error);
  return error ? absolute.lexically_normal() : canonical;
}

std::string quoted(const FlagPath &named) {
  return absl::StrCat(named.flag, " '", named.path, "'");
}

} // namespace

bool isSameFile(const std::string &a, const std::string &b) {
  std::optional<Identity> first = identityOf(a), second = identityOf(b);
  return first && second && *first == *second;
}

bool isInsideDirectory(const std::string &path, const std::string &dir) {
  std::optional<Identity> target = identityOf(dir);
  if (!target || !target->directory || path.empty())
    return false;
  fs::path at = resolved(path);
  while (true) {
    if (std::optional<Identity> here = identityOf(at.string());
        here && *here == *target)
      return true;
    fs::path parent = at.parent_path();
    if (parent.empty() || parent == at)
      return false;
    at = std::move(parent);
  }
}

absl::Status checkOutputsAreNotInputs(absl::Span<const FlagPath> inputs,
                                      absl::Span<const OutputPath> outputs) {
  for (const OutputPath &output : outputs) {
    const FlagPath &out = output.named;
    if (out.path.empty())
      continue;
    for (const FlagPath &in : inputs) {
      if (in.path.empty())
        continue;
      if (isSameFile(out.path, in.path))
        return absl::InvalidArgumentError(
            absl::StrCat(quoted(out), " is ", quoted(in),
                         ": an output must not overwrite an input"));
      if (isInsideDirectory(out.path, in.path))
        return absl::InvalidArgumentError(absl::StrCat(
            quoted(out), " lies inside ", quoted(in),
            ", a directory this command reads: an output must not overwrite "
            "an input"));
      if (output.directory && isInsideDirectory(in.path, out.path))
        return absl::InvalidArgumentError(absl::StrCat(
            quoted(out), " holds ", quoted(in),
            ": an output directory must not hold an input"));
    }
  }
  return absl::OkStatus();
}

} // namespace moe::rt::io
