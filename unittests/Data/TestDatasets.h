//===- TestDatasets.h - hand-built Megatron indices -------------*- C++ -*-===//
//-*-===//
//
// IdxBuilder writes an MMIDIDX index field by field, exactly as the format
// spells it, independently of the library's writer, so the tests can build
// valid indices the writer never produces and corrupt any one field.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_DATA_TESTDATASETS_H
#define MOE_UNITTESTS_DATA_TESTDATASETS_H

#include "TestFiles.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::testing {

struct IdxBuilder {
  std::string magic = std::string("MMIDIDX\0\0", 9);
  uint64_t version = 1;
  uint8_t dtypeCode = 8; // uint16
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> documents = {0};
  /// Overrides the counts written in the header when set.
  int64_t sequenceCount = -1;
  int64_t documentCount = -1;

  std::string bytes() const {
    std::string out = magic;
    appendLE<uint64_t>(out, version);
    appendLE<uint8_t>(out, dtypeCode);
    appendLE<uint64_t>(out, sequenceCount >= 0
                                ? static_cast<uint64_t>(sequenceCount)
                                : lengths.size());
    appendLE<uint64_t>(out, documentCount >= 0
                                ? static_cast<uint64_t>(documentCount)
                                : documents.size());
    for (int32_t length : lengths)
      appendLE<int32_t>(out, length);
    for (int64_t pointer : pointers)
      appendLE<int64_t>(out, pointer);
    for (int64_t document : documents)
      appendLE<int64_t>(out, document);
    return out;
  }
};

/// Little-endian uint16 ids.
inline std::string u16Bytes(const std::vector<uint16_t> &ids) {
  std::string out;
  for (uint16_t id : ids)
    appendLE<uint16_t>(out, id);
  return out;
}

} // namespace moe::testing

#endif // MOE_UNITTESTS_DATA_TESTDATASETS_H
