//===- ByteLevel.cpp - GPT-2's bytes-to-unicode map -----------------------===//
#include "moe/Runtime/Text/ByteLevel.h"

#include "moe/Runtime/Text/Utf8.h"

#include <unordered_map>

namespace moe::rt::text {

const std::array<char32_t, 256> &bytesToUnicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> map{};
    // The printable bytes stand for themselves; the others (controls,
    // space, DEL, NBSP, soft hyphen) take U+0100 upwards in byte order.
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
             (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b)
      map[b] = printable(b) ? static_cast<char32_t>(b) : next++;
    return map;
  }();
  return table;
}

std::string byteLevelEncode(std::string_view bytes) {
  const std::array<char32_t, 256> &map = bytesToUnicode();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char byte : bytes)
    appendUtf8(out, map[static_cast<unsigned char>(byte)]);
  return out;
}

std::optional<std::string> byteLevelDecode(std::string_view text) {
  static const std::unordered_map<char32_t, char> inverse = [] {
    std::unordered_map<char32_t, char> map;
    const std::array<char32_t, 256> &forward = bytesToUnicode();
    for (int b = 0; b < 256; ++b)
      map.emplace(forward[b], static_cast<char>(b));
    return map;
  }();
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    auto it = inverse.find(utf8CodePoint(text, pos));
    if (it == inverse.end())
      return std::nullopt;
    out += it->second;
    pos += utf8CharLength(text, pos);
  }
  return out;
}

} // namespace moe::rt::text
