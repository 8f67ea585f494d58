//===- GenerateCommand.h - moe-run generate ---------------------*- C++ -*-===//
#ifndef MOE_TOOLS_MOE_RUN_GENERATECOMMAND_H
#define MOE_TOOLS_MOE_RUN_GENERATECOMMAND_H

#include <string>
#include <vector>

/// `moe-run generate ARGS...` (the arguments after "generate"): 0 on
/// success, 1 on a runtime error, 2 on bad usage.
int runGenerateCommand(const std::vector<std::string> &args);

#endif // MOE_TOOLS_MOE_RUN_GENERATECOMMAND_H
