//===- ConfigJson.h - a config.json as Python's json reads it ---*- C++ -*-===//
//
// HF reads config.json with Python's json module; moe-import must refuse
// what it refuses and nothing it reads differently. llvm::json::parse
// recurses once per nesting level (50,000 nested '[' overflow the stack)
// and accepts numbers Python's json refuses (`+32`, `032`), so a config is
// first scanned by a small iterative tokenizer that bounds the nesting and
// checks every token against Python's grammar, with the line and column of
// the first problem; only then is it parsed into a json::Value.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_IMPORT_CONFIGJSON_H
#define MOE_IMPORT_CONFIGJSON_H

#include "llvm/Support/JSON.h"

#include <optional>
#include <string>

namespace mlir::moe {

/// Nesting deeper than this is refused before any recursive parse: HF's
/// configs nest four levels at most.
inline constexpr unsigned kMaxConfigJsonDepth = 512;

/// `text` parsed, or nullopt with `error` set to "LINE:COLUMN: why" (the
/// column counts bytes from 1). Refuses, beyond RFC 8259 and Python's json:
/// nesting past kMaxConfigJsonDepth, NaN and Infinity (Python reads them,
/// but no config field may be non-finite), a byte-order mark, and a key
/// given twice in one object (Python silently keeps the last).
std::optional<llvm::json::Value> parseConfigJson(llvm::StringRef text,
                                                 std::string &error);

/// `text` cut to `limit` bytes for an error message, marked with its full
/// size: "abc...(10485760 bytes)".
std::string cutForMessage(llvm::StringRef text, size_t limit = 64);

} // namespace mlir::moe

#endif // MOE_IMPORT_CONFIGJSON_H
