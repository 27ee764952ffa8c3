// kolorun's command line, the parts that need no parser: its usage line, and
// what it says about an option it does not know.
#pragma once

#include <string>
#include <vector>

namespace kolo::launcher {

inline constexpr const char* kUsage = "usage: kolorun [options] [--] command args...";

// True for an argument that can only be meant as an option ("-x", "--foo",
// "--foo=1"), never a program's name; "-" and "--" are not.
bool LooksLikeOption(const std::string& arg);

// The name in `known` closest to `name` (edit distance, the part before any
// '='), or "" when none is close enough to be what was meant.
std::string NearestName(const std::string& name, const std::vector<std::string>& known);

// "unknown option '--bogus'; did you mean '--verbose'? ..." in one line.
std::string UnknownOptionMessage(const std::string& arg, const std::vector<std::string>& known);

}  // namespace kolo::launcher
