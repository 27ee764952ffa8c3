#!/usr/bin/env bash
# Builds kolo with CUDA and checks its GPU path on the machine it runs on: a
# GPU machine lent to a session (run from the carried tree, with gpu-kit/ made
# here by scripts/gpu_kit.sh), or any machine of a user's own with a GPU, the
# CUDA toolkit and NCCL. See docs/gpu.md.
#
#   scripts/gpu_check.sh [--kit DIR] [--build DIR] [--out DIR] [--budget-s N] STEP...
#
# Steps (each appends a line to the summary):
#   nccl       where the NCCL found is older than 2.30 and the kit brings NCCL's
#              source (gpu_kit.sh --nccl SOURCE_DIR): build it for this GPU into
#              <build>-nccl, used from then on (minutes; skipped when not needed)
#   build      unpack the kit (if --kit names one), configure with CUDA for this
#              machine's GPU (native; sm_90 where no GPU answers), build
#   suite      the whole normal CTest suite of that build (gpu.np1 included)
#   gpu        gpu.np1: kolo_gpu_tests at np=1 (NCCL, the fusion copy kernel), and
#              gpu.tf_operation.np1 (the TensorFlow op library's C table on the device)
#   torch1     test/python/test_torch_cuda.py at np=1 (CUDA tensors, the
#              DistributedOptimizer equivalence in float64)
#   speed      bench/gpu_allreduce (kolo vs ncclAllReduce, 4 B to 1 GiB), bench/gpu_copy
#              (the fusion copy kernel vs cudaMemcpyAsync), bench/gpu_torch_bench.py
#              (kolo.torch vs torch.distributed with NCCL on the same tensors)
#   memcheck, racecheck, synccheck
#              kolo_gpu_tests under compute-sanitizer with that tool
#   tworanks   kolo_gpu_tests at np=2
#   torch2     test/python/test_torch_cuda.py at np=2 (every collective, the
#              DistributedOptimizer equivalence)
#   hosts2     kolo_gpu_tests at np=2 over two loopback "hosts" (127.0.0.1 and
#              127.0.0.2, the second in a UTS namespace of its own): the
#              hierarchical allreduce and Adasum across hosts
#   faults     mismatched devices across ranks, two ranks pinned to one GPU, a rank
#              killed inside a GPU collective: a named error on every surviving
#              rank, no hang
#   The np=2 steps need a GPU per rank or NCCL's multi-rank mode: on one GPU with
#   NCCL >= 2.30 (the kit's, see below) they run with NCCL_MULTI_RANK_GPU_ENABLE=1,
#   NCCL_NVLS_ENABLE=0 and NCCL_MAX_CTAS=2, the ranks time-sharing the GPU (a
#   functional check, not a speed); with an older NCCL, tworanks, torch2 and
#   hosts2 are skipped saying so, and faults checks kolo's refusal.
#   resnet     a synthetic ResNet-50 training step at np=1 three ways in one job
#              (bench/gpu_resnet_bench.py): kolo's DistributedOptimizer, torch's
#              DDP, no distribution; images per second and their ratios
#   wheel      the wheel users install (the kit's, for this Python: gpu_kit.sh
#              --wheel), unpacked beside the build: test_torch_cuda.py at np=1 and
#              bench/gpu_torch_bench.py on its GPU code and its kolorun
#   tf         kolo.tensorflow's GPU kernels: test/tensorflow/test_tf_gpu.py and
#              test_op_library.py at np=1, the op library compiled on first import
#              for that TensorFlow (this build ships none). Needs a TensorFlow with
#              CUDA (GPU_CHECK_TF_PYTHON, else the Python above) for which _core was
#              built; skipped, saying why, where there is none (a lent machine: the
#              CUDA wheel is far over what reaches it). Not in quick.
# Groups: sanitize = memcheck racecheck synccheck; torch = torch1 torch2 resnet;
#   quick = nccl build gpu torch1 speed memcheck racecheck synccheck tworanks torch2
#           hosts2 faults resnet wheel, in that order of value: one call of a lent
#           machine;
#   all   = nccl build suite, then the rest of quick.
#
# Budget (--budget-s, default 480; 0 = none): a step starts only if the time
# left covers its estimate (STEP_ESTIMATE_S below, measured on a lent H100)
# and runs at most for the time left; the build always starts. summary.txt,
# speed.json and logs.tgz are rewritten after every step, so a call cut off at
# its limit still brings back everything measured so far.
#
# NCCL: NCCL_HOME, else the one step nccl built, else the kit's (scripts/gpu_kit.sh
# --nccl: built for sm_90, so used where the GPU is of compute capability 9.0 or
# none answers), else the CUDA
# toolkit's, /usr's, or the nvidia-nccl wheel's beside PyTorch. Every step runs
# with that NCCL's lib folder (unless a system one) first on LD_LIBRARY_PATH, so
# that kolo and PyTorch load the NCCL kolo was built against.
#
# Out ($OUT, else --out, else gpu-check-out/): summary.txt (one line per step:
# name, ok/FAILED/skipped, seconds; the machine's GPU and driver first),
# speed.json, and logs.tgz with every step's full log. Three files: the device
# tool brings back at most eight.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

kit=""
build=build-gpu
out=${OUT:-$root/gpu-check-out}
budget=480
steps=()
quick=(nccl build gpu torch1 speed memcheck racecheck synccheck tworanks torch2 hosts2 faults resnet wheel)
step_names="nccl build suite gpu torch1 speed memcheck racecheck synccheck tworanks torch2 hosts2 faults resnet wheel tf"
while [ $# -gt 0 ]; do
  case $1 in
    --kit) kit=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --budget-s) budget=$2; shift 2 ;;
    quick) steps+=("${quick[@]}"); shift ;;
    all) steps+=(nccl build suite "${quick[@]:2}"); shift ;;
    sanitize) steps+=(memcheck racecheck synccheck); shift ;;
    torch) steps+=(torch1 torch2 resnet); shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *)
      if [[ " $step_names " == *" $1 "* ]]; then
        steps+=("$1"); shift
      else
        echo "gpu_check: unknown argument '$1' (steps: $step_names; groups: sanitize torch quick all)" >&2
        exit 2
      fi ;;
  esac
done
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu_check: --budget-s takes whole seconds, not '$budget'" >&2; exit 2; }
[ ${#steps[@]} -gt 0 ] || { echo "gpu_check: name at least one step (or all); --help lists them" >&2; exit 2; }
case $kit in
  none) kit="" ;;
  "") [ -f "$root/gpu-kit/MANIFEST" ] && kit=$root/gpu-kit ;;
esac

mkdir -p "$out"
logs=$(mktemp -d)
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
python=${GPU_CHECK_PYTHON:-$(command -v python3)}

if [ -n "$kit" ]; then
  # shellcheck source=gpu_kit_env.sh
  source "$root/scripts/gpu_kit_env.sh" "$kit" "${GPU_KIT_DIR:-/tmp/kolo-kit}" || exit 1
fi
export PATH=$PATH:/usr/local/cuda/bin
mpirun=$(command -v mpirun || true)
mpiflags=(--oversubscribe --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp)
[ "$(id -u)" = 0 ] && mpiflags+=(--allow-run-as-root)

gpu_name=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -1)
gpu_count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# The budget's test stands in for the machine (below, "The clock").
[ -z "${GPU_CHECK_FAKE_CLOCK:-}" ] || gpu_count=${GPU_CHECK_FAKE_GPUS:-$gpu_count}
note "machine: ${gpu_name:-no GPU answers nvidia-smi}; $(nproc) cores; kit: ${kit:-none}"

# Where step nccl builds the kit's NCCL source for this GPU (kept with the build).
nccl_build_dir=$root/${build%/}-nccl
[[ $build != /* ]] || nccl_build_dir=${build%/}-nccl

nccl_dir() {
  local d cap built=""
  cap=${gpu_name##*, }
  [ ! -e "$nccl_build_dir/lib/libnccl.so.2" ] || built=$nccl_build_dir
  for d in "${NCCL_HOME:-}" "$built" "${GPU_KIT_NCCL_HOME:-}" /usr/local/cuda /usr; do
    if [ -z "$d" ] || [ ! -f "$d/include/nccl.h" ]; then continue; fi
    if [ "$d" = "${GPU_KIT_NCCL_HOME:-}" ] && [ -n "$gpu_name" ] && [ "$cap" != 9.0 ]; then
      echo "gpu_check: the kit's NCCL is built for sm_90, this GPU is $cap: not using it" >&2
      continue
    fi
    echo "$d"
    return
  done
  "$python" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__ or list(nvidia.nccl.__path__)[0]))' 2>/dev/null
}

# NCCL's version code (major*10000 + minor*100 + patch) from its nccl.h; 0 if none.
nccl_header_version() {
  awk '$1 == "#define" && $2 == "NCCL_MAJOR" { M = $3 } $1 == "#define" && $2 == "NCCL_MINOR" { m = $3 }
       $1 == "#define" && $2 == "NCCL_PATCH" { p = $3 } END { print (M == "" ? 0 : M * 10000 + m * 100 + p) }' \
    "$1" 2>/dev/null || echo 0
}

nccl_name() { echo "$(($1 / 10000)).$(($1 / 100 % 100)).$(($1 % 100))"; }

# How the np=2 steps run, from the GPUs and the NCCL version code: "own" (a GPU per
# rank), "shared" (one GPU, NCCL's multi-rank mode) or "skip: why".
two_rank_mode() {
  local gpus=$1 code=$2
  if [ "$gpus" -eq 0 ]; then
    echo "skip: no CUDA device answers nvidia-smi"
  elif [ "$gpus" -ge 2 ]; then
    echo own
  elif [ "$code" -ge 23000 ]; then
    echo shared
  else
    echo "skip: NCCL $(nccl_name "$code") cannot put two ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE needs NCCL >= 2.30: scripts/gpu_kit.sh --nccl)"
  fi
}

# The NCCL the steps build with and load, and so how two ranks run; again after
# step nccl built one.
choose_nccl() {
  nccl=$(nccl_dir)
  nccl_lib=""
  nccl_code=0
  if [ -n "$nccl" ]; then
    nccl_lib=$(ls "$nccl"/lib/libnccl.so "$nccl"/lib/libnccl.so.2 "$nccl"/lib/x86_64-linux-gnu/libnccl.so 2>/dev/null | head -1)
    nccl_code=$(nccl_header_version "$nccl/include/nccl.h")
    # kolo and PyTorch load this NCCL (libnccl.so.2 is found on LD_LIBRARY_PATH
    # first); a system folder stays where the dynamic linker has it, behind the kit's.
    if [ -n "$nccl_lib" ] && [[ $nccl_lib != /usr/lib/* && $nccl_lib != /lib/* ]]; then
      LD_LIBRARY_PATH=$(dirname "$nccl_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      export LD_LIBRARY_PATH
    fi
  fi
  two_ranks=$(two_rank_mode "${gpu_count:-0}" "$nccl_code")
  case $two_ranks in
    own) note "two ranks: a GPU each" ;;
    shared) note "two ranks: on one GPU, NCCL $(nccl_name "$nccl_code") ($nccl_lib) in its multi-rank mode" ;;
    *) note "two ranks: ${two_ranks#skip: }" ;;
  esac
}
choose_nccl
# What a step of two ranks on one GPU runs with (NVLS cannot have two ranks of a
# communicator on one GPU; few CTAs each, so that both ranks' kernels fit).
two_rank_env() {
  [ "$two_ranks" = shared ] || return 0
  export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_NVLS_ENABLE=0 NCCL_MAX_CTAS=2
  [ -z "$nccl_lib" ] || export LD_PRELOAD=$nccl_lib${LD_PRELOAD:+:$LD_PRELOAD}
}
# Steps that need two ranks on devices that NCCL accepts, skipped where there are none.
needs_two_gpu_ranks=" tworanks torch2 hosts2 "

# The kit's NCCL source (gpu_kit.sh --nccl SOURCE_DIR), built here for this GPU
# only, where the NCCL found cannot share a GPU: NCCL >= 2.30 for the np=2 steps
# on one GPU. Once built, it stays beside the build and is used from then on.
step_nccl() {
  local cap
  if [ -e "$nccl_build_dir/lib/libnccl.so.2" ]; then
    echo "NCCL $(nccl_name "$(nccl_header_version "$nccl_build_dir/include/nccl.h")") already built in $nccl_build_dir"
    return 0
  fi
  need_gpu || return
  [ -n "${GPU_KIT_NCCL_SRC:-}" ] || { skipped "no NCCL source in the kit (scripts/gpu_kit.sh --nccl SOURCE_DIR)"; return; }
  if [ "$nccl_code" -ge 23000 ]; then
    skipped "NCCL $(nccl_name "$nccl_code") here can share a GPU already"
    return
  fi
  cap=${gpu_name##*, }
  cap=${cap/./}
  echo "== NCCL from $GPU_KIT_NCCL_SRC for sm_$cap into $nccl_build_dir"
  make -C "$GPU_KIT_NCCL_SRC" -j "$(nproc)" src.build BUILDDIR="$nccl_build_dir" \
    CUDA_HOME="$(dirname "$(dirname "$(command -v nvcc)")")" \
    NVCC_GENCODE="-gencode=arch=compute_$cap,code=sm_$cap" >"$logs/nccl-make.log" 2>&1 ||
    { tail -n 30 "$logs/nccl-make.log"; return 1; }
  ls -l "$nccl_build_dir"/lib/libnccl.so*
}

step_build() {
  local arch
  [ -n "$nccl" ] || { echo "no nccl.h found (set NCCL_HOME)"; return 1; }
  arch=native
  [ -n "$gpu_name" ] || arch=90
  echo "NCCL: $nccl ($nccl_lib, version code $nccl_code); CUDA architectures: $arch; Python: $python"
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DKOLO_NCCL_INCLUDE="$nccl/include" -DKOLO_NCCL_LIBRARY="$nccl_lib" \
    -DKOLO_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$python" -DKOLO_TF_PYTHON="$root/.no-tf-python" \
    ${GPU_KIT_CMAKE_ARGS:-} || return 1
  cmake --build "$build" -j "$(nproc)"
}

step_suite() {
  # The packaging tests fetch from PyPI, which a lent machine cannot reach.
  # In parallel first; what failed runs again alone, so that a test that only
  # lost a race for the cores is told apart from one that fails.
  cd "$build" || return 1
  ctest --output-on-failure --timeout 300 -j "$(($(nproc) / 3))" -LE packaging && return 0
  echo "== the failed tests again, one at a time"
  ctest --output-on-failure --timeout 300 --rerun-failed
}

# A step that finds nothing to check returns 77 after a line "SKIPPED: why",
# which the summary repeats.
skipped() {
  echo "SKIPPED: $*"
  return 77
}
need_gpu() {
  [ -n "$gpu_name" ] || skipped "no CUDA device answers nvidia-smi"
}
# Runs a command, output shown and kept; 77 (with its reason) where the output
# says that every test skipped and none ran (pytest, GoogleTest, CTest).
all_or_skipped() {
  local tmp rc why
  tmp=$(mktemp)
  "$@" 2>&1 | tee "$tmp"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ] && grep -Eq '[0-9]+ skipped|\[  SKIPPED \]|\*\*\*Skipped' "$tmp" &&
    ! grep -Eq '[0-9]+ passed|\[  PASSED  \] [1-9]|Test +#[0-9]+: .* Passed' "$tmp"; then
    rc=77
    why=$(grep -Eo 'no CUDA device on this machine|[0-9]+ ranks on this host share [0-9]+ GPU\(s\)' "$tmp" | head -1)
    echo "SKIPPED: ${why:-every test skipped}"
  fi
  rm -f "$tmp"
  return "$rc"
}

step_gpu() {
  cd "$build" || return 1
  all_or_skipped ctest --verbose --timeout 120 -R '^gpu\.'
}

# kolo_gpu_tests at np=1 under one compute-sanitizer tool. API errors are not
# reported: NCCL's ncclCommInitRank probes its kernels with
# cudaFuncGetAttributes and handles the "no kernel image" (209) it gets for
# those not built for this GPU (docs/gpu.md); kolo checks every CUDA call of
# its own.
sanitize_with() {
  need_gpu || return
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer is not on PATH"; return 1; }
  echo "== compute-sanitizer --tool $1"
  "$mpirun" -np 1 "${mpiflags[@]}" compute-sanitizer --tool "$1" --error-exitcode 9 --report-api-errors no \
    "$build/test/kolo_gpu_tests"
}
step_memcheck() { sanitize_with memcheck; }
step_racecheck() { sanitize_with racecheck; }
step_synccheck() { sanitize_with synccheck; }

step_tworanks() {
  # A GPU per rank, or both on one in NCCL's multi-rank mode. Nothing may hang.
  two_rank_env
  all_or_skipped timeout 120 "$mpirun" -np 2 "${mpiflags[@]}" -x LD_LIBRARY_PATH \
    "$build/test/kolo_gpu_tests"
  local rc=$?
  [ $rc -ne 124 ] || echo "tworanks: HUNG (timeout 120 s)"
  return $rc
}

step_hosts2() {
  # One rank on each of two loopback "hosts" (the ssh stand-in runs the second's
  # daemon in a UTS namespace of its own): the hierarchical allreduce's
  # cross-host communicator and Adasum's combination across hosts.
  two_rank_env
  echo "== kolo_gpu_tests over two loopback hosts, KOLO_HIERARCHICAL_ALLREDUCE=1"
  local env=(-x KOLO_HIERARCHICAL_ALLREDUCE=1 -x LD_LIBRARY_PATH) run=("$build/test/kolo_gpu_tests")
  [ "$two_ranks" != shared ] || env+=(-x NCCL_MULTI_RANK_GPU_ENABLE -x NCCL_NVLS_ENABLE -x NCCL_MAX_CTAS -x LD_PRELOAD)
  # A GPU each: both are local rank 0 of their "host", so each sees only its own.
  # shellcheck disable=SC2016
  [ "$two_ranks" != own ] || run=(sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_RANK exec "$0"' "${run[@]}")
  KOLO_HIERARCHICAL_ALLREDUCE=1 all_or_skipped timeout 180 "$mpirun" -np 2 -H 127.0.0.1:1,127.0.0.2:1 \
    --mca plm_rsh_agent "$root/test/launcher/fake_ssh.sh" "${mpiflags[@]}" "${env[@]}" "${run[@]}"
  local rc=$?
  [ $rc -ne 124 ] || echo "hosts2: HUNG (timeout 180 s)"
  return $rc
}

torch_at() {
  echo "== test_torch_cuda.py at np=$1"
  PYTHONPATH=$build/python all_or_skipped timeout 300 "$build/launcher/kolorun" -np "$1" "$python" \
    -m pytest -q -rs -p no:cacheprovider "$root/test/python/test_torch_cuda.py"
}
# Also with stream-ordered completion: the same tests see their results
# through torch's current stream, not a host wait.
step_torch1() {
  local rc r
  torch_at 1
  rc=$?
  echo "== with KOLO_ENABLE_ASYNC_COMPLETION=1"
  (export KOLO_ENABLE_ASYNC_COMPLETION=1; torch_at 1)
  r=$?
  [ $rc -ne 0 ] || rc=$r
  return $rc
}
step_torch2() {
  two_rank_env
  torch_at 2
}

step_resnet() {
  need_gpu || return
  echo "== synthetic ResNet-50 at np=1: kolo's DistributedOptimizer, DDP, no distribution"
  PYTHONPATH=$build/python timeout 300 "$build/launcher/kolorun" -np 1 "$python" \
    "$root/bench/gpu_resnet_bench.py" --json "$logs/gpu_resnet.json"
}

# The kit's kolo wheel for this Python (cp312 for Python 3.12), if any.
kit_wheel() {
  local tag
  tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  find "${kit:-/nonexistent}/kolo-wheels" -name "kolo-*-$tag-$tag-*.whl" 2>/dev/null | sort | tail -1
}

step_wheel() {
  local whl dir rc
  whl=$(kit_wheel)
  if [ -z "$whl" ]; then
    need_gpu || return
    skipped "no kolo wheel for this Python in the kit (scripts/gpu_kit.sh --wheel)"
    return
  fi
  dir=$build/kolo-wheel
  rm -rf "$dir"
  echo "== $(basename "$whl"), unpacked into $dir"
  "$python" -m zipfile -e "$whl" "$dir" || return 1
  chmod +x "$dir"/kolo-*.data/scripts/*
  PYTHONPATH=$dir "$python" -c 'import kolo.torch as k; print("the wheel imports; cuda_built", k.cuda_built(), "nccl", k.nccl_built())' ||
    return 1
  need_gpu || return
  echo "== test_torch_cuda.py at np=1 on the wheel"
  PYTHONPATH=$dir all_or_skipped timeout 300 "$dir"/kolo-*.data/scripts/kolorun -np 1 "$python" \
    -m pytest -q -rs -p no:cacheprovider "$root/test/python/test_torch_cuda.py"
  rc=$?
  echo "== kolo.torch vs torch.distributed on the wheel"
  PYTHONPATH=$dir timeout 300 "$dir"/kolo-*.data/scripts/kolorun -np 1 "$python" \
    "$root/bench/gpu_torch_bench.py" --max-bytes $((1 << 20)) --json "$logs/gpu_torch_wheel.json" ||
    rc=1
  return $rc
}

step_tf() {
  need_gpu || return
  local tfpy=${GPU_CHECK_TF_PYTHON:-$python} gpus
  gpus=$("$tfpy" -c 'import tensorflow as tf; print(len(tf.config.list_physical_devices("GPU")))' 2>/dev/null | tail -1)
  [ -n "$gpus" ] || { skipped "no TensorFlow for $tfpy (set GPU_CHECK_TF_PYTHON to a Python with tensorflow[and-cuda])"; return; }
  [ "$gpus" -gt 0 ] || { skipped "the TensorFlow of $tfpy sees no GPU (a CPU-only wheel?)"; return; }
  PYTHONPATH=$build/python "$tfpy" -c 'import kolo._core' ||
    { echo "kolo._core of $build was built for $python, which $tfpy cannot import"; return 1; }
  echo "== kolo.tensorflow on the GPU, np=1 ($tfpy)"
  XDG_CACHE_HOME=$build/tf-ops-cache PYTHONPATH=$build/python TF_CPP_MIN_LOG_LEVEL=2 \
    all_or_skipped timeout 600 "$build/launcher/kolorun" -np 1 "$tfpy" -m pytest -q -rs \
    -p no:cacheprovider "$root/test/tensorflow/test_tf_gpu.py" "$root/test/tensorflow/test_op_library.py"
}

# Each benchmark exits 77 without a device; the step is skipped when all three are.
step_speed() {
  local rc=0 ran=0 r
  echo "== kolo vs ncclAllReduce on the same buffers"
  timeout 300 "$mpirun" -np 1 "${mpiflags[@]}" "$build/bench/gpu_allreduce" >"$logs/gpu_allreduce.json"
  r=$?
  write_results
  # Stream-ordered completion, up to 64 MiB; 8 tensors a call through the
  # fusion buffer and as one NCCL group, each against 8 ncclAllReduce in one
  # group, up to 256 MiB.
  echo "== the same with KOLO_ENABLE_ASYNC_COMPLETION=1"
  KOLO_ENABLE_ASYNC_COMPLETION=1 timeout 120 "$mpirun" -np 1 "${mpiflags[@]}" \
    "$build/bench/gpu_allreduce" $((64 << 20)) 0.3 >"$logs/gpu_allreduce_async.json"
  r="$r $?"
  for group in 0 1; do
    echo "== 8 tensors a call, KOLO_NCCL_GROUP_MIN_BYTES=$group"
    KOLO_NCCL_GROUP_MIN_BYTES=$group timeout 120 "$mpirun" -np 1 "${mpiflags[@]}" \
      "$build/bench/gpu_allreduce" $((256 << 20)) 0.3 8 >"$logs/gpu_allreduce_group$group.json"
    r="$r $?"
  done
  write_results
  echo "== the fusion copy kernel vs cudaMemcpyAsync device to device"
  timeout 120 "$build/bench/gpu_copy" >"$logs/gpu_copy.json"
  r="$r $?"
  write_results
  echo "== kolo.torch vs torch.distributed (NCCL) on the same CUDA tensors"
  PYTHONPATH=$build/python timeout 300 "$build/launcher/kolorun" -np 1 "$python" \
    "$root/bench/gpu_torch_bench.py" --json "$logs/gpu_torch.json"
  r="$r $?"
  write_results
  echo "== the same with KOLO_ENABLE_ASYNC_COMPLETION=1, up to 64 MiB"
  KOLO_ENABLE_ASYNC_COMPLETION=1 PYTHONPATH=$build/python timeout 300 "$build/launcher/kolorun" \
    -np 1 "$python" "$root/bench/gpu_torch_bench.py" --max-bytes $((64 << 20)) \
    --json "$logs/gpu_torch_async.json"
  r="$r $?"
  echo "exit codes: $r"
  for r in $r; do
    case $r in
      0) ran=1 ;;
      77) ;;
      *) rc=1 ;;
    esac
  done
  if [ $rc -eq 0 ] && [ $ran -eq 0 ]; then
    skipped "no CUDA device on this machine"
    return
  fi
  return $rc
}

step_faults() {
  local rc first status
  two_rank_env
  export PYTHONPATH=$build/python
  all_or_skipped timeout 300 "$build/launcher/kolorun" -np 2 "$python" -m pytest -q -rs -s \
    -p no:cacheprovider "$root/test/python/test_torch_cuda_faults.py" -k "not killed"
  first=$?
  # The killed rank ends the job with its exit code; what counts is that the
  # survivors name the failure and that nothing hangs.
  echo "== a rank killed inside a GPU collective"
  timeout 120 "$build/launcher/kolorun" -np 2 "$python" -m pytest -q -rs -s -p no:cacheprovider \
    "$root/test/python/test_torch_cuda_faults.py" -k killed
  status=$?
  echo "killed-rank run: exit $status"
  [ $status -ne 124 ] || { echo "faults: the killed-rank run HUNG (timeout 120 s)"; return 1; }
  [ $first -ne 77 ] || return 77
  return $first
}

# speed.json (every benchmark that wrote its JSON so far, each file whole or
# not at all) and logs.tgz, rewritten after every step and benchmark.
write_results() {
  "$python" - "$logs" "$out/speed.json" "$gpu_name" <<'EOF' || true
import json, os, sys
logs, dest, gpu = sys.argv[1:]
result = {"gpu": gpu}
for name in ("gpu_allreduce", "gpu_allreduce_async", "gpu_allreduce_group0",
             "gpu_allreduce_group1", "gpu_copy", "gpu_torch", "gpu_torch_async", "gpu_resnet",
             "gpu_torch_wheel"):
    path = os.path.join(logs, name + ".json")
    try:
        with open(path) as f:
            result[name] = json.load(f)
    except (OSError, ValueError):
        pass
with open(dest + ".new", "w") as f:
    json.dump(result, f, indent=1)
os.replace(dest + ".new", dest)
EOF
  tar -czf "$out/logs.tgz.new" -C "$logs" . && mv "$out/logs.tgz.new" "$out/logs.tgz"
}

# What each step may take, in seconds: about twice what it took on a lent
# H100 (docs/gpu.md has those times). A step starts only if this much of the
# budget is left.
declare -A STEP_ESTIMATE_S=(
  [build]=120 [suite]=900 [gpu]=20 [torch1]=80 [speed]=120 [memcheck]=60 [racecheck]=40
  [synccheck]=30 [tworanks]=20 [torch2]=30 [faults]=40
  # Not yet run on a GPU: the GPU tests at np=2 over two hosts (their NCCL
  # communicators through the ssh stand-in), about tworanks' twice.
  [hosts2]=40
  # Not yet run on a GPU: three ResNet-50 copies, 165 steps of about 40 ms on an
  # H100 and their start; the wheel's test_torch_cuda.py (as torch1) and a short
  # gpu_torch_bench.py.
  [resnet]=60 [wheel]=60
  # Not yet run on a GPU: NCCL for one architecture on the machine's cores (16 on
  # the lent H100s); on 2 cores here it took hours.
  [nccl]=420
  # Not yet run on a GPU: TensorFlow's import and the op library's compile on first
  # import (about 10 s of one core here) with room to spare.
  [tf]=180
)

# The clock. GPU_CHECK_FAKE_CLOCK names a file holding the time: the budget's
# test (test/packaging/gpu_check_budget_test.sh) sets it and
# GPU_CHECK_FAKE_STEPS ("build=200 gpu=30:1 speed=20:kill ..."), and each step
# then only moves the clock by its seconds (cut at the time it was given) and
# exits with the code named (0 by default); "kill" kills this script there, as
# the device tool does at its limit.
now() {
  if [ -n "${GPU_CHECK_FAKE_CLOCK:-}" ]; then cat "$GPU_CHECK_FAKE_CLOCK"; else date +%s; fi
}
fake_step() {
  local kv spec d code=0
  for kv in ${GPU_CHECK_FAKE_STEPS:-}; do
    [ "${kv%%=*}" = "$1" ] || continue
    spec=${kv#*=}
    d=${spec%%:*}
    [ "$spec" = "$d" ] || code=${spec#*:}
  done
  [ "$code" != kill ] || kill -KILL $$
  # What the step would run with, for the test: NCCL's multi-rank settings.
  (
    case $1 in tworanks | torch2 | hosts2 | faults) two_rank_env ;; esac
    echo "$1 ${NCCL_MULTI_RANK_GPU_ENABLE:--} ${NCCL_NVLS_ENABLE:--} ${NCCL_MAX_CTAS:--} ${LD_PRELOAD:--}"
  ) >>"$GPU_CHECK_FAKE_CLOCK.env"
  if [ "${d:-0}" -gt "$2" ]; then
    echo $(($(now) + $2)) >"$GPU_CHECK_FAKE_CLOCK"
    return 143
  fi
  echo $(($(now) + ${d:-0})) >"$GPU_CHECK_FAKE_CLOCK"
  [ "$code" != 77 ] || echo "SKIPPED: fake" >"$logs/$1.log"
  return "$code"
}

# Runs one step in its own process group, killed (TERM, then KILL) when its
# time runs out.
run_step() {
  local s=$1 limit=$2 pid watchdog rc
  if [ -n "${GPU_CHECK_FAKE_CLOCK:-}" ]; then
    fake_step "$s" "$limit"
    return
  fi
  set -m
  ("step_$s") >"$logs/$s.log" 2>&1 &
  pid=$!
  (sleep "$limit" && echo "gpu_check: $s ran out of budget after $limit s" >>"$logs/$s.log" &&
    kill -TERM -- -"$pid" && sleep 5 && kill -KILL -- -"$pid") >/dev/null 2>&1 &
  watchdog=$!
  set +m
  wait "$pid"
  rc=$?
  kill -- -"$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null
  return $rc
}

# The budget: each step starts only if the time left covers its estimate (the
# build always starts) and runs at most for the time left.
started=$(now)
built=yes
for s in "${steps[@]}"; do
  left=$((budget - ($(now) - started)))
  need=${STEP_ESTIMATE_S[$s]}
  if [ "$built" = no ]; then
    note "$s: skipped (the build failed)"
    continue
  fi
  if [ "$budget" -gt 0 ] && [ "$s" != build ] && [ "$left" -lt "$need" ]; then
    note "$s: skipped (needs ~$need s, $left s of the budget left)"
    continue
  fi
  if [[ $needs_two_gpu_ranks == *" $s "* && $two_ranks == skip:* ]]; then
    note "$s: skipped (${two_ranks#skip: }) in 0 s"
    continue
  fi
  [ "$budget" -gt 0 ] || left=86400
  [ "$left" -gt 0 ] || left=1
  start=$(now)
  echo "== gpu_check: $s (log: $s.log; $left s of the budget left)"
  run_step "$s" "$left"
  rc=$?
  [ -f "$logs/$s.log" ] && tail -n 15 "$logs/$s.log"
  took=$(($(now) - start))
  case $rc in
    0) result="ok in $took s" ;;
    77) result="skipped ($(grep -o 'SKIPPED: .*' "$logs/$s.log" 2>/dev/null | tail -1 | cut -c10-)) in $took s" ;;
    124 | 137 | 143) result="FAILED (exit $rc, out of budget) in $took s" ;;
    *) result="FAILED (exit $rc) in $took s" ;;
  esac
  [ "$took" -le "$need" ] || result="$result, over its $need s estimate"
  note "$s: $result"
  [ "$s" = build ] && [ $rc -ne 0 ] && built=no
  [ "$s" != nccl ] || [ $rc -ne 0 ] || choose_nccl
  write_results
done
rm -rf "$logs"
echo "== gpu_check summary ($out/summary.txt; logs in $out/logs.tgz)"
cat "$summary"
! grep -q FAILED "$summary"
