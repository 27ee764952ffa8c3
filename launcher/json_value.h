// A JSON reader for the few JSON texts kolorun reads: what a cloud writes
// about a job (SageMaker's resourceconfig.json and SM_HOSTS). The whole of
// JSON's syntax (RFC 8259) is accepted, so that fields kolorun does not read
// never stop it; a pure function, fuzzed with the host parsers.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kolo/status.h"

namespace kolo::launcher {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  // A string's value (escapes decoded to UTF-8), or a number's or a
  // boolean's literal as written.
  std::string text;
  std::vector<JsonValue> items;                            // an array's
  std::vector<std::pair<std::string, JsonValue>> members;  // an object's, in order

  // An object's member `key` (the last one of that name), or nullptr.
  const JsonValue* Member(const std::string& key) const;
};

// The value that `text` holds, or an error naming what is wrong and where
// ("at character N"). Nesting deeper than 64 levels is refused.
Result<JsonValue> ParseJson(const std::string& text);

}  // namespace kolo::launcher
