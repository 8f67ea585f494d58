//===- ShardingSeeds.cpp - the parallelism policy as sharding seeds -------===//
//
// What an experienced Megatron/TorchTitan user would choose, stated once:
//   * data parallelism: the batch is split over every data-like axis
//     (dp, fsdp, and ep, onto which experts fold);
//   * Megatron tensor parallelism over tp: q/k/v (MLA's q_b and kv_b) and
//     the MLP's gate/up are column-parallel (output features split),
//     o_proj and down_proj
//     row-parallel (input features split), experts split their width;
//   * expert parallelism over ep: the stacked experts split along experts;
//   * FSDP over fsdp: every weight and its AdamW moments are stored split
//     along their first splittable dimension and gathered before use;
//   * Megatron sequence parallelism over tp: the residual stream (from the
//     embedding on) splits the sequence, so norms, residual adds and the
//     loss run on 1/tp of the tokens; the partitioner then gathers the
//     sequence before column-parallel linears and reduce-scatters it after
//     row-parallel ones;
//   * context parallelism over cp: every activation splits the sequence
//     (load-balanced for the causal mask, outside tp's split), and
//     attention gathers its keys and values over cp.
// Everything else (embeddings, LM head, norms, router) stays whole.
//
//===----------------------------------------------------------------------===//
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Per-dimension axes of one tensor, and why each dimension is split.
struct Seed {
  SmallVector<SmallVector<StringRef>> dims;
  SmallVector<std::string> why;
};

/// The parts of the mesh the policy uses.
struct Axes {
  SmallVector<StringRef> data;
  /// Token axes the experts fold over, after ep.
  SmallVector<StringRef> folded;
  std::optional<int64_t> tp, ep, fsdp, cp;
  int64_t dataRanks = 1;
};
} // namespace

static Axes axesOf(MeshOp mesh) {
  Axes axes;
  for (auto [attr, size] : llvm::zip(mesh.getAxes(), mesh.getShape())) {
    StringRef name = cast<StringAttr>(attr).getValue();
    if (name == kDataAxis || name == kFsdpAxis || name == kExpertAxis) {
      axes.data.push_back(name);
      axes.dataRanks *= size;
    }
    if (name == kTensorAxis)
      axes.tp = size;
    if (name == kExpertAxis)
      axes.ep = size;
    if (name == kFsdpAxis)
      axes.fsdp = size;
    if (name == kContextAxis)
      axes.cp = size;
  }
  return axes;
}

static int64_t modelSize(ModuleOp module, StringRef key) {
  auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName);
  auto value = model ? model.getAs<IntegerAttr>(key) : IntegerAttr();
  return value ? value.getInt() : 0;
}

/// Megatron's split of a weight over tp, by its HF name; none for weights
/// that stay whole.
static std::optional<std::pair<unsigned, const char *>>
tensorParallelDim(StringRef name) {
  // Stacked experts [E, F, H] and [E, H, F], by any family's names.
  if (name.contains("{e}")) {
    for (const HfNames &names : kHfFamilies) {
      if (name.ends_with((names.expertGate + ".weight").str()) ||
          name.ends_with((names.expertUp + ".weight").str()))
        return std::make_pair(1u, "expert width split over tp");
      if (name.ends_with((names.expertDown + ".weight").str()))
        return std::make_pair(2u, "expert width split over tp");
    }
    return std::nullopt;
  }
  // Multi-head latent attention's up-projections split their heads too;
  // its down-projections (q_a_proj, kv_a_proj_with_mqa) stay whole, as in
  // Megatron-Core's MLA.
  if (name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight") ||
      name.ends_with("v_proj.weight") || name.ends_with("gate_proj.weight") ||
      name.ends_with("up_proj.weight") || name.ends_with("q_b_proj.weight") ||
      name.ends_with("kv_b_proj.weight"))
    return std::make_pair(0u, "column-parallel linear (Megatron): output "
                              "features split over tp");
  if (name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight"))
    return std::make_pair(1u, "row-parallel linear (Megatron): input "
                              "features split over tp");
  return std::nullopt;
}

/// Checks that `count` of something splits `ways` ways, naming both.
static LogicalResult expectDivisible(Operation *op, StringRef what,
                                     int64_t count, StringRef axis,
                                     int64_t ways, StringRef because) {
  if (ways <= 1 || count % ways == 0)
    return success();
  return op->emitError() << what << " (" << count << ") is not divisible by "
                         << axis << " (" << ways << "): " << because;
}

/// The storage seed of one weight.
static FailureOr<Seed> seedWeight(ParamOp param, const Axes &axes,
                                  MeshOp mesh) {
  RankedTensorType type = param.getTensorType();
  Seed seed;
  seed.dims.resize(type.getRank());
  seed.why.resize(type.getRank());
  auto add = [&](unsigned dim, StringRef axis, StringRef why) {
    seed.dims[dim].push_back(axis);
    if (!why.empty())
      seed.why[dim] += (seed.why[dim].empty() ? "" : "; ") + why.str();
  };
  auto partsOf = [&](unsigned dim) {
    int64_t parts = 1;
    for (StringRef axis : seed.dims[dim])
      parts *= *mesh.getAxisSize(axis);
    return parts;
  };
  StringRef name = param.getSymName();
  bool stacked = name.contains("{e}");
  if (stacked && axes.ep)
    add(0, kExpertAxis, "expert parallel: experts split over ep");
  for (StringRef axis : axes.folded)
    if (stacked)
      add(0, axis,
          ("expert parallelism folded over " + axis +
           " (MoE parallel folding): the experts split over its ranks too")
              .str());
  // Experts folded over tp split over its ranks instead of by width
  // (expert-TP 1, as Megatron's MoE parallel folding).
  bool foldedOverTp = stacked && llvm::is_contained(axes.folded, kTensorAxis);
  if (axes.tp && !foldedOverTp)
    if (auto split = tensorParallelDim(name))
      add(split->first, kTensorAxis, split->second);
  // Experts folded over fsdp are stored split over it already.
  bool folded = llvm::any_of(seed.dims, [](const SmallVector<StringRef> &dim) {
    return llvm::is_contained(dim, kFsdpAxis);
  });
  if (axes.fsdp && !folded) {
    // FSDP stores the first dimension that still splits evenly; a weight
    // too small for that is stored whole (its reason is the missing split).
    // The ep ranks hold other tokens and the same non-expert weights, so
    // those are stored split over fsdp x ep, as TorchTitan's FSDP spans the
    // ranks its expert parallelism borrows.
    bool overEp = axes.ep && !stacked;
    int64_t ways = *axes.fsdp * (overEp ? *axes.ep : 1);
    for (unsigned dim = 0; dim < seed.dims.size(); ++dim) {
      if ((type.getDimSize(dim) / partsOf(dim)) % ways != 0)
        continue;
      add(dim, kFsdpAxis,
          overEp ? "FSDP: stored split over fsdp x ep (the ranks expert "
                   "parallelism spreads the experts over), gathered before use"
                 : "FSDP: stored split over fsdp, gathered before use");
      if (overEp)
        add(dim, kExpertAxis, "");
      break;
    }
  }
  for (unsigned dim = 0; dim < seed.dims.size(); ++dim)
    if (type.getDimSize(dim) % partsOf(dim) != 0)
      return param.emitError()
             << "dimension " << dim << " of " << name << " (size "
             << type.getDimSize(dim) << ") cannot be split " << partsOf(dim)
             << " ways";
  return seed;
}

/// ZeRO-1's storage of a weight's optimizer state: the weight's own
/// sharding with dimension 0 split further over the data axes the weight
/// is whole on (dp, and ep for the weights every token reads), minor to
/// its own axes there, so that a rank's block is contiguous rows of its
/// copy. None when no such axis has more than one rank, or dimension 0 does
/// not divide among them.
static std::optional<std::pair<ShardingAttr, ArrayAttr>>
zeroOneSeed(ParamOp weight, ShardingAttr sharding, ArrayAttr whys,
            const Axes &axes, MeshOp mesh) {
  RankedTensorType type = weight.getTensorType();
  if (type.getRank() == 0)
    return std::nullopt;
  SmallVector<SmallVector<StringRef>> dims;
  for (unsigned d = 0; d < type.getRank(); ++d)
    dims.push_back(sharding.axesOf(d));
  auto held = [&](StringRef axis) {
    return llvm::any_of(dims, [&](const SmallVector<StringRef> &dim) {
      return llvm::is_contained(dim, axis);
    });
  };
  SmallVector<StringRef> extra;
  for (StringRef axis : axes.data)
    if (*mesh.getAxisSize(axis) > 1 && !held(axis))
      extra.push_back(axis);
  if (extra.empty())
    return std::nullopt;
  int64_t parts = 1;
  dims[0].append(extra.begin(), extra.end());
  for (StringRef axis : dims[0])
    parts *= *mesh.getAxisSize(axis);
  if (type.getDimSize(0) % parts != 0)
    return std::nullopt;
  SmallVector<Attribute> reasons(whys.begin(), whys.end());
  std::string first = cast<StringAttr>(reasons[0]).getValue().str();
  reasons[0] = StringAttr::get(
      mesh.getContext(),
      (first.empty() ? "" : first + "; ") +
          "ZeRO-1: the optimizer state split over " + llvm::join(extra, ", ") +
          " (the ranks holding the same weight), the updated blocks "
          "gathered into the whole weight");
  return std::make_pair(ShardingAttr::get(sharding.getMesh(), dims),
                        ArrayAttr::get(mesh.getContext(), reasons));
}

LogicalResult mlir::moe::seedShardings(ModuleOp module, func::FuncOp step,
                                       MeshOp mesh,
                                       ArrayRef<std::string> foldExperts,
                                       bool zeroOne) {
  Axes axes = axesOf(mesh);
  if (zeroOne && axes.fsdp)
    return mesh.emitError()
           << "ZeRO-1 splits the optimizer state over the data ranks and "
              "keeps the weights whole, and FSDP splits both over fsdp: use "
              "dp with ZeRO-1, or fsdp alone";
  if (zeroOne && axes.dataRanks == 1)
    return mesh.emitError()
           << "ZeRO-1 splits the optimizer state over the data ranks, and "
              "this mesh has none (dp or ep above 1)";
  int64_t folded = 1;
  for (const std::string &axis : foldExperts) {
    std::optional<int64_t> size = mesh.getAxisSize(axis);
    if (!size || (axis != kDataAxis && axis != kFsdpAxis &&
                  axis != kContextAxis && axis != kTensorAxis)) {
      return mesh.emitError()
             << "experts fold over '" << axis
             << "', which is not a token axis of the mesh: they fold over "
                "its dp, fsdp, cp or tp axes (their ranks hold other tokens; "
                "tp's between blocks, sequence parallel)";
    }
    if (llvm::is_contained(axes.folded, axis))
      return mesh.emitError() << "experts fold over '" << axis << "' twice";
    // The mesh's own copy of the name, which outlives `foldExperts`.
    for (StringRef name : mesh.getAxes().getAsValueRange<StringAttr>())
      if (name == axis)
        axes.folded.push_back(name);
    folded *= *size;
  }
  // cp's split is load-balanced where it leads a dimension's axes and
  // nowhere else (Partition.cpp): folded in, it must lead the experts'.
  if (llvm::is_contained(axes.folded, kContextAxis) &&
      (axes.ep || axes.folded.front() != kContextAxis))
    return mesh.emitError()
           << "experts fold over 'cp' only as their outermost split: list it "
              "first (--fold-experts=cp,dp), on a mesh without ep";
  if (folded > 1 && failed(expectDivisible(
                        mesh, "experts", modelSize(module, "experts"),
                        "ep x the folded axes", axes.ep.value_or(1) * folded,
                        "expert parallelism gives each rank an equal "
                        "share of the experts")))
    return failure();
  MLIRContext *ctx = module.getContext();
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());

  // Whole-model constraints, stated in the model's own terms.
  if (axes.tp) {
    const char *why = "tensor parallelism splits attention by key/value head "
                      "groups and the MLPs by width";
    if (failed(expectDivisible(mesh, "heads", modelSize(module, "heads"),
                               kTensorAxis, *axes.tp, why)) ||
        failed(expectDivisible(mesh, "kv_heads", modelSize(module, "kv_heads"),
                               kTensorAxis, *axes.tp, why)) ||
        failed(expectDivisible(mesh, "ffn", modelSize(module, "ffn"),
                               kTensorAxis, *axes.tp, why)))
      return failure();
  }
  if (axes.ep &&
      failed(expectDivisible(mesh, "experts", modelSize(module, "experts"),
                             kExpertAxis, *axes.ep,
                             "expert parallelism gives each rank of ep an "
                             "equal share of the experts")))
    return failure();

  // The batch: tokens, targets and document positions split over all
  // data-like axes (the step counter is a scalar).
  for (unsigned arg = 0; arg < step.getNumArguments(); ++arg) {
    auto type = cast<ShapedType>(step.getArgumentTypes()[arg]);
    // Always seeded, also with no data axes: the runtime feeds each rank
    // whole rows, so only the batch dimension may ever be split.
    if (type.getRank() < 1)
      continue;
    if (type.getDimSize(0) % axes.dataRanks != 0) {
      InFlightDiagnostic error = step.emitError();
      auto microbatches =
          module->getAttrOfType<IntegerAttr>(kMicrobatchesAttrName);
      if (microbatches && microbatches.getInt() > 1)
        error << "a microbatch (" << type.getDimSize(0)
              << " sequences: the batch of "
              << type.getDimSize(0) * microbatches.getInt() << " over "
              << microbatches.getInt() << " microbatches)";
      else
        error << "the batch (" << type.getDimSize(0) << ")";
      return error << " is not divisible by the data-parallel ranks ("
                   << axes.dataRanks << " over "
                   << llvm::join(axes.data, " x ") << ")";
    }
    SmallVector<SmallVector<StringRef>> dims(type.getRank());
    dims[0] = axes.data;
    step.setArgAttr(arg, kShardingAttrName, ShardingAttr::get(meshRef, dims));
    step.setArgAttr(arg, kShardingOriginAttrName,
                    StringAttr::get(ctx, axes.data.empty()
                                             ? std::string("whole on every rank: no data-parallel axes")
                                             : "data parallel: batch split over " +
                                                   llvm::join(axes.data, ", ")));
  }

  // The sequence: split over cp (context parallelism, load-balanced: rank
  // c holds chunks c and 2 cp - 1 - c), then over tp (sequence
  // parallelism), by a weak seed on the embeddings, so the tensor parallel
  // splits of the linears win where both apply (their inputs gather tp's
  // part only) and cp splits every token-wise op down to attention.
  if (axes.cp || axes.tp) {
    int64_t cp = axes.cp.value_or(1), tp = axes.tp.value_or(1);
    WalkResult walk = step.walk([&](EmbeddingOp embedding) {
      auto type = cast<ShapedType>(embedding.getType());
      int64_t seq = type.getDimSize(1);
      if (seq % (2 * cp) != 0 && cp > 1) {
        embedding.emitError()
            << "seq (" << seq << ") is not divisible by 2 * cp (" << 2 * cp
            << "): context parallelism gives each rank two of 2 * cp "
               "equal chunks of the sequence";
        return WalkResult::interrupt();
      }
      if ((seq / cp) % tp != 0) {
        InFlightDiagnostic error = embedding.emitError();
        if (cp > 1)
          error << "seq / cp (" << seq / cp << ")";
        else
          error << "seq (" << seq << ")";
        error << " is not divisible by tp (" << tp
              << "): sequence parallelism splits the sequence";
        return WalkResult::interrupt();
      }
      SmallVector<SmallVector<StringRef>> dims(type.getRank());
      dims[0] = axes.data;
      SmallVector<std::string> split;
      if (axes.cp) {
        dims[1].push_back(kContextAxis);
        split.push_back("context parallel: the sequence splits over cp, "
                        "rank c holding chunks c and 2 cp - 1 - c");
      }
      if (axes.tp) {
        dims[1].push_back(kTensorAxis);
        split.push_back("sequence parallel (Megatron): the residual stream "
                        "splits the sequence over tp");
      }
      embedding->setAttr(kShardingSeedAttrName,
                         ShardingAttr::get(meshRef, dims));
      SmallVector<Attribute> whys(type.getRank(), StringAttr::get(ctx, ""));
      whys[0] = StringAttr::get(ctx, "data parallel: batch split over " +
                                         llvm::join(axes.data, ", "));
      whys[1] = StringAttr::get(ctx, llvm::join(split, "; "));
      embedding->setAttr(kShardingSeedOriginAttrName,
                         ArrayAttr::get(ctx, whys));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }

  // Weights, then their moments, which live where their weight lives.
  llvm::StringMap<std::pair<ShardingAttr, ArrayAttr>> weightSeeds;
  for (ParamOp param : module.getOps<ParamOp>()) {
    if (param.getKind() != ParamKind::weight)
      continue;
    SmallVector<Attribute> whys;
    if (param.getSharding()) {
      whys.assign(param.getTensorType().getRank(),
                  StringAttr::get(ctx, "user pin"));
    } else {
      FailureOr<Seed> seed = seedWeight(param, axes, mesh);
      if (failed(seed))
        return failure();
      param.setShardingAttr(ShardingAttr::get(meshRef, seed->dims));
      for (const std::string &why : seed->why)
        whys.push_back(StringAttr::get(ctx, why));
    }
    auto origin = ArrayAttr::get(ctx, whys);
    param->setAttr(kParamShardingOriginAttrName, origin);
    weightSeeds[param.getSymName()] = {*param.getSharding(), origin};
  }
  // Where each weight's optimizer state lives: with the weight, or split
  // further by ZeRO-1.
  llvm::StringMap<std::pair<ShardingAttr, ArrayAttr>> stateSeeds = weightSeeds;
  if (zeroOne)
    for (ParamOp param : module.getOps<ParamOp>()) {
      auto it = weightSeeds.find(param.getSymName());
      if (it == weightSeeds.end())
        continue;
      if (auto seed = zeroOneSeed(param, it->second.first, it->second.second,
                                  axes, mesh))
        stateSeeds[param.getSymName()] = *seed;
    }
  for (ParamOp param : module.getOps<ParamOp>()) {
    // A BF16 working copy is its master, rounded: it is stored (and FSDP
    // all-gathers it) where and why the master is. Under ZeRO-1 the copy
    // stays where the weight is and the fp32 master joins the optimizer
    // state.
    if (param.getKind() == ParamKind::working_copy) {
      StringRef master = param.getMasterAttr().getValue();
      auto it = weightSeeds.find(master);
      if (it == weightSeeds.end())
        continue;
      param.setShardingAttr(it->second.first);
      param->setAttr(kParamShardingOriginAttrName, it->second.second);
      if (auto masterParam = module.lookupSymbol<ParamOp>(master)) {
        masterParam.setShardingAttr(stateSeeds[master].first);
        masterParam->setAttr(kParamShardingOriginAttrName,
                             stateSeeds[master].second);
      }
      continue;
    }
    // FP8 amax histories follow their experts when partitioned.
    if (param.getKind() != ParamKind::optimizer_state)
      continue;
    StringRef weight = param.getSymName();
    weight = weight.drop_back(weight.ends_with(".exp_avg_sq")
                                  ? StringRef(".exp_avg_sq").size()
                                  : StringRef(".exp_avg").size());
    auto it = stateSeeds.find(weight);
    if (it == stateSeeds.end())
      continue;
    // Moments live where their weight lives, for the same reasons.
    param.setShardingAttr(it->second.first);
    param->setAttr(kParamShardingOriginAttrName, it->second.second);
  }
  return success();
}
