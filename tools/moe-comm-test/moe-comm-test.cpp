//===- moe-comm-test.cpp - every collective on every group of a mesh ------===//
//
//   mpirun -np 4 moe-comm-test --mesh dp=2,tp=2
//
// Creates the group of every subset of the mesh's axes (and, for two or more
// axes, the same subset listed in reverse order, which numbers the group
// differently), runs every collective of the communication layer on it and
// checks the results bitwise against values computed locally. Rank 0 prints
// one line per check and "comm-test: N passed, M failed".
//
// Exit codes: 0 all checks passed, 1 a check failed or a communication
// error (message on stderr, prefixed with the rank), 2 bad usage.
//
//===----------------------------------------------------------------------===//
#include "Faults.h"
#include "GroupChecks.h"
#include "Report.h"

#include "moe/Runtime/Comm/Communicator.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

using namespace moe;
using namespace moe::rt::comm;

static const char *kUsage = R"(usage: moe-comm-test [options]

Runs every collective of the runtime's communication layer on every group of
a device mesh and checks the results. Start it with mpirun -np <mesh size>.

  --mesh SPEC        axes and sizes, row-major, e.g. dp=2,tp=2
                     (default: one axis "world" of the job's size)
  --count N          elements of the large transfers (default 4099)
  --fault NAME       inject a failure instead: skip-collective, short-recv
                     or long-recv (see tools/moe-comm-test/Faults.h)
  --fault-rank R     the misbehaving rank (default: the last)
)";

namespace {

struct Options {
  std::string mesh;
  int64_t count = 4099;
  std::string fault;
  int64_t faultRank = -1;
};

absl::StatusOr<Options> parseOptions(int argc, char **argv) {
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    if (size_t equals = arg.find('='); equals != std::string::npos) {
      name = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("option '", name, "' needs a value"));
    }
    if (name != "--mesh" && name != "--count" && name != "--fault" &&
        name != "--fault-rank")
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", name, "'"));
    values[name] = value;
  }
  Options options;
  options.mesh = values["--mesh"];
  options.fault = values["--fault"];
  if (values.count("--count") &&
      (!absl::SimpleAtoi(values["--count"], &options.count) ||
       options.count < 1))
    return absl::InvalidArgumentError(absl::StrCat(
        "--count expects a positive integer, got '", values["--count"], "'"));
  if (values.count("--fault-rank") &&
      (!absl::SimpleAtoi(values["--fault-rank"], &options.faultRank) ||
       options.faultRank < 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "--fault-rank expects a rank, got '", values["--fault-rank"], "'"));
  return options;
}

const char *threadLevelName(ThreadLevel level) {
  switch (level) {
  case ThreadLevel::Single:
    return "single";
  case ThreadLevel::Funneled:
    return "funneled";
  case ThreadLevel::Serialized:
    return "serialized";
  case ThreadLevel::Multiple:
    return "multiple";
  }
  return "?";
}

/// Every subset of the mesh's axes in mesh order, then each subset of two or
/// more axes reversed.
std::vector<std::vector<std::string>> axisSubsets(const Mesh &mesh) {
  std::vector<std::vector<std::string>> subsets, reversed;
  size_t k = mesh.axes.size();
  for (uint64_t bits = 0; bits < (uint64_t(1) << k); ++bits) {
    std::vector<std::string> axes;
    for (size_t i = 0; i < k; ++i)
      if (bits & (uint64_t(1) << i))
        axes.push_back(mesh.axes[i]);
    if (axes.size() >= 2)
      reversed.emplace_back(axes.rbegin(), axes.rend());
    subsets.push_back(std::move(axes));
  }
  subsets.insert(subsets.end(), reversed.begin(), reversed.end());
  return subsets;
}

/// Runs the checks; returns the exit code.
int run(World &world, const Options &options) {
  int rank = world.rank();
  auto fail = [&](const absl::Status &status) {
    std::fprintf(stderr, "moe-comm-test: rank %d: error: %s\n", rank,
                 std::string(status.message()).c_str());
    return 1;
  };

  std::string spec = options.mesh.empty() ? absl::StrCat("world=", world.size())
                                          : options.mesh;
  absl::StatusOr<Mesh> mesh = Mesh::parse(spec);
  if (!mesh.ok())
    return fail(mesh.status());
  if (rank == 0) {
    std::printf("comm-test: mesh %s, %d rank(s), %s, MPI thread level %s, "
                "timeout %.1f s\n",
                mesh->toString().c_str(), world.size(),
                world.usesMpi() ? "MPI" : "no MPI",
                threadLevelName(world.threadLevel()),
                absl::ToDoubleSeconds(world.timeout()));
    std::fflush(stdout);
  }
  absl::StatusOr<std::unique_ptr<Group>> everyone =
      world.group(*mesh, mesh->axes);
  if (!everyone.ok())
    return fail(everyone.status());

  if (!options.fault.empty()) {
    int faultRank = options.faultRank >= 0 ? static_cast<int>(options.faultRank)
                                           : world.size() - 1;
    if (absl::Status status =
            commtest::injectFault(options.fault, faultRank, **everyone, rank);
        !status.ok())
      return fail(status);
    // Ranks that did their part still end with an error: a run with an
    // injected fault is never a success.
    return 1;
  }

  commtest::Report report(**everyone, rank);
  for (const std::vector<std::string> &axes : axisSubsets(*mesh)) {
    absl::StatusOr<std::unique_ptr<Group>> group = world.group(*mesh, axes);
    if (!group.ok())
      return fail(group.status());
    absl::StatusOr<Mesh::GroupPlace> place = mesh->groupPlace(rank, axes);
    if (!place.ok())
      return fail(place.status());
    commtest::GroupUnderTest g{**group, place->members, rank,
                               absl::StrCat("{", absl::StrJoin(axes, ","), "}"),
                               options.count};
    if (absl::Status status = commtest::checkGroup(g, report); !status.ok())
      return fail(status);
  }
  if (rank == 0) {
    std::printf("comm-test: %d passed, %d failed\n", report.passed(),
                report.failed());
    std::fflush(stdout);
  }
  return report.failed() == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  absl::StatusOr<std::unique_ptr<World>> world = World::init(&argc, &argv);
  if (!world.ok()) {
    std::fprintf(stderr, "moe-comm-test: error: %s\n",
                 std::string(world.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<Options> options = parseOptions(argc, argv);
  if (!options.ok()) {
    if ((*world)->rank() == 0)
      std::fprintf(stderr, "moe-comm-test: error: %s\n%s",
                   std::string(options.status().message()).c_str(), kUsage);
    return 2;
  }
  // The World outlives every Group created in run(); its destructor
  // finalises MPI, or aborts the job after a communication failure.
  return run(**world, *options);
}
