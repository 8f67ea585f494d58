//===- Synth.cpp - moe-data synth: write the synthetic corpus -------------===//
#include "Commands.h"

#include "moe/Runtime/Data/TextCorpus.h"

namespace moe::tools {

absl::Status runSynth(const SynthOptions &options, std::ostream &out) {
  std::vector<std::string> paragraphs =
      rt::data::synthesizeParagraphs(options.seed, options.tokens);
  return writeByteCorpus(paragraphs, options.output, out);
}

} // namespace moe::tools
