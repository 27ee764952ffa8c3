// What happens when things go wrong: every rank gets the same clear error, no
// test can hang, and the runtime carries on where the API allows.
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace kolo::test {
namespace {

using Clock = std::chrono::steady_clock;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class Errors : public RuntimeTest {};

TEST_F(Errors, MismatchedShapesRaiseTheSameErrorOnEveryRankThenCarryOn) {
  Buffer b(DataType::kFloat32, 18 * 18);
  int64_t d = rank_ == 0 ? 17 : 18;
  AllreduceOptions opts;
  opts.name = "mismatch.shape";
  Status s = Run(rt_->EnqueueAllreduce(b.View({d, d}), b.View({d, d}), opts));
  ASSERT_FALSE(s.ok()) << "rank " << rank_;
  EXPECT_EQ(s.code(), StatusCode::kPreconditionFailed);
  EXPECT_TRUE(Contains(s.message(),
                       "Mismatched allreduce tensor shapes for tensor "
                       "'mismatch.shape'"))
      << s.message();
  EXPECT_TRUE(Contains(s.message(), "rank 0 sent a tensor of shape [17, 17]")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "shape [18, 18]")) << s.message();
  // The message is the coordinator's: nothing waited for a stall check (the time it took
  // is the machine's, not a promise).
  EXPECT_FALSE(Contains(s.message(), "Stalled")) << s.message();
  // The same name works afterwards with agreeing shapes.
  b.Set(0, 1);
  opts.op = ReduceOp::kSum;
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View({2}), b.View({2}), opts)).ok());
  EXPECT_EQ(b.Get(0), size_);
}

TEST_F(Errors, MismatchedDtypesOpsRootsAndScales) {
  struct Case {
    const char* name;
    const char* fragment;
  };
  Buffer f(DataType::kFloat32, 4), i(DataType::kInt32, 4);
  const bool odd = rank_ % 2 == 1;
  {
    AllreduceOptions o;
    o.name = "mm.dtype";
    Status s = Run(rt_->EnqueueAllreduce(odd ? i.View() : f.View(), odd ? i.View() : f.View(), o));
    EXPECT_TRUE(Contains(s.message(), "Mismatched data types")) << s.message();
  }
  {
    AllreduceOptions o;
    o.name = "mm.op";
    o.op = odd ? ReduceOp::kMax : ReduceOp::kSum;
    Status s = Run(rt_->EnqueueAllreduce(f.View(), f.View(), o));
    EXPECT_TRUE(Contains(s.message(), "Mismatched reduce operations")) << s.message();
  }
  {
    AllreduceOptions o;
    o.name = "mm.scale";
    o.prescale_factor = odd ? 2 : 1;
    Status s = Run(rt_->EnqueueAllreduce(f.View(), f.View(), o));
    EXPECT_TRUE(Contains(s.message(), "Mismatched prescale factors")) << s.message();
  }
  {
    CollectiveOptions o;
    o.name = "mm.root";
    Status s = Run(rt_->EnqueueBroadcast(f.View(), odd ? 1 : 0, o));
    EXPECT_TRUE(Contains(s.message(), "Mismatched broadcast root ranks")) << s.message();
  }
  {
    CollectiveOptions o;
    o.name = "mm.collective";
    Status s =
        odd ? Run(rt_->EnqueueAllgather(f.View(), o)) : Run(rt_->EnqueueBroadcast(f.View(), 0, o));
    EXPECT_TRUE(Contains(s.message(), "Mismatched operations")) << s.message();
  }
}

TEST_F(Errors, NameReusedWhilePendingFailsAtOnce) {
  // Every rank but the last holds "dup" pending (the last submits it only
  // after the barrier, so it cannot complete before): reusing the name fails
  // at once on each of them. (A rank whose first call may already have
  // completed could accept the reuse while another refuses it, so the last
  // rank does not try.)
  Buffer a(DataType::kFloat32, 4), b(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.name = "dup";
  const bool holder = rank_ < size_ - 1;
  Result<Handle> first = Status::Internal("not submitted");
  if (holder) {
    first = rt_->EnqueueAllreduce(a.View(), a.View(), opts);
    ASSERT_TRUE(first.ok());
    auto second = rt_->EnqueueAllreduce(b.View(), b.View(), opts);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(second.status().message(), "'dup' is already pending"))
        << second.status().message();
  }
  ASSERT_TRUE(Run(rt_->EnqueueBarrier({})).ok());
  if (!holder) first = rt_->EnqueueAllreduce(a.View(), a.View(), opts);
  Status status = Run(first);
  ASSERT_TRUE(status.ok()) << status.ToString();
}

TEST_F(Errors, NameReusedWhilePendingFailsDeterministically) {
  // Rank 0 holds the name pending (the others have not submitted it yet).
  Buffer a(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.name = "held";
  if (rank_ == 0) {
    auto first = rt_->EnqueueAllreduce(a.View(), a.View(), opts);
    ASSERT_TRUE(first.ok());
    auto second = rt_->EnqueueAllreduce(a.View(), a.View(), opts);
    ASSERT_FALSE(second.ok());
    EXPECT_TRUE(Contains(second.status().message(), "already pending"));
    ASSERT_TRUE(Run(rt_->EnqueueBarrier({})).ok());
    ASSERT_TRUE(rt_->Wait(first.value()).ok());
  } else {
    ASSERT_TRUE(Run(rt_->EnqueueBarrier({})).ok());
    ASSERT_TRUE(Run(rt_->EnqueueAllreduce(a.View(), a.View(), opts)).ok());
  }
}

TEST_F(Errors, BadInputFailsAtEnqueueWithAClearMessage) {
  Buffer b(DataType::kFloat32, 6);
  struct Case {
    Result<Handle> result;
    const char* fragment;
  };
  CollectiveOptions none;
  AllreduceOptions avg;
  std::vector<Case> cases;
  cases.push_back({rt_->EnqueueBroadcast(b.View(), size_, none), "root_rank"});
  cases.push_back({rt_->EnqueueBroadcast(b.View(), -1, none), "out of range"});
  cases.push_back(
      {rt_->EnqueueAlltoall(b.View({6}), std::vector<int64_t>(size_, 1), none), "splits sum to"});
  cases.push_back({rt_->EnqueueAlltoall(b.View({6}), {6}, none), "entries but the process set"});
  std::vector<int64_t> negative(size_, 0);
  negative[0] = -1;
  negative[size_ - 1] += 7;
  cases.push_back({rt_->EnqueueAlltoall(b.View({6}), negative, none), "must not be negative"});
  cases.push_back({rt_->EnqueueAllgather(b.View({}), none), "at least one dimension"});
  Buffer bools(DataType::kBool, 2);
  cases.push_back(
      {rt_->EnqueueAllreduce(bools.View(), bools.View(), avg), "average is not defined"});
  cases.push_back(
      {rt_->EnqueueAllreduce(b.View({6}), b.View({3}), avg), "input's dtype and shape"});
  TensorView gpu = b.View();
  gpu.device = 0;
  if (GpuCount() == 0) {
    cases.push_back({rt_->EnqueueAllreduce(gpu, gpu, avg),
                     BuiltWithCuda() ? "no usable CUDA device" : "no GPU support"});
  }
  cases.push_back({rt_->EnqueueAllreduce(b.View(), gpu, avg), "both must be on one device"});
  cases.push_back({rt_->EnqueueAllreduce({nullptr, DataType::kFloat32, {3}},
                                         {nullptr, DataType::kFloat32, {3}}, avg),
                   "no data pointer"});
  cases.push_back({rt_->EnqueueAllreduce(b.View({-1}), b.View({-1}), avg), "negative dimension"});
  CollectiveOptions bad_set;
  bad_set.process_set = 42;
  cases.push_back({rt_->EnqueueAllgather(b.View(), bad_set), "process set 42 does not exist"});
  ReducescatterOptions rs;
  rs.op = ReduceOp::kMax;
  cases.push_back({rt_->EnqueueReducescatter(b.View(), rs), "supports sum and average"});
  cases.push_back({rt_->EnqueueRemoveProcessSet(0), "cannot be removed"});
  cases.push_back({rt_->EnqueueAddProcessSet({0, 0}), "distinct ranks"});
  for (size_t k = 0; k < cases.size(); ++k) {
    ASSERT_FALSE(cases[k].result.ok()) << "case " << k << " was accepted";
    EXPECT_EQ(cases[k].result.status().code(), StatusCode::kInvalidArgument) << "case " << k;
    EXPECT_TRUE(Contains(cases[k].result.status().message(), cases[k].fragment))
        << "case " << k << ": " << cases[k].result.status().message();
  }
  EXPECT_FALSE(rt_->Wait(12345).ok());
}

TEST_F(Errors, ShutdownWithPendingWorkFailsEveryHandle) {
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.name = "never.everywhere";
  std::optional<Handle> pending;
  if (rank_ == 0) {
    auto h = rt_->EnqueueAllreduce(b.View(), b.View(), opts);
    ASSERT_TRUE(h.ok());
    pending = h.value();
  }
  ASSERT_TRUE(rt_->Shutdown().ok());
  if (pending) {
    Status s = rt_->Wait(*pending);
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "shut down")) << s.message();
  }
  // Enqueue after shutdown fails clearly; shutdown is idempotent.
  auto late = rt_->EnqueueAllreduce(b.View(), b.View(), opts);
  ASSERT_FALSE(late.ok());
  EXPECT_TRUE(Contains(late.status().message(), "not running")) << late.status().message();
  EXPECT_TRUE(rt_->Shutdown().ok());
  // A new runtime works on the same (still initialized) MPI.
  InitOptions again;
  again.comm = HandleOfComm(MPI_COMM_WORLD);
  auto rt2 = Runtime::Create(again);
  ASSERT_TRUE(rt2.ok()) << rt2.status().ToString();
  b.Set(0, 2);
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  auto h = rt2.value()->EnqueueAllreduce(b.View(), b.View(), sum);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(rt2.value()->Wait(h.value()).ok());
  EXPECT_EQ(b.Get(0), 2 * size_);
  EXPECT_TRUE(rt2.value()->Shutdown().ok());
}

TEST_F(Errors, OneRankShuttingDownEndsTheOthersPendingWork) {
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.name = "only.on.others";
  // Rank 0 shuts down only once the others' allreduce is pending.
  SideBarrier enqueued;
  if (rank_ == 0) {
    enqueued.Wait();
    ASSERT_TRUE(rt_->Shutdown().ok());
  } else {
    Result<Handle> pending = rt_->EnqueueAllreduce(b.View(), b.View(), opts);
    enqueued.Wait();
    Status s = Run(std::move(pending));
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
    EXPECT_TRUE(
        Contains(s.message(), "shut down by rank 0 (it called shutdown() or its process ended)"))
        << s.message();
  }
}

// Rank 0 "raises" before an unnamed allreduce that the others start (and wait
// in), then calls its next unnamed collective: the others' collective is
// cancelled, and from there every rank's unnamed collectives pair correctly.
TEST_F(Errors, UnnamedCollectivesOutOfStepResyncAndPairCorrectlyAgain) {
  Buffer ints(DataType::kInt32, 3), floats(DataType::kFloat32, 5);
  AllreduceOptions skipped, next;
  skipped.call_site = "train.py:10 in step";
  next.call_site = "train.py:20 in step";
  next.op = ReduceOp::kSum;
  Handle waiting = 0;
  if (rank_ != 0) {
    Result<Handle> h = rt_->EnqueueAllreduce(ints.View(), ints.View(), skipped);
    ASSERT_TRUE(h.ok()) << h.status().message();
    waiting = h.value();
  }
  // Orders the arrivals: the others' skipped collective before rank 0's next.
  AllreduceOptions order;
  order.name = "others.started.theirs";
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(floats.View({1}), floats.View({1}), order)).ok());
  if (rank_ != 0) {
    Status s = rt_->Wait(waiting);
    ASSERT_EQ(s.code(), StatusCode::kPreconditionFailed) << "rank " << rank_ << ": " << s.message();
    EXPECT_TRUE(Contains(s.message(), "Unnamed collectives out of step")) << s.message();
    EXPECT_TRUE(Contains(s.message(),
                         "at train.py:10 in step, but rank(s) 0 called their unnamed "
                         "collective of that number"))
        << s.message();
    EXPECT_TRUE(Contains(s.message(), "train.py:20 in step")) << s.message();
  }
  for (int i = 0; i < 3; ++i) {
    floats.Set(0, rank_ + i);
    ASSERT_TRUE(Run(rt_->EnqueueAllreduce(floats.View({1}), floats.View({1}), next)).ok())
        << "rank " << rank_ << " call " << i;
    EXPECT_EQ(floats.Get(0), size_ * (size_ - 1) / 2 + size_ * i) << "rank " << rank_;
  }
}

TEST_F(Errors, UnnamedMismatchAtOnePlaceLeavesRanksInStep) {
  // Horovod's own error tests do this: one line, rank-dependent shapes.
  Buffer b(DataType::kFloat32, 8);
  AllreduceOptions opts;
  opts.call_site = "test.py:5 in test_error";
  Status s = Run(rt_->EnqueueAllreduce(b.View({rank_ + 1}), b.View({rank_ + 1}), opts));
  EXPECT_TRUE(Contains(s.message(), "Mismatched allreduce tensor shapes")) << s.message();
  EXPECT_FALSE(Contains(s.message(), "out of step")) << s.message();
  opts.op = ReduceOp::kSum;
  b.Set(0, 1);
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View({1}), b.View({1}), opts)).ok());
  EXPECT_EQ(b.Get(0), size_);
}

TEST_F(Errors, ANameIsTakenUntilItsHandleIsWaitedFor) {
  // However fast the first one completes, the second start of the same
  // collective under its name is refused until the first handle is waited for.
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.name = "twice";
  Result<Handle> first = rt_->EnqueueAllreduce(b.View(), b.View(), opts);
  ASSERT_TRUE(first.ok()) << first.status().message();
  while (!rt_->Poll(first.value())) std::this_thread::yield();
  Result<Handle> again = rt_->EnqueueAllreduce(b.View(), b.View(), opts);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(again.status().message(),
                       "'twice' is already pending on this rank (it finished, but its handle "
                       "has not been synchronized yet)"))
      << again.status().message();
  // Another collective may use the name, and the same one once it was waited for.
  ASSERT_TRUE(Run(rt_->EnqueueAllgather(b.View({1}), opts)).ok());
  ASSERT_TRUE(rt_->Wait(first.value()).ok());
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts)).ok());
}

class Stall : public RuntimeTest {
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_STALL_CHECK_TIME_SECONDS", "0.5"}, {"KOLO_STALL_SHUTDOWN_TIME_SECONDS", "1.5"}};
  }

 protected:
  // The skipping rank meets the others at a barrier only after their tensor
  // has failed (~1.5 s), and soon enough that the barrier itself does not
  // stall: the others tell it when theirs failed.
  void MeetAfterTheStall() {
    AfterTheStall();
    ASSERT_TRUE(Run(rt_->EnqueueBarrier({})).ok());
  }
  // Returns on the skipping rank once the others have seen their tensor fail
  // (they call it after that), without a kolo collective that would take part
  // in what the test checks.
  void AfterTheStall() { stalled_.Wait(); }

  SideBarrier stalled_;
};

TEST_F(Stall, MissingTensorFailsWithTheMissingRankNamed) {
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.name = "skipped.by.last.rank";
  if (rank_ != size_ - 1) {
    auto start = Clock::now();
    Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts));
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_FALSE(s.ok());  // and meets the others all the same
    EXPECT_TRUE(Contains(s.message(), "not by rank(s) " + std::to_string(size_ - 1)))
        << s.message();
    EXPECT_TRUE(Contains(s.message(), "'skipped.by.last.rank'")) << s.message();
    // Failed by the stall shutdown (1.5 s), not before it; an upper bound would be the
    // machine's speed, and a hang ends at CTest's timeout.
    EXPECT_GE(seconds, 1.4) << "failed before the stall shutdown time";
  }
  MeetAfterTheStall();
}

TEST_F(Stall, UnnamedTensorThatStallsLetsItsRanksPairTheirNextOne) {
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.call_site = "train.py:10 in step";
  opts.op = ReduceOp::kSum;
  if (rank_ != size_ - 1) {
    Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts));
    EXPECT_TRUE(Contains(s.message(), "Stalled for")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "It was unnamed")) << s.message();
  }
  // After the others' tensor failed (~1.5 s): no kolo barrier, which would
  // number unnamed collectives afresh by itself.
  AfterTheStall();
  // The ranks that sent it number their next one like it: all pair.
  b.Set(0, 1);
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View({1}), b.View({1}), opts)).ok());
  EXPECT_EQ(b.Get(0), size_);
}

TEST_F(Stall, CachedTensorThatStallsIsReportedToo) {
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.name = "cached.then.skipped";
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts)).ok());  // now cached
  if (rank_ != size_ - 1) {
    Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts));
    EXPECT_FALSE(s.ok());  // and meets the others all the same
    EXPECT_TRUE(Contains(s.message(), "not by rank(s) " + std::to_string(size_ - 1)))
        << s.message();
  }
  MeetAfterTheStall();
}

TEST_F(Stall, CachedGroupThatStallsIsReportedToo) {
  // The stalled hits take their whole group to the coordinator, which fails
  // every member on the waiting ranks.
  Buffer a(DataType::kFloat32, 4), b(DataType::kFloat32, 2);
  AllreduceOptions opts;
  opts.name = "cached.group.then.skipped";
  auto step = [&] {
    return Run(rt_->EnqueueGroupedAllreduce({a.View(), b.View()}, {a.View(), b.View()}, opts));
  };
  ASSERT_TRUE(step().ok());  // now cached
  if (rank_ != size_ - 1) {
    Status s = step();
    EXPECT_FALSE(s.ok());  // and meets the others all the same
    EXPECT_TRUE(Contains(s.message(), "Group 'cached.group.then.skipped' failed")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "not by rank(s) " + std::to_string(size_ - 1)))
        << s.message();
  }
  MeetAfterTheStall();
}

// Rank 0 sends a tensor on the global set, the others send it on a set of all
// ranks: neither set's coordinator sees every rank, so without help both would
// stall. At the stall check time the missing ranks say where they sent it.
TEST_F(Stall, TensorOnDifferentProcessSetsFailsOnEveryRank) {
  std::vector<int> everyone(size_);
  for (int r = 0; r < size_; ++r) everyone[r] = r;
  WorkResult added;
  ASSERT_TRUE(Run(rt_->EnqueueAddProcessSet(everyone), &added).ok());
  const int other_set = added.value;
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions opts;
  opts.name = "sent.on.two.sets";
  opts.process_set = rank_ == 0 ? kGlobalProcessSet : other_set;
  Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(),
                       "Mismatched process sets for allreduce tensor "
                       "'sent.on.two.sets'"))
      << s.message();
  EXPECT_TRUE(Contains(s.message(), "on process set 0")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "on process set " + std::to_string(other_set))) << s.message();
  EXPECT_FALSE(Contains(s.message(), "Stalled")) << s.message();  // not the stall shutdown's
  // Both sets carry on.
  for (int set : {kGlobalProcessSet, other_set}) {
    b.Set(0, 1);
    opts.process_set = set;
    opts.op = ReduceOp::kSum;
    Status again = Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts));
    ASSERT_TRUE(again.ok()) << "rank " << rank_ << ", set " << set << ": " << again.ToString();
    EXPECT_EQ(b.Get(0), size_);
  }
}

TEST(ProcessSets, RegisteredAtInitAndAddedLater) {
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<int> evens;
  for (int r = 0; r < size; r += 2) evens.push_back(r);
  InitOptions options;
  options.comm = HandleOfComm(MPI_COMM_WORLD);
  options.process_sets = {evens};
  auto created = Runtime::Create(options);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Runtime& rt = *created.value();
  const bool even = rank % 2 == 0;
  Buffer b(DataType::kInt32, 2);
  b.Set(0, rank);
  AllreduceOptions opts;
  opts.op = ReduceOp::kSum;
  opts.process_set = 1;
  auto h = rt.EnqueueAllreduce(b.View(), b.View(), opts);
  if (even) {
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(rt.Wait(h.value()).ok());
    int want = 0;
    for (int r : evens) want += r;
    EXPECT_EQ(b.Get(0), want);
    EXPECT_EQ(rt.ProcessSetRank(1).value(), rank / 2);
  } else {
    ASSERT_FALSE(h.ok());
    EXPECT_TRUE(Contains(h.status().message(), "not a member of process set 1"));
  }
  // Added later, collectively: the odd ranks plus rank 0.
  std::vector<int> odds = {0};
  for (int r = 1; r < size; r += 2) odds.push_back(r);
  auto add = rt.EnqueueAddProcessSet(odds);
  ASSERT_TRUE(add.ok());
  WorkResult added;
  ASSERT_TRUE(rt.Wait(add.value(), &added).ok());
  EXPECT_EQ(added.value, 2);
  EXPECT_EQ(rt.ProcessSetRanks(2).value(), odds);
  if (!even || rank == 0) {
    b.Set(0, 1);
    opts.process_set = 2;
    ASSERT_TRUE(rt.Wait(rt.EnqueueAllreduce(b.View(), b.View(), opts).value()).ok());
    EXPECT_EQ(b.Get(0), static_cast<double>(odds.size()));
    CollectiveOptions bopts;
    bopts.process_set = 2;
    b.Set(1, rank * 10);
    ASSERT_TRUE(rt.Wait(rt.EnqueueBroadcast(b.View(), 1, bopts).value()).ok());
    EXPECT_EQ(b.Get(1), 10);  // set rank 1 is global rank 1
  }
  auto remove = rt.EnqueueRemoveProcessSet(2);
  ASSERT_TRUE(remove.ok());
  ASSERT_TRUE(rt.Wait(remove.value()).ok());
  EXPECT_FALSE(rt.ProcessSetRanks(2).ok());
  EXPECT_TRUE(rt.Shutdown().ok());
}

class TimelineTest : public RuntimeTest {
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_TIMELINE", ::testing::TempDir() + "/kolo_mpi_timeline.json"},
            {"KOLO_TIMELINE_MARK_CYCLES", "1"}};
  }
};

TEST_F(TimelineTest, RankZeroWritesAValidTrace) {
  Buffer b(DataType::kFloat32, 100);
  AllreduceOptions opts;
  for (int k = 0; k < 3; ++k) {
    opts.name = "traced." + std::to_string(k);
    ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts)).ok());
  }
  ASSERT_TRUE(rt_->Shutdown().ok());
  if (rank_ != 0) return;
  std::ifstream f(::testing::TempDir() + "/kolo_mpi_timeline.json");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  ASSERT_GE(text.size(), 3u);
  EXPECT_EQ(text.front(), '[');
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");
  // Horovod's names: the row "<op>.<name>", the phases NEGOTIATE_<OP> and <OP>,
  // the data movement as an activity inside the latter.
  for (const char* part : {"\"allreduce.traced.0\"", "\"NEGOTIATE_ALLREDUCE\"", "\"ALLREDUCE\"",
                           "\"QUEUE\"", "CYCLE_START"}) {
    EXPECT_TRUE(Contains(text, part)) << part << "\n" << text;
  }
  EXPECT_TRUE(Contains(text, "\"MPI_ALLREDUCE\"") || Contains(text, "\"SHM_ALLREDUCE\"")) << text;
  EXPECT_FALSE(Contains(text, "\"NEGOTIATE\"")) << text;
  EXPECT_FALSE(Contains(text, "\"traced.0\"")) << text;
}

// A call refused on one rank's calling thread (a bad input) fails the other
// ranks' matching collective within a negotiation round, naming the refusing
// rank and its reason. The stall shutdown is short so that a refusal that is
// not announced fails the test instead of hanging it.
class Refusals : public RuntimeTest {
 protected:
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_STALL_CHECK_TIME_SECONDS", "10"}, {"KOLO_STALL_SHUTDOWN_TIME_SECONDS", "20"}};
  }
  bool refuser() const { return rank_ == size_ - 1; }
  // The refusing rank runs `bad` (refused at once), the others `good`, which
  // must fail with the refusal and `fragment`, not with the stall shutdown.
  void Expect(const char* label, const std::function<Result<Handle>()>& bad,
              const std::function<Result<Handle>()>& good, const std::string& fragment) {
    if (refuser()) {
      Result<Handle> h = bad();
      ASSERT_FALSE(h.ok()) << label << ": accepted on the refusing rank";
      EXPECT_TRUE(Contains(h.status().message(), fragment))
          << label << ": " << h.status().message();
      return;
    }
    Status s = Run(good());
    ASSERT_FALSE(s.ok()) << label << ": rank " << rank_ << " completed it";
    EXPECT_EQ(s.code(), StatusCode::kPreconditionFailed) << label << ": " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "rank " + std::to_string(size_ - 1) + " refused its input: "))
        << label << ": " << s.message();
    EXPECT_TRUE(Contains(s.message(), fragment)) << label << ": " << s.message();
    EXPECT_FALSE(Contains(s.message(), "Stalled")) << label << ": " << s.message();
  }
};

TEST_F(Refusals, EveryKindOfLocalCheckFailsTheOtherRanksToo) {
  Buffer b(DataType::kFloat32, 6), bools(DataType::kBool, 6);
  AllreduceOptions avg;
  auto named = [](const char* name) {
    AllreduceOptions o;
    o.name = name;
    return o;
  };
  Expect(
      "negative dimension",
      [&] { return rt_->EnqueueAllreduce(b.View({-1}), b.View({-1}), named("r.neg")); },
      [&] { return rt_->EnqueueAllreduce(b.View(), b.View(), named("r.neg")); },
      "allreduce input has a negative dimension");
  Expect(
      "output shape",
      [&] { return rt_->EnqueueAllreduce(b.View({6}), b.View({3}), named("r.out")); },
      [&] { return rt_->EnqueueAllreduce(b.View(), b.View(), named("r.out")); },
      "input's dtype and shape");
  Expect(
      "bool average",
      [&] { return rt_->EnqueueAllreduce(bools.View(), bools.View(), named("r.bool")); },
      [&] { return rt_->EnqueueAllreduce(b.View(), b.View(), named("r.bool")); },
      "average is not defined for bool");
  if (GpuCount() == 0) {  // the device check, made in RuntimeImpl::Enqueue
    TensorView gpu = b.View();
    gpu.device = 0;
    Expect(
        "device", [&] { return rt_->EnqueueAllreduce(gpu, gpu, named("r.gpu")); },
        [&] { return rt_->EnqueueAllreduce(b.View(), b.View(), named("r.gpu")); },
        BuiltWithCuda() ? "no usable CUDA device" : "no GPU support");
  }
  CollectiveOptions gather;
  gather.name = "r.gather";
  Expect(
      "allgather scalar", [&] { return rt_->EnqueueAllgather(b.View({}), gather); },
      [&] { return rt_->EnqueueAllgather(b.View(), gather); }, "at least one dimension");
  CollectiveOptions bcast;
  bcast.name = "r.bcast";
  Expect(
      "broadcast root", [&] { return rt_->EnqueueBroadcast(b.View(), size_, bcast); },
      [&] { return rt_->EnqueueBroadcast(b.View(), 0, bcast); }, "root_rank");
  CollectiveOptions a2a;
  a2a.name = "r.alltoall";
  Buffer rows(DataType::kFloat32, size_);
  Expect(
      "alltoall splits",
      [&] { return rt_->EnqueueAlltoall(rows.View(), std::vector<int64_t>(size_, 2), a2a); },
      [&] { return rt_->EnqueueAlltoall(rows.View(), {}, a2a); }, "splits sum to");
  ReducescatterOptions rs;
  rs.name = "r.rs";
  Expect(
      "reducescatter op",
      [&] {
        ReducescatterOptions max = rs;
        max.op = ReduceOp::kMax;
        return rt_->EnqueueReducescatter(rows.View(), max);
      },
      [&] { return rt_->EnqueueReducescatter(rows.View(), rs); }, "supports sum and average");
  Buffer c(DataType::kFloat32, 6);
  Expect(
      "grouped member",
      [&] {
        return rt_->EnqueueGroupedAllreduce({b.View(), c.View({-2})}, {b.View(), c.View({-2})},
                                            named("r.group"));
      },
      [&] {
        return rt_->EnqueueGroupedAllreduce({b.View(), c.View()}, {b.View(), c.View()},
                                            named("r.group"));
      },
      "negative dimension");
  Expect(
      "announced by the caller",
      [&]() -> Result<Handle> {
        rt_->AnnounceRefusal("allreduce", 1, named("r.python"),
                             "TypeError: dtype torch.complex64 is not supported");
        return Status::InvalidArgument("dtype torch.complex64 is not supported");
      },
      [&] { return rt_->EnqueueAllreduce(b.View(), b.View(), named("r.python")); },
      "dtype torch.complex64 is not supported");
  // Everything ran in step: a last allreduce pairs and sums.
  Buffer one(DataType::kFloat32, 1);
  one.Set(0, 1);
  AllreduceOptions sum;
  sum.name = "r.after";
  sum.op = ReduceOp::kSum;
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(one.View(), one.View(), sum)).ok());
  EXPECT_EQ(one.Get(0), size_) << "rank " << rank_;
}

TEST_F(Refusals, ARefusedUnnamedCallTakesItsNumberSoTheNextOnesPair) {
  Buffer b(DataType::kFloat32, 4), bools(DataType::kBool, 4);
  AllreduceOptions avg;  // unnamed
  avg.call_site = "refusal_test.cc:1 in step";
  Expect(
      "unnamed", [&] { return rt_->EnqueueAllreduce(bools.View(), bools.View(), avg); },
      [&] { return rt_->EnqueueAllreduce(b.View(), b.View(), avg); }, "average is not defined");
  // The next unnamed collectives, from another place, pair with each other:
  // no rank is out of step, no RESYNC.
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  sum.call_site = "refusal_test.cc:2 in step";
  for (int k = 0; k < 3; ++k) {
    b.Set(0, rank_ + 1);
    Status s = Run(rt_->EnqueueAllreduce(b.View({1}), b.View({1}), sum));
    ASSERT_TRUE(s.ok()) << "rank " << rank_ << " call " << k << ": " << s.message();
    EXPECT_EQ(b.Get(0), size_ * (size_ + 1) / 2) << "rank " << rank_ << " call " << k;
  }
}

TEST_F(Refusals, TheRefusingRankMayStartTheNameAgainAtOnce) {
  // The refusing rank retries "retry" with a valid tensor before the others
  // reach their first "retry": its retry pairs with their second one.
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions o;
  o.name = "retry";
  o.op = ReduceOp::kSum;
  b.Set(0, 1);
  if (refuser()) {
    ASSERT_FALSE(rt_->EnqueueAllreduce(b.View({-4}), b.View({-4}), o).ok());
  } else {
    Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), o));
    ASSERT_FALSE(s.ok()) << "rank " << rank_;
    EXPECT_TRUE(Contains(s.message(), "refused its input")) << s.message();
  }
  b.Set(0, 1);
  Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), o));
  ASSERT_TRUE(s.ok()) << "rank " << rank_ << ": " << s.message();
  EXPECT_EQ(b.Get(0), size_) << "rank " << rank_;
}

TEST_F(Refusals, ACachedNameIsRefusedWithinARound) {
  // "hot" rides the response cache on the valid ranks; the refusal marks its
  // bit invalid, so their hit goes to the coordinator and meets it.
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions o;
  o.name = "hot";
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), o)).ok());
  Expect(
      "cached", [&] { return rt_->EnqueueAllreduce(b.View({-4}), b.View({-4}), o); },
      [&] { return rt_->EnqueueAllreduce(b.View(), b.View(), o); }, "negative dimension");
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), o)).ok()) << "rank " << rank_;
}

TEST(Init, BadConfigurationFailsNamingTheVariable) {
  InitOptions options;
  options.comm = HandleOfComm(MPI_COMM_WORLD);
  options.settings = {{"KOLO_CYCLE_TIME", "fast"}};
  auto rt = Runtime::Create(options);
  ASSERT_FALSE(rt.ok());
  EXPECT_TRUE(Contains(rt.status().message(), "KOLO_CYCLE_TIME='fast'")) << rt.status().message();
}

// Horovod's init(comm=[ranks]): kolo runs on the listed ranks of
// MPI_COMM_WORLD, ranked in the list's order.
int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int WorldSize() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

Result<std::unique_ptr<Runtime>> CreateOnWorldRanks(std::vector<int> ranks) {
  InitOptions options;
  options.world_ranks = std::move(ranks);
  return Runtime::Create(options);
}

TEST(Init, WorldRanksRunInTheListsOrder) {
  const int me = WorldRank(), n = WorldSize();
  std::vector<int> reversed;
  for (int r = n - 1; r >= 0; --r) reversed.push_back(r);
  auto rt = CreateOnWorldRanks(reversed);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  Runtime& kolo = *rt.value();
  EXPECT_EQ(kolo.size(), n);
  EXPECT_EQ(kolo.rank(), n - 1 - me) << "world rank " << me;
  // Gathered in kolo's rank order: the world ranks from the last to the first.
  Buffer mine(DataType::kFloat64, 1);
  mine.Set(0, me);
  WorkResult out;
  auto h = kolo.EnqueueAllgather(mine.View(), {});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(kolo.Wait(h.value(), &out).ok());
  ASSERT_EQ(out.data.size(), sizeof(double) * n);
  for (int i = 0; i < n; ++i) {
    double got = 0;
    std::memcpy(&got, out.data.data() + i * sizeof(double), sizeof got);
    EXPECT_EQ(got, n - 1 - i) << "world rank " << me << " elem " << i;
  }
  EXPECT_TRUE(kolo.Shutdown().ok());
}

TEST(Init, AProcessNotInTheListFailsAtOnceAndTheListedRanksRun) {
  const int me = WorldRank();
  auto rt = CreateOnWorldRanks({0});
  if (me != 0) {
    ASSERT_FALSE(rt.ok()) << "world rank " << me << " started on a list without it";
    EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(rt.status().message(), "init(comm=[0]): this process is rank " +
                                                    std::to_string(me) + " of MPI_COMM_WORLD"))
        << rt.status().message();
    return;
  }
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  EXPECT_EQ(rt.value()->size(), 1);
  Buffer b(DataType::kFloat32, 4);
  b.Set(0, 5);
  auto h = rt.value()->EnqueueAllreduce(b.View(), b.View(), AllreduceOptions{});
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(rt.value()->Wait(h.value()).ok());
  EXPECT_EQ(b.Get(0), 5);
  EXPECT_TRUE(rt.value()->Shutdown().ok());
}

TEST(Init, ListsThatOrderTheRanksDifferentlyFailOnEveryListedRank) {
  const int me = WorldRank(), n = WorldSize();
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(me == 0 ? r : n - 1 - r);
  auto rt = CreateOnWorldRanks(ranks);
  ASSERT_FALSE(rt.ok()) << "world rank " << me;
  EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(rt.status().message(), "the listed ranks passed different lists"))
      << rt.status().message();
  EXPECT_TRUE(Contains(rt.status().message(), "world rank 0 passed [0, 1"))
      << rt.status().message();
}

TEST(Init, ListsThatAreNoRanksAreRefusedOnEveryRank) {
  const int n = WorldSize();
  auto twice = CreateOnWorldRanks({0, 0});
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(Contains(twice.status().message(),
                       "init(comm=[0, 0]): the list must hold distinct ranks of MPI_COMM_WORLD, "
                       "between 0 and " +
                           std::to_string(n - 1)))
      << twice.status().message();
  auto outside = CreateOnWorldRanks({n});
  ASSERT_FALSE(outside.ok());
  EXPECT_TRUE(Contains(outside.status().message(), "between 0 and")) << outside.status().message();
  InitOptions both;
  both.comm = HandleOfComm(MPI_COMM_WORLD);
  both.world_ranks = {0};
  auto rt = Runtime::Create(both);
  ASSERT_FALSE(rt.ok());
  EXPECT_TRUE(Contains(rt.status().message(), "not both")) << rt.status().message();
}

}  // namespace
}  // namespace kolo::test
