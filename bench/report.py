"""Turns bench/run_all.sh's JSON files into report.md and PNG plots.

    python3 bench/report.py bench/results
"""
import json
import math
import os
import platform
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(out, name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def human(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return "%g %s" % (nbytes / (1 << shift), unit)
    return "%d B" % nbytes


def machine(out):
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        except OSError:
            return ""
    model = next((line.split(":", 1)[1].strip() for line in run(["lscpu"]).splitlines()
                  if line.startswith("Model name")), platform.processor())
    mpi = run(["mpirun", "--version"]).splitlines()[:1]
    recorded = load(out, "run.json") or {}
    commit = recorded.get("commit") or run(["git", "rev-parse", "--short", "HEAD"]).strip()
    return "%s, %d cores, %s, kolo %s" % (model, os.cpu_count(), mpi[0] if mpi else "MPI ?",
                                        commit or "?")


def verdict(ok):
    return "met" if ok else "**missed**"


def sweep_section(out, cpp, torch_sweep, lines, targets):
    rows = {r["bytes"]: {"cpp": r} for r in cpp["rows"]} if cpp else {}
    for r in (torch_sweep or {}).get("rows", []):
        rows.setdefault(r["bytes"], {})["torch"] = r
    lines += ["## 1. Size sweep (np=%d, float32 sum, medians)" % (cpp or torch_sweep)["np"], "",
              "`raw` is `MPI_Allreduce` on the same buffer in the same process, alternating with "
              "kolo in rounds. Ratio = raw time / kolo time (above 1: kolo is faster).", "",
              "| size | raw µs (C++ run) | kolo C++ µs | ratio | raw µs (torch run) | "
              "kolo.torch µs | ratio | raw GB/s | kolo C++ GB/s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    worst, big_ok, best_raw_bw = None, True, 0.0
    for size in sorted(rows):
        c, t = rows[size].get("cpp"), rows[size].get("torch")
        cells = [human(size)]
        if c:
            ratio = c["raw_us"] / c["kolo_us"]
            worst = ratio if worst is None else min(worst, ratio)
            best_raw_bw = max(best_raw_bw, c["raw_busbw_gbs"])
            cells += ["%.1f" % c["raw_us"], "%.1f" % c["kolo_us"], "%.2f" % ratio]
        else:
            cells += ["", "", ""]
        if t:
            cells += ["%.1f" % t["raw_us"], "%.1f" % t["kolo_torch_us"],
                      "%.2f" % (t["raw_us"] / t["kolo_torch_us"])]
        else:
            cells += ["", "", ""]
        cells += ["%.2f" % c["raw_busbw_gbs"] if c else "", "%.2f" % c["kolo_busbw_gbs"] if c else ""]
        lines.append("| " + " | ".join(cells) + " |")
    if cpp:
        for r in cpp["rows"]:
            if r["bytes"] >= 16 << 20 and r["kolo_busbw_gbs"] < best_raw_bw:
                big_ok = False
        big = [r for r in cpp["rows"] if r["bytes"] >= 64 << 10]
        worst_big = min(r["raw_us"] / r["kolo_us"] for r in big) if big else None
        targets.append(("size sweep (C++): kolo ≥ 0.95 × raw at every size ≥ 64 KiB",
                        "worst ratio %s (all sizes: %.2f)" % (
                            "%.2f" % worst_big if worst_big else "-", worst),
                        worst_big is not None and worst_big >= 0.95))
        targets.append(("sizes ≥ 16 MiB: kolo bus bandwidth ≥ raw's best (%.2f GB/s)" % best_raw_bw,
                        ", ".join("%s: %.2f" % (human(r["bytes"]), r["kolo_busbw_gbs"])
                                  for r in cpp["rows"] if r["bytes"] >= 16 << 20), big_ok))
        floor = [r for r in cpp["rows"] if r["bytes"] >= 16 << 20 and r.get("memcpy_us")]
        if floor:
            worst_floor = max(r["kolo_us"] / r["memcpy_us"] for r in floor)
            targets.append(("sizes ≥ 16 MiB: kolo ≤ 1.5 × the memory floor (one memcpy of the "
                            "buffer per rank, all ranks at once)",
                            ", ".join("%s: %.2f ×" % (human(r["bytes"]), r["kolo_us"] / r["memcpy_us"])
                                      for r in floor), worst_floor <= 1.5))
        tiny = [r for r in cpp["rows"] if r["bytes"] == 4]
        if tiny:
            handoff = cpp.get("handoff_round_trip_us")
            targets.append(("4-byte allreduce through the C++ API: p50 ≤ 10 µs",
                            "%.1f µs%s" % (tiny[0]["kolo_us"],
                                           " (two thread hand-offs alone: %.1f µs)" % handoff
                                           if handoff else ""), tiny[0]["kolo_us"] <= 10))
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        sizes = [r["bytes"] for r in cpp["rows"]]
        axes[0].loglog(sizes, [r["raw_us"] for r in cpp["rows"]], "o-", label="raw MPI_Allreduce")
        axes[0].loglog(sizes, [r["kolo_us"] for r in cpp["rows"]], "s-", label="kolo C++ API")
        if torch_sweep:
            axes[0].loglog([r["bytes"] for r in torch_sweep["rows"]],
                           [r["kolo_torch_us"] for r in torch_sweep["rows"]], "^-",
                           label="kolo.torch")
        axes[0].set_xlabel("bytes")
        axes[0].set_ylabel("µs (median)")
        axes[0].legend()
        axes[0].set_title("allreduce latency")
        axes[1].semilogx(sizes, [r["raw_busbw_gbs"] for r in cpp["rows"]], "o-", label="raw")
        axes[1].semilogx(sizes, [r["kolo_busbw_gbs"] for r in cpp["rows"]], "s-", label="kolo")
        axes[1].set_xlabel("bytes")
        axes[1].set_ylabel("bus bandwidth GB/s")
        axes[1].legend()
        axes[1].set_title("bus bandwidth, factor 2(n-1)/n")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "sweep.png"), dpi=90)
        lines += ["", "![size sweep](sweep.png)"]
    lines.append("")


def models_section(out, models, lines, targets):
    lines += ["## 2. Model gradient sets (np=%d, float32 sum, ms per step, medians)" % models["np"],
              "",
              "Gradients submitted in backward order, as DistributedOptimizer does. "
              "`raw_packed`: one `MPI_Allreduce` of all gradients already packed in one buffer; "
              "`raw_per_tensor`: one `MPI_Allreduce` per tensor; `raw_fused_64MiB_with_copies`: "
              "Horovod's default scheme with raw MPI; `gloo_25MB_buckets`: torch.distributed "
              "(gloo) with DDP's 25 MB buckets.", ""]
    names = list(models["rows"][0]["step_ms"])
    lines += ["| model | tensors | MiB | " + " | ".join(names) + " | kolo / best raw | "
              "gloo / kolo |", "| --- " * (len(names) + 5) + "|"]
    for r in models["rows"]:
        lines.append("| %s | %d | %.1f | %s | %.2f | %.1f |" % (
            r["model"], r["tensors"], r["bytes"] / 2**20,
            " | ".join("%.1f" % r["step_ms"][n] for n in names),
            r["kolo_vs_best_raw"], r["gloo_vs_kolo"]))
        targets.append(("%s: kolo ≤ 0.75 × best raw MPI" % r["model"],
                        "%.2f ×" % r["kolo_vs_best_raw"], r["kolo_vs_best_raw"] <= 0.75))
        targets.append(("%s: kolo ≥ 4 × faster than gloo" % r["model"],
                        "%.1f ×" % r["gloo_vs_kolo"], r["gloo_vs_kolo"] >= 4))
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        ax.bar([j + i * width for j in range(len(models["rows"]))],
               [r["step_ms"][n] for r in models["rows"]], width, label=n)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models["rows"]))])
    ax.set_xticklabels([r["model"] for r in models["rows"]])
    ax.set_ylabel("ms per step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "models.png"), dpi=90)
    lines += ["", "![model gradient sets](models.png)", ""]


def latency_section(latency, lines, targets):
    lines += ["## 3. Small-op latency: one float32 (4 B), np=%d, %d iterations" % (
        latency["np"], latency["iterations"]), "", "| path | p50 µs | p99 µs |",
        "| --- | --- | --- |"]
    for name, r in latency["rows"].items():
        lines.append("| %s | %.1f | %.1f |" % (name, r["p50_us"], r["p99_us"]))
    k = latency["rows"]["kolo.torch allreduce_"]
    targets.append(("4-byte allreduce through kolo.torch: p50 ≤ 20 µs",
                    "%.1f µs" % k["p50_us"], k["p50_us"] <= 20))
    lines.append("")


def coordinator_section(out, coord, lines, targets):
    lines += ["## 4. Coordinator cost, %d-tensor step, simulated ranks" % coord["tensors"], "",
              "Slow path: rank 0's work in one round of the reference protocol (decode every "
              "rank's answer to the digests of rank 0's own requests, count the holders, decide, "
              "encode the responses): *in step*, every rank holds all of rank 0's requests; *out "
              "of step*, each holds a prefix (17 distinct ones); *in full*, rank 0 holds none yet "
              "and every rank sends its requests in full. Fast path: one rank's cache lookups, bit "
              "vector, and the log2(N) ANDs of a recursive-doubling reduction (the MPI transfer "
              "itself is not included). Every rank's own slow-path work: %.1f µs." % coord.get(
                  "rank_side_us", float("nan")),
              "", "| ranks | slow path in step ms | out of step ms | in full ms | fast path µs |",
              "| --- | --- | --- | --- | --- |"]
    for r in coord["rows"]:
        lines.append("| %d | %.3f | %.3f | %.3f | %.2f |" % (
            r["ranks"], r["slow_path_ms"], r.get("slow_path_partial_ms", float("nan")),
            r.get("slow_path_full_ms", float("nan")), r["fast_path_us"]))
    last = coord["rows"][-1]
    first = coord["rows"][0]
    targets.append(("coordinator slow path (ranks in step) < 1 ms at %d ranks" % last["ranks"],
                    "%.1f ms" % last["slow_path_ms"], last["slow_path_ms"] < 1))
    growth = last["fast_path_us"] / first["fast_path_us"]
    log_growth = math.log2(last["ranks"]) / math.log2(first["ranks"])
    targets.append(("fast path grows no faster than log N",
                    "×%.2f from %d to %d ranks (log N: ×%.0f)" % (
                        growth, first["ranks"], last["ranks"], log_growth), growth <= log_growth))
    fig, ax = plt.subplots(figsize=(6, 4))
    ranks = [r["ranks"] for r in coord["rows"]]
    ax.loglog(ranks, [r["slow_path_ms"] * 1e3 for r in coord["rows"]], "o-",
              label="slow path, in step")
    if "slow_path_full_ms" in coord["rows"][0]:
        ax.loglog(ranks, [r["slow_path_partial_ms"] * 1e3 for r in coord["rows"]], "^-",
                  label="slow path, out of step")
        ax.loglog(ranks, [r["slow_path_full_ms"] * 1e3 for r in coord["rows"]], "v-",
                  label="slow path, in full")
    ax.loglog(ranks, [r["fast_path_us"] for r in coord["rows"]], "s-", label="fast path")
    ax.set_xlabel("ranks")
    ax.set_ylabel("µs per cycle")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "coordinator.png"), dpi=90)
    lines += ["", "![coordinator cost](coordinator.png)", ""]


def standalone_section(runs, lines, targets):
    lines += ["## 6. Standalone jobs: what a user's own job sees", "",
              "Each strategy in a job of its own (`bench/standalone.sh`: `torch_bench.py alone`), "
              "jobs of the strategies alternated; a job's figure is its median step (slowest "
              "rank), ms. Unlike sections 1-2 nothing else runs between the steps.", "",
              "| workload | strategy | jobs | median of jobs | fastest job | slowest job | "
              "slowest / fastest |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        for name, r in run["strategies"].items():
            med = r["job_median_ms"]
            lines.append("| %s | %s | %d | %.3f | %.3f | %.3f | %.2f |" % (
                run["model"], name, len(med), r["median_ms"], min(med), max(med),
                r["slowest_over_fastest"]))
        got = run["strategies"]
        raw = [got[n]["median_ms"] for n in ("raw_per_tensor", "raw_packed") if n in got]
        if "kolo" in got and raw and run["model"] in ("resnet50", "bert_base"):
            limit = 0.75 if run["model"] == "resnet50" else 0.65
            ratio = got["kolo"]["median_ms"] / min(raw)
            targets.append(("standalone %s: kolo ≤ %.2f × best raw MPI" % (run["model"], limit),
                            "%.2f ×" % ratio, ratio <= limit))
        if "kolo" in got and run["model"] == "resnet50":
            spread = got["kolo"]["slowest_over_fastest"]
            targets.append(("standalone resnet50: slowest / fastest kolo job ≤ 1.2",
                            "%.2f over %d jobs" % (spread, len(got["kolo"]["job_median_ms"])),
                            spread <= 1.2))
        if run["model"] == "small":
            for name, limit in (("kolo", 0.3), ("kolo_grouped", 0.07)):
                if name in got:
                    submit = got[name].get("submit_ms")
                    targets.append(("small workload (100 tensors, 0.2 MiB): %s ≤ %g ms" % (
                        name, limit), "%.3f ms%s" % (
                            got[name]["median_ms"],
                            " (of which %.3f ms in the Python submitting calls)" % submit
                            if submit is not None else ""),
                        got[name]["median_ms"] <= limit))
    lines.append("")


def training_section(on, off, lines):
    lines += ["## 5. Training overhead: synthetic %s, batch %d at %d px, np=%d, 1 thread per rank"
              % (on["model"], on["batch_size"], on["image_size"], on["np"]), "",
              "| allreduce | img/s per rank | ±95% |", "| --- | --- | --- |",
              "| on (DistributedOptimizer) | %.1f | %.1f |" % (on["img_per_sec_per_rank"],
                                                          on["ci95"]),
              "| off | %.1f | %.1f |" % (off["img_per_sec_per_rank"], off["ci95"]),
              "", "Scaling efficiency (on / off): %.2f" % (
                  on["img_per_sec_per_rank"] / off["img_per_sec_per_rank"]), ""]


def framework_paths_table(paths, label, skip, lines):
    """The per-path table of a framework against kolo.torch (tf_bench / jax_bench `jobs`):
    ratios for ``label``'s paths except ``skip``. Returns the faster torch path's name."""
    torch_names = [n for n in paths if n.startswith("torch ")]
    lines += ["| path | jobs | median of jobs | fastest job | slowest job | slowest / fastest | "
              "minor page faults per step | " + " | ".join("/ %s" % n for n in torch_names) + " |",
              "| --- " * (7 + len(torch_names)) + "|"]
    for name, r in paths.items():
        med = r["job_median_ms"]
        ratios = ["%.2f" % (r["median_ms"] / paths[t]["median_ms"]) if name.startswith(
            label + " ") and name.split(" ")[1] not in skip else "" for t in torch_names]
        lines.append("| %s | %d | %.2f | %.2f | %.2f | %.2f | %s | %s |" % (
            name, len(med), r["median_ms"], min(med), max(med), r["slowest_over_fastest"],
            "%d" % r["minor_faults_per_step"] if "minor_faults_per_step" in r else "",
            " | ".join(ratios)))
    lines.append("")
    return min(torch_names, key=lambda n: paths[n]["median_ms"]) if torch_names else None


def copies_table(c, intro, binding, without, lines):
    """A `copies` result: the table, then ``binding``'s rows against kolo.numpy's
    out-of-place allreduce of the same buffer (``without``: the framework's name)."""
    lines += [intro, "", "| path | ms | memcpys | minor page faults per call |",
              "| --- | --- | --- | --- |"]
    for name, r in c["rows"].items():
        lines.append("| %s | %.2f | %.2f | %d |" % (name, r["median_ms"], r["memcpy_units"],
                                                r["minor_faults_per_call"]))
    ref = c["rows"].get("kolo.numpy allreduce (new output)")
    if ref:
        lines += ["", "The binding's own copies, from the same job: %s over kolo.numpy's "
                  "allreduce (the same out-of-place call without %s): " % (binding, without)
                  + ", ".join("%s %+.2f memcpys" % (name.split(", ")[-1], r["memcpy_units"]
                                                     - ref["memcpy_units"])
                              for name, r in c["rows"].items() if name.startswith(binding))]
    lines.append("")


def _ratio_target(paths, name, torch_best, title, run, targets):
    ratio = paths[name]["median_ms"] / paths[torch_best]["median_ms"]
    targets.append(("%s ≤ 1.15 × kolo.torch (its faster path, %s)" % (
        title, torch_best.split(" ")[1]), "%.2f × over %d jobs" % (ratio, run["jobs"]),
        ratio <= 1.15))


def tensorflow_section(run, lines, targets):
    paths = run["paths"]
    lines += ["## 7. kolo.tensorflow against kolo.torch: ResNet-50's gradients (np=%d%s)"
              % (run["np"], ", kolo %s" % run["commit"] if run.get("commit") else ""), "",
              "`bench/tf_bench.py jobs`: each path in a job of its own, %d rounds of jobs with "
              "the paths alternated; a job's figure is its median over %d steps (slowest rank), "
              "ms. The same 161 float32 tensors (97.5 MiB, backward order, op Sum) on both "
              "sides: TensorFlow through `DistributedGradientTape` (eagerly and inside "
              "`tf.function`) and `grouped_allreduce`; PyTorch through `allreduce_async_` per "
              "tensor (DistributedOptimizer's path) and `grouped_allreduce_async_`. "
              "`plain_tape` is TensorFlow's own tape with no allreduce, for scale."
              % (run["jobs"], run["steps"]), ""]
    torch_best = framework_paths_table(paths, "tensorflow", {"plain_tape"}, lines)
    for name in paths:
        if torch_best and name.startswith("tensorflow ") and "plain_tape" not in name:
            _ratio_target(paths, name, torch_best,
                          name.replace("tensorflow ", "kolo.tensorflow "), run, targets)
    for framework, c in run.get("copies", {}).items():
        copies_table(c, "Copies, %s: one allreduce of %s against a memcpy of the same bytes, "
                     "every rank at once; median of %d jobs' medians (%d calls each, slowest "
                     "rank). At np=2 an allreduce moves the bytes a few times by itself; a "
                     "staging copy would add one memcpy to a path over its zero-copy reference "
                     "in the same job." % (framework, human(c["bytes"]), c["jobs"],
                                            c["calls_per_job"]),
                     "kolo.tensorflow", "TensorFlow", lines)


def jax_section(run, lines, targets):
    """Section 8: kolo.jax (jitted and eager) and JAX's own psum against kolo.torch."""
    paths = run["paths"]
    versions = run.get("versions", {})
    lines += ["## 8. kolo.jax against kolo.torch and JAX's psum: ResNet-50's gradients (np=%d%s)"
              % (run["np"], ", kolo %s" % run["commit"] if run.get("commit") else ""), "",
              "`bench/jax_bench.py jobs`: each path in a job of its own, %d rounds of jobs with "
              "the paths alternated; a job's figure is its median over %d steps (slowest rank, "
              "each step ends with `jax.block_until_ready`), ms. The same 161 float32 tensors "
              "(97.5 MiB, backward order, op Sum) on every path: `jit_donated` is "
              "`kj.DistributedOptimizer(optax.identity(), op=Sum).update` inside `jax.jit` "
              "with the gradients donated, so that kolo's XLA FFI handler reduces XLA's "
              "buffers in place, as on gradients a jitted train step computes itself; "
              "`jit_optimizer` the same step without donation (XLA first copies the "
              "arguments it must keep), `jit_allreduce` `kj.allreduce` inside "
              "`jax.jit`, `eager` `kj.allreduce` eagerly; `psum` is JAX's own collective "
              "(`jax.distributed.initialize()` under kolorun, a jitted `shard_map` of "
              "`jax.lax.psum` over the processes' CPU devices, JAX %s, CPU collectives: %s); "
              "`plain_jit` is a jitted step that returns the gradients times 1, no allreduce, "
              "for scale. PyTorch through `allreduce_async_` per tensor (DistributedOptimizer's "
              "path) and `grouped_allreduce_async_`."
              % (run["jobs"], run["steps"], versions.get("jax", "?"),
                 versions.get("jax_cpu_collectives", "?")), ""]
    torch_best = framework_paths_table(paths, "jax", {"plain_jit"}, lines)
    for name in ("jax jit_donated", "jax jit_optimizer", "jax eager"):
        if torch_best and name in paths:
            _ratio_target(paths, name, torch_best, "kolo.jax %s" % name.split(" ")[1], run,
                          targets)
    c = run.get("copies", {}).get("jax")
    if c:
        copies_table(c, "Copies, kolo.jax: one allreduce of %s against a memcpy of the same "
                     "bytes, every rank at once; median of %d jobs' medians (%d calls each, "
                     "slowest rank). Fresh output memory costs page faults (the kernel zeroes "
                     "every page) as well as the copy." % (human(c["bytes"]), c["jobs"],
                                                           c["calls_per_job"]),
                     "kolo.jax", "JAX", lines)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    lines = ["# kolo benchmark report", "", "Machine: " + machine(out), ""]
    targets = []
    cpp, torch_sweep = load(out, "sweep_cpp.json"), load(out, "sweep_torch.json")
    if cpp or torch_sweep:
        sweep_section(out, cpp, torch_sweep, lines, targets)
    models = load(out, "models.json")
    if models:
        models_section(out, models, lines, targets)
    latency = load(out, "latency.json")
    if latency:
        latency_section(latency, lines, targets)
    coord = load(out, "coordinator.json")
    if coord:
        coordinator_section(out, coord, lines, targets)
    on, off = load(out, "training_on.json"), load(out, "training_off.json")
    if on and off:
        training_section(on, off, lines)
    alone = [r for r in (load(out, "standalone_%s.json" % m) for m in ("resnet50", "bert_base", "small")) if r]
    if alone:
        standalone_section(alone, lines, targets)
    tf_vs_torch = load(out, "tf_vs_torch.json")
    if tf_vs_torch:
        tensorflow_section(tf_vs_torch, lines, targets)
    jax_vs_torch = load(out, "jax_vs_torch.json")
    if jax_vs_torch:
        jax_section(jax_vs_torch, lines, targets)
    summary = ["## Targets", "", "| target | measured | |", "| --- | --- | --- |"]
    summary += ["| %s | %s | %s |" % (name, got, verdict(ok)) for name, got, ok in targets]
    text = "\n".join(lines[:4] + summary + [""] + lines[4:]) + "\n"
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
