//===- Documents.h - the documents of moe-data's input files ----*- C++ -*-===//
#ifndef MOE_TOOLS_MOE_DATA_DOCUMENTS_H
#define MOE_TOOLS_MOE_DATA_DOCUMENTS_H

#include "moe/Runtime/Data/TokenDataset.h"

#include "absl/status/statusor.h"

#include <string>
#include <vector>

namespace moe::tools {

/// The documents of `inputs` in order: one per line of a .jsonl file (the
/// string field `jsonKey`, as Megatron's preprocess_data reads them); for
/// other files one per paragraph for Megatron output and the whole file for
/// flat output. With `utf8Warnings`, text is read as Python reads it with
/// errors="replace": each maximal ill-formed UTF-8 sequence becomes U+FFFD,
/// and each file that had some gets a warning with their count and the
/// offset of the first (a tokenizer's text is Unicode; HF's takes a str).
absl::StatusOr<std::vector<std::string>>
readDocuments(const std::vector<std::string> &inputs,
              rt::data::DatasetFormat format, const std::string &jsonKey,
              std::vector<std::string> *utf8Warnings = nullptr);

} // namespace moe::tools

#endif // MOE_TOOLS_MOE_DATA_DOCUMENTS_H
