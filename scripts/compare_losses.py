#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares the loss curves of two `maestro run` metrics files step by step.

    scripts/compare_losses.py CANDIDATE/metrics.jsonl REFERENCE/metrics.jsonl
        [--early-steps 10 --early-tolerance 0.02 --window 20 --window-tolerance 0.05]

The device script (scripts/gpu-kit.sh campaign) runs it on `maestro run
specs/tiny_vlm.toml --steps 200` on the GPU (bf16 autocast over fp32 masters)
against the same command with `--device cpu` (fp32). Two runs that start from
the same weights and read the same samples in the same order follow one curve
until rounding separates them; bf16's 8-bit mantissa separates them first in
the per-step noise, not in the trend. So it checks:
  - each of the first `early_steps` steps within `early_tolerance` relative
    (before the trajectories have had time to drift apart);
  - the mean loss of every window of `window` steps within
    `window_tolerance` relative (the trend, over the whole run);
and prints the largest per-step difference for the record. Exit 0 when both
hold, 1 when not, 2 on bad input (a missing step, no losses).
"""
import argparse
import json
import sys


def losses(path):
    """{step: loss} of the step lines of a metrics.jsonl."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            if "loss" in row and "step" in row:
                out[int(row["step"])] = float(row["loss"])
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("candidate")
    p.add_argument("reference")
    p.add_argument("--early-steps", type=int, default=10)
    p.add_argument("--early-tolerance", type=float, default=0.02)
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--window-tolerance", type=float, default=0.05)
    a = p.parse_args(argv)
    cand, ref = losses(a.candidate), losses(a.reference)
    if not cand or not ref:
        print(f"compare_losses: no step losses in {a.candidate if not cand else a.reference}")
        return 2
    steps = sorted(ref)
    missing = [s for s in steps if s not in cand]
    if missing:
        print(f"compare_losses: {a.candidate} lacks steps {missing[:5]}{'...' if len(missing) > 5 else ''}")
        return 2
    rel = {s: abs(cand[s] - ref[s]) / max(abs(ref[s]), 1e-12) for s in steps}
    worst = max(steps, key=lambda s: rel[s])
    early = steps[: a.early_steps]
    early_worst = max(early, key=lambda s: rel[s])
    windows = []
    for i in range(0, len(steps) - a.window + 1, a.window):
        w = steps[i : i + a.window]
        mc = sum(cand[s] for s in w) / len(w)
        mr = sum(ref[s] for s in w) / len(w)
        windows.append((w[0], w[-1], mc, mr, abs(mc - mr) / max(abs(mr), 1e-12)))
    window_worst = max(windows, key=lambda w: w[4]) if windows else None
    print(f"steps compared: {len(steps)} ({steps[0]}..{steps[-1]})")
    print(f"loss first/last: candidate {cand[steps[0]]:.4f} -> {cand[steps[-1]]:.4f}, "
          f"reference {ref[steps[0]]:.4f} -> {ref[steps[-1]]:.4f}")
    print(f"largest per-step difference: {rel[worst]:.4g} relative at step {worst}")
    print(f"first {len(early)} steps: largest {rel[early_worst]:.4g} at step {early_worst} "
          f"(tolerance {a.early_tolerance})")
    ok = rel[early_worst] <= a.early_tolerance
    if window_worst:
        print(f"windows of {a.window} steps: largest mean difference {window_worst[4]:.4g} over steps "
              f"{window_worst[0]}..{window_worst[1]} ({window_worst[2]:.4f} vs {window_worst[3]:.4f}; "
              f"tolerance {a.window_tolerance})")
        ok = ok and window_worst[4] <= a.window_tolerance
    print("compare_losses: " + ("within tolerance" if ok else "OUTSIDE tolerance"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
