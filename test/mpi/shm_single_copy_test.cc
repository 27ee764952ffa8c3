// The shared-memory allreduce's single copy (process_vm_readv): the same bits
// as MPI_Allreduce, as the slots and as a reference reduced in rank order, in
// place and out of place, around the threshold; many calls that mix both
// paths; a peer whose memory cannot be read; the kernel refusing the probe on
// one rank (every rank falls back, rank 0 says why once); the setting. The
// pipelined slots that share its range, and the choice between the two.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../../ops/shm_allreduce.h"
#include "ops/data_mover.h"
#include "test_util.h"

namespace kolo::test {
namespace {

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int Size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

Result<std::unique_ptr<ShmAllreduce>> Create(bool single_copy, int64_t min_bytes,
                                             int64_t chunk_bytes, double timeout = 30) {
  ShmAllreduce::Options options;
  options.timeout_seconds = timeout;
  options.single_copy = single_copy;
  options.single_copy_min_bytes = min_bytes;
  options.chunk_bytes = chunk_bytes;
  options.choose_path = false;  // the single copy takes every buffer of its range
  return ShmAllreduce::Create(MPI_COMM_WORLD, options);
}

const ShmAllreduce::Options kDefaults;

// A well-mixed 64-bit value for (seed, rank, i): splitmix64's finalizer.
uint64_t Mix(uint64_t seed, int rank, int64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank) * 0xD1B54A32D192ED03ull +
               static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Rank `rank`'s input for one case: random values that any rank can make for
// any other. Floats span exponents 2^-8..2^8 (so the order of a sum shows in
// the bits) and, for min and max, include NaN, infinities and zeros of both
// signs (so the order of the operands shows too).
std::vector<uint8_t> Input(DataType dtype, ReduceOp op, int64_t count, int rank, uint64_t seed) {
  const size_t elem = DataTypeSize(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * elem);
  const float kSpecials[] = {std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f,
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
  const bool specials = op == ReduceOp::kMin || op == ReduceOp::kMax;
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* p = bytes.data() + static_cast<size_t>(i) * elem;
    const uint64_t h = Mix(seed, rank, i);
    if (!IsFloat(dtype)) {
      if (dtype == DataType::kBool) {
        p[0] = static_cast<uint8_t>(h & 1);
      } else {
        std::memcpy(p, &h, elem);
      }
      continue;
    }
    const uint64_t sign = h >> 63, exponent = (h >> 8) % 17;  // 2^-8 .. 2^8
    if (dtype == DataType::kFloat64) {
      const uint64_t bits = sign << 63 | (1023 - 8 + exponent) << 52 | (h & ((1ull << 52) - 1));
      std::memcpy(p, &bits, sizeof(bits));
    } else {
      const uint32_t bits = static_cast<uint32_t>(sign << 31 | (127 - 8 + exponent) << 23 |
                                                  ((h >> 20) & ((1u << 23) - 1)));
      float v;
      std::memcpy(&v, &bits, sizeof(v));
      Buffer::Write(p, dtype, 0, v);
    }
    if (specials && (h & 63) < 5) Buffer::Write(p, dtype, 0, kSpecials[h & 63]);
  }
  return bytes;
}

// op(x[n-1], ... op(x[1], x[0])): the order both paths promise. This rank's
// input in `mine`.
std::vector<uint8_t> Reference(DataType dtype, ReduceOp op, int64_t count, uint64_t seed,
                               std::vector<uint8_t>* mine) {
  std::vector<uint8_t> sum = Input(dtype, op, count, 0, seed);
  if (Rank() == 0) *mine = sum;
  for (int r = 1; r < Size(); ++r) {
    std::vector<uint8_t> x = Input(dtype, op, count, r, seed);
    ReduceInto(x.data(), sum.data(), count, dtype, op);
    if (r == Rank()) *mine = std::move(x);
  }
  return sum;
}

// The first element where `got` differs from `want` in its bits, or -1.
int64_t FirstDifference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                        DataType dtype) {
  if (got == want) return -1;
  const size_t elem = DataTypeSize(dtype);
  for (size_t i = 0; i < got.size(); i += elem) {
    if (std::memcmp(got.data() + i, want.data() + i, elem) != 0) {
      return static_cast<int64_t>(i / elem);
    }
  }
  return -1;
}

// Runs one case with this rank's `input` through `shm`, in place or not, and
// returns the result; the input of an out-of-place call must come back unchanged.
std::vector<uint8_t> Reduce(ShmAllreduce& shm, DataType dtype, ReduceOp op, int64_t count,
                            const std::vector<uint8_t>& input, bool in_place) {
  std::vector<uint8_t> in = input;
  if (in_place) {
    Status s = shm.Allreduce(in.data(), count, dtype, op);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return in;
  }
  const std::vector<uint8_t> before = in;
  std::vector<uint8_t> out(in.size(), 0xA5);
  Status s = shm.Allreduce(in.data(), out.data(), count, dtype, op);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(in == before) << "the input was written to";
  return out;
}

// `rounds` float32 sums through `shm`, cycling over `sizes` (elements), in
// place and out of place in turns of one cycle each, every result checked.
void ExpectSumsOverRounds(ShmAllreduce& shm, const std::vector<int64_t>& sizes, int rounds) {
  const int size = Size(), rank = Rank();
  const int64_t most = *std::max_element(sizes.begin(), sizes.end());
  const int cycle = static_cast<int>(sizes.size());
  std::vector<float> x(static_cast<size_t>(most)), y(static_cast<size_t>(most));
  for (int round = 0; round < rounds; ++round) {
    const int64_t n = sizes[round % cycle];
    const bool in_place = round / cycle % 2 == 0;
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((rank + 1) * ((i + round) % 7));
    Status s = in_place ? shm.Allreduce(x.data(), n, DataType::kFloat32, ReduceOp::kSum)
                        : shm.Allreduce(x.data(), y.data(), n, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const float* got = in_place ? x.data() : y.data();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], static_cast<float>((i + round) % 7 * size * (size + 1) / 2))
          << "round " << round << " rank " << rank << " elem " << i;
    }
  }
}

TEST(ShmSingleCopy, MatchesMpiAllreduceBitForBitOnEveryDtypeOpAndChunkBoundary) {
  // Every size through the single copy, in 256-byte chunks: the counts cross
  // chunk and slice boundaries.
  auto shm = Create(true, 1, 256);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  if (!shm.value()->single_copy()) GTEST_SKIP() << shm.value()->single_copy_why_not();
  ExpectSameBitsAsMpiAllreduce([&](void* p, int64_t n, DataType dtype, ReduceOp op) {
    return shm.value()->Allreduce(p, n, dtype, op);
  });
}

TEST(ShmSingleCopy, OutOfPlaceMatchesMpiAllreduceAndLeavesTheInputAlone) {
  auto shm = Create(true, 1, 256);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  if (!shm.value()->single_copy()) GTEST_SKIP() << shm.value()->single_copy_why_not();
  ExpectSameBitsOutOfPlaceLeavingTheInputAlone(
      [&](const void* in, void* out, int64_t n, DataType dtype, ReduceOp op) {
        return shm.value()->Allreduce(in, out, n, dtype, op);
      });
}

// The single copy and the slots against the reference, bit for bit, at the
// default threshold and chunk size: one element below it (slots), at it and
// one above (single copy), and over several chunks, slices and slot pieces.
TEST(ShmSingleCopy, SameBitsAsTheSlotsAndTheRankOrderAroundTheThreshold) {
  auto slots = Create(false, kDefaults.single_copy_min_bytes, kDefaults.chunk_bytes);
  auto one = Create(true, kDefaults.single_copy_min_bytes, kDefaults.chunk_bytes);
  ASSERT_TRUE(slots.ok()) << slots.status().ToString();
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_FALSE(slots.value()->single_copy());
  if (!one.value()->single_copy()) GTEST_SKIP() << one.value()->single_copy_why_not();
  struct Case {
    DataType dtype;
    ReduceOp op;
    int64_t extra;  // elements beyond the threshold's count
  };
  std::vector<Case> cases;
#ifdef KOLO_SANITIZED
  const int64_t kMany = 70001;  // several chunks per slice still
#else
  const int64_t kMany = 700001;  // two slot pieces, several chunks per slice
#endif
  for (int64_t extra : {int64_t{-1}, int64_t{0}, int64_t{1}, kMany})
    cases.push_back({DataType::kFloat32, ReduceOp::kSum, extra});
  for (DataType t : {DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    cases.push_back({t, ReduceOp::kSum, 3});
  }
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    cases.push_back({DataType::kFloat32, op, 5});
  }
  cases.push_back({DataType::kFloat16, ReduceOp::kMax, 7});
  cases.push_back({DataType::kInt32, ReduceOp::kSum, 1});
  cases.push_back({DataType::kInt8, ReduceOp::kProduct, 9});
  cases.push_back({DataType::kUInt16, ReduceOp::kMin, 11});
  cases.push_back({DataType::kBool, ReduceOp::kMax, 13});
  uint64_t seed = 0;
  for (const Case& c : cases) {
    const int64_t count =
        kDefaults.single_copy_min_bytes / static_cast<int64_t>(DataTypeSize(c.dtype)) + c.extra;
    std::vector<uint8_t> mine;
    const std::vector<uint8_t> want = Reference(c.dtype, c.op, count, ++seed, &mine);
    for (bool in_place : {true, false}) {
      const std::string what = std::string(DataTypeName(c.dtype)) + " op " +
                               std::to_string(static_cast<int>(c.op)) + " count " +
                               std::to_string(count) + (in_place ? " in place" : " out of place") +
                               " rank " + std::to_string(Rank());
      std::vector<uint8_t> got = Reduce(*one.value(), c.dtype, c.op, count, mine, in_place);
      ASSERT_EQ(FirstDifference(got, want, c.dtype), -1) << "single copy, " << what;
      got = Reduce(*slots.value(), c.dtype, c.op, count, mine, in_place);
      ASSERT_EQ(FirstDifference(got, want, c.dtype), -1) << "slots, " << what;
    }
  }
}

// Both ends of the single copy's range, scaled down (4 to 64 KiB): one
// element either side of each bound, against the reference.
TEST(ShmSingleCopy, SameBitsAsTheRankOrderAtBothEndsOfItsRange) {
  ShmAllreduce::Options options;
  options.single_copy_min_bytes = 4096;
  options.single_copy_max_bytes = 64 << 10;
  options.chunk_bytes = 1024;
  options.choose_path = false;
  auto shm = ShmAllreduce::Create(MPI_COMM_WORLD, options);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  if (!shm.value()->single_copy()) GTEST_SKIP() << shm.value()->single_copy_why_not();
  uint64_t seed = 1000;
  for (int64_t count : {1023, 1024, 1025, 16383, 16384, 16385}) {
    std::vector<uint8_t> mine;
    const std::vector<uint8_t> want =
        Reference(DataType::kFloat32, ReduceOp::kSum, count, ++seed, &mine);
    for (bool in_place : {true, false}) {
      std::vector<uint8_t> got =
          Reduce(*shm.value(), DataType::kFloat32, ReduceOp::kSum, count, mine, in_place);
      ASSERT_EQ(FirstDifference(got, want, DataType::kFloat32), -1)
          << "count " << count << (in_place ? " in place" : " out of place") << " rank " << Rank();
    }
  }
}

TEST(ShmSingleCopy, ManyCallsMixingBothPathsReuseTheirBuffersAtOnce) {
  // 4 to 64 KiB through the single copy, in 4 KiB chunks; smaller and larger
  // in 1 KiB pieces through the slots. Each call refills its buffer as soon as
  // the previous one returned, so a peer still reading it would get the next
  // round's values.
  ShmAllreduce::Options options;
  options.piece_bytes = 1024;
  options.single_copy_min_bytes = 4096;
  options.single_copy_max_bytes = 64 << 10;
  options.chunk_bytes = 4096;
  options.choose_path = false;
  auto shm = ShmAllreduce::Create(MPI_COMM_WORLD, options);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  if (!shm.value()->single_copy()) GTEST_SKIP() << shm.value()->single_copy_why_not();
  ExpectSumsOverRounds(*shm.value(), {1000, 1025, 9999, 16384, 16385, 39999}, 60);
}

TEST(ShmSingleCopy, APeerWhoseMemoryCannotBeReadFailsTheCallOnEveryRankNamingIt) {
  const int size = Size(), rank = Rank(), last = size - 1;
  auto shm = Create(true, kDefaults.single_copy_min_bytes, kDefaults.chunk_bytes, 5);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  if (!shm.value()->single_copy()) GTEST_SKIP() << shm.value()->single_copy_why_not();
  // Each rank's slice is 256 pages. The last rank's input is mapped, but the
  // slices the other ranks read from it are not readable: their
  // process_vm_readv fails with EFAULT, as it would for a buffer freed under
  // them. The last rank reads only its own slice locally.
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t slice = 256 * page;
  const int64_t count = size * slice / 4;
  ASSERT_GE(count * 4, kDefaults.single_copy_min_bytes);
  void* in = mmap(nullptr, static_cast<size_t>(size * slice), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(in, MAP_FAILED);
  std::memset(in, 0, static_cast<size_t>(size * slice));
  if (rank == last) {
    ASSERT_EQ(mprotect(in, static_cast<size_t>(last * slice), PROT_NONE), 0);
  }
  std::vector<float> out(static_cast<size_t>(count));
  Status s = shm.value()->Allreduce(in, out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  ASSERT_FALSE(s.ok()) << "rank " << rank;
  // A rank that reads the last rank's input says so; the others (the last
  // rank, and any that learned of a failure before their own read) name a
  // rank that failed.
  const std::string unreadable = "rank " + std::to_string(rank) + " cannot read rank " +
                                 std::to_string(last) + "'s memory: process_vm_readv: Bad address";
  int said_unreadable = s.message().find(unreadable) != std::string::npos ? 1 : 0;
  EXPECT_TRUE(said_unreadable || s.message().find(" failed a shared-memory allreduce (its log "
                                                  "says why)") != std::string::npos)
      << "rank " << rank << ": " << s.message();
  EXPECT_FALSE(rank == last && said_unreadable);
  MPI_Allreduce(MPI_IN_PLACE, &said_unreadable, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  EXPECT_TRUE(said_unreadable) << "no rank said that it could not read rank " << last;
  // The peers learn it from the segment, not from the 5 s timeout (whose words differ).
  EXPECT_EQ(s.message().find("has not copied its piece in"), std::string::npos)
      << "rank " << rank << ": " << s.message();
  Status again = shm.value()->Allreduce(out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_NE(again.message().find("failed earlier"), std::string::npos) << again.message();
  MPI_Barrier(MPI_COMM_WORLD);
  munmap(in, static_cast<size_t>(size * slice));
}

// The pipelined slots in pieces of 1 KiB through a ring of 8 (slots of 4
// KiB): every dtype and op against the rank order, counts below the number of
// ranks (some ranks reduce nothing), across piece boundaries and around the
// ring, in place and out of place.
TEST(ShmPipelined, SameBitsAsTheRankOrderAcrossPiecesAndAroundTheRing) {
  ShmAllreduce::Options options;
  options.piece_bytes = 4096;
  options.single_copy = false;
  options.pipelined_min_bytes = 1;
  options.pipelined_piece_bytes = 1024;
  auto shm = ShmAllreduce::Create(MPI_COMM_WORLD, options);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  struct Case {
    DataType dtype;
    ReduceOp op;
  };
  std::vector<Case> cases = {
      {DataType::kFloat32, ReduceOp::kSum},     {DataType::kFloat64, ReduceOp::kSum},
      {DataType::kFloat16, ReduceOp::kSum},     {DataType::kBFloat16, ReduceOp::kMax},
      {DataType::kFloat32, ReduceOp::kMin},     {DataType::kFloat32, ReduceOp::kMax},
      {DataType::kFloat32, ReduceOp::kProduct}, {DataType::kInt32, ReduceOp::kSum},
      {DataType::kInt8, ReduceOp::kProduct},    {DataType::kUInt16, ReduceOp::kMin},
      {DataType::kBool, ReduceOp::kMax}};
  uint64_t seed = 2000;
  for (const Case& c : cases) {
    for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{255}, int64_t{256}, int64_t{257},
                          int64_t{5000}, int64_t{20001}}) {
      std::vector<uint8_t> mine;
      const std::vector<uint8_t> want = Reference(c.dtype, c.op, count, ++seed, &mine);
      for (bool in_place : {true, false}) {
        std::vector<uint8_t> got = Reduce(*shm.value(), c.dtype, c.op, count, mine, in_place);
        ASSERT_EQ(FirstDifference(got, want, c.dtype), -1)
            << DataTypeName(c.dtype) << " op " << static_cast<int>(c.op) << " count " << count
            << (in_place ? " in place" : " out of place") << " rank " << Rank();
      }
    }
  }
}

// Calls through the slots and through the pipelined ring, one after the
// other, share the slots' memory: each refills its buffer as soon as the call
// before returned, so a peer still reading a slot would get wrong values.
TEST(ShmPipelined, CallsMixedWithTheSlotsReuseTheSlotsAtOnce) {
  ShmAllreduce::Options options;
  options.piece_bytes = 4096;
  options.single_copy = false;
  options.pipelined_min_bytes = 8192;
  options.pipelined_piece_bytes = 1024;
  auto shm = ShmAllreduce::Create(MPI_COMM_WORLD, options);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  ExpectSumsOverRounds(*shm.value(), {100, 2047, 2048, 300, 9000, 1500, 4097}, 80);
}

// Where both paths can take a buffer, rank 0 chooses and every rank follows:
// both paths are tried, every rank counts the same single-copy calls (a rank
// that took the other path would wait for its peers until the timeout), and
// every result is right whichever path made it.
TEST(ShmPipelined, EveryRankTakesThePathRankZeroChose) {
  ShmAllreduce::Options options;
  options.piece_bytes = 4096;
  options.single_copy_min_bytes = 4096;
  options.pipelined_min_bytes = 4096;
  options.pipelined_piece_bytes = 1024;
  options.chunk_bytes = 1024;
  options.timeout_seconds = 20;
  options.whole_max_bytes = 0;  // 4 KiB buffers to the chooser too, not the whole path
  auto shm = ShmAllreduce::Create(MPI_COMM_WORLD, options);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  if (!shm.value()->single_copy()) GTEST_SKIP() << shm.value()->single_copy_why_not();
  const int size = Size(), rank = Rank();
  std::vector<float> x(16384);
  const int calls = 3 * static_cast<int>(PathChooser::kExploreFirst) + 5;
  for (int round = 0; round < calls; ++round) {
    const int64_t n = round % 2 == 0 ? 1024 : 16384;  // two size classes
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((rank + 1) * ((i + round) % 5));
    Status s = shm.value()->Allreduce(x.data(), n, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(x[i], static_cast<float>((i + round) % 5 * size * (size + 1) / 2))
          << "round " << round << " rank " << rank << " elem " << i;
    }
  }
  const int64_t mine = shm.value()->single_copy_calls();
  int64_t least = mine, most = mine;
  MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(least, most) << "rank " << rank << " took the single copy " << mine << " times";
  // Each class tried both paths: at least one call each way.
  EXPECT_GE(mine, 2) << "rank " << rank;
  EXPECT_LE(mine, calls - 2) << "rank " << rank;
}

// Tensors reduced as one buffer of their concatenation, straight from and into
// their own memory: empty parts, parts smaller than a piece and parts across
// pieces and slices, in place and out of place, against the rank order.
TEST(ShmPipelined, PartsAreReducedAsTheirConcatenation) {
  ShmAllreduce::Options options;
  options.piece_bytes = 4096;
  options.single_copy = false;
  options.pipelined_min_bytes = 64;
  options.pipelined_piece_bytes = 1024;
  auto shm = ShmAllreduce::Create(MPI_COMM_WORLD, options);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  if (Size() < 2) GTEST_SKIP() << "one rank reduces nothing";
  const std::vector<int64_t> counts = {3, 0, 255, 1, 1000, 0, 4097, 17};
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  ASSERT_TRUE(shm.value()->TakesParts(total * 4));
  uint64_t seed = 3000;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    std::vector<uint8_t> mine;
    const std::vector<uint8_t> want = Reference(DataType::kFloat32, op, total, ++seed, &mine);
    for (bool in_place : {true, false}) {
      std::vector<std::vector<uint8_t>> in, out;
      std::vector<ShmAllreduce::Part> parts;
      int64_t at = 0;
      for (int64_t c : counts) {
        in.emplace_back(mine.begin() + at * 4, mine.begin() + (at + c) * 4);
        out.emplace_back(static_cast<size_t>(c * 4), 0xA5);
        at += c;
      }
      for (size_t i = 0; i < counts.size(); ++i) {
        parts.push_back({in[i].data(), in_place ? in[i].data() : out[i].data(), counts[i]});
      }
      Status s = shm.value()->AllreduceParts(parts, DataType::kFloat32, op);
      ASSERT_TRUE(s.ok()) << s.ToString();
      std::vector<uint8_t> got;
      at = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        const std::vector<uint8_t>& result = in_place ? in[i] : out[i];
        got.insert(got.end(), result.begin(), result.end());
        if (!in_place) {
          EXPECT_TRUE(std::equal(in[i].begin(), in[i].end(), mine.begin() + at * 4))
              << "part " << i << "'s input was written to";
        }
        at += counts[i];
      }
      ASSERT_EQ(FirstDifference(got, want, DataType::kFloat32), -1)
          << "op " << static_cast<int>(op) << (in_place ? " in place" : " out of place") << " rank "
          << Rank();
    }
  }
}

// The runtime's fused allreduces of 1 MiB and more go through the parts (no
// fusion buffer): averaged, in place and out of place, each tensor right.
TEST(ShmPipelined, FusedTensorsThroughTheRuntimeAreAveragedEachInItsOwnMemory) {
  InitOptions init;
  init.comm = HandleOfComm(MPI_COMM_WORLD);
  auto rt = Runtime::Create(init);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  const int size = Size(), rank = Rank();
  const int tensors = 12;
  const int64_t n = 60000;  // 240 KB each: below the in-place threshold, so fused
  std::vector<Buffer> in, out;
  for (int k = 0; k < tensors; ++k) {
    in.emplace_back(DataType::kFloat32, n + k);
    out.emplace_back(DataType::kFloat32, n + k);
  }
  for (int round = 0; round < 3; ++round) {
    std::vector<Handle> handles;
    for (int k = 0; k < tensors; ++k) {
      for (int64_t i = 0; i < in[k].size(); ++i) in[k].Set(i, (rank + 1) * ((i + k + round) % 11));
      AllreduceOptions opts;
      opts.op = ReduceOp::kAverage;
      opts.name = "parts." + std::to_string(k);
      auto h = k % 2 == 0 ? rt.value()->EnqueueAllreduce(in[k].View(), in[k].View(), opts)
                          : rt.value()->EnqueueAllreduce(in[k].View(), out[k].View(), opts);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
    }
    for (Handle h : handles) ASSERT_TRUE(rt.value()->Wait(h).ok());
    for (int k = 0; k < tensors; ++k) {
      const Buffer& got = k % 2 == 0 ? in[k] : out[k];
      for (int64_t i = 0; i < got.size(); ++i) {
        const double want = static_cast<float>((i + k + round) % 11 * (size + 1) / 2.0);
        ASSERT_EQ(got.Get(i), want)
            << "round " << round << " tensor " << k << " rank " << rank << " elem " << i;
        if (k % 2 == 1) {
          ASSERT_EQ(in[k].Get(i), (rank + 1) * ((i + k + round) % 11)) << "input changed";
        }
      }
    }
  }
  EXPECT_TRUE(rt.value()->Shutdown().ok());
}

// A runtime whose log of its start is captured; the captured text in `log`.
std::unique_ptr<Runtime> StartCapturingLog(
    const std::vector<std::pair<std::string, std::string>>& settings, std::string* log) {
  InitOptions options;
  options.comm = HandleOfComm(MPI_COMM_WORLD);
  options.settings = settings;
  ::testing::internal::CaptureStderr();
  auto rt = Runtime::Create(options);
  *log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return rt.ok() ? std::move(rt).value() : nullptr;
}

// Sizes around the threshold, in place (fused or alone), and one out of place.
void AllreduceAroundTheThreshold(Runtime& rt, const std::string& prefix) {
  const int64_t n = kDefaults.single_copy_min_bytes / 4;
  AllreduceSizesAndCheck(rt, {n - 1, n, n + 1, 3 * n + 5}, prefix, 11);
  const int size = rt.size(), rank = rt.rank();
  Buffer in(DataType::kFloat32, n + 3), out(DataType::kFloat32, n + 3);
  for (int64_t i = 0; i < in.size(); ++i) in.Set(i, (rank + 1) * (i % 9));
  AllreduceOptions opts;
  opts.op = ReduceOp::kSum;
  opts.name = prefix + "out_of_place";
  auto h = rt.EnqueueAllreduce(in.View(), out.View(), opts);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(rt.Wait(h.value()).ok());
  for (int64_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out.Get(i), (i % 9) * size * (size + 1) / 2.0) << "rank " << rank << " elem " << i;
    ASSERT_EQ(in.Get(i), (rank + 1) * (i % 9)) << "the input changed, elem " << i;
  }
}

TEST(SingleCopyPath, OnByDefaultWhereTheKernelAllowsIt) {
  std::string log;
  auto rt = StartCapturingLog({{"KOLO_LOG_LEVEL", "debug"}}, &log);
  ASSERT_NE(rt, nullptr);
  const bool permitted = log.find("with one copy from") != std::string::npos;
  const bool refused = log.find("copying through slots") != std::string::npos;
  EXPECT_TRUE(permitted != refused) << log;
  AllreduceAroundTheThreshold(*rt, "single_copy_on.");
  EXPECT_TRUE(rt->Shutdown().ok());
}

TEST(SingleCopyPath, KoloShmSingleCopyZeroCopiesThroughTheSlots) {
  std::string log;
  auto rt = StartCapturingLog({{"KOLO_SHM_SINGLE_COPY", "0"}, {"KOLO_LOG_LEVEL", "debug"}}, &log);
  ASSERT_NE(rt, nullptr);
  EXPECT_NE(log.find("allreduce through shared memory (every member on this host)"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("with one copy"), std::string::npos) << log;
  EXPECT_EQ(log.find("copying through slots"), std::string::npos) << log;  // nothing refused
  AllreduceAroundTheThreshold(*rt, "single_copy_off.");
  EXPECT_TRUE(rt->Shutdown().ok());
}

// Makes process_vm_readv fail with EPERM in this process from now on, as a
// container's seccomp profile does, in every thread, present and future.
// Returns whether it could.
bool RefuseProcessVmReadv() {
#if defined(__x86_64__)
  constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
  return false;
#endif
  static bool done = false;
  if (done) return true;
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  done = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program) == 0;
  return done;
}

// The last rank may not read other processes' memory (the others may): the
// probe fails there only, and every rank must still choose the slots.
// Run in a process of their own (CTest mpi.np*.shm_single_copy_refused):
// the filter cannot be taken back.
class ShmSingleCopyRefused : public ::testing::Test {
 protected:
  void SetUp() override {
    int refused = Rank() == Size() - 1 ? RefuseProcessVmReadv() : 1;
    MPI_Allreduce(MPI_IN_PLACE, &refused, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!refused) GTEST_SKIP() << "no seccomp filter here";
  }
  std::string Why() const {
    return "rank " + std::to_string(Size() - 1) +
           " cannot read rank 0's memory: process_vm_readv: Operation not permitted";
  }
};

TEST_F(ShmSingleCopyRefused, EveryRankFallsBackToTheSlotsForTheSameReason) {
  auto shm = Create(true, kDefaults.single_copy_min_bytes, kDefaults.chunk_bytes);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  EXPECT_FALSE(shm.value()->single_copy()) << "rank " << Rank();
  EXPECT_EQ(shm.value()->single_copy_why_not(), Why()) << "rank " << Rank();
  const int64_t count = kDefaults.single_copy_min_bytes / 4 + 7;
  std::vector<uint8_t> mine;
  const std::vector<uint8_t> want = Reference(DataType::kFloat32, ReduceOp::kSum, count, 99, &mine);
  for (bool in_place : {true, false}) {
    std::vector<uint8_t> got =
        Reduce(*shm.value(), DataType::kFloat32, ReduceOp::kSum, count, mine, in_place);
    ASSERT_EQ(FirstDifference(got, want, DataType::kFloat32), -1)
        << "rank " << Rank() << (in_place ? " in place" : " out of place");
  }
}

TEST_F(ShmSingleCopyRefused, RankZeroLogsOneLineSayingWhy) {
  std::string log;
  auto rt = StartCapturingLog({{"KOLO_LOG_LEVEL", "info"}}, &log);
  ASSERT_NE(rt, nullptr);
  const std::string line = "copying through slots: " + Why();
  size_t lines = 0;
  for (size_t at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++lines;
  EXPECT_EQ(lines, Rank() == 0 ? 1u : 0u) << "rank " << Rank() << ":\n" << log;
  AllreduceAroundTheThreshold(*rt, "refused.");
  EXPECT_TRUE(rt->Shutdown().ok());
}

}  // namespace
}  // namespace kolo::test
