// The unit tests' check of an error: it happened, and its message says `fragment`.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kolo/status.h"

namespace kolo {

inline void ExpectError(const Status& s, const std::string& fragment) {
  ASSERT_FALSE(s.ok()) << "accepted; wanted an error with '" << fragment << "'";
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
}

}  // namespace kolo
