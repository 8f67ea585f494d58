//===- AsyncCollectives.cpp - collectives off the critical path -----------===//

#include "AsyncCollectives.h"

#include "Collectives.h"
#include "ExpertParallel.h"

#include "moe/Runtime/Artifact/OpTable.h"
#include "moe/Runtime/IO/Trace.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>

namespace moe::rt::engine {

struct AsyncCollectives::Operation {
  size_t index = 0;
  /// The step's addresses with the inputs and results redirected here.
  std::vector<uint8_t *> pointers;
  std::vector<std::vector<uint8_t>> inputs;
  /// The results (one, or a bucket's) and their private copies.
  std::vector<uint32_t> results;
  std::vector<std::vector<uint8_t>> outputs;
  /// Its own pack space: the step's thread may pack for a collective of
  /// another group meanwhile.
  std::vector<float> pack;
  StepContext context;
  absl::Status status;
  bool done = false;

  Operation(const StepContext &step)
      : context{step.program, pointers, step.groups, pack} {
    context.trace = step.trace;
  }
};

AsyncCollectives::AsyncCollectives(const Program &program, bool groupsAtOnce)
    : program(program), deferred(program.instructions.size(), false),
      prefetchNext(program.instructions.size(), -1),
      inFlight(program.buffers.size()),
      communicates(program.instructions.size(), false),
      groupsOf(program.instructions.size()), groupsAtOnce(groupsAtOnce) {
  size_t n = program.instructions.size();
  // First reader of every buffer after its writer.
  std::vector<int64_t> firstRead(program.buffers.size(), -1);
  for (size_t i = n; i-- > 0;)
    for (uint32_t b : program.instructions[i].operands)
      firstRead[b] = static_cast<int64_t>(i);
  int64_t lastGather = -1;
  for (size_t i = 0; i < n; ++i) {
    const Instruction &inst = program.instructions[i];
    // Collectives, expert exchanges, the losses and norms combined over a
    // group, and amax histories kept alike over one call MPI themselves
    // (and so must not run while the communication thread does).
    communicates[i] = ops::communicatesOverGroup(inst);
    groupsOf[i] = ops::groupsOf(inst);
    bool reduction = inst.opcode == Opcode::AllReduce ||
                     inst.opcode == Opcode::ReduceScatter ||
                     inst.opcode == Opcode::ReduceBucket;
    // Worth it when something else runs before a result is needed. BF16
    // ones too: the communication layer moves and sums BF16 itself.
    int64_t needed = -1;
    for (uint32_t b : inst.results)
      if (firstRead[b] >= 0 && (needed < 0 || firstRead[b] < needed))
        needed = firstRead[b];
    if (reduction && needed > static_cast<int64_t>(i) + 1)
      deferred[i] = true;
    bool parameterGather =
        inst.opcode == Opcode::AllGather &&
        program.buffers[inst.operands[0]].kind == BufferKind::Parameter;
    if (parameterGather) {
      if (lastGather >= 0)
        prefetchNext[lastGather] = static_cast<int64_t>(i);
      lastGather = static_cast<int64_t>(i);
    }
  }
  worker = std::thread([this] { serve(); });
}

AsyncCollectives::~AsyncCollectives() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
    changed.notify_all();
  }
  worker.join();
}

void AsyncCollectives::serve() {
  for (;;) {
    std::shared_ptr<Operation> operation;
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty())
        return;
      operation = queue.front();
      queue.pop_front();
    }
    absl::Status status;
    {
      const Instruction &inst = program.instructions[operation->index];
      io::TraceScope span(operation->context.trace,
                          io::TraceTrack::AsyncCommunication,
                          absl::StrCat(opcodeName(inst.opcode), " (async)"));
      status = runCollective(operation->context, operation->index);
    }
    std::lock_guard<std::mutex> lock(mutex);
    operation->status = std::move(status);
    operation->done = true;
    changed.notify_all();
  }
}

absl::Status AsyncCollectives::start(const StepContext &context,
                                     size_t index) {
  const Instruction &inst = program.instructions[index];
  if (inFlight[inst.results[0]])
    return absl::OkStatus(); // prefetched already
  auto operation = std::make_shared<Operation>(context);
  operation->index = index;
  operation->pointers = context.pointers;
  operation->pack.resize(packElementsOf(program, inst));
  // Parameters stay put until the optimizer; temporaries may be reused.
  operation->inputs.reserve(inst.operands.size());
  for (uint32_t in : inst.operands) {
    const Buffer &input = program.buffers[in];
    if (input.kind != BufferKind::Temporary)
      continue;
    std::vector<uint8_t> &copy = operation->inputs.emplace_back(
        context.pointers[in], context.pointers[in] + input.sizeInBytes());
    operation->pointers[in] = copy.data();
  }
  operation->results = inst.results;
  operation->outputs.reserve(inst.results.size());
  for (uint32_t out : inst.results) {
    std::vector<uint8_t> &copy =
        operation->outputs.emplace_back(program.buffers[out].sizeInBytes());
    operation->pointers[out] = copy.data();
    inFlight[out] = operation;
  }
  std::lock_guard<std::mutex> lock(mutex);
  queue.push_back(std::move(operation));
  changed.notify_all();
  return absl::OkStatus();
}

absl::Status AsyncCollectives::finish(const StepContext &context,
                                      uint32_t result) {
  std::shared_ptr<Operation> operation = std::move(inFlight[result]);
  if (!operation)
    return absl::OkStatus();
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return operation->done; });
  }
  if (!operation->status.ok())
    return absl::Status(operation->status.code(),
                        absl::StrCat(describeInstruction(program,
                                                         operation->index),
                                     ": ", operation->status.message()));
  size_t which =
      std::find(operation->results.begin(), operation->results.end(), result) -
      operation->results.begin();
  const std::vector<uint8_t> &output = operation->outputs[which];
  std::memcpy(context.pointers[result], output.data(), output.size());
  return absl::OkStatus();
}

void AsyncCollectives::waitIdle() {
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait(lock, [&] {
    if (!queue.empty())
      return false;
    for (const std::shared_ptr<Operation> &operation : inFlight)
      if (operation && !operation->done)
        return false;
    return true;
  });
}

void AsyncCollectives::waitIdleOn(const std::vector<int64_t> &groups) {
  auto shares = [&](const Operation &operation) {
    for (int64_t group : groupsOf[operation.index])
      if (std::find(groups.begin(), groups.end(), group) != groups.end())
        return true;
    return false;
  };
  // Everything queued is in inFlight too (start() puts it there).
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait(lock, [&] {
    for (const std::shared_ptr<Operation> &operation : inFlight)
      if (operation && !operation->done && shares(*operation))
        return false;
    return true;
  });
}

absl::Status AsyncCollectives::drain(const StepContext &context) {
  absl::Status first;
  for (uint32_t b = 0; b < inFlight.size(); ++b)
    if (inFlight[b])
      if (absl::Status s = finish(context, b); !s.ok() && first.ok())
        first = s;
  return first;
}

absl::Status AsyncCollectives::run(const StepContext &context, size_t index) {
  const Instruction &inst = program.instructions[index];
  for (uint32_t b : inst.operands)
    if (inFlight[b])
      if (absl::Status s = finish(context, b); !s.ok())
        return s;
  if (deferred[index])
    return start(context, index);
  bool prefetched = inst.opcode == Opcode::AllGather &&
                    inFlight[inst.results[0]] != nullptr;
  if (prefetched) {
    if (absl::Status s = finish(context, inst.results[0]); !s.ok())
      return s;
  } else {
    // One thread at a time calls a group (all of MPI without
    // MPI_THREAD_MULTIPLE; an expert exchange starts a thread of its own).
    // What the communication thread finished stays out of the arena until
    // its own position: the plan gives its result's bytes to other values
    // until then.
    if (communicates[index]) {
      if (groupsAtOnce && !isExpertParallel(inst))
        waitIdleOn(groupsOf[index]);
      else
        waitIdle();
    }
    if (inst.opcode == Opcode::AllGather && prefetchNext[index] >= 0) {
      // A parameter gather runs on the thread too, so that the next can
      // follow it there while this one's layer computes.
      if (absl::Status s = start(context, index); !s.ok())
        return s;
      if (absl::Status s = finish(context, inst.results[0]); !s.ok())
        return s;
    } else if (absl::Status s = runInstruction(context, index); !s.ok()) {
      return s;
    }
  }
  if (prefetchNext[index] >= 0)
    return start(context, prefetchNext[index]);
  return absl::OkStatus();
}

} // namespace moe::rt::engine
