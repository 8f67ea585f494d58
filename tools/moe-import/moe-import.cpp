//===- moe-import.cpp - a model description from another framework's ----===//
//
//   moe-import hf DIR-or-config.json -o model.mlir [--batch B] [--seq S]
//              [--ignore FIELD]... [--bias-update-rate R] [--router-aux-loss]
//
// Writes the moe.transformer of a Hugging Face config.json
// (MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM;
// moe/Import/HfConfig.h), headed by what the import decided. moec compiles
// the result; moe-run --load DIR reads the checkpoint next to the config.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Import/ConfigJson.h"
#include "moe/Import/HfConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

using namespace mlir;

namespace {
constexpr const char *kUsage =
    "usage: moe-import hf DIR-or-config.json -o model.mlir [--batch B] "
    "[--seq S] [--ignore FIELD]... [--bias-update-rate R] "
    "[--router-aux-loss]";

int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-import: error: " << message << "\n";
  return 1;
}

/// Each of the import's problems, one a line, as an error of its own.
int failEach(StringRef problems) {
  SmallVector<StringRef> lines;
  problems.split(lines, '\n');
  for (StringRef line : lines)
    fail(line);
  return 1;
}

/// A config larger than this is refused unread: HF's are a few KB.
constexpr uint64_t kMaxConfigBytes = uint64_t(64) << 20;

/// The text of the config at `path`, a regular file of at most
/// kMaxConfigBytes (a FIFO would block the read, a device never end).
std::unique_ptr<llvm::MemoryBuffer> readConfig(const std::string &path,
                                               std::string &error) {
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(path, status)) {
    error = "cannot read '" + path + "': " + ec.message();
    return nullptr;
  }
  if (status.type() != llvm::sys::fs::file_type::regular_file) {
    error = "cannot read '" + path + "': not a regular file";
    return nullptr;
  }
  if (status.getSize() > kMaxConfigBytes) {
    error = (path + ": " + llvm::Twine(status.getSize()) +
             " bytes; moe-import reads configs of at most " +
             llvm::Twine(kMaxConfigBytes) + " bytes")
                .str();
    return nullptr;
  }
  auto file = llvm::MemoryBuffer::getFile(path);
  if (!file) {
    error = "cannot read '" + path + "': " + file.getError().message();
    return nullptr;
  }
  return std::move(*file);
}

/// A positive integer flag value.
std::optional<int64_t> positive(StringRef flag, StringRef text,
                                std::string &error) {
  int64_t value = 0;
  if (text.getAsInteger(10, value) || value <= 0) {
    error = (flag + " expects a positive integer, got '" + text + "'").str();
    return std::nullopt;
  }
  return value;
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || StringRef(argv[1]) == "--help" ||
      StringRef(argv[1]) == "-h") {
    llvm::outs() << kUsage << "\n";
    return argc < 2 ? 1 : 0;
  }
  if (StringRef(argv[1]) != "hf")
    return fail(llvm::Twine("unknown source '") + argv[1] + "' (known: hf)\n" +
                kUsage);
  std::string input, output, error;
  llvm::StringSet<> given;
  moe::HfImportOptions options;
  for (int i = 2; i < argc; ++i) {
    StringRef arg = argv[i];
    auto value = [&]() -> std::optional<StringRef> {
      if (i + 1 >= argc)
        return std::nullopt;
      return StringRef(argv[++i]);
    };
    if (arg == "--router-aux-loss") {
      options.routerAuxLoss = true;
      continue;
    }
    if (arg == "-o" || arg == "--batch" || arg == "--seq" ||
        arg == "--ignore" || arg == "--bias-update-rate") {
      if (arg != "--ignore" && !given.insert(arg).second)
        return fail(arg + " is given twice");
      std::optional<StringRef> text = value();
      if (!text)
        return fail(arg + " needs a value\n" + kUsage);
      if (arg == "-o") {
        output = text->str();
      } else if (arg == "--ignore") {
        options.ignored.insert(text->str());
      } else if (arg == "--bias-update-rate") {
        double rate = 0;
        if (text->getAsDouble(rate) || !(rate >= 0))
          return fail("--bias-update-rate expects a number >= 0, got '" +
                      moe::cutForMessage(*text) + "'");
        options.biasUpdateRate = static_cast<float>(rate);
      } else {
        std::optional<int64_t> n = positive(arg, *text, error);
        if (!n)
          return fail(error);
        (arg == "--batch" ? options.batch : options.seq) = n;
      }
      continue;
    }
    if (arg.starts_with("-"))
      return fail("unknown flag '" + moe::cutForMessage(arg) +
                  "' (known: -o, --batch, --seq, --ignore, "
                  "--bias-update-rate, --router-aux-loss)\n" +
                  kUsage);
    if (!input.empty())
      return fail("more than one input ('" + moe::cutForMessage(input) +
                  "', '" + moe::cutForMessage(arg) + "')");
    input = arg.str();
  }
  if (input.empty() || output.empty())
    return fail(kUsage);

  std::string path = input;
  if (llvm::sys::fs::is_directory(input)) {
    llvm::SmallString<256> joined(input);
    llvm::sys::path::append(joined, "config.json");
    path = joined.str().str();
  }
  // The output must not be the input (same file, also through a link).
  bool same = false;
  if (!llvm::sys::fs::equivalent(path, output, same) && same)
    return fail("-o '" + output + "' is the input config '" + path +
                "'; writing it would destroy the config");
  std::unique_ptr<llvm::MemoryBuffer> file = readConfig(path, error);
  if (!file)
    return fail(error);
  std::optional<llvm::json::Value> parsed =
      moe::parseConfigJson(file->getBuffer(), error);
  if (!parsed)
    return fail(path + ":" + error);
  const llvm::json::Object *config = parsed->getAsObject();
  if (!config)
    return fail(path + ": expected a JSON object");

  MLIRContext context;
  context.loadDialect<moe::MoEDialect>();
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  FailureOr<moe::HfImport> imported =
      moe::importHfConfig(*config, path, options, *module, error);
  if (failed(imported))
    return failEach(error);
  for (const std::string &note : imported->notes)
    llvm::errs() << "moe-import: note: " << note << "\n";

  std::error_code ec;
  llvm::ToolOutputFile out(output, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return fail("cannot write '" + output + "': " + ec.message());
  out.os() << "// " << imported->architecture << " from " << path
           << " (moe-import hf).\n";
  for (const std::string &note : imported->notes)
    out.os() << "// " << note << "\n";
  module->print(out.os());
  out.os() << "\n";
  out.keep();
  return 0;
}
