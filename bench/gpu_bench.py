#!/usr/bin/env python3
"""mlt-run beside the PyTorch reference, in one run, as one table.

Runs `mlt-run --device cuda` on one or more plans (compiled on the build
machine for a model shape of ../shared/bench/hf_llama_bench.py: same
micro-batch and sequence length per GPU), then the reference (HF
transformers, eager and/or torch.compile) for the first plan's shape on one
GPU, and prints tokens/s, TFLOP/s, MFU (the reference's convention: its
flops_per_token and peak, per GPU), peak GPU memory, and the first mlt row's
ratio to each row. A plan of N ranks (e.g. dp=2) runs under
`mpirun -np N` with NCCL_NVLS_ENABLE=0, one process per GPU; its tokens/s
is the whole run's (rank 0's log), so its ratio to the one-GPU row is the
scaling. Results also go to OUT/bench.json (OUT: --out, or $OUT, or the
current directory).

  gpu_bench.py --mlt-run bin/mlt-run --plan plans/tl-bf16-b4.mltplan \\
      --plan plans/tl-bf16-b8-dp2.mltplan \\
      --ref tools/hf_llama_bench.py --config llama-1b --modes eager,compile \\
      [--matmul-algorithms matmuls/h100.json]

mlt's tokens/s is the median over the steps after the first 3 (warm-up), from
`--log-json`. Its peak memory is measured by polling nvidia-smi (the device's
used memory above what it was before mlt-run started: the arena, the CUDA
context and the library workspaces) and predicted by the plan (its arena).
The reference's is torch.cuda.max_memory_allocated (its allocator's peak,
without the context). Standard library only (the reference needs torch).
"""
import argparse
import importlib.util
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import threading
import time


def gpu_memory_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def plan_shape(mlt_run, plan):
    text = subprocess.run([mlt_run, plan, "--print-plan"], capture_output=True, text=True, check=True).stdout
    model = re.search(r"vocab (\d+), max positions \d+, micro-batch (\d+) x seq (\d+), (\d+) micro-batch", text)
    arena = max(int(a) for a in re.findall(r"arena (\d+) bytes", text))
    world = re.search(r"world size (\d+)(?:, mesh (\S+))?", text)
    if not model or not world:
        sys.exit(f"gpu_bench: cannot read the header of {plan}'s --print-plan")
    vocab, mb, seq, micro = (int(g) for g in model.groups())
    return dict(vocab=vocab, mb=mb, seq=seq, microbatches=micro, arena=arena,
                world=int(world.group(1)), mesh=world.group(2) or "")


def run_mlt(args, plan, shape, out):
    tokens = os.path.join(out, "bench-tokens.bin")
    n = shape["mb"] * shape["microbatches"] * (shape["seq"] + 1) * (args.steps + 4)
    rng = random.Random(0)
    wide = shape["vocab"] > 65535
    with open(tokens + (".u32" if wide else ".u16"), "wb") as f:
        f.write(struct.pack(f"<{n}{'I' if wide else 'H'}", *(rng.randrange(shape["vocab"]) for _ in range(n))))
    tokens += ".u32" if wide else ".u16"
    log = os.path.join(out, "mlt-bench.jsonl")
    base = gpu_memory_used_mib()
    peak = [base]
    done = threading.Event()

    def poll():
        while not done.is_set():
            peak[0] = max(peak[0], gpu_memory_used_mib())
            time.sleep(0.1)

    poller = threading.Thread(target=poll)
    poller.start()
    cmd = [args.mlt_run, plan, "--device", "cuda", "--data", tokens, "--steps", str(args.steps + 3),
           "--lr", "1e-4", "--log-json", log]
    if args.matmul_algorithms:
        cmd += ["--matmul-algorithms", args.matmul_algorithms]
    env = dict(os.environ)
    if shape["world"] > 1:
        env["NCCL_NVLS_ENABLE"] = "0"
        # mlt-run's own settings (MLT_CUDA_GRAPHS, ...) reach every rank.
        forwarded = [arg for key in sorted(env) if key.startswith("MLT_") for arg in ("-x", key)]
        # --bind-to none: Open MPI binds each of two processes to one core,
        # which would leave mlt-run's threads (the initial parameter values,
        # made a tensor per thread) one core to share.
        cmd = ["mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", str(shape["world"]),
               "-x", "NCCL_NVLS_ENABLE", "-x", "LD_LIBRARY_PATH"] + forwarded + cmd
    # mlt-run's output goes to files in `out` as it runs, so that a run that
    # is stopped (a machine's time limit) still shows how far it got.
    stem = os.path.join(out, os.path.splitext(os.path.basename(plan))[0])
    with open(stem + ".out", "w") as stdout, open(stem + ".err", "w") as stderr:
        returncode = subprocess.run(cmd, stdout=stdout, stderr=stderr, text=True, env=env).returncode
    proc = subprocess.CompletedProcess(cmd, returncode, open(stem + ".out").read(),
                                       open(stem + ".err").read())
    done.set()
    poller.join()
    os.remove(tokens)
    if proc.returncode != 0:
        sys.exit(f"gpu_bench: mlt-run failed: {proc.stderr.strip() or proc.stdout.strip()}")
    steps = [json.loads(l) for l in open(log) if l.strip()]
    tps = statistics.median(s["tokens_per_s"] for s in steps[3:])
    name = "mlt" + (f" ({shape['mesh']}, {shape['world']} GPUs)" if shape["world"] > 1 else "")
    return dict(system=name, tokens_per_s=round(tps), gpus=shape["world"],
                peak_mem_gib=round((peak[0] - base) / 1024, 2),
                predicted_gib=round(shape["arena"] / 2**30, 2), loss=steps[-1]["loss"],
                summary=proc.stdout.splitlines()[0] if proc.stdout else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mlt-run", required=True)
    ap.add_argument("--plan", required=True, action="append",
                    help="a plan to run (repeatable); the first sets the reference's shape")
    ap.add_argument("--ref", required=True, help="path to hf_llama_bench.py")
    ap.add_argument("--config", default="llama-1b")
    ap.add_argument("--modes", default="eager,compile",
                    help="the reference's modes, comma-separated; empty: none")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--matmul-algorithms", default="",
                    help="mlt-run's --matmul-algorithms FILE (a tuned cuBLASLt table)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()

    spec = importlib.util.spec_from_file_location("hf_llama_bench", args.ref)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)  # defines CONFIGS, flops_per_token, PEAK (imports torch)
    shapes = [plan_shape(args.mlt_run, plan) for plan in args.plan]
    shape = shapes[0]
    config = ref.CONFIGS[args.config]
    for s in shapes:
        if config["vocab_size"] != s["vocab"] or s["seq"] != shape["seq"]:
            sys.exit(f"gpu_bench: every plan must have {args.config}'s vocabulary ({config['vocab_size']}) "
                     f"and the first plan's sequence length ({shape['seq']})")
    fpt = ref.flops_per_token(config, shape["seq"])

    rows = []
    for plan, s in zip(args.plan, shapes):
        row = run_mlt(args, plan, s, args.out)
        # TFLOP/s of the whole run; MFU per GPU.
        row.update(tflops=round(row["tokens_per_s"] * fpt / 1e12, 1),
                   mfu=round(row["tokens_per_s"] * fpt / ref.PEAK / s["world"], 3))
        rows.append(row)
    mlt_rows = len(rows)
    for mode in filter(None, args.modes.split(",")):
        proc = subprocess.run([sys.executable, args.ref, "--config", args.config, "--mode", mode,
                               "--steps", str(args.steps),
                               "--mb", str(shape["mb"] * shape["microbatches"] // shape["world"]),
                               "--seq", str(shape["seq"])], capture_output=True, text=True)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
        if proc.returncode != 0 or not lines:
            print(f"gpu_bench: the reference ({mode}) failed: {proc.stderr.strip()[-500:]}", file=sys.stderr)
            continue
        rows.append(json.loads(lines[-1]))

    mlt = rows[0]
    print(f"model {args.config}, micro-batch {shape['mb']} x {shape['microbatches']} x seq {shape['seq']}, "
          f"{fpt / 1e9:.2f} GFLOP/token, peak {ref.PEAK / 1e12:.1f} TFLOP/s")
    print(f"mlt: {mlt['summary']}")
    # mlt rows after the first: their speed-up over it (the scaling of a
    # multi-GPU plan); reference rows: the first mlt row's ratio to them.
    print("| system | tokens/s | TFLOP/s | MFU (per GPU) | peak GPU memory (GiB, GPU 0) | ratio |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        mem = (f"{r['peak_mem_gib']} measured, {r['predicted_gib']} predicted" if i < mlt_rows
               else f"{r['peak_mem_gib']}")
        if i == 0:
            ratio = ""
        elif i < mlt_rows:
            ratio = f"{r['tokens_per_s'] / mlt['tokens_per_s']:.2f}x the first"
        else:
            ratio = f"mlt {mlt['tokens_per_s'] / r['tokens_per_s']:.2f}x"
        print(f"| {r['system']} | {r['tokens_per_s']} | {r['tflops']} | {r['mfu']:.1%} | {mem} | {ratio} |")
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(dict(config=args.config, shapes=shapes, flops_per_token=fpt, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
