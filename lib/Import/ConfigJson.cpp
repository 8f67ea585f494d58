//===- ConfigJson.cpp - a config.json as Python's json reads it -----------===//
//
// An iterative scanner (an explicit stack of open containers, never
// recursion) over RFC 8259's grammar as Python's json module applies it;
// what passes is then parsed by llvm::json, whose recursion is bounded by
// the scanner's depth limit.
//
//===----------------------------------------------------------------------===//
#include "moe/Import/ConfigJson.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <vector>

using namespace mlir;
using namespace mlir::moe;

std::string mlir::moe::cutForMessage(llvm::StringRef text, size_t limit) {
  if (text.size() <= limit)
    return text.str();
  return llvm::formatv("{0}...({1} bytes)", text.take_front(limit), text.size())
      .str();
}

namespace {

/// What the scanner expects next.
enum class Expect {
  Value,
  ValueOrClose, // just after '['
  Key,
  KeyOrClose, // just after '{'
  Separator,  // after a value: ',' or the container's closing bracket
};

class Scanner {
public:
  explicit Scanner(llvm::StringRef text) : text(text) {}

  /// Scans the whole text; false with `error` set on the first problem.
  bool scan() {
    if (text.starts_with("\xEF\xBB\xBF"))
      return fail("a UTF-8 byte-order mark (Python's json refuses it)");
    Expect expect = Expect::Value;
    while (true) {
      skipSpace();
      if (pos == text.size()) {
        if (expect == Expect::Separator && open.empty())
          return true;
        return fail("unexpected end of file");
      }
      char c = text[pos];
      switch (expect) {
      case Expect::ValueOrClose:
        if (c == ']') {
          close();
          expect = Expect::Separator;
          continue;
        }
        [[fallthrough]];
      case Expect::Value:
        if (!value(expect))
          return false;
        continue;
      case Expect::KeyOrClose:
        if (c == '}') {
          close();
          expect = Expect::Separator;
          continue;
        }
        [[fallthrough]];
      case Expect::Key:
        if (!key())
          return false;
        expect = Expect::Value;
        continue;
      case Expect::Separator:
        if (open.empty())
          return fail("text after the end of the JSON value");
        if (c == ',') {
          advance();
          expect = open.back() ? Expect::Key : Expect::Value;
          continue;
        }
        if (c == (open.back() ? '}' : ']')) {
          close();
          continue;
        }
        return fail(open.back() ? "expected ',' or '}' after a member"
                                : "expected ',' or ']' after an element");
      }
    }
  }

  std::string error;

private:
  /// A value at `pos`: a scalar, or an opened container.
  bool value(Expect &expect) {
    char c = text[pos];
    if (c == '{' || c == '[') {
      if (open.size() >= kMaxConfigJsonDepth)
        return fail(llvm::formatv("nesting deeper than {0} levels",
                                  kMaxConfigJsonDepth));
      bool object = c == '{';
      open.push_back(object);
      if (object)
        keys.emplace_back();
      advance();
      expect = object ? Expect::KeyOrClose : Expect::ValueOrClose;
      return true;
    }
    expect = Expect::Separator;
    if (c == '"')
      return string(nullptr);
    if (c == '-' || c == '+' || c == '.' || llvm::isDigit(c))
      return number();
    for (llvm::StringRef word : {"true", "false", "null"})
      if (text.substr(pos).starts_with(word)) {
        for (size_t i = 0; i < word.size(); ++i)
          advance();
        return true;
      }
    for (llvm::StringRef word : {"NaN", "Infinity"})
      if (text.substr(pos).starts_with(word))
        return nonFinite(word);
    return fail("unexpected " + describeByte(c) + " where a value belongs");
  }

  /// A member's key and its ':'.
  bool key() {
    if (text[pos] != '"')
      return fail("expected a string key" +
                  std::string(text[pos] == '}' ? " after ','" : ""));
    unsigned keyLine = line, keyColumn = column;
    std::string name;
    if (!string(&name))
      return false;
    if (!keys.back().insert(name).second) {
      line = keyLine;
      column = keyColumn;
      return fail("key '" + cutForMessage(name) +
                  "' is given twice in one object (Python's json keeps the "
                  "last silently)");
    }
    skipSpace();
    if (pos == text.size() || text[pos] != ':')
      return fail("expected ':' after a key");
    advance();
    return true;
  }

  /// A string from its opening quote; its raw text (escapes kept) into
  /// `raw` when given.
  bool string(std::string *raw) {
    advance();
    size_t start = pos;
    while (pos < text.size()) {
      unsigned char c = text[pos];
      if (c == '"') {
        if (raw)
          *raw = text.slice(start, pos).str();
        advance();
        return true;
      }
      if (c < 0x20)
        return fail("a control character (byte " + llvm::utostr(c) +
                    ") inside a string; Python's json refuses it unescaped");
      if (c == '\\') {
        advance();
        if (pos == text.size())
          break;
        char escape = text[pos];
        if (escape == 'u') {
          advance();
          for (int i = 0; i < 4; ++i, advance())
            if (pos == text.size() || !llvm::isHexDigit(text[pos]))
              return fail("expected four hex digits after \\u");
          continue;
        }
        if (!llvm::StringRef("\"\\/bfnrt").contains(escape))
          return fail("invalid escape '\\" + std::string(1, escape) + "'");
      }
      advance();
    }
    return fail("unterminated string");
  }

  /// A number as Python's json reads it:
  /// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number() {
    size_t start = pos;
    unsigned startLine = line, startColumn = column;
    size_t end = pos;
    while (end < text.size() && (llvm::isAlnum(text[end]) ||
                                 llvm::StringRef("+-.").contains(text[end])))
      ++end;
    llvm::StringRef token = text.slice(start, end);
    if (token == "-Infinity" || token.starts_with("-NaN"))
      return nonFinite(token);
    size_t i = 0;
    auto digits = [&] {
      size_t from = i;
      while (i < token.size() && llvm::isDigit(token[i]))
        ++i;
      return i - from;
    };
    bool valid = true;
    if (i < token.size() && token[i] == '-')
      ++i;
    if (i < token.size() && token[i] == '0') {
      ++i;
    } else if (digits() == 0) {
      valid = false;
    }
    if (valid && i < token.size() && token[i] == '.') {
      ++i;
      valid = digits() > 0;
    }
    if (valid && i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
      ++i;
      if (i < token.size() && (token[i] == '+' || token[i] == '-'))
        ++i;
      valid = digits() > 0;
    }
    if (!valid || i != token.size()) {
      line = startLine;
      column = startColumn;
      return fail("invalid JSON number '" + cutForMessage(token) +
                  "' (Python's json, and so HF, refuses it)");
    }
    while (pos < end)
      advance();
    return true;
  }

  bool nonFinite(llvm::StringRef word) {
    return fail("'" + word.str() +
                "': Python's json reads it, but no config field may be "
                "NaN or infinite");
  }

  void close() {
    if (open.back())
      keys.pop_back();
    open.pop_back();
    advance();
  }

  void skipSpace() {
    while (pos < text.size() && llvm::StringRef(" \t\n\r").contains(text[pos]))
      advance();
  }

  void advance() {
    if (text[pos] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    ++pos;
  }

  static std::string describeByte(char c) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f)
      return "'" + std::string(1, c) + "'";
    return "byte " + llvm::utostr(byte);
  }

  bool fail(const llvm::Twine &why) {
    error = llvm::formatv("{0}:{1}: {2}", line, column, why.str()).str();
    return false;
  }

  llvm::StringRef text;
  size_t pos = 0;
  unsigned line = 1, column = 1;
  /// The open containers, innermost last: true for an object.
  llvm::SmallVector<bool, 8> open;
  /// The keys seen in each open object, innermost last.
  std::vector<llvm::StringSet<>> keys;
};

} // namespace

std::optional<llvm::json::Value>
mlir::moe::parseConfigJson(llvm::StringRef config, std::string &error) {
  Scanner scanner(config);
  if (!scanner.scan()) {
    error = scanner.error;
    return std::nullopt;
  }
  // What passed the scanner is RFC 8259 JSON nested at most
  // kMaxConfigJsonDepth deep; llvm::json still checks UTF-8.
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(config);
  if (!parsed) {
    // "[LINE:COLUMN, byte=OFFSET]: Why" (a column counted from 0) as
    // "LINE:COLUMN: why" (from 1), as the scanner says it.
    std::string text = llvm::toString(parsed.takeError());
    llvm::StringRef message = text;
    auto [position, why] = message.split("]: ");
    auto [line, column] = position.drop_front().split(',').first.split(':');
    unsigned fromZero = 0;
    column.getAsInteger(10, fromZero);
    error = (line + ":" + llvm::Twine(fromZero + 1) + ": " +
             why.take_front(1).lower() + why.drop_front())
                .str();
    return std::nullopt;
  }
  return std::move(*parsed);
}
