//===- Decoder.h - one token at a time with a KV cache ----------*- C++ -*-===//
//
// moe-run generate decodes with the trained step's own forward
// instructions, run for one token at a time: those the LM head's input
// depends on (engine::dependencySlice), each temporary resized from the
// step's [batch, seq, ...] rows to one token's [1, 1, ...]. Two kinds of
// instruction see the sequence and are run here instead of by the step's
// kernels: RoPE rotates the token by its position, and attention appends
// the token's keys and values to its layer's cache and attends over the
// cache (cpu::attentionBlockForward, the query placed at the position).
// The LM head gives the logits: the fused head's GEMM against the output
// embedding, or the unfused head's logits.
//
// What a one-token program cannot mean is refused when the decoder is
// made, naming it: a program over several ranks or with collectives
// (context parallelism's ring attention among them), BF16 buffers, or a
// temporary that is not per token.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_DECODER_H
#define MOE_RUNTIME_ENGINE_DECODER_H

#include "moe/Runtime/Engine/Executor.h"

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace moe::rt::engine {

class Decoder {
public:
  /// A decoder over the weights `executor` holds (loaded or trained); the
  /// executor must outlive it.
  static absl::StatusOr<std::unique_ptr<Decoder>> create(Executor &executor);
  /// What create() refuses first, checked before the weights are
  /// allocated: a program over several ranks or with collectives.
  static absl::Status checkRanks(const Program &program);
  ~Decoder();

  /// Feeds `token` at the next position (0 first) and returns the logits
  /// of the token after it, valid until the next call. Errors: a token
  /// outside the vocabulary, a position past `maxPositions()`.
  absl::StatusOr<absl::Span<const float>> feed(int32_t token);

  /// Tokens fed so far.
  int64_t position() const { return fed; }
  int64_t vocab() const { return vocabSize; }
  /// The sequence length the model was compiled for: how far the cache
  /// goes.
  int64_t maxPositions() const { return maxLength; }

private:
  struct State;
  explicit Decoder(std::unique_ptr<State> state);
  std::unique_ptr<State> state;
  int64_t fed = 0, vocabSize = 0, maxLength = 0;
};

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_DECODER_H
