//===- RegexSplitter.cpp - HF's pre-tokenizer regexes on RE2 --------------===//
#include "moe/Runtime/Text/RegexSplitter.h"

#include "moe/Runtime/Text/Utf8.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "re2/re2.h"

#include <optional>

namespace moe::rt::text {

namespace {

/// The one lookahead the HF regexes use, matched by hand.
constexpr std::string_view kSpacesNotBeforeNonSpace = "\\s+(?!\\S)";

/// Unicode White_Space as the members of an RE2 class.
constexpr const char *kWhiteSpaceMembers = "\\x{9}-\\x{D}\\x{85}\\p{Z}";

/// The length of `\s+(?!\S)` at `pos`, or -1. A backtracking engine takes
/// the whole run of white space when it ends the text or is followed by more
/// white space (never, as the run is maximal); before a non-space it gives
/// back the run's last character, which needs a run of two or more.
long matchSpacesNotBeforeNonSpace(std::string_view text, size_t pos) {
  size_t end = pos;
  size_t lastLength = 0;
  while (end < text.size() && isUnicodeWhiteSpace(utf8CodePoint(text, end))) {
    lastLength = utf8CharLength(text, end);
    end += lastLength;
  }
  if (end == pos)
    return -1;
  if (end == text.size())
    return static_cast<long>(end - pos);
  if (end - lastLength == pos)
    return -1;
  return static_cast<long>(end - lastLength - pos);
}

/// Oniguruma's inline flag `m` (dot matches newline) spelled as RE2's `s`;
/// RE2's own `m` (line anchors) is what Oniguruma does without any flag.
/// Oniguruma has no `s` flag: HF refuses it, and so does this.
absl::StatusOr<std::string> onigurumaInlineFlags(std::string_view pattern) {
  std::string out(pattern);
  for (size_t i = 0; i + 2 < out.size(); ++i) {
    if (out[i] == '\\') {
      ++i;
      continue;
    }
    if (out[i] != '(' || out[i + 1] != '?')
      continue;
    size_t j = i + 2;
    while (j < out.size() && std::string_view("imsx-").find(out[j]) !=
                                 std::string_view::npos)
      ++j;
    if (j == i + 2 || j >= out.size() || (out[j] != ')' && out[j] != ':'))
      continue;
    for (size_t k = i + 2; k < j; ++k) {
      if (out[k] == 's')
        return absl::InvalidArgumentError(absl::StrCat(
            "regex '", std::string(pattern), "' is not supported: inline flag "
            "s at offset ", k, " is not Oniguruma's (HF's tokenizers refuses "
            "it too; its m lets . match a newline)"));
      if (out[k] == 'm')
        out[k] = 's';
    }
  }
  return out;
}

} // namespace

std::vector<std::string> splitTopLevelAlternation(std::string_view pattern) {
  std::vector<std::string> alternatives;
  std::string current;
  int depth = 0;
  bool inClass = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      current += c;
      current += pattern[++i];
      continue;
    }
    if (inClass) {
      if (c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        // A POSIX class such as [:alpha:] inside the brackets.
        size_t close = pattern.find(":]", i + 2);
        if (close != std::string_view::npos) {
          current.append(pattern.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
      }
      if (c == ']')
        inClass = false;
      current += c;
      continue;
    }
    if (c == '[') {
      inClass = true;
      current += c;
      // A ']' first in the class (after an optional '^') is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^')
        current += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']')
        current += pattern[++i];
      continue;
    }
    if (c == '(')
      ++depth;
    else if (c == ')')
      --depth;
    if (c == '|' && depth == 0) {
      alternatives.push_back(std::move(current));
      current.clear();
      continue;
    }
    current += c;
  }
  alternatives.push_back(std::move(current));
  return alternatives;
}

absl::StatusOr<std::string> unicodeWhiteSpaceClasses(std::string_view pattern) {
  std::string out;
  bool inClass = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char next = pattern[++i];
      if (next == 's') {
        if (inClass)
          out.append(kWhiteSpaceMembers);
        else
          absl::StrAppend(&out, "[", kWhiteSpaceMembers, "]");
      } else if (next == 'S') {
        if (inClass)
          return absl::InvalidArgumentError(absl::StrCat(
              "\\S inside a character class is not supported at offset ", i - 1,
              " of regex '", std::string(pattern), "'"));
        absl::StrAppend(&out, "[^", kWhiteSpaceMembers, "]");
      } else if (next == 'd' || next == 'D') {
        // Oniguruma's \d is Unicode's Decimal_Number; RE2's is ASCII.
        out.append(next == 'd' ? "\\p{Nd}" : "\\P{Nd}");
      } else if (std::string_view("wWbBhH").find(next) !=
                 std::string_view::npos) {
        // Oniguruma's word characters (and so its word boundaries) are its
        // own mix of Unicode categories (\w takes ½ but not ①, and not ½
        // inside a class); RE2's are ASCII. Refused rather than guessed.
        return absl::InvalidArgumentError(absl::StrCat(
            "\\", std::string(1, next), " at offset ", i - 1, " of regex '",
            std::string(pattern),
            "' is not supported: Oniguruma's word and hex classes differ from "
            "RE2's (spell the class with \\p{...})"));
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (inClass) {
      if (c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        size_t close = pattern.find(":]", i + 2);
        if (close != std::string_view::npos)
          // Oniguruma's [:alpha:] and the like are Unicode; RE2's ASCII.
          return absl::InvalidArgumentError(absl::StrCat(
              std::string(pattern.substr(i, close + 2 - i)), " at offset ", i,
              " of regex '", std::string(pattern),
              "' is not supported: Oniguruma's POSIX classes are Unicode, "
              "RE2's ASCII (spell the class with \\p{...})"));
      }
      if (c == ']')
        inClass = false;
      out += c;
      continue;
    }
    out += c;
    if (c == '[') {
      inClass = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^')
        out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']')
        out += pattern[++i];
    }
  }
  return out;
}

RegexSplitter::RegexSplitter(RegexSplitter &&) noexcept = default;
RegexSplitter &RegexSplitter::operator=(RegexSplitter &&) noexcept = default;
RegexSplitter::~RegexSplitter() = default;

absl::StatusOr<RegexSplitter>
RegexSplitter::create(const std::string &pattern) {
  RegexSplitter splitter;
  std::vector<std::string> run;
  auto flushRun = [&]() -> absl::Status {
    if (run.empty())
      return absl::OkStatus();
    // Oniguruma's ^ and $ match at line boundaries (Ruby syntax), which is
    // RE2's multi-line mode.
    absl::StatusOr<std::string> flagged =
        onigurumaInlineFlags(absl::StrJoin(run, "|"));
    run.clear();
    if (!flagged.ok())
      return flagged.status();
    absl::StatusOr<std::string> rewritten =
        unicodeWhiteSpaceClasses(absl::StrCat("(?m:", *flagged, ")"));
    if (!rewritten.ok())
      return rewritten.status();
    RE2::Options options;
    options.set_log_errors(false);
    auto regex = std::make_unique<RE2>(*rewritten, options);
    if (!regex->ok())
      return absl::InvalidArgumentError(absl::StrCat(
          "regex '", pattern, "' is not supported: ", regex->error(),
          " (RE2 syntax, plus the lookahead ",
          std::string(kSpacesNotBeforeNonSpace), " as a whole alternative)"));
    splitter.steps_.push_back(Step{std::move(regex)});
    return absl::OkStatus();
  };
  for (std::string &alternative : splitTopLevelAlternation(pattern)) {
    if (alternative == kSpacesNotBeforeNonSpace) {
      if (absl::Status status = flushRun(); !status.ok())
        return status;
      splitter.steps_.push_back(Step{nullptr});
      continue;
    }
    run.push_back(std::move(alternative));
  }
  if (absl::Status status = flushRun(); !status.ok())
    return status;
  return splitter;
}

RegexSplitter RegexSplitter::literal(const std::string &text) {
  RegexSplitter splitter;
  splitter.literal_ = text;
  splitter.isLiteral_ = true;
  return splitter;
}

long RegexSplitter::matchAt(std::string_view text, size_t pos) const {
  re2::StringPiece input(text.data(), text.size());
  for (const Step &step : steps_) {
    if (!step.regex) {
      long length = matchSpacesNotBeforeNonSpace(text, pos);
      if (length >= 0)
        return length;
      continue;
    }
    re2::StringPiece match;
    if (step.regex->Match(input, pos, text.size(), RE2::ANCHOR_START, &match,
                          1))
      return static_cast<long>(match.size());
  }
  return -1;
}

std::vector<std::pair<size_t, size_t>>
RegexSplitter::matches(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> found;
  if (isLiteral_) {
    if (literal_.empty())
      return found;
    for (size_t pos = text.find(literal_); pos != std::string_view::npos;
         pos = text.find(literal_, pos + literal_.size()))
      found.emplace_back(pos, pos + literal_.size());
    return found;
  }
  // Oniguruma's find_iter, which HF iterates: an empty match counts,
  // except right where the previous match ended; after it the search moves
  // on by one character. Empty text has no match at all (HF's Pattern).
  if (text.empty())
    return found;
  size_t pos = 0;
  std::optional<size_t> lastEnd;
  while (pos <= text.size()) {
    long length = matchAt(text, pos);
    if (length > 0 || (length == 0 && lastEnd != pos)) {
      found.emplace_back(pos, pos + length);
      lastEnd = pos + length;
      if (length > 0) {
        pos += length;
        continue;
      }
    }
    if (pos == text.size())
      break;
    pos += utf8CharLength(text, pos);
  }
  return found;
}

bool RegexSplitter::matchesEmpty() const {
  if (isLiteral_)
    return literal_.empty();
  // An empty match at the start of "\n" or after it covers ^, $ and any
  // pattern that can match nothing.
  return matchAt("\n", 0) == 0 || matchAt("\n", 1) == 0;
}

std::vector<std::string_view>
RegexSplitter::splitIsolated(std::string_view text) const {
  std::vector<std::string_view> pieces;
  size_t last = 0;
  for (auto [begin, end] : matches(text)) {
    if (begin > last)
      pieces.push_back(text.substr(last, begin - last));
    if (end > begin)
      pieces.push_back(text.substr(begin, end - begin));
    last = end;
  }
  if (last < text.size())
    pieces.push_back(text.substr(last));
  return pieces;
}

} // namespace moe::rt::text
