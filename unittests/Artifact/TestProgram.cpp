//===- TestProgram.cpp - small hand-built artifacts for tests -------------===//

#include "TestProgram.h"

#include "moe/Pipeline/Schedule.h"

#include "moe/Runtime/Artifact/OpTable.h"
#include "moe/Runtime/Artifact/OpTableCheck.h"
#include "moe/Runtime/Artifact/Program_generated.h"
#include "moe/Runtime/Artifact/Seal.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace moe::rt::testing {

namespace fb = moe::artifact;

uint32_t ProgramBuilder::add(Buffer buffer) {
  program.buffers.push_back(std::move(buffer));
  return static_cast<uint32_t>(program.buffers.size() - 1);
}

uint32_t ProgramBuilder::workingCopy(uint32_t master) {
  const Buffer &weight = program.buffers[master];
  Buffer buffer;
  buffer.name = weight.name + ".bf16";
  buffer.kind = BufferKind::WorkingCopy;
  buffer.dtype = DType::BF16;
  buffer.shape = weight.shape;
  buffer.split = weight.split;
  buffer.master = master;
  return add(std::move(buffer));
}

uint32_t ProgramBuilder::parameter(const std::string &name,
                                   std::vector<int64_t> shape, Init init,
                                   float initStd, bool weightDecay) {
  Buffer buffer;
  buffer.name = name;
  buffer.kind = BufferKind::Parameter;
  buffer.shape = std::move(shape);
  buffer.init = init;
  buffer.initStd = initStd;
  buffer.weightDecay = weightDecay;
  return add(std::move(buffer));
}

std::pair<uint32_t, uint32_t> ProgramBuilder::moments(uint32_t param) {
  const Buffer &weight = program.buffers[param];
  std::string name = weight.name;
  std::vector<int64_t> shape = weight.shape;
  std::vector<AxisList> split = weight.split;
  uint32_t expAvg = state(name + ".exp_avg", shape, split);
  return {expAvg, state(name + ".exp_avg_sq", shape, split)};
}

uint32_t ProgramBuilder::state(const std::string &name,
                               std::vector<int64_t> shape,
                               std::vector<AxisList> split) {
  Buffer buffer;
  buffer.name = name;
  buffer.kind = BufferKind::OptimizerState;
  buffer.shape = std::move(shape);
  buffer.split = std::move(split);
  buffer.init = Init::Zeros;
  return add(std::move(buffer));
}

uint32_t ProgramBuilder::input(const std::string &name, DType dtype,
                               std::vector<int64_t> shape) {
  Buffer buffer;
  buffer.name = name;
  buffer.kind = BufferKind::Input;
  buffer.dtype = dtype;
  buffer.shape = std::move(shape);
  return add(std::move(buffer));
}

uint32_t ProgramBuilder::temporary(const std::string &name,
                                   std::vector<int64_t> shape, DType dtype) {
  Buffer buffer;
  buffer.name = name;
  buffer.kind = BufferKind::Temporary;
  buffer.dtype = dtype;
  buffer.shape = std::move(shape);
  buffer.offset = program.arenaBytes;
  program.arenaBytes += (buffer.sizeInBytes() + 63) / 64 * 64;
  return add(std::move(buffer));
}

size_t ProgramBuilder::emit(Opcode opcode, std::vector<uint32_t> operands,
                            std::vector<uint32_t> results,
                            std::vector<int64_t> intAttrs,
                            std::vector<float> floatAttrs) {
  Instruction instruction;
  instruction.opcode = opcode;
  instruction.operands = std::move(operands);
  instruction.results = std::move(results);
  instruction.intAttrs = std::move(intAttrs);
  instruction.floatAttrs = std::move(floatAttrs);
  instruction.location =
      "tiny.mlir:" + std::to_string(program.instructions.size() + 1);
  program.instructions.push_back(std::move(instruction));
  return program.instructions.size() - 1;
}

void ProgramBuilder::mesh(AxisList axes, std::vector<int64_t> shape) {
  program.meshAxes = std::move(axes);
  program.meshShape = std::move(shape);
}

int64_t ProgramBuilder::group(const AxisList &axes) {
  for (size_t g = 0; g < program.groups.size(); ++g)
    if (program.groups[g] == axes)
      return static_cast<int64_t>(g);
  program.groups.push_back(axes);
  return static_cast<int64_t>(program.groups.size() - 1);
}

void ProgramBuilder::split(uint32_t buffer, std::vector<AxisList> split) {
  program.buffers[buffer].split = std::move(split);
}

/// A current-version program with no model, buffers or instructions yet.
static Program emptyProgram(uint64_t seed) {
  Program program;
  program.versionMajor = kArtifactVersionMajor;
  program.versionMinor = kArtifactVersionMinor;
  program.producer = "unittests";
  program.seed = seed;
  return program;
}

Program makeTinyProgram(const TinyConfig &c) {
  Program program = emptyProgram(/*seed=*/1234);
  ModelInfo &model = program.model;
  model.name = "tiny";
  model.configJson = R"({"model": "tiny"})";
  model.vocab = c.vocab;
  model.hidden = c.hidden;
  model.layers = 0;
  model.heads = 1;
  model.kvHeads = 1;
  model.batch = c.batch;
  model.seq = c.seq;
  model.totalParams = (c.tiedHead ? 1 : 2) * c.vocab * c.hidden + c.hidden;
  model.activeParams = model.totalParams;

  ProgramBuilder b(program);
  int64_t B = c.batch, S = c.seq, V = c.vocab, H = c.hidden;
  program.tokens = b.input("tokens", DType::I32, {B, S});
  program.targets = b.input("targets", DType::I32, {B, S});
  program.step = b.input("step", DType::I32, {});
  uint32_t embed =
      b.parameter("model.embed_tokens.weight", {V, H}, Init::Normal, 0.02f);
  uint32_t norm = b.parameter("model.norm.weight", {H}, Init::Ones, 0.0f,
                              /*weightDecay=*/false);
  uint32_t head =
      c.tiedHead ? embed
                 : b.parameter("lm_head.weight", {V, H}, Init::Normal, 0.02f);
  auto [embedM, embedV] = b.moments(embed);
  auto [normM, normV] = b.moments(norm);
  auto [headM, headV] = c.tiedHead ? std::make_pair(0u, 0u) : b.moments(head);

  // Forward.
  uint32_t h = b.temporary("h", {B, S, H});
  uint32_t n = b.temporary("n", {B, S, H});
  // The fused head keeps [B, S] log-sum-exps instead of the logits.
  uint32_t logits = c.fusedHead ? b.temporary("lse", {B, S})
                                : b.temporary("logits", {B, S, V});
  uint32_t loss = b.temporary("loss", {});
  b.emit(Opcode::Embedding, {program.tokens, embed}, {h});
  b.emit(Opcode::RmsNorm, {h, norm}, {n}, {}, {1e-5f});
  if (c.fusedHead) {
    b.emit(Opcode::LinearCrossEntropy, {n, head, program.targets},
           {loss, logits});
  } else {
    b.emit(Opcode::Linear, {n, head}, {logits});
    b.emit(Opcode::CrossEntropy, {logits, program.targets}, {loss});
  }

  // Backward.
  uint32_t one = b.temporary("dloss", {});
  uint32_t dlogits = c.fusedHead ? 0 : b.temporary("dlogits", {B, S, V});
  uint32_t dn = b.temporary("dn", {B, S, H});
  uint32_t dhead = b.temporary("dhead", {V, H});
  uint32_t dh = b.temporary("dh", {B, S, H});
  uint32_t dnorm = b.temporary("dnorm", {H});
  uint32_t dembed = b.temporary("dembed", {V, H});
  b.emit(Opcode::Constant, {}, {one}, {}, {1.0f});
  if (c.fusedHead) {
    b.emit(Opcode::LinearCrossEntropyGrad,
           {one, n, head, program.targets, logits}, {dn, dhead});
  } else {
    b.emit(Opcode::CrossEntropyGrad, {one, logits, program.targets}, {dlogits});
    b.emit(Opcode::LinearGradInput, {dlogits, head}, {dn});
    b.emit(Opcode::LinearGradWeight, {dlogits, n}, {dhead});
  }
  b.emit(Opcode::RmsNormGrad, {dn, h, norm}, {dh, dnorm}, {}, {1e-5f});
  b.emit(Opcode::EmbeddingGrad, {dh, program.tokens}, {dembed});

  // Optimizer.
  uint32_t gradNorm = b.temporary("grad_norm", {});
  uint32_t coef = b.temporary("clip_coef", {});
  uint32_t lr = b.temporary("lr", {});
  // Tied: the table's gradient is the sum of its two halves; over two
  // stages, each stage's sum of them.
  std::vector<uint32_t> tableGrads = {dembed};
  if (c.tiedHead && c.sumOverStages) {
    tableGrads = {b.temporary("dembed.stage_sum", {V, H}),
                  b.temporary("dembed.stage_sum.1", {V, H})};
    for (uint32_t sum : tableGrads)
      b.emit(Opcode::PipelineGradientSum, {dhead, dembed}, {sum});
  } else if (c.tiedHead) {
    tableGrads = {b.temporary("dembed.sum", {V, H})};
    b.emit(Opcode::Add, {dhead, dembed}, {tableGrads[0]});
  }
  if (c.tiedHead)
    b.emit(Opcode::GlobalNorm, {tableGrads[0], dnorm}, {gradNorm});
  else
    b.emit(Opcode::GlobalNorm, {dembed, dnorm, dhead}, {gradNorm});
  b.emit(Opcode::ClipCoefficient, {gradNorm}, {coef}, {}, {c.maxNorm});
  b.emit(Opcode::LearningRate, {program.step}, {lr}, {c.warmup, c.decay},
         {c.peakLr, c.minLr});
  auto adamw = [&](uint32_t param, uint32_t grad, uint32_t m, uint32_t v,
                   float decay) {
    b.emit(Opcode::AdamW, {param, grad, m, v, lr, coef, program.step}, {}, {},
           {c.beta1, c.beta2, c.eps, decay});
  };
  adamw(embed, tableGrads[0], embedM, embedV, c.weightDecay);
  adamw(norm, dnorm, normM, normV, 0.0f);
  if (!c.tiedHead)
    adamw(head, dhead, headM, headV, c.weightDecay);
  else if (tableGrads.size() > 1)
    adamw(embed, tableGrads[1], embedM, embedV, c.weightDecay);

  program.loss = loss;
  program.gradNorm = gradNorm;
  program.lr = lr;
  return program;
}

Program makeBf16TinyProgram(const TinyConfig &config) {
  Program program = makeTinyProgram(config);
  ProgramBuilder b(program);
  // Working copies of the three weights; every read of a weight outside
  // its AdamW reads the copy instead, and the AdamW rounds into it.
  std::vector<uint32_t> copyOf(program.buffers.size(), ~0u);
  for (const char *name :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}) {
    uint32_t master = bufferNamed(program, name);
    copyOf[master] = b.workingCopy(master);
  }
  for (Instruction &instruction : program.instructions) {
    if (instruction.opcode == Opcode::AdamW) {
      instruction.operands.push_back(copyOf[instruction.operands[0]]);
      continue;
    }
    for (uint32_t &operand : instruction.operands)
      if (operand < copyOf.size() && copyOf[operand] != ~0u)
        operand = copyOf[operand];
  }
  // Narrower than the f32 the arena was planned for, so the plan holds.
  for (const char *name : {"h", "n", "logits", "dlogits", "dn", "dh"})
    program.buffers[bufferNamed(program, name)].dtype = DType::BF16;
  return program;
}

Program makePipelinedTinyProgram(int stages, int microbatches,
                                 const std::string &schedule,
                                 const TinyConfig &config) {
  Program program = makeTinyProgram(config);
  Pipeline &pipeline = program.pipeline;
  pipeline.stages = stages;
  pipeline.microbatches = microbatches;
  pipeline.schedule = schedule;
  int32_t last = stages - 1;
  // A table two stages share: the first sum and update on stage 0.
  int gradientSums = 0, tableUpdates = 0;
  for (const Instruction &inst : program.instructions) {
    PipelinePhase phase = PipelinePhase::Backward;
    int32_t stage = last;
    switch (inst.opcode) {
    case Opcode::Embedding:
      phase = PipelinePhase::Forward;
      stage = 0;
      break;
    case Opcode::RmsNorm:
    case Opcode::Linear:
    case Opcode::CrossEntropy:
      phase = PipelinePhase::Forward;
      break;
    case Opcode::EmbeddingGrad:
      stage = 0;
      break;
    case Opcode::GlobalNorm:
    case Opcode::ClipCoefficient:
    case Opcode::LearningRate:
      phase = PipelinePhase::Optimizer;
      stage = -1;
      break;
    case Opcode::PipelineGradientSum:
      phase = PipelinePhase::Optimizer;
      stage = gradientSums++ == 0 ? 0 : last;
      break;
    case Opcode::AdamW:
      phase = PipelinePhase::Optimizer;
      stage = program.buffers[inst.operands[0]].name ==
                          "model.embed_tokens.weight" &&
                      tableUpdates++ == 0
                  ? 0
                  : last;
      break;
    default:
      break;
    }
    pipeline.instructionStage.push_back(stage);
    pipeline.instructionPhase.push_back(phase);
  }
  if (stages > 1) {
    program.meshAxes = {"pp"};
    program.meshShape = {stages};
  }
  pipeline::ScheduleKind kind = pipeline::ScheduleKind::OneFOneB;
  for (pipeline::ScheduleKind candidate :
       {pipeline::ScheduleKind::GPipe, pipeline::ScheduleKind::ZeroBubble})
    if (schedule == pipeline::toString(candidate))
      kind = candidate;
  pipeline::ScheduleOptions options;
  options.stages = stages;
  options.microbatches = microbatches;
  pipeline::ErrorOr<pipeline::Schedule> built =
      pipeline::buildSchedule(kind, options);
  for (const std::vector<pipeline::Action> &actions : built->ranks) {
    std::vector<PipelineAction> &rank = pipeline.ranks.emplace_back();
    for (const pipeline::Action &action : actions)
      rank.push_back({static_cast<PipelineAction::Kind>(action.kind),
                      action.chunk, action.microbatch});
  }
  return program;
}

Program makeMoeProgram(const MoeConfig &c) {
  Program program = emptyProgram(/*seed=*/7);
  int64_t B = c.batch, S = c.seq, V = c.vocab, H = c.hidden;
  int64_t d = H / c.heads, Q = c.heads * d, KV = c.kvHeads * d;
  int64_t E = c.experts, F = c.ffn, K = c.topK;
  ModelInfo &model = program.model;
  model.name = "tiny-moe";
  model.vocab = V;
  model.hidden = H;
  model.layers = 1;
  model.heads = c.heads;
  model.kvHeads = c.kvHeads;
  model.experts = E;
  model.topK = K;
  model.ffn = F;
  model.batch = B;
  model.seq = S;

  ProgramBuilder b(program);
  program.tokens = b.input("tokens", DType::I32, {B, S});
  program.targets = b.input("targets", DType::I32, {B, S});
  program.step = b.input("step", DType::I32, {});
  uint32_t positions = 0;
  if (c.documentMasking) {
    positions = b.input("positions", DType::I32, {B, S});
    program.positions = positions;
  }
  std::vector<std::pair<uint32_t, float>> params; // (param, weight decay)
  auto param = [&](const std::string &name, std::vector<int64_t> shape,
                   bool isNorm = false) {
    uint32_t index =
        isNorm ? b.parameter(name, std::move(shape), Init::Ones, 0.0f, false)
               : b.parameter(name, std::move(shape), Init::Normal, 0.2f);
    params.push_back({index, isNorm ? 0.0f : 0.1f});
    return index;
  };
  const std::string layer = "model.layers.0.";
  uint32_t embed = param("model.embed_tokens.weight", {V, H});
  uint32_t ln1 = param(layer + "input_layernorm.weight", {H}, true);
  uint32_t wq = param(layer + "self_attn.q_proj.weight", {Q, H});
  uint32_t wk = param(layer + "self_attn.k_proj.weight", {KV, H});
  uint32_t wv = param(layer + "self_attn.v_proj.weight", {KV, H});
  uint32_t wo = param(layer + "self_attn.o_proj.weight", {H, Q});
  uint32_t ln2 = param(layer + "post_attention_layernorm.weight", {H}, true);
  uint32_t wg = param(layer + "block_sparse_moe.gate.weight", {E, H});
  uint32_t w1 =
      param(layer + "block_sparse_moe.experts.{e}.w1.weight", {E, F, H});
  uint32_t w3 =
      param(layer + "block_sparse_moe.experts.{e}.w3.weight", {E, F, H});
  uint32_t w2 =
      param(layer + "block_sparse_moe.experts.{e}.w2.weight", {E, H, F});
  uint32_t lnf = param("model.norm.weight", {H}, true);
  uint32_t head = param("lm_head.weight", {V, H});

  auto t = [&](const char *name, std::vector<int64_t> shape,
               DType dtype = DType::F32) {
    return b.temporary(name, std::move(shape), dtype);
  };
  auto emit = [&](Opcode op, std::vector<uint32_t> operands,
                  std::vector<uint32_t> results,
                  std::vector<int64_t> intAttrs = {},
                  std::vector<float> floatAttrs = {}) {
    b.emit(op, std::move(operands), std::move(results), std::move(intAttrs),
           std::move(floatAttrs));
  };
  const float eps = 1e-5f, theta = 10000.0f;

  // Forward.
  uint32_t x0 = t("x0", {B, S, H}), n1 = t("n1", {B, S, H});
  uint32_t q = t("q", {B, S, Q}), k = t("k", {B, S, KV}),
           v = t("v", {B, S, KV});
  uint32_t qr = t("qr", {B, S, Q}), kr = t("kr", {B, S, KV});
  uint32_t att = t("att", {B, S, Q}), lse = t("lse", {B, c.heads, S});
  uint32_t o = t("o", {B, S, H}), x1 = t("x1", {B, S, H});
  uint32_t n2 = t("n2", {B, S, H}), rl = t("router_logits", {B, S, E});
  uint32_t probs = t("probs", {B, S, E}), rw = t("route_weights", {B, S, K});
  uint32_t ridx = t("route_ids", {B, S, K}, DType::I32);
  uint32_t ffn = t("ffn", {B, S, H}), x2 = t("x2", {B, S, H});
  uint32_t nf = t("nf", {B, S, H}), logits = t("logits", {B, S, V});
  uint32_t ce = t("ce", {}), aux = t("aux", {}), loss = t("loss", {});
  emit(Opcode::Embedding, {program.tokens, embed}, {x0});
  emit(Opcode::RmsNorm, {x0, ln1}, {n1}, {}, {eps});
  emit(Opcode::Linear, {n1, wq}, {q});
  emit(Opcode::Linear, {n1, wk}, {k});
  emit(Opcode::Linear, {n1, wv}, {v});
  if (c.documentMasking) {
    emit(Opcode::DocumentRope, {q, positions}, {qr}, {c.heads}, {theta});
    emit(Opcode::DocumentRope, {k, positions}, {kr}, {c.kvHeads}, {theta});
    emit(Opcode::DocumentAttention, {qr, kr, v, positions}, {att, lse},
         {c.heads, c.kvHeads});
  } else if (c.ringRanks > 0) {
    // The rank's block of a sequence over {cp}, its keys passed around.
    program.meshAxes = {"cp"};
    program.meshShape = {c.ringRanks};
    program.groups = {{"cp"}};
    emit(Opcode::Rope, {q}, {qr}, {c.heads, 0}, {theta});
    emit(Opcode::Rope, {k}, {kr}, {c.kvHeads, 0}, {theta});
    emit(Opcode::RingAttention, {qr, kr, v}, {att, lse},
         {c.heads, c.kvHeads, 0});
  } else {
    emit(Opcode::Rope, {q}, {qr}, {c.heads}, {theta});
    emit(Opcode::Rope, {k}, {kr}, {c.kvHeads}, {theta});
    emit(Opcode::Attention, {qr, kr, v}, {att, lse}, {c.heads, c.kvHeads});
  }
  emit(Opcode::Linear, {att, wo}, {o});
  emit(Opcode::Add, {x0, o}, {x1});
  emit(Opcode::RmsNorm, {x1, ln2}, {n2}, {}, {eps});
  emit(Opcode::Linear, {n2, wg}, {rl});
  emit(Opcode::Router, {rl}, {probs, rw, ridx}, {K}, {c.capacityFactor});
  uint32_t hidden = c.keepHidden ? t("expert_hidden", {B, S, K, 2, F}) : 0;
  if (c.keepHidden)
    emit(Opcode::ExpertsWithHidden, {n2, rw, ridx, w1, w3, w2}, {ffn, hidden});
  else
    emit(Opcode::Experts, {n2, rw, ridx, w1, w3, w2}, {ffn});
  emit(Opcode::Add, {x1, ffn}, {x2});
  emit(Opcode::RmsNorm, {x2, lnf}, {nf}, {}, {eps});
  emit(Opcode::Linear, {nf, head}, {logits});
  emit(Opcode::CrossEntropy, {logits, program.targets}, {ce});
  emit(Opcode::AuxLoss, {probs}, {aux}, {K});
  emit(Opcode::WeightedSum, {ce, aux}, {loss}, {}, {1.0f, c.auxCoef});

  // Backward, in reverse.
  uint32_t dloss = t("dloss", {}), dce = t("dce", {}), daux = t("daux", {});
  emit(Opcode::Constant, {}, {dloss}, {}, {1.0f});
  emit(Opcode::WeightedSum, {dloss}, {dce}, {}, {1.0f});
  emit(Opcode::WeightedSum, {dloss}, {daux}, {}, {c.auxCoef});
  uint32_t dlogits = t("dlogits", {B, S, V}), dnf = t("dnf", {B, S, H});
  uint32_t dhead = t("dhead", {V, H});
  uint32_t dx2 = t("dx2", {B, S, H}), dlnf = t("dlnf", {H});
  emit(Opcode::CrossEntropyGrad, {dce, logits, program.targets}, {dlogits});
  emit(Opcode::LinearGradInput, {dlogits, head}, {dnf});
  emit(Opcode::LinearGradWeight, {dlogits, nf}, {dhead});
  emit(Opcode::RmsNormGrad, {dnf, x2, lnf}, {dx2, dlnf}, {}, {eps});
  uint32_t dn2e = t("dn2_experts", {B, S, H}),
           drw = t("droute_weights", {B, S, K});
  uint32_t dw1 = t("dw1", {E, F, H}), dw3 = t("dw3", {E, F, H});
  uint32_t dw2 = t("dw2", {E, H, F});
  if (c.keepHidden)
    emit(Opcode::ExpertsGradWithHidden, {dx2, n2, rw, ridx, w1, w3, w2, hidden},
         {dn2e, drw, dw1, dw3, dw2});
  else
    emit(Opcode::ExpertsGrad, {dx2, n2, rw, ridx, w1, w3, w2},
         {dn2e, drw, dw1, dw3, dw2});
  uint32_t dprobs = t("dprobs", {B, S, E}),
           drl = t("drouter_logits", {B, S, E});
  emit(Opcode::AuxLossGrad, {daux, probs}, {dprobs}, {K});
  emit(Opcode::RouterGrad, {drw, probs, dprobs}, {drl}, {K});
  uint32_t dn2r = t("dn2_router", {B, S, H}), dwg = t("dwg", {E, H});
  emit(Opcode::LinearGradInput, {drl, wg}, {dn2r});
  emit(Opcode::LinearGradWeight, {drl, n2}, {dwg});
  uint32_t dn2 = t("dn2", {B, S, H}), dx1n = t("dx1_norm", {B, S, H});
  uint32_t dln2 = t("dln2", {H}), dx1 = t("dx1", {B, S, H});
  emit(Opcode::Add, {dn2e, dn2r}, {dn2});
  emit(Opcode::RmsNormGrad, {dn2, x1, ln2}, {dx1n, dln2}, {}, {eps});
  emit(Opcode::Add, {dx2, dx1n}, {dx1});
  uint32_t datt = t("datt", {B, S, Q}), dwo = t("dwo", {H, Q});
  emit(Opcode::LinearGradInput, {dx1, wo}, {datt});
  emit(Opcode::LinearGradWeight, {dx1, att}, {dwo});
  uint32_t dqr = t("dqr", {B, S, Q}), dkr = t("dkr", {B, S, KV});
  uint32_t dv = t("dv", {B, S, KV});
  uint32_t dq = t("dq", {B, S, Q}), dk = t("dk", {B, S, KV});
  if (c.documentMasking) {
    emit(Opcode::DocumentAttentionGrad, {datt, qr, kr, v, att, lse, positions},
         {dqr, dkr, dv}, {c.heads, c.kvHeads});
    emit(Opcode::DocumentRopeGrad, {dqr, positions}, {dq}, {c.heads}, {theta});
    emit(Opcode::DocumentRopeGrad, {dkr, positions}, {dk}, {c.kvHeads},
         {theta});
  } else if (c.ringRanks > 0) {
    emit(Opcode::RingAttentionGrad, {datt, qr, kr, v, att, lse}, {dqr, dkr, dv},
         {c.heads, c.kvHeads, 0});
    emit(Opcode::RopeGrad, {dqr}, {dq}, {c.heads, 0}, {theta});
    emit(Opcode::RopeGrad, {dkr}, {dk}, {c.kvHeads, 0}, {theta});
  } else {
    emit(Opcode::AttentionGrad, {datt, qr, kr, v, att, lse}, {dqr, dkr, dv},
         {c.heads, c.kvHeads});
    emit(Opcode::RopeGrad, {dqr}, {dq}, {c.heads}, {theta});
    emit(Opcode::RopeGrad, {dkr}, {dk}, {c.kvHeads}, {theta});
  }
  uint32_t dn1 = t("dn1", {B, S, H}), dn1k = t("dn1_k", {B, S, H});
  uint32_t dn1v = t("dn1_v", {B, S, H});
  uint32_t dwq = t("dwq", {Q, H}), dwk = t("dwk", {KV, H}),
           dwv = t("dwv", {KV, H});
  emit(Opcode::LinearGradInput, {dq, wq}, {dn1});
  emit(Opcode::LinearGradWeight, {dq, n1}, {dwq});
  emit(Opcode::LinearGradInput, {dk, wk}, {dn1k});
  emit(Opcode::LinearGradWeight, {dk, n1}, {dwk});
  emit(Opcode::LinearGradInput, {dv, wv}, {dn1v});
  emit(Opcode::LinearGradWeight, {dv, n1}, {dwv});
  // Gradient accumulation in place, as a memory planner would emit it.
  emit(Opcode::Add, {dn1, dn1k}, {dn1});
  emit(Opcode::Add, {dn1, dn1v}, {dn1});
  uint32_t dx0n = t("dx0_norm", {B, S, H}), dln1 = t("dln1", {H});
  uint32_t dx0 = t("dx0", {B, S, H}), dembed = t("dembed", {V, H});
  emit(Opcode::RmsNormGrad, {dn1, x0, ln1}, {dx0n, dln1}, {}, {eps});
  emit(Opcode::Add, {dx1, dx0n}, {dx0});
  emit(Opcode::EmbeddingGrad, {dx0, program.tokens}, {dembed});

  // Optimizer: grads in the order of `params`.
  std::vector<uint32_t> grads = {dembed, dln1, dwq, dwk, dwv,  dwo,  dln2,
                                 dwg,    dw1,  dw3, dw2, dlnf, dhead};
  uint32_t gradNorm = t("grad_norm", {}), coef = t("clip_coef", {});
  uint32_t lr = t("lr", {});
  emit(Opcode::GlobalNorm, grads, {gradNorm});
  emit(Opcode::ClipCoefficient, {gradNorm}, {coef}, {}, {1.0f});
  emit(Opcode::LearningRate, {program.step}, {lr}, {1, 20}, {3e-2f, 3e-3f});
  for (size_t i = 0; i < params.size(); ++i) {
    auto [m, s] = b.moments(params[i].first);
    emit(Opcode::AdamW,
         {params[i].first, grads[i], m, s, lr, coef, program.step}, {}, {},
         {0.9f, 0.95f, 1e-8f, params[i].second});
  }
  program.loss = loss;
  program.gradNorm = gradNorm;
  program.lr = lr;
  return program;
}

Program makeMeshProgram(const MeshConfig &c) {
  using Sizes = MeshProgramSizes;
  const int64_t B = Sizes::kBatch, S = Sizes::kSeq, V = Sizes::kVocab;
  Program program = emptyProgram(/*seed=*/99);
  ModelInfo &model = program.model;
  model.name = "mesh";
  model.vocab = V;
  model.batch = B;
  model.seq = S;

  ProgramBuilder b(program);
  b.mesh({"dp", "tp"}, {c.dp, c.tp});
  program.batchAxes = {"dp", "tp"};
  int64_t tp = b.group({"tp"}), all = b.group({"dp", "tp"});
  int64_t dp = b.group({"dp"}), tpFirst = b.group({"tp", "dp"});

  program.tokens = b.input("tokens", DType::I32, {B, S});
  program.targets = b.input("targets", DType::I32, {B, S});
  program.step = b.input("step", DType::I32, {});
  uint32_t table = b.parameter("table", {V / c.tp, V}, Init::Normal, 1.0f);
  b.split(table, {{"tp"}, {}});
  uint32_t w = b.parameter("w", {3, 4, 5}, Init::Normal, 0.5f);
  b.split(w, {{}, {"dp"}, {}});
  auto [wM, wV] = b.moments(w);
  uint32_t v = b.parameter("v", {2, 4}, Init::Normal, 0.5f);
  b.split(v, {{"tp", "dp"}, {}});
  uint32_t x = b.parameter("x", {2, 2 * c.dp, 3}, Init::Normal, 0.5f);
  b.split(x, {{"dp"}, {}, {}});
  uint32_t y = b.parameter("y", {2, 3, 2}, Init::Normal, 0.5f);
  b.split(y, {{"dp"}, {}, {"tp"}});
  uint32_t u = b.parameter("u", {5}, Init::Ones, 0.0f, /*weightDecay=*/false);
  uint32_t z =
      c.zeroOne ? b.parameter("z", {2 * c.dp, 3}, Init::Normal, 0.5f) : 0;

  uint32_t tableFull = b.temporary("table_full", {V, V});
  uint32_t logits = b.temporary("logits", {B, S, V});
  uint32_t ce = b.temporary("ce", {}), aux = b.temporary("aux", {});
  uint32_t loss = b.temporary("loss", {}), dloss = b.temporary("dloss", {});
  uint32_t dlogits = b.temporary("dlogits", {B, S, V});
  uint32_t dprobs = b.temporary("dprobs", {B, S, V});
  b.emit(Opcode::AllGather, {table}, {tableFull}, {tp, 0});
  b.emit(Opcode::Embedding, {program.tokens, tableFull}, {logits});
  b.emit(Opcode::CrossEntropy, {logits, program.targets}, {ce}, {all});
  b.emit(Opcode::AuxLoss, {logits}, {aux}, {Sizes::kTopK, all});
  b.emit(Opcode::WeightedSum, {ce, aux}, {loss}, {}, {1.0f, 0.01f});
  b.emit(Opcode::Constant, {}, {dloss}, {}, {1.0f});
  b.emit(Opcode::CrossEntropyGrad, {dloss, logits, program.targets}, {dlogits},
         {all});
  b.emit(Opcode::AuxLossGrad, {dloss, logits}, {dprobs}, {Sizes::kTopK, all});

  uint32_t wFull = b.temporary("w_full", {3, 4 * c.dp, 5});
  uint32_t wBlock = b.temporary("w_block", {3, 4, 5});
  uint32_t vFull = b.temporary("v_full", {2 * c.dp * c.tp, 4});
  uint32_t vSum = b.temporary("v_sum", {2, 4});
  uint32_t xScattered = b.temporary("x_scattered", {2, 2, 3});
  b.emit(Opcode::AllGather, {w}, {wFull}, {dp, 1});
  b.emit(Opcode::Slice, {wFull}, {wBlock}, {dp, 1});
  b.emit(Opcode::AllGather, {v}, {vFull}, {tpFirst, 0});
  b.emit(Opcode::AllReduce, {v}, {vSum}, {dp});
  b.emit(Opcode::ReduceScatter, {x}, {xScattered}, {dp, 1});
  // Buckets: three shapes summed over every rank in one message, and two
  // tensors' blocks of dimension 0 over {dp}.
  uint32_t vBucket = b.temporary("v_bucket", {2, 4});
  uint32_t xBucket = b.temporary("x_bucket", {2, 2 * c.dp, 3});
  uint32_t uBucket = b.temporary("u_bucket", {5});
  uint32_t vScattered = b.temporary("v_full_scattered", {2 * c.tp, 4});
  uint32_t tableScattered = b.temporary("table_full_scattered", {V / c.dp, V});
  b.emit(Opcode::ReduceBucket, {v, x, u}, {vBucket, xBucket, uBucket},
         {all, 0});
  b.emit(Opcode::ReduceBucket, {vFull, tableFull}, {vScattered, tableScattered},
         {dp, 1});

  // The gradients are copies of the parameters (p + 0), so that their norm,
  // summed over each one's group, is the norm of the whole parameters.
  std::vector<uint32_t> params = {w, v, table, x, y, u}, grads;
  for (uint32_t param : params) {
    std::string name = program.buffers[param].name;
    std::vector<int64_t> shape = program.buffers[param].shape;
    uint32_t zero = b.temporary(name + "_zero", shape);
    uint32_t grad = b.temporary(name + "_grad", shape);
    b.emit(Opcode::Constant, {}, {zero}, {}, {0.0f});
    b.emit(Opcode::Add, {param, zero}, {grad});
    grads.push_back(grad);
  }
  std::vector<int64_t> normGroups = {dp, all, tp, dp, all, -1};
  uint32_t zGrad = 0;
  if (c.zeroOne) {
    uint32_t zero = b.temporary("z_zero", {2 * c.dp, 3});
    uint32_t whole = b.temporary("z_whole_grad", {2 * c.dp, 3});
    zGrad = b.temporary("z_grad", {2, 3});
    b.emit(Opcode::Constant, {}, {zero}, {}, {0.0f});
    b.emit(Opcode::Add, {z, zero}, {whole});
    b.emit(Opcode::Slice, {whole}, {zGrad}, {dp, 0});
    grads.push_back(zGrad);
    normGroups.push_back(dp);
  }
  uint32_t gradNorm = b.temporary("grad_norm", {});
  uint32_t coef = b.temporary("clip_coef", {}), lr = b.temporary("lr", {});
  b.emit(Opcode::GlobalNorm, grads, {gradNorm}, normGroups);
  b.emit(Opcode::ClipCoefficient, {gradNorm}, {coef}, {}, {1.0f});
  b.emit(Opcode::LearningRate, {program.step}, {lr}, {0, 10}, {1e-2f, 1e-3f});
  for (size_t i = 0; i < params.size(); ++i) {
    auto [m, s] = params[i] == w ? std::make_pair(wM, wV)
                                 : b.moments(params[i]);
    float decay = program.buffers[params[i]].weightDecay ? 0.1f : 0.0f;
    b.emit(Opcode::AdamW, {params[i], grads[i], m, s, lr, coef, program.step},
           {}, {}, {0.9f, 0.95f, 1e-8f, decay});
  }
  if (c.zeroOne) {
    auto [m, s] = b.moments(z);
    for (uint32_t moment : {m, s}) {
      program.buffers[moment].shape = {2, 3};
      b.split(moment, {{"dp"}, {}});
    }
    b.emit(Opcode::ShardedAdamW, {z, zGrad, m, s, lr, coef, program.step}, {},
           {dp}, {0.9f, 0.95f, 1e-8f, 0.1f});
  }
  program.loss = loss;
  program.gradNorm = gradNorm;
  program.lr = lr;
  return program;
}

Program makeExpertParallelProgram(const ExpertParallelConfig &c) {
  using Sizes = ExpertParallelSizes;
  const int64_t B = Sizes::kBatch, S = Sizes::kSeq, V = Sizes::kVocab;
  const int64_t H = Sizes::kHidden, F = Sizes::kFfn, K = c.topK;
  const int64_t El = c.localExperts, E = El * c.ep;
  Program program = emptyProgram(/*seed=*/5);
  ModelInfo &model = program.model;
  model.name = "expert-parallel";
  model.vocab = V;
  model.hidden = H;
  model.experts = E;
  model.topK = K;
  model.ffn = F;
  model.batch = B;
  model.seq = S;

  ProgramBuilder b(program);
  b.mesh({"dp", "ep"}, {c.dp, c.ep});
  program.batchAxes = {"dp", "ep"};
  int64_t ep = b.group({"ep"}), dp = b.group({"dp"});
  int64_t all = b.group({"dp", "ep"});

  program.tokens = b.input("tokens", DType::I32, {B, S});
  program.targets = b.input("targets", DType::I32, {B, S});
  program.step = b.input("step", DType::I32, {});
  uint32_t embed = b.parameter("embed", {V, H}, Init::Normal, 1.0f);
  uint32_t gate = b.parameter("gate", {V, E}, Init::Normal, 1.0f);
  uint32_t grad = b.parameter("grad", {V, H}, Init::Normal, 1.0f);
  auto expert = [&](const char *name, std::vector<int64_t> shape) {
    uint32_t index = b.parameter(std::string("experts.{e}.") + name,
                                 std::move(shape), Init::Normal, 0.5f);
    b.split(index, {{"ep"}, {}, {}});
    return index;
  };
  uint32_t w1 = expert("w1", {El, F, H}), w3 = expert("w3", {El, F, H});
  uint32_t w2 = expert("w2", {El, H, F});

  DType rows = c.bf16 ? DType::BF16 : DType::F32;
  uint32_t x = b.temporary("x", {B, S, H}, rows);
  uint32_t logits = b.temporary("logits", {B, S, E});
  uint32_t probs = b.temporary("probs", {B, S, E});
  uint32_t weights = b.temporary("weights", {B, S, K});
  uint32_t ids = b.temporary("ids", {B, S, K}, DType::I32);
  uint32_t y = b.temporary("y", {B, S, H}, rows);
  b.emit(Opcode::Embedding, {program.tokens, embed}, {x});
  b.emit(Opcode::Embedding, {program.tokens, gate}, {logits});
  b.emit(Opcode::Router, {logits}, {probs, weights, ids}, {K},
         {c.capacityFactor});
  b.emit(Opcode::Experts, {x, weights, ids, w1, w3, w2}, {y}, {ep});

  uint32_t dy = b.temporary("dy", {B, S, H}, rows);
  uint32_t dx = b.temporary("dx", {B, S, H}, rows);
  uint32_t dweights = b.temporary("dweights", {B, S, K});
  uint32_t dw1 = b.temporary("dw1", {El, F, H});
  uint32_t dw3 = b.temporary("dw3", {El, F, H});
  uint32_t dw2 = b.temporary("dw2", {El, H, F});
  b.emit(Opcode::Embedding, {program.tokens, grad}, {dy});
  b.emit(Opcode::ExpertsGrad, {dy, x, weights, ids, w1, w3, w2},
         {dx, dweights, dw1, dw3, dw2}, {ep});
  // The experts' gradients over the other data axis, as the compiler adds.
  uint32_t dw1Total = b.temporary("dw1_total", {El, F, H});
  uint32_t dw3Total = b.temporary("dw3_total", {El, F, H});
  uint32_t dw2Total = b.temporary("dw2_total", {El, H, F});
  b.emit(Opcode::AllReduce, {dw1}, {dw1Total}, {dp});
  b.emit(Opcode::AllReduce, {dw3}, {dw3Total}, {dp});
  b.emit(Opcode::AllReduce, {dw2}, {dw2Total}, {dp});

  uint32_t ce = b.temporary("ce", {});
  b.emit(Opcode::CrossEntropy, {y, program.targets}, {ce}, {all});
  uint32_t gradNorm = b.temporary("grad_norm", {});
  uint32_t coef = b.temporary("clip_coef", {}), lr = b.temporary("lr", {});
  b.emit(Opcode::GlobalNorm, {dw1Total, dw3Total, dw2Total}, {gradNorm},
         {ep, ep, ep});
  b.emit(Opcode::ClipCoefficient, {gradNorm}, {coef}, {}, {1.0f});
  // A learning rate of 0: the updates leave the experts as they are, so
  // that the second step's checks see the first step's weights.
  b.emit(Opcode::LearningRate, {program.step}, {lr}, {0, 10}, {0.0f, 0.0f});
  const std::pair<uint32_t, uint32_t> updates[] = {
      {w1, dw1Total}, {w3, dw3Total}, {w2, dw2Total}};
  for (auto [weight, grad] : updates) {
    auto [m, s] = b.moments(weight);
    b.emit(Opcode::AdamW, {weight, grad, m, s, lr, coef, program.step}, {}, {},
           {0.9f, 0.95f, 1e-8f, 0.1f});
  }
  program.loss = ce;
  program.gradNorm = gradNorm;
  program.lr = lr;
  return program;
}

uint32_t bufferNamed(const Program &program, const std::string &name) {
  for (uint32_t i = 0; i < program.buffers.size(); ++i)
    if (program.buffers[i].name == name)
      return i;
  std::fprintf(stderr, "no buffer named '%s'\n", name.c_str());
  std::abort();
}

size_t instructionWith(const Program &program, Opcode opcode, size_t nth) {
  for (size_t i = 0; i < program.instructions.size(); ++i)
    if (program.instructions[i].opcode == opcode && nth-- == 0)
      return i;
  std::fprintf(stderr, "no instruction %s #%zu\n", opcodeName(opcode), nth);
  std::abort();
}

namespace {
using StringList = std::vector<flatbuffers::Offset<flatbuffers::String>>;
using AxesList = std::vector<flatbuffers::Offset<fb::Axes>>;

StringList strings(flatbuffers::FlatBufferBuilder &fbb, const AxisList &names) {
  StringList offsets;
  for (const std::string &name : names)
    offsets.push_back(fbb.CreateString(name));
  return offsets;
}

AxesList axesLists(flatbuffers::FlatBufferBuilder &fbb,
                   const std::vector<AxisList> &lists) {
  AxesList offsets;
  for (const AxisList &axes : lists) {
    StringList names = strings(fbb, axes);
    offsets.push_back(fb::CreateAxesDirect(fbb, &names));
  }
  return offsets;
}
} // namespace

std::vector<uint8_t> serialize(const Program &program,
                               const ForeignOpTable &foreign) {
  // The number the writer's table gives `opcode`.
  auto numberOf = [&](Opcode opcode) {
    if (foreign.swapped && opcode == foreign.swapped->first)
      return foreign.swapped->second;
    if (foreign.swapped && opcode == foreign.swapped->second)
      return foreign.swapped->first;
    return opcode;
  };
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::Buffer>> buffers;
  for (const Buffer &buffer : program.buffers) {
    // Left out when empty, so that an unpartitioned program is exactly
    // what a version 1.0 writer produced.
    AxesList split = axesLists(fbb, buffer.split);
    buffers.push_back(fb::CreateBufferDirect(
        fbb, buffer.name.c_str(), static_cast<fb::BufferKind>(buffer.kind),
        static_cast<fb::DType>(buffer.dtype), &buffer.shape, buffer.offset,
        static_cast<fb::Init>(buffer.init), buffer.initStd, buffer.weightDecay,
        split.empty() ? nullptr : &split, buffer.master));
  }
  std::vector<flatbuffers::Offset<fb::Instruction>> instructions;
  for (const Instruction &instruction : program.instructions)
    instructions.push_back(fb::CreateInstructionDirect(
        fbb, static_cast<fb::Opcode>(numberOf(instruction.opcode)),
        &instruction.operands,
        &instruction.results, &instruction.intAttrs, &instruction.floatAttrs,
        instruction.location.c_str()));
  const ModelInfo &m = program.model;
  auto model = fb::CreateModelInfoDirect(
      fbb, m.name.c_str(), m.vocab, m.hidden, m.layers, m.heads, m.kvHeads,
      m.experts, m.topK, m.ffn, m.batch, m.seq, m.totalParams, m.activeParams,
      m.flopsPerStep, m.configJson.c_str());
  StringList meshAxes = strings(fbb, program.meshAxes);
  AxesList groups = axesLists(fbb, program.groups);
  StringList batchAxes = strings(fbb, program.batchAxes);
  bool partitioned = !program.meshAxes.empty() || !program.meshShape.empty();
  flatbuffers::Offset<fb::Pipeline> pipeline;
  if (program.pipeline.enabled()) {
    const Pipeline &p = program.pipeline;
    std::vector<fb::PipelinePhase> phases;
    for (PipelinePhase phase : p.instructionPhase)
      phases.push_back(static_cast<fb::PipelinePhase>(phase));
    std::vector<flatbuffers::Offset<fb::PipelineRank>> ranks;
    for (const std::vector<PipelineAction> &actions : p.ranks) {
      std::vector<fb::PipelineAction> encoded;
      for (const PipelineAction &action : actions)
        encoded.emplace_back(static_cast<fb::PipelineActionKind>(action.kind),
                             action.chunk, action.microbatch);
      ranks.push_back(fb::CreatePipelineRankDirect(fbb, &encoded));
    }
    pipeline = fb::CreatePipelineDirect(
        fbb, p.stages, p.virtualStages, p.microbatches, p.schedule.c_str(),
        &p.instructionStage, &phases, &ranks);
  }
  std::vector<Opcode> opcodes;
  for (const Instruction &instruction : program.instructions)
    opcodes.push_back(instruction.opcode);
  artifact::OpcodeEntries entries = artifact::writeOpcodeEntries(fbb, opcodes);
  if (foreign.swapped || foreign.relaidOut || foreign.unrecorded ||
      foreign.extraNumber) {
    // The entries of the other table: each opcode's name and layout under
    // the number that table gives it.
    entries.clear();
    std::sort(opcodes.begin(), opcodes.end(), [&](Opcode a, Opcode b) {
      return numberOf(a) < numberOf(b);
    });
    opcodes.erase(std::unique(opcodes.begin(), opcodes.end()), opcodes.end());
    for (Opcode opcode : opcodes) {
      if (foreign.unrecorded == opcode)
        continue;
      const ops::OpInfo &info = ops::opInfo(opcode);
      uint64_t layout = info.layoutHash;
      if (foreign.relaidOut == opcode)
        layout ^= 1;
      entries.push_back(fb::CreateOpcodeEntry(
          fbb, static_cast<fb::Opcode>(numberOf(opcode)),
          fbb.CreateString(info.name), layout));
    }
    if (foreign.extraNumber)
      entries.push_back(fb::CreateOpcodeEntry(
          fbb, static_cast<fb::Opcode>(*foreign.extraNumber),
          fbb.CreateString("FutureOp"), 0));
  }
  auto root = fb::CreateProgramDirect(
      fbb, program.versionMajor, program.versionMinor, program.producer.c_str(),
      model, &buffers, &instructions, program.arenaBytes, program.tokens,
      program.targets, program.step, program.loss, program.gradNorm, program.lr,
      program.seed, partitioned ? &meshAxes : nullptr,
      partitioned ? &program.meshShape : nullptr,
      groups.empty() ? nullptr : &groups,
      batchAxes.empty() ? nullptr : &batchAxes, pipeline, &entries,
      program.target.empty() ? nullptr : program.target.c_str());
  fb::FinishProgramBuffer(fbb, root);
  std::vector<uint8_t> bytes(fbb.GetBufferPointer(),
                             fbb.GetBufferPointer() + fbb.GetSize());
  reseal(bytes, /*sealed=*/false);
  return bytes;
}

void reseal(std::vector<uint8_t> &bytes, bool sealed) {
  if (sealed)
    bytes.resize(bytes.size() - artifact::kSealSize);
  std::array<uint8_t, artifact::kSealSize> seal =
      artifact::sealFor(bytes.data(), bytes.size());
  bytes.insert(bytes.end(), seal.begin(), seal.end());
}

/// The MoE program with DeepSeek-V3's router on the same logits after the
/// update: sigmoid scores, a selection bias, the top-2 among the experts of
/// the better of two groups, renormalised and scaled weights, and its
/// gradient (the model programs route as Mixtral), with the router's load
/// counted (ExpertLoad) and the bias balanced on it (ExpertLoadUpdate).
Program makeScoredRouterProgram() {
  Program program = makeMoeProgram();
  ProgramBuilder b(program);
  uint32_t logits = bufferNamed(program, "router_logits");
  uint32_t dweights = bufferNamed(program, "droute_weights");
  uint32_t dprobs = bufferNamed(program, "dprobs");
  const std::vector<int64_t> &shape = program.buffers[logits].shape;
  std::vector<int64_t> routed = program.buffers[dweights].shape;
  int64_t experts = shape.back(), topK = routed.back();
  // Router state, as moec declares it: persistent, zeros, not trained (the
  // second step selects with the bias the first one moved).
  uint32_t bias = b.state("router.bias", {experts}, {});
  uint32_t load = b.state("router.load", {experts}, {});
  uint32_t probs = b.temporary("scores", shape);
  uint32_t weights = b.temporary("scored_weights", routed);
  uint32_t ids = b.temporary("scored_ids", routed, DType::I32);
  uint32_t dlogits = b.temporary("dscored_logits", shape);
  int64_t sigmoid = static_cast<int64_t>(RouterScoring::Sigmoid);
  const float scale = 2.5f;
  // ints: top_k, scoring, normalize, groups, top_groups.
  b.emit(Opcode::ScoredRouter, {logits, bias}, {probs, weights, ids},
         {topK, sigmoid, 1, 2, 1}, {/*capacity_factor=*/0.0f, scale});
  b.emit(Opcode::ExpertLoad, {ids, load}, {});
  b.emit(Opcode::ScoredRouterGrad, {dweights, probs, dprobs, bias}, {dlogits},
         {topK, sigmoid, 1, 2, 1}, {scale});
  b.emit(Opcode::ExpertLoadUpdate, {load, bias}, {}, {}, {/*rate=*/1e-3f});
  return program;
}

} // namespace moe::rt::testing
