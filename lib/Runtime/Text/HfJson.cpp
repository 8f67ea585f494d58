//===- HfJson.cpp - read and check an HF tokenizer.json -------------------===//
//
// Every object's fields are checked against the ones implemented: an
// unknown field, type or option value is an error naming the file and the
// JSON path of the field, and listing what is supported.
//
//===----------------------------------------------------------------------===//
#include "HfTokenizer.h"

#include "moe/Runtime/IO/File.h"
#include "moe/Runtime/Text/Utf8.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace moe::rt::text {

namespace {

using nlohmann::json;

/// GPT-2's pre-tokenizer regex, which ByteLevel(use_regex=true) splits with.
constexpr const char *kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

const char *jsonTypeName(const json &value) { return value.type_name(); }

class Reader {
public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  absl::Status error(const std::string &field, const std::string &message) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": ", field, " ", message));
  }

  absl::Status expectObject(const json &value, const std::string &field) {
    if (!value.is_object())
      return error(
          field, absl::StrCat("must be an object, not ", jsonTypeName(value)));
    return absl::OkStatus();
  }

  /// Refuses fields of `object` outside `known`.
  absl::Status checkFields(const json &object, const std::string &field,
                           const std::vector<std::string> &known) {
    if (absl::Status status = expectObject(object, field); !status.ok())
      return status;
    for (const auto &item : object.items())
      if (std::find(known.begin(), known.end(), item.key()) == known.end())
        return error(absl::StrCat(field, ".", item.key()),
                     absl::StrCat("is not a supported field (supported: ",
                                  absl::StrJoin(known, ", "), ")"));
    return absl::OkStatus();
  }

  /// A Sequence of `object`: its array `key` (and no other field besides
  /// "type"), each element read by `each(element, itsField)`.
  template <typename Each>
  absl::Status sequence(const json &object, const std::string &field,
                        const std::string &key, Each each) {
    if (absl::Status s = checkFields(object, field, {"type", key}); !s.ok())
      return s;
    if (!object.contains(key) || !object[key].is_array())
      return error(absl::StrCat(field, ".", key), "must be an array");
    for (size_t i = 0; i < object[key].size(); ++i)
      if (absl::Status s =
              each(object[key][i], absl::StrCat(field, ".", key, "[", i, "]"));
          !s.ok())
        return s;
    return absl::OkStatus();
  }

  /// A Metaspace pre-tokenizer's or decoder's fields (the same in both):
  /// its replacement and prepend scheme.
  absl::Status metaspace(const json &object, const std::string &field,
                         std::string &replacement, PrependScheme &scheme);

  absl::StatusOr<std::string> string(const json &object, const std::string &key,
                                     const std::string &field) {
    std::string where = absl::StrCat(field, ".", key);
    if (!object.contains(key))
      return error(where, "is missing");
    if (!object[key].is_string())
      return error(where, absl::StrCat("must be a string, not ",
                                       jsonTypeName(object[key])));
    return object[key].get<std::string>();
  }

  absl::StatusOr<bool> boolean(const json &object, const std::string &key,
                               const std::string &field, bool fallback) {
    if (!object.contains(key) || object[key].is_null())
      return fallback;
    if (!object[key].is_boolean())
      return error(absl::StrCat(field, ".", key),
                   absl::StrCat("must be true or false, not ",
                                jsonTypeName(object[key])));
    return object[key].get<bool>();
  }

  absl::StatusOr<int64_t> integer(const json &object, const std::string &key,
                                  const std::string &field) {
    std::string where = absl::StrCat(field, ".", key);
    if (!object.contains(key))
      return error(where, "is missing");
    if (!object[key].is_number_integer())
      return error(where, absl::StrCat("must be an integer, not ",
                                       jsonTypeName(object[key])));
    return object[key].get<int64_t>();
  }

  /// A {"String": s} or {"Regex": r} pattern.
  absl::StatusOr<std::shared_ptr<RegexSplitter>>
  pattern(const json &object, const std::string &key,
          const std::string &field) {
    std::string where = absl::StrCat(field, ".", key);
    if (!object.contains(key))
      return error(where, "is missing");
    const json &value = object[key];
    if (absl::Status status = checkFields(value, where, {"String", "Regex"});
        !status.ok())
      return status;
    if (value.size() != 1)
      return error(where, "must hold exactly one of String and Regex");
    if (value.contains("String")) {
      absl::StatusOr<std::string> text = string(value, "String", where);
      if (!text.ok())
        return text.status();
      // HF matches a String as an escaped regex, so "" matches the empty
      // text between characters.
      if (text->empty())
        return std::make_shared<RegexSplitter>(
            std::move(*RegexSplitter::create("")));
      return std::make_shared<RegexSplitter>(RegexSplitter::literal(*text));
    }
    absl::StatusOr<std::string> regex = string(value, "Regex", where);
    if (!regex.ok())
      return regex.status();
    absl::StatusOr<RegexSplitter> splitter = RegexSplitter::create(*regex);
    if (!splitter.ok())
      return error(absl::StrCat(where, ".Regex"),
                   std::string(splitter.status().message()));
    return std::make_shared<RegexSplitter>(std::move(*splitter));
  }

  /// prepend_scheme (always when absent, as in HF), which add_prefix_space
  /// false must agree with: HF refuses a file where they disagree.
  absl::StatusOr<PrependScheme> prependScheme(const json &object,
                                              const std::string &field) {
    PrependScheme scheme = PrependScheme::Always;
    std::string name = "always";
    if (object.contains("prepend_scheme")) {
      absl::StatusOr<std::string> read =
          string(object, "prepend_scheme", field);
      if (!read.ok())
        return read.status();
      name = *read;
      if (name == "first")
        scheme = PrependScheme::First;
      else if (name == "never")
        scheme = PrependScheme::Never;
      else if (name != "always")
        return error(absl::StrCat(field, ".prepend_scheme"),
                     absl::StrCat("'", name,
                                  "' is not supported (supported: first, "
                                  "always, never)"));
    }
    absl::StatusOr<bool> add = boolean(object, "add_prefix_space", field, true);
    if (!add.ok())
      return add.status();
    if (!*add && scheme != PrependScheme::Never)
      return error(absl::StrCat(field, ".add_prefix_space"),
                   absl::StrCat("false does not match prepend_scheme '", name,
                                "' (HF's tokenizers refuses it too; say "
                                "\"prepend_scheme\": \"never\")"));
    return scheme;
  }

  /// The "type" of a component, which must be one of `supported`.
  absl::StatusOr<std::string> type(const json &object, const std::string &field,
                                   const std::vector<std::string> &supported) {
    if (absl::Status status = expectObject(object, field); !status.ok())
      return status;
    absl::StatusOr<std::string> name = string(object, "type", field);
    if (!name.ok())
      return name.status();
    if (std::find(supported.begin(), supported.end(), *name) == supported.end())
      return error(absl::StrCat(field, ".type"),
                   absl::StrCat("'", *name, "' is not supported (supported: ",
                                absl::StrJoin(supported, ", "), ")"));
    return *name;
  }

  absl::Status normalizer(const json &object, const std::string &field,
                          std::vector<NormalizerStep> &steps);
  absl::Status preTokenizer(const json &object, const std::string &field,
                            std::vector<PreTokenizerStep> &steps);
  absl::Status decoder(const json &object, const std::string &field,
                       std::vector<DecoderStep> &steps);
  absl::Status postProcessor(const json &object, const std::string &field,
                             HfTokenizerParts &parts);
  absl::Status addedTokens(const json &array, HfTokenizerParts &parts);
  absl::StatusOr<BpeModel> model(const json &object);

private:
  std::string path_;
};

absl::Status Reader::metaspace(const json &object, const std::string &field,
                               std::string &replacement,
                               PrependScheme &scheme) {
  if (absl::Status s = checkFields(object, field,
                                   {"type", "replacement", "prepend_scheme",
                                    "split", "add_prefix_space", "str_rep"});
      !s.ok())
    return s;
  absl::StatusOr<std::string> read = string(object, "replacement", field);
  if (!read.ok())
    return read.status();
  // HF's replacement is one char: an empty one would never advance, and
  // HF's tokenizers refuses both that and a longer one.
  if (read->empty() || !isValidUtf8(*read) ||
      utf8CharLength(*read, 0) != read->size())
    return error(absl::StrCat(field, ".replacement"),
                 absl::StrCat("must be one character, not '", *read,
                              "' (HF's tokenizers refuses it too)"));
  absl::StatusOr<PrependScheme> readScheme = prependScheme(object, field);
  if (!readScheme.ok())
    return readScheme.status();
  replacement = *read;
  scheme = *readScheme;
  return absl::OkStatus();
}

absl::Status Reader::normalizer(const json &object, const std::string &field,
                                std::vector<NormalizerStep> &steps) {
  absl::StatusOr<std::string> type = this->type(
      object, field,
      {"Sequence", "Prepend", "Replace", "NFC", "NFD", "NFKC", "NFKD"});
  if (!type.ok())
    return type.status();
  for (auto [name, form] : {std::pair{"NFC", UnicodeForm::NFC},
                            std::pair{"NFD", UnicodeForm::NFD},
                            std::pair{"NFKC", UnicodeForm::NFKC},
                            std::pair{"NFKD", UnicodeForm::NFKD}}) {
    if (*type != name)
      continue;
    if (absl::Status s = checkFields(object, field, {"type"}); !s.ok())
      return s;
    NormalizerStep step{NormalizerStep::Kind::Unicode, "", nullptr};
    step.form = form;
    step.field = field;
    steps.push_back(std::move(step));
    return absl::OkStatus();
  }
  if (*type == "Sequence")
    return sequence(object, field, "normalizers",
                    [&](const json &element, const std::string &at) {
                      return normalizer(element, at, steps);
                    });
  if (*type == "Prepend") {
    if (absl::Status s = checkFields(object, field, {"type", "prepend"});
        !s.ok())
      return s;
    absl::StatusOr<std::string> text = string(object, "prepend", field);
    if (!text.ok())
      return text.status();
    if (text->empty())
      return error(absl::StrCat(field, ".prepend"),
                   "must not be empty (HF's tokenizers panics encoding text "
                   "with it)");
    steps.push_back({NormalizerStep::Kind::Prepend, *text, nullptr,
                     UnicodeForm::NFC, field});
    return absl::OkStatus();
  }
  if (absl::Status s =
          checkFields(object, field, {"type", "pattern", "content"});
      !s.ok())
    return s;
  absl::StatusOr<std::shared_ptr<RegexSplitter>> pattern =
      this->pattern(object, "pattern", field);
  if (!pattern.ok())
    return pattern.status();
  absl::StatusOr<std::string> content = string(object, "content", field);
  if (!content.ok())
    return content.status();
  steps.push_back({NormalizerStep::Kind::Replace, *content, *pattern,
                   UnicodeForm::NFC, field});
  return absl::OkStatus();
}

absl::Status Reader::preTokenizer(const json &object, const std::string &field,
                                  std::vector<PreTokenizerStep> &steps) {
  absl::StatusOr<std::string> type = this->type(
      object, field, {"Sequence", "ByteLevel", "Split", "Metaspace"});
  if (!type.ok())
    return type.status();
  if (*type == "Sequence")
    return sequence(object, field, "pretokenizers",
                    [&](const json &element, const std::string &at) {
                      return preTokenizer(element, at, steps);
                    });
  PreTokenizerStep step;
  if (*type == "ByteLevel") {
    if (absl::Status s = checkFields(
            object, field,
            {"type", "add_prefix_space", "trim_offsets", "use_regex"});
        !s.ok())
      return s;
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    absl::StatusOr<bool> addPrefixSpace =
        boolean(object, "add_prefix_space", field, true);
    absl::StatusOr<bool> useRegex = boolean(object, "use_regex", field, true);
    // trim_offsets changes offsets only, which moe does not report.
    absl::StatusOr<bool> trimOffsets =
        boolean(object, "trim_offsets", field, true);
    for (const auto *value : {&addPrefixSpace, &useRegex, &trimOffsets})
      if (!value->ok())
        return value->status();
    step.addPrefixSpace = *addPrefixSpace;
    step.useRegex = *useRegex;
    if (step.useRegex) {
      absl::StatusOr<RegexSplitter> splitter =
          RegexSplitter::create(kGpt2Regex);
      if (!splitter.ok())
        return error(field, std::string(splitter.status().message()));
      step.splitter = std::make_shared<RegexSplitter>(std::move(*splitter));
    }
    steps.push_back(std::move(step));
    return absl::OkStatus();
  }
  if (*type == "Split") {
    if (absl::Status s = checkFields(object, field,
                                     {"type", "pattern", "behavior", "invert"});
        !s.ok())
      return s;
    step.kind = PreTokenizerStep::Kind::Split;
    absl::StatusOr<std::shared_ptr<RegexSplitter>> pattern =
        this->pattern(object, "pattern", field);
    if (!pattern.ok())
      return pattern.status();
    step.splitter = *pattern;
    absl::StatusOr<std::string> behavior = string(object, "behavior", field);
    if (!behavior.ok())
      return behavior.status();
    if (*behavior != "Isolated")
      return error(absl::StrCat(field, ".behavior"),
                   absl::StrCat("'", *behavior,
                                "' is not supported (supported: Isolated)"));
    absl::StatusOr<bool> invert = boolean(object, "invert", field, false);
    if (!invert.ok())
      return invert.status();
    if (*invert)
      return error(absl::StrCat(field, ".invert"),
                   "true is not supported (supported: false)");
    steps.push_back(std::move(step));
    return absl::OkStatus();
  }
  step.kind = PreTokenizerStep::Kind::Metaspace;
  if (absl::Status s =
          metaspace(object, field, step.replacement, step.prependScheme);
      !s.ok())
    return s;
  absl::StatusOr<bool> split = boolean(object, "split", field, true);
  if (!split.ok())
    return split.status();
  step.split = *split;
  steps.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status Reader::decoder(const json &object, const std::string &field,
                             std::vector<DecoderStep> &steps) {
  absl::StatusOr<std::string> type =
      this->type(object, field,
                 {"Sequence", "ByteLevel", "Replace", "ByteFallback", "Fuse",
                  "Strip", "Metaspace"});
  if (!type.ok())
    return type.status();
  DecoderStep step;
  if (*type == "Sequence")
    return sequence(object, field, "decoders",
                    [&](const json &element, const std::string &at) {
                      return decoder(element, at, steps);
                    });
  if (*type == "ByteLevel") {
    // The ByteLevel decoder's options matter to offsets only.
    if (absl::Status s = checkFields(
            object, field,
            {"type", "add_prefix_space", "trim_offsets", "use_regex"});
        !s.ok())
      return s;
    step.kind = DecoderStep::Kind::ByteLevel;
  } else if (*type == "ByteFallback" || *type == "Fuse") {
    if (absl::Status s = checkFields(object, field, {"type"}); !s.ok())
      return s;
    step.kind = *type == "Fuse" ? DecoderStep::Kind::Fuse
                                : DecoderStep::Kind::ByteFallback;
  } else if (*type == "Replace") {
    if (absl::Status s =
            checkFields(object, field, {"type", "pattern", "content"});
        !s.ok())
      return s;
    step.kind = DecoderStep::Kind::Replace;
    absl::StatusOr<std::shared_ptr<RegexSplitter>> pattern =
        this->pattern(object, "pattern", field);
    if (!pattern.ok())
      return pattern.status();
    step.pattern = *pattern;
    absl::StatusOr<std::string> content = string(object, "content", field);
    if (!content.ok())
      return content.status();
    step.content = *content;
  } else if (*type == "Strip") {
    if (absl::Status s =
            checkFields(object, field, {"type", "content", "start", "stop"});
        !s.ok())
      return s;
    step.kind = DecoderStep::Kind::Strip;
    absl::StatusOr<std::string> content = string(object, "content", field);
    absl::StatusOr<int64_t> start = integer(object, "start", field);
    absl::StatusOr<int64_t> stop = integer(object, "stop", field);
    if (!content.ok())
      return content.status();
    if (!start.ok())
      return start.status();
    if (!stop.ok())
      return stop.status();
    step.content = *content;
    step.start = *start;
    step.stop = *stop;
  } else {
    step.kind = DecoderStep::Kind::Metaspace;
    if (absl::Status s =
            metaspace(object, field, step.content, step.prependScheme);
        !s.ok())
      return s;
  }
  steps.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status Reader::postProcessor(const json &object, const std::string &field,
                                   HfTokenizerParts &parts) {
  absl::StatusOr<std::string> type = this->type(
      object, field, {"Sequence", "ByteLevel", "TemplateProcessing"});
  if (!type.ok())
    return type.status();
  if (*type == "Sequence")
    return sequence(object, field, "processors",
                    [&](const json &element, const std::string &at) {
                      return postProcessor(element, at, parts);
                    });
  if (*type == "ByteLevel")
    // Only offsets change; the ids are left as they are.
    return checkFields(
        object, field,
        {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  if (absl::Status s = checkFields(
          object, field, {"type", "single", "pair", "special_tokens"});
      !s.ok())
    return s;
  if (parts.hasTemplate)
    return error(field, "is a second TemplateProcessing (supported: one)");
  std::string single = absl::StrCat(field, ".single");
  if (!object.contains("single") || !object["single"].is_array())
    return error(single, "must be an array");
  std::string specialField = absl::StrCat(field, ".special_tokens");
  const json &special = object.value("special_tokens", json::object());
  if (absl::Status s = expectObject(special, specialField); !s.ok())
    return s;
  for (size_t i = 0; i < object["single"].size(); ++i) {
    const json &item = object["single"][i];
    std::string where = absl::StrCat(single, "[", i, "]");
    if (absl::Status s = checkFields(item, where, {"SpecialToken", "Sequence"});
        !s.ok())
      return s;
    if (item.size() != 1)
      return error(where, "must hold exactly one of SpecialToken and Sequence");
    bool isSequence = item.contains("Sequence");
    std::string kind = isSequence ? "Sequence" : "SpecialToken";
    std::string inner = absl::StrCat(where, ".", kind);
    if (absl::Status s = checkFields(item[kind], inner, {"id", "type_id"});
        !s.ok())
      return s;
    absl::StatusOr<std::string> id = string(item[kind], "id", inner);
    if (!id.ok())
      return id.status();
    TemplateItem templateItem;
    templateItem.isSequence = isSequence;
    if (isSequence) {
      if (*id != "A")
        return error(absl::StrCat(inner, ".id"),
                     absl::StrCat("'", *id,
                                  "' is not supported in single (supported: "
                                  "A)"));
    } else {
      if (!special.contains(*id))
        return error(absl::StrCat(inner, ".id"),
                     absl::StrCat("'", *id, "' is not in ", specialField));
      const json &entry = special[*id];
      std::string entryField = absl::StrCat(specialField, ".", *id);
      if (absl::Status s =
              checkFields(entry, entryField, {"id", "ids", "tokens"});
          !s.ok())
        return s;
      if (!entry.contains("ids") || !entry["ids"].is_array())
        return error(absl::StrCat(entryField, ".ids"), "must be an array");
      for (const json &value : entry["ids"]) {
        if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
            value.get<int64_t>() > std::numeric_limits<int32_t>::max())
          return error(absl::StrCat(entryField, ".ids"),
                       "must hold integers in [0, 2^31)");
        templateItem.ids.push_back(value.get<int64_t>());
      }
    }
    parts.singleTemplate.push_back(std::move(templateItem));
  }
  parts.hasTemplate = true;
  return absl::OkStatus();
}

absl::Status Reader::addedTokens(const json &array, HfTokenizerParts &parts) {
  if (!array.is_array())
    return error("added_tokens", "must be an array");
  for (size_t i = 0; i < array.size(); ++i) {
    std::string field = absl::StrCat("added_tokens[", i, "]");
    const json &object = array[i];
    if (absl::Status s = checkFields(object, field,
                                     {"id", "content", "single_word", "lstrip",
                                      "rstrip", "normalized", "special"});
        !s.ok())
      return s;
    AddedToken token;
    absl::StatusOr<int64_t> id = integer(object, "id", field);
    if (!id.ok())
      return id.status();
    if (*id < 0 || *id > std::numeric_limits<int32_t>::max())
      return error(absl::StrCat(field, ".id"),
                   absl::StrCat(*id, " is outside [0, 2^31)"));
    token.id = *id;
    absl::StatusOr<std::string> content = string(object, "content", field);
    if (!content.ok())
      return content.status();
    token.content = *content;
    // Every flag is required, as HF's tokenizers requires it.
    for (auto [key, flag] : std::vector<std::pair<const char *, bool *>>{
             {"special", &token.special},
             {"single_word", &token.singleWord},
             {"lstrip", &token.lstrip},
             {"rstrip", &token.rstrip},
             {"normalized", &token.normalized}}) {
      if (!object.contains(key))
        return error(absl::StrCat(field, ".", key), "is missing");
      absl::StatusOr<bool> value = boolean(object, key, field, false);
      if (!value.ok())
        return value.status();
      *flag = *value;
    }
    parts.addedTokens.push_back(std::move(token));
  }
  return absl::OkStatus();
}

absl::StatusOr<BpeModel> Reader::model(const json &object) {
  absl::StatusOr<std::string> type = this->type(object, "model", {"BPE"});
  if (!type.ok())
    return type.status();
  if (absl::Status s = checkFields(
          object, "model",
          {"type", "dropout", "unk_token", "continuing_subword_prefix",
           "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
           "vocab", "merges"});
      !s.ok())
    return s;
  if (object.contains("dropout") && !object["dropout"].is_null() &&
      !(object["dropout"].is_number() && object["dropout"].get<double>() == 0))
    return error("model.dropout",
                 "is not supported: BPE dropout is random (supported: null)");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (object.contains(key) && !object[key].is_null() &&
        !(object[key].is_string() && object[key].get<std::string>().empty()))
      return error(absl::StrCat("model.", key),
                   "is not supported (supported: null)");
  BpeOptions options;
  if (object.contains("unk_token") && !object["unk_token"].is_null()) {
    absl::StatusOr<std::string> unk = string(object, "unk_token", "model");
    if (!unk.ok())
      return unk.status();
    options.unkToken = *unk;
  }
  absl::StatusOr<bool> fuseUnk = boolean(object, "fuse_unk", "model", false);
  absl::StatusOr<bool> byteFallback =
      boolean(object, "byte_fallback", "model", false);
  absl::StatusOr<bool> ignoreMerges =
      boolean(object, "ignore_merges", "model", false);
  for (const auto *value : {&fuseUnk, &byteFallback, &ignoreMerges})
    if (!value->ok())
      return value->status();
  options.fuseUnk = *fuseUnk;
  options.byteFallback = *byteFallback;
  options.ignoreMerges = *ignoreMerges;

  if (!object.contains("vocab") || !object["vocab"].is_object())
    return error("model.vocab", "must be an object of token ids");
  absl::flat_hash_map<std::string, int64_t> vocab;
  for (const auto &item : object["vocab"].items()) {
    if (!item.value().is_number_integer())
      return error(absl::StrCat("model.vocab.", item.key()),
                   "must be an integer id");
    vocab[item.key()] = item.value().get<int64_t>();
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (!object.contains("merges"))
    return error("model.merges",
                 "is missing (HF's tokenizers refuses a BPE model without "
                 "merges; an empty list is allowed)");
  const json &mergeList = object["merges"];
  if (!mergeList.is_array())
    return error("model.merges", "must be an array");
  // One spelling for the whole list, as HF reads it: ["a", "b"] pairs, or
  // the older "a b" strings (where "#version" lines are skipped).
  bool strings = !mergeList.empty() && mergeList[0].is_string();
  for (size_t i = 0; i < mergeList.size(); ++i) {
    const json &merge = mergeList[i];
    std::string where = absl::StrCat("model.merges[", i, "]");
    if (strings && merge.is_string()) {
      std::string line = merge.get<std::string>();
      if (line.compare(0, 8, "#version") == 0)
        continue;
      std::vector<std::string> halves = absl::StrSplit(line, ' ');
      if (halves.size() != 2)
        return error(where, absl::StrCat("'", line,
                                         "' is not two tokens separated by "
                                         "one space"));
      merges.emplace_back(halves[0], halves[1]);
    } else if (!strings && merge.is_array() && merge.size() == 2 &&
               merge[0].is_string() && merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(),
                          merge[1].get<std::string>());
    } else {
      return error(where, strings ? "must be \"a b\" like model.merges[0]"
                                  : "must be [\"a\", \"b\"] like "
                                    "model.merges[0]");
    }
  }
  return BpeModel::create(std::move(vocab), merges, std::move(options),
                          absl::StrCat(path_, ": model"));
}

/// HF's serde_json refuses JSON nested deeper than this; the readers of
/// nested Sequences recurse, so the limit also bounds their stack.
constexpr int kMaxJsonDepth = 128;

/// The line and column of the first bracket nested deeper than
/// kMaxJsonDepth in `text`, or nothing. Counted before parsing, on the raw
/// bytes, so that nothing downstream ever sees deeper JSON.
std::optional<std::pair<int64_t, int64_t>> tooDeep(std::string_view text) {
  int depth = 0;
  bool inString = false;
  int64_t line = 1;
  size_t lineStart = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      lineStart = i + 1;
    }
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth >= kMaxJsonDepth)
        return std::pair{line, static_cast<int64_t>(i - lineStart + 1)};
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

/// Gives each added token the id HF's tokenizers gives it, which ignores the
/// file's: the id of the same content among the tokens before it or in the
/// model's vocabulary, else the next of the ids counted from the model's
/// token count. A token with the content of one before it replaces it, and
/// an empty one is ignored, all as in HF's AddedVocabulary::add_tokens.
void assignAddedTokenIds(HfTokenizerParts &parts) {
  int64_t nextId = parts.model->numTokens();
  absl::flat_hash_map<std::string, int64_t> idOfContent;
  absl::flat_hash_map<int64_t, AddedToken> byId;
  std::vector<int64_t> order;
  for (size_t i = 0; i < parts.addedTokens.size(); ++i) {
    const AddedToken &token = parts.addedTokens[i];
    std::string where = absl::StrCat(parts.path, ": added_tokens[", i, "]");
    if (token.content.empty()) {
      parts.warnings.push_back(absl::StrCat(
          where, " has empty content and is ignored, as HF's tokenizers does"));
      continue;
    }
    int64_t id;
    const char *why;
    if (auto known = idOfContent.find(token.content);
        known != idOfContent.end()) {
      id = known->second;
      why = "the id of the same content before it";
    } else if (std::optional<int64_t> inVocab =
                   parts.model->tokenId(token.content)) {
      id = *inVocab;
      why = "its id in model.vocab";
    } else {
      id = nextId++;
      why = "the next id after model.vocab's tokens";
    }
    if (id != token.id)
      parts.warnings.push_back(absl::StrCat(
          where, " '", token.content, "' has id ", token.id,
          " in the file; HF's tokenizers gives it ", id, ", ", why,
          ", and so does moe"));
    idOfContent[token.content] = id;
    if (!byId.contains(id))
      order.push_back(id);
    AddedToken resolved = token;
    resolved.id = id;
    byId[id] = std::move(resolved);
  }
  parts.addedTokens.clear();
  for (int64_t id : order)
    parts.addedTokens.push_back(std::move(byId[id]));
}

/// HF's tokenizers panics normalizing any text where a Replace that
/// inserts text at an empty match (`x*`, `^`, a String "") comes before a
/// Unicode normalization: the inserted text has no alignment there.
absl::Status refuseInsertionBeforeUnicode(Reader &reader,
                                          const std::vector<NormalizerStep> &steps) {
  const NormalizerStep *inserting = nullptr;
  for (const NormalizerStep &step : steps) {
    if (step.kind == NormalizerStep::Kind::Replace && !step.text.empty() &&
        step.pattern->matchesEmpty() && !inserting)
      inserting = &step;
    if (step.kind == NormalizerStep::Kind::Unicode && inserting)
      return reader.error(
          inserting->field,
          absl::StrCat("inserts text at empty matches before the Unicode "
                       "normalizer ",
                       step.field,
                       ", which HF's tokenizers panics on (not supported)"));
  }
  return absl::OkStatus();
}

/// The id of `token` among the added tokens, then the model's vocabulary.
std::optional<int64_t> findToken(const HfTokenizerParts &parts,
                                 const std::string &token) {
  for (const AddedToken &added : parts.addedTokens)
    if (added.content == token)
      return added.id;
  return parts.model->tokenId(token);
}

/// bos_token and eos_token from a tokenizer_config.json beside the file, as
/// transformers reads them; else the first special token with a well-known
/// name.
absl::Status findBosEos(HfTokenizerParts &parts) {
  std::filesystem::path config =
      std::filesystem::path(parts.path).parent_path() / "tokenizer_config.json";
  std::error_code ignored;
  if (std::filesystem::is_regular_file(config, ignored)) {
    absl::StatusOr<io::MappedFile> file = io::MappedFile::open(config.string());
    if (!file.ok())
      return file.status();
    json root = json::parse(file->data(), file->data() + file->size(), nullptr,
                            /*allow_exceptions=*/false);
    if (root.is_discarded() || !root.is_object())
      return absl::InvalidArgumentError(
          absl::StrCat(config.string(), ": not a JSON object"));
    for (auto [key, id] : {std::pair{"bos_token", &parts.bosId},
                           std::pair{"eos_token", &parts.eosId}}) {
      if (!root.contains(key) || root[key].is_null())
        continue;
      const json &value = root[key];
      std::string token;
      if (value.is_string())
        token = value.get<std::string>();
      else if (value.is_object() && value.contains("content") &&
               value["content"].is_string())
        token = value["content"].get<std::string>();
      else
        return absl::InvalidArgumentError(
            absl::StrCat(config.string(), ": ", key,
                         " must be a string or an object with "
                         "a content string"));
      *id = findToken(parts, token);
      if (!*id)
        return absl::InvalidArgumentError(
            absl::StrCat(config.string(), ": ", key, " '", token,
                         "' is not in the vocabulary of ", parts.path));
    }
    return absl::OkStatus();
  }
  for (const char *name : {"<s>", "<|begin_of_text|>", "<bos>"})
    if (!parts.bosId)
      parts.bosId = findToken(parts, name);
  for (const char *name : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"})
    if (!parts.eosId)
      parts.eosId = findToken(parts, name);
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<HfTokenizerParts> loadHfTokenizerParts(const std::string &path) {
  absl::StatusOr<io::MappedFile> file = io::MappedFile::open(path, "tokenizer");
  if (!file.ok())
    return file.status();
  std::string_view text(reinterpret_cast<const char *>(file->data()),
                        file->size());
  if (std::optional<std::pair<int64_t, int64_t>> at = tooDeep(text))
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": JSON nested deeper than ", kMaxJsonDepth, " levels at line ",
        at->first, " column ", at->second,
        " (HF's tokenizers refuses it too)"));
  json root;
  try {
    root = json::parse(file->data(), file->data() + file->size());
  } catch (const json::exception &e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": malformed JSON: ", e.what()));
  }
  Reader reader(path);
  if (!root.is_object())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a JSON object"));
  if (absl::Status s = reader.checkFields(
          root, "tokenizer",
          {"version", "truncation", "padding", "added_tokens", "normalizer",
           "pre_tokenizer", "post_processor", "decoder", "model"});
      !s.ok())
    return s;
  for (const char *key : {"truncation", "padding"})
    if (root.contains(key) && !root[key].is_null())
      return reader.error(key, "is not supported (supported: null)");
  if (root.contains("version") &&
      !(root["version"].is_string() && root["version"] == "1.0"))
    return reader.error("version",
                        absl::StrCat(root["version"].dump(),
                                     " is not supported (supported: \"1.0\", "
                                     "the only version HF's tokenizers reads)"));

  HfTokenizerParts parts;
  parts.path = path;
  if (!root.contains("model"))
    return reader.error("model", "is missing");
  absl::StatusOr<BpeModel> model = reader.model(root["model"]);
  if (!model.ok())
    return model.status();
  parts.model = std::move(*model);
  if (root.contains("added_tokens"))
    if (absl::Status s = reader.addedTokens(root["added_tokens"], parts);
        !s.ok())
      return s;
  assignAddedTokenIds(parts);
  auto present = [&](const char *key) {
    return root.contains(key) && !root[key].is_null();
  };
  if (present("normalizer")) {
    if (absl::Status s = reader.normalizer(root["normalizer"], "normalizer",
                                           parts.normalizer);
        !s.ok())
      return s;
    if (absl::Status s = refuseInsertionBeforeUnicode(reader, parts.normalizer);
        !s.ok())
      return s;
  }
  if (present("pre_tokenizer"))
    if (absl::Status s = reader.preTokenizer(
            root["pre_tokenizer"], "pre_tokenizer", parts.preTokenizer);
        !s.ok())
      return s;
  if (present("decoder")) {
    if (absl::Status s =
            reader.decoder(root["decoder"], "decoder", parts.decoder);
        !s.ok())
      return s;
    parts.hasDecoder = true;
  }
  if (present("post_processor"))
    if (absl::Status s = reader.postProcessor(root["post_processor"],
                                              "post_processor", parts);
        !s.ok())
      return s;
  if (absl::Status s = findBosEos(parts); !s.ok())
    return s;
  return parts;
}

} // namespace moe::rt::text
