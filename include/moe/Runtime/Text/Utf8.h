//===- Utf8.h - UTF-8 helpers of the tokenizers -----------------*- C++ -*-===//
#ifndef MOE_RUNTIME_TEXT_UTF8_H
#define MOE_RUNTIME_TEXT_UTF8_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moe::rt::text {

/// The length in bytes of the character starting at `text[pos]`: 1 for a
/// byte that does not start a well-formed sequence, so that callers walking
/// malformed text still advance.
size_t utf8CharLength(std::string_view text, size_t pos);

/// The code point starting at `text[pos]`, or U+FFFD where it is malformed.
char32_t utf8CodePoint(std::string_view text, size_t pos);

void appendUtf8(std::string &out, char32_t codePoint);

/// `bytes` with each maximal ill-formed subsequence replaced by U+FFFD, as
/// Rust's String::from_utf8_lossy (and so HF's decoders) does.
std::string utf8Lossy(std::string_view bytes);

/// Whether `bytes` is well-formed UTF-8.
bool isValidUtf8(std::string_view bytes);

/// The maximal ill-formed subsequences of `bytes` (each one U+FFFD in
/// utf8Lossy): how many, and the byte offset of the first.
struct Utf8Errors {
  int64_t count = 0;
  int64_t firstOffset = -1;
};
Utf8Errors findUtf8Errors(std::string_view bytes);

/// Unicode's White_Space property: what Oniguruma's \s and Rust's
/// char::is_whitespace match.
bool isUnicodeWhiteSpace(char32_t codePoint);

} // namespace moe::rt::text

#endif // MOE_RUNTIME_TEXT_UTF8_H
