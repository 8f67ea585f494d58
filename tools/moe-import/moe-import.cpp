//===- moe-import.cpp - a model description from another framework's ----===//
//
//   moe-import hf DIR-or-config.json -o model.mlir [--batch B] [--seq S]
//              [--ignore FIELD]... [--bias-update-rate R]
//
// Writes the moe.transformer of a Hugging Face config.json
// (MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM;
// moe/Import/HfConfig.h), headed by what the import decided. moec compiles
// the result; moe-run --load DIR reads the checkpoint next to the config.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Import/HfConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
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
    "[--seq S] [--ignore FIELD]... [--bias-update-rate R]";

int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-import: error: " << message << "\n";
  return 1;
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
  moe::HfImportOptions options;
  for (int i = 2; i < argc; ++i) {
    StringRef arg = argv[i];
    auto value = [&]() -> std::optional<StringRef> {
      if (i + 1 >= argc)
        return std::nullopt;
      return StringRef(argv[++i]);
    };
    if (arg == "-o" || arg == "--batch" || arg == "--seq" ||
        arg == "--ignore" || arg == "--bias-update-rate") {
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
                      *text + "'");
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
      return fail("unknown flag '" + arg +
                  "' (known: -o, --batch, --seq, --ignore, "
                  "--bias-update-rate)\n" +
                  kUsage);
    if (!input.empty())
      return fail("more than one input ('" + input + "', '" + arg + "')");
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
  auto file = llvm::MemoryBuffer::getFile(path);
  if (!file)
    return fail("cannot read '" + path + "': " + file.getError().message());
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse((*file)->getBuffer());
  if (!parsed)
    return fail(path + ": not JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *config = parsed->getAsObject();
  if (!config)
    return fail(path + ": expected a JSON object");

  MLIRContext context;
  context.loadDialect<moe::MoEDialect>();
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  FailureOr<moe::HfImport> imported =
      moe::importHfConfig(*config, path, options, *module, error);
  if (failed(imported))
    return fail(error);
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
