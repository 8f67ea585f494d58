//===- Utf8.cpp - UTF-8 helpers of the tokenizers -------------------------===//
#include "moe/Runtime/Text/Utf8.h"

namespace moe::rt::text {

namespace {

/// The length of the well-formed sequence at `pos` (Unicode table 3-7), or
/// the length of its maximal ill-formed prefix as a negative number.
int sequenceLength(std::string_view text, size_t pos) {
  auto byteAt = [&](size_t i) -> int {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : -1;
  };
  int b0 = byteAt(pos);
  if (b0 < 0x80)
    return 1;
  int need;
  int lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0)
      lo = 0xA0;
    else if (b0 == 0xED)
      hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0)
      lo = 0x90;
    else if (b0 == 0xF4)
      hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    int b = byteAt(pos + k);
    if (b < lo || b > hi)
      return -k;
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

} // namespace

size_t utf8CharLength(std::string_view text, size_t pos) {
  int length = sequenceLength(text, pos);
  return length > 0 ? static_cast<size_t>(length) : 1;
}

char32_t utf8CodePoint(std::string_view text, size_t pos) {
  int length = sequenceLength(text, pos);
  if (length < 0)
    return 0xFFFD;
  auto b = [&](int k) { return static_cast<unsigned char>(text[pos + k]); };
  switch (length) {
  case 1:
    return b(0);
  case 2:
    return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  case 3:
    return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  default:
    return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) |
           ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void appendUtf8(std::string &out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    int length = sequenceLength(bytes, pos);
    if (length > 0) {
      out.append(bytes.substr(pos, length));
      pos += length;
    } else {
      appendUtf8(out, 0xFFFD);
      pos += static_cast<size_t>(-length);
    }
  }
  return out;
}

bool isValidUtf8(std::string_view bytes) {
  for (size_t pos = 0; pos < bytes.size();) {
    int length = sequenceLength(bytes, pos);
    if (length < 0)
      return false;
    pos += length;
  }
  return true;
}

Utf8Errors findUtf8Errors(std::string_view bytes) {
  Utf8Errors errors;
  for (size_t pos = 0; pos < bytes.size();) {
    int length = sequenceLength(bytes, pos);
    if (length > 0) {
      pos += length;
      continue;
    }
    if (errors.count++ == 0)
      errors.firstOffset = static_cast<int64_t>(pos);
    pos += static_cast<size_t>(-length);
  }
  return errors;
}

bool isUnicodeWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

} // namespace moe::rt::text
