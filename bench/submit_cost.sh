#!/usr/bin/env bash
# The submit cost of kolo.torch's allreduces, two builds of the package against each other
# (issue 33: a refactor of the Python side must not make it worse). Each measurement is a
# job of its own, the two packages alternated job by job:
#   - bench/torch_bench.py alone --strategy kolo --model small: submit_ms, the Python
#     submitting calls of 100 allreduce_async_ per step (median over the job's steps),
#     and the step (100 allreduce_async_ + 100 synchronize, slowest rank, median);
#   - the same with --strategy kolo_grouped: one grouped_allreduce_async_ of the 100
#     tensors, its submitting call and the step (issue 35);
#   - bench/torch_bench.py latency: p50 of a 4-byte allreduce_ (the kolo.torch row).
# Prints per package the median over jobs and the spread (fastest, slowest), and the
# ratio after/before; with OUT=file.json writes them as JSON.
#
#   bench/submit_cost.sh BEFORE_PYTHONPATH AFTER_PYTHONPATH [JOBS=8]
#
# e.g. a package built from the commit before the change, copied aside, against build/python.
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1
after=$2
jobs=${3:-8}
kolorun=${KOLORUN:-build/launcher/kolorun}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for i in $(seq 1 "$jobs"); do
  for which in before after; do
    path=$before
    [ "$which" = after ] && path=$after
    PYTHONPATH=$path "$kolorun" -np 2 /usr/bin/python3 bench/torch_bench.py \
      --out "$dir/alone.$which.$i.json" alone --strategy kolo --model small --steps 60 \
      --warmup 10 > /dev/null
    PYTHONPATH=$path "$kolorun" -np 2 /usr/bin/python3 bench/torch_bench.py \
      --out "$dir/grouped.$which.$i.json" alone --strategy kolo_grouped --model small \
      --steps 60 --warmup 10 > /dev/null
    PYTHONPATH=$path "$kolorun" -np 2 /usr/bin/python3 bench/torch_bench.py \
      --out "$dir/latency.$which.$i.json" latency --iterations 2000 > /dev/null
  done
done
/usr/bin/python3 - "$dir" "$jobs" "${OUT:-}" <<'PY'
import json, statistics, sys
dir, jobs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
result = {"benchmark": "submit_cost", "jobs": jobs}
def load(kind, which):
    return [json.load(open(f"{dir}/{kind}.{which}.{i}.json")) for i in range(1, jobs + 1)]
names = ("submit_us_per_tensor", "step_ms", "grouped_submit_ms", "grouped_step_ms",
         "latency_4B_p50_us")
for which in ("before", "after"):
    alone, grouped = load("alone", which), load("grouped", which)
    result[which] = {
        "submit_us_per_tensor": [j["submit_ms"] * 1e3 / 100 for j in alone],
        "step_ms": [j["median_ms"] for j in alone],
        "grouped_submit_ms": [j["submit_ms"] for j in grouped],
        "grouped_step_ms": [j["median_ms"] for j in grouped],
        "latency_4B_p50_us": [j["rows"]["kolo.torch allreduce_"]["p50_us"]
                              for j in load("latency", which)],
    }
    for name, values in result[which].items():
        print(f"{which:6s} {name:22s} median {statistics.median(values):8.3f}  "
              f"fastest {min(values):8.3f}  slowest {max(values):8.3f}")
for name in names:
    ratio = statistics.median(result["after"][name]) / statistics.median(result["before"][name])
    result[name + "_after_over_before"] = ratio
    print(f"{name}: after/before {ratio:.3f}")
if out:
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
PY
