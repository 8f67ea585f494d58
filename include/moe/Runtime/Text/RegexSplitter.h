//===- RegexSplitter.h - HF's pre-tokenizer regexes on RE2 ------*- C++ -*-===//
//
// HF tokenizers match pre-tokenizer regexes with Oniguruma; RE2 has no
// lookahead, and the GPT-2, Llama 3 and Qwen regexes hold `\s+(?!\S)`. The
// top-level alternation is split and its alternatives are tried in order at
// each position, which is Oniguruma's leftmost-first rule; runs of
// alternatives without lookahead are one RE2 each, and `\s+(?!\S)` is
// matched by hand. `\s` and `\S` mean Unicode White_Space, as in Oniguruma
// (RE2's own `\s` is ASCII); `^` and `$` match at line boundaries, and the
// inline flag `m` lets `.` match a newline, as in Oniguruma's Ruby syntax.
// Any other construct RE2 cannot compile is an error.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TEXT_REGEXSPLITTER_H
#define MOE_RUNTIME_TEXT_REGEXSPLITTER_H

#include "absl/status/statusor.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace re2 {
class RE2;
}

namespace moe::rt::text {

/// The top-level alternatives of `pattern` ("a|(b|c)|d" -> "a", "(b|c)",
/// "d"), respecting escapes, groups and character classes.
std::vector<std::string> splitTopLevelAlternation(std::string_view pattern);

/// `pattern` with `\s` and `\S` spelled as Unicode White_Space classes for
/// RE2, and `\d` and `\D` as Unicode's Decimal_Number, as Oniguruma reads
/// them. Fails on `\S` inside a character class, and on `\w`, `\W`, `\b`,
/// `\B`, `\h` and `\H`, which Oniguruma reads in ways RE2 cannot.
absl::StatusOr<std::string> unicodeWhiteSpaceClasses(std::string_view pattern);

class RegexSplitter {
public:
  static absl::StatusOr<RegexSplitter> create(const std::string &pattern);
  /// A splitter on a literal string (HF's Split with a String pattern).
  static RegexSplitter literal(const std::string &text);

  RegexSplitter(RegexSplitter &&) noexcept;
  RegexSplitter &operator=(RegexSplitter &&) noexcept;
  ~RegexSplitter();

  /// The non-overlapping matches in `text`, leftmost first, as [begin, end)
  /// byte ranges, empty ones included as Oniguruma's find_iter gives them
  /// (none where the previous match ended, none in empty text).
  std::vector<std::pair<size_t, size_t>> matches(std::string_view text) const;

  /// Whether the pattern matches empty text somewhere (`x*`, `^`, `$`, "").
  bool matchesEmpty() const;

  /// HF's SplitDelimiterBehavior::Isolated: matches and the text between
  /// them, in order, leaving out empty pieces.
  std::vector<std::string_view> splitIsolated(std::string_view text) const;

private:
  /// Alternatives in order: an RE2 matching a run of them, or (null) the
  /// emulated `\s+(?!\S)`.
  struct Step {
    std::unique_ptr<re2::RE2> regex;
  };
  RegexSplitter() = default;
  /// The length of the match at `pos`, or -1.
  long matchAt(std::string_view text, size_t pos) const;

  std::vector<Step> steps_;
  std::string literal_;
  bool isLiteral_ = false;
};

} // namespace moe::rt::text

#endif // MOE_RUNTIME_TEXT_REGEXSPLITTER_H
