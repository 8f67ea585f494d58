//===- ExpertParallelChecks.h - expert-parallel steps checked ---*- C++ -*-===//
//
// Runs testing::makeExpertParallelProgram on this rank of a world and checks
// its expert-parallel Experts and ExpertsGrad against the single-rank
// kernels run on the gathered tokens of each {ep} group with all the
// experts. Shared by the one-process executor tests (a 1 x 1 mesh, where the
// group of one must reproduce the plain kernels) and the MPI test binary
// (every dp x ep mesh of its world).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_ENGINE_EXPERTPARALLELCHECKS_H
#define MOE_UNITTESTS_ENGINE_EXPERTPARALLELCHECKS_H

#include "TestProgram.h"

namespace moe::rt::comm {
class World;
} // namespace moe::rt::comm

namespace moe::rt::testing {

/// Checks two steps of makeExpertParallelProgram(config) on this rank of
/// `world` (nullptr: the only rank, for a 1 x 1 mesh): y, dx, dweights and
/// the local experts' dw1, dw3, dw2 bitwise against the reference of the
/// rank's {ep} group, their AllReduce over {dp} against the sum of the
/// groups' references, the loss, and that the second step repeats the
/// first bitwise. Collective over the world: every rank must call it with
/// the same config.
void checkExpertParallelStep(const ExpertParallelConfig &config,
                             comm::World *world);

/// Plants a bad expert id on the last rank of every {ep} group, before
/// Experts and then before ExpertsGrad: the step must fail on every rank
/// (the culprit naming the token, the others the culprit's group rank)
/// without a hang, and a clean step must run afterwards.
void checkExpertParallelBadIds(const ExpertParallelConfig &config,
                               comm::World *world);

/// Runs two steps of makeExpertParallelProgram(config) with delayed FP8
/// scaling and checks the amax history each rank ends with: the ranks that
/// hold copies of one block (differing only on dp) agree bitwise, and each
/// row holds the two steps' amaxes with this step's cleared.
void checkFp8AmaxHistoryCopies(const ExpertParallelConfig &config,
                               comm::World *world);

} // namespace moe::rt::testing

#endif // MOE_UNITTESTS_ENGINE_EXPERTPARALLELCHECKS_H
