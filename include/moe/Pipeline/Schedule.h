//===- Schedule.h - pipeline-parallel schedules as data ---------*- C++ -*-===//
//
// A pipeline schedule says, for each of `stages` ranks, the order in which it
// runs the forward and backward passes of `microbatches` microbatches. The
// compiler emits it and the runtime follows it, so this library is plain
// C++17 (no MLIR, LLVM or Abseil) and reports bad input as errors, never by
// asserting or throwing.
//
// Model layout: with `virtualStages` = v chunks per rank (interleaved 1F1B)
// the model is cut into p * v model stages and chunk c of rank r holds model
// stage c * p + r (Megatron's layout), so activations go around the ranks v
// times. Without interleaving v = 1 and model stage == rank.
//
// Communication is implicit: the forward of model stage s for microbatch i
// needs the forward of stage s - 1 for i (a send/recv between their ranks),
// and the backward of stage s needs the backward of stage s + 1. The runtime
// derives the transfers from these dependencies.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_PIPELINE_SCHEDULE_H
#define MOE_PIPELINE_SCHEDULE_H

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moe::pipeline {

/// An error message; converts into any ErrorOr<T>.
struct Error {
  std::string message;
};

/// A value or an error message (a minimal std-only llvm::ErrorOr).
template <typename T> class ErrorOr {
public:
  ErrorOr(T value) : value(std::move(value)) {}
  ErrorOr(Error error) : error(std::move(error.message)) {}

  explicit operator bool() const { return value.has_value(); }
  const T &operator*() const { return *value; }
  T &operator*() { return *value; }
  const T *operator->() const { return &*value; }
  T *operator->() { return &*value; }
  /// Empty when there is a value.
  const std::string &getError() const { return error; }

private:
  std::optional<T> value;
  std::string error;
};

enum class ScheduleKind {
  /// All forwards, then all backwards: m activations alive per rank.
  GPipe,
  /// One forward, one backward (PipeDream-flush): at most p - rank alive.
  OneFOneB,
  /// Megatron's interleaved 1F1B over `virtualStages` chunks per rank; needs
  /// microbatches % stages == 0. Shrinks the bubble by a factor v.
  Interleaved1F1B,
  /// ZB-H1: the backward is split into B (input grad, on the critical path)
  /// and W (weight grad, off it); rank r puts off W by r B passes, so W
  /// passes fill the bubbles while keeping 1F1B's bound of p - rank
  /// microbatches between F and B, and p between F and W.
  ZeroBubble,
};

enum class ActionKind {
  Forward,
  /// Gradient w.r.t. the stage's input (ZeroBubble only).
  BackwardInput,
  /// Gradient w.r.t. the stage's weights (ZeroBubble only).
  BackwardWeight,
  /// Fused BackwardInput + BackwardWeight (all other kinds).
  Backward,
};

/// The part of a step an instruction belongs to: one microbatch's forward,
/// backward (input gradients; everything when not split) or weight
/// gradients of one model stage, or the optimizer, once per step.
enum class Phase { Forward, Backward, BackwardWeight, Optimizer };

/// Whether an action of `kind` runs the instructions of `phase` (fused
/// Backward runs both backward phases).
bool actionRuns(ActionKind kind, Phase phase);

/// Whether every schedule runs the (model stage, phase) producing a value
/// before a reader's (stage, phase) of the same microbatch: forwards in
/// model order, backwards in reverse after all forwards, weight gradients
/// after their own stage's backward. The optimizer is not a reader here.
bool runsBefore(int fromStage, Phase from, int toStage, Phase to);

/// One compute pass of one microbatch on chunk `chunk` of rank `rank`.
struct Action {
  ActionKind kind = ActionKind::Forward;
  int rank = 0;
  int chunk = 0;
  int microbatch = 0;

  bool operator==(const Action &o) const {
    return kind == o.kind && rank == o.rank && chunk == o.chunk &&
           microbatch == o.microbatch;
  }
  bool operator!=(const Action &o) const { return !(*this == o); }
};

struct ScheduleOptions {
  int stages = 1;        ///< p: pipeline ranks.
  int microbatches = 1;  ///< m.
  int virtualStages = 1; ///< v: chunks per rank (Interleaved1F1B only).
  /// Costs of one microbatch's passes over a rank's whole share of the model
  /// (all its chunks); one chunk costs cost / v, so bubble fractions of
  /// different v compare like for like. All must be finite and > 0.
  double forwardCost = 1;
  double backwardInputCost = 1;
  double backwardWeightCost = 1;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int stages = 0;
  int virtualStages = 1;
  int microbatches = 0;
  /// ranks[r] is the order in which rank r runs its actions, one at a time.
  std::vector<std::vector<Action>> ranks;

  /// The model stage an action of this schedule computes.
  int modelStageOf(const Action &a) const { return a.chunk * stages + a.rank; }
};

/// Checks options for `kind`; returns the error message if they are invalid.
std::optional<std::string> validateOptions(ScheduleKind kind,
                                           const ScheduleOptions &opts);

/// Builds the schedule of `kind`; the order depends on p, m and v only (the
/// costs matter to simulate()).
ErrorOr<Schedule> buildSchedule(ScheduleKind kind, const ScheduleOptions &opts);

/// Checks that a (possibly hand-written or deserialized) schedule is well
/// formed: ranks and chunks in range, actions on their own rank's list, and
/// per (model stage, microbatch) exactly one Forward plus either exactly one
/// Backward or exactly one BackwardInput and one BackwardWeight.
std::optional<std::string> verifySchedule(const Schedule &schedule);

/// The largest number of (chunk, microbatch) pairs that each rank holds
/// between their Forward and their last backward pass (Backward, or
/// BackwardWeight when split), following its order: the activation memory
/// the schedule needs, in chunk activations (a pending W reads the inputs
/// and output gradients of its stage's linear layers).
std::vector<int> peakInFlight(const Schedule &schedule);

/// The most microbatches a rank holds at once when it runs actions of the
/// microbatches `order` (in its order): each from its first action to its
/// last; at least 1 (the optimizer's). One arena slot each: the memory the
/// runtime reserves, and the compiler plans for.
int peakOpenMicrobatches(const std::vector<int> &order);
/// peakOpenMicrobatches of each rank of `schedule`.
std::vector<int> peakMicrobatchSlots(const Schedule &schedule);

const char *toString(ScheduleKind kind);
/// "F", "B" (BackwardInput and fused Backward) or "W".
const char *toString(ActionKind kind);

//===----------------------------------------------------------------------===//
// Simulation
//===----------------------------------------------------------------------===//

struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

struct Timeline {
  int stages = 0;
  int virtualStages = 1;
  /// ranks[r] in execution order, as in the schedule.
  std::vector<std::vector<TimedAction>> ranks;
  double makespan = 0;
  /// 1 - (busy time summed over ranks) / (ranks * makespan).
  double bubbleFraction = 0;
};

/// Runs each rank's actions in order, each as soon as its rank is free and
/// its dependencies have ended (sends are free and unbounded):
///  - F of model stage s, microbatch i after F of stage s - 1, i;
///  - B (or fused backward) of s, i after F of s, i and B of s + 1, i;
///  - W of s, i after B of s, i.
/// Costs come from `opts` (which must match the schedule's p, m, v). Returns
/// an error for a malformed schedule or one whose order deadlocks.
ErrorOr<Timeline> simulate(const Schedule &schedule,
                           const ScheduleOptions &opts);

/// Chrome trace JSON (open in Perfetto or chrome://tracing): one "X" event
/// per action, pid 0, tid = rank, named "F3"/"B3"/"W3" for microbatch 3, one
/// cost unit = 1000 us; plus "M" events naming the rank threads.
std::string toChromeTrace(const Timeline &timeline);

/// One line per rank drawing the timeline in characters: F, B, W for chunk 0
/// (lower case for odd chunks, so interleaving is visible) and '.' for idle.
/// At most `maxWidth` characters per line after the "rank N |" prefix.
std::string toText(const Timeline &timeline, int maxWidth = 120);

} // namespace moe::pipeline

#endif // MOE_PIPELINE_SCHEDULE_H
