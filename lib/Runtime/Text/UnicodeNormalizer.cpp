//===- UnicodeNormalizer.cpp - HF's NFC, NFD, NFKC, NFKD normalizers ------===//
//
// utf8proc, Debian's maintained implementation of UAX #15, rather than
// tables of our own. HF's tokenizers uses Rust's unicode-normalization
// tables; the two agree on every character both Unicode versions define.
//
//===----------------------------------------------------------------------===//
#include "HfTokenizer.h"

#include "moe/Runtime/Text/Utf8.h"

#include <cstdlib>
#include <utf8proc.h>

namespace moe::rt::text {

std::string normalizeUnicode(std::string_view text, UnicodeForm form) {
  std::string valid;
  if (!isValidUtf8(text)) {
    valid = utf8Lossy(text);
    text = valid;
  }
  int options = UTF8PROC_STABLE;
  switch (form) {
  case UnicodeForm::NFC:
    options |= UTF8PROC_COMPOSE;
    break;
  case UnicodeForm::NFD:
    options |= UTF8PROC_DECOMPOSE;
    break;
  case UnicodeForm::NFKC:
    options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    break;
  case UnicodeForm::NFKD:
    options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    break;
  }
  utf8proc_uint8_t *mapped = nullptr;
  // The length is given, so a NUL inside the text is a character like any.
  utf8proc_ssize_t length = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t *>(text.data()),
      static_cast<utf8proc_ssize_t>(text.size()), &mapped,
      static_cast<utf8proc_option_t>(options));
  if (length < 0) {
    // Only an allocation failure is left (the text is valid UTF-8); the
    // text is then left as it is rather than lost.
    std::free(mapped);
    return std::string(text);
  }
  std::string out(reinterpret_cast<const char *>(mapped),
                  static_cast<size_t>(length));
  std::free(mapped);
  return out;
}

} // namespace moe::rt::text
