// The message that names the first leaf whose signature differs between the
// ranks, for kolo.jax's tree check: from Python (_structured, every eager and
// callback collective) through kolo._core.first_difference, and from the XLA
// FFI handler of an allreduce inside jit (jax_ffi.cc). One copy, so both say
// the same thing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kolo {

// Given every rank's signature text (one line per leaf, "path dtype shape"),
// in rank order: "the first leaf that differs is number I: rank 0: ...;
// rank 1: ..." ("(no leaf)" where a rank's tree is shorter), or "" when every
// rank sent the same lines.
std::string FirstDifference(const std::vector<std::string>& every);

}  // namespace kolo
