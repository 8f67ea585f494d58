//===- ByteLevel.h - GPT-2's bytes-to-unicode map ---------------*- C++ -*-===//
//
// Byte-level BPE works on bytes shown as printable characters: GPT-2 maps
// each byte to one code point (printable Latin-1 bytes to themselves, the
// rest to U+0100 upwards in byte order), so every string of bytes is a string
// of vocabulary characters.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TEXT_BYTELEVEL_H
#define MOE_RUNTIME_TEXT_BYTELEVEL_H

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace moe::rt::text {

/// The code point of each byte (GPT-2's bytes_to_unicode()).
const std::array<char32_t, 256> &bytesToUnicode();

/// Each byte of `bytes` as its code point, in UTF-8.
std::string byteLevelEncode(std::string_view bytes);

/// The bytes of a byte-level string, or nullopt if it holds a character that
/// is no byte's (HF's ByteLevel decoder then keeps the token as it is).
std::optional<std::string> byteLevelDecode(std::string_view text);

} // namespace moe::rt::text

#endif // MOE_RUNTIME_TEXT_BYTELEVEL_H
