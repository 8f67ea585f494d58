//===- Documents.cpp - the documents of moe-data's input files ------------===//
#include "Documents.h"

#include "moe/Runtime/Data/TextCorpus.h"
#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/Text/Utf8.h"

#include "absl/strings/str_cat.h"

#include <nlohmann/json.hpp>

namespace moe::tools {

namespace {

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

absl::Status readJsonLines(const std::string &path, const std::string &text,
                           const std::string &jsonKey,
                           std::vector<std::string> &documents) {
  size_t begin = 0;
  for (int64_t line = 1; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos)
      end = text.size();
    std::string_view content(text.data() + begin, end - begin);
    begin = end + 1;
    if (content.find_first_not_of(" \t\r") == std::string_view::npos)
      continue;
    nlohmann::json object = nlohmann::json::parse(content, nullptr, false);
    std::string where = absl::StrCat("'", path, "' line ", line);
    if (object.is_discarded())
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": malformed JSON"));
    if (!object.is_object() || !object.contains(jsonKey) ||
        !object[jsonKey].is_string())
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": no string field \"", jsonKey, "\" (--json-key)"));
    documents.push_back(object[jsonKey].get<std::string>());
  }
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::vector<std::string>>
readDocuments(const std::vector<std::string> &inputs,
              rt::data::DatasetFormat format, const std::string &jsonKey,
              std::vector<std::string> *utf8Warnings) {
  std::vector<std::string> documents;
  for (const std::string &path : inputs) {
    absl::StatusOr<rt::io::MappedFile> file = rt::io::MappedFile::open(path);
    if (!file.ok())
      return file.status();
    std::string text(reinterpret_cast<const char *>(file->data()),
                     file->size());
    if (utf8Warnings) {
      rt::text::Utf8Errors errors = rt::text::findUtf8Errors(text);
      if (errors.count > 0) {
        utf8Warnings->push_back(absl::StrCat(
            "'", path, "' is not valid UTF-8: ", errors.count,
            " malformed sequence(s), the first at byte offset ",
            errors.firstOffset,
            "; each was read as U+FFFD, as Python's errors=\"replace\" "
            "reads it"));
        text = rt::text::utf8Lossy(text);
      }
    }
    if (endsWith(path, ".jsonl")) {
      if (absl::Status status = readJsonLines(path, text, jsonKey, documents);
          !status.ok())
        return status;
    } else if (format == rt::data::DatasetFormat::Megatron) {
      for (std::string &paragraph : rt::data::splitParagraphs(text))
        documents.push_back(std::move(paragraph));
    } else {
      documents.push_back(std::move(text));
    }
  }
  return documents;
}

} // namespace moe::tools
