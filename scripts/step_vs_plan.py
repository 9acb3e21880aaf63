#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A `maestro run`'s measured step against its plan's prediction.

    scripts/step_vs_plan.py OUT_DIR [--skip 20] [--label tiny-vlm-gpu]

OUT_DIR is a `maestro run -o` folder: plan.json (predicted_step_seconds) and
run/metrics.jsonl (one line per step with step_seconds). Prints one line:
the median step after the first `skip` steps (warm-up: the allocator, the
first autocast casts), the plan's step, and measured / planned. The device
script (scripts/gpu-kit.sh campaign) appends it to campaign.txt for
`maestro run specs/tiny_vlm.toml` on the GPU: the check of the step model's
issue cost on a small, issue-bound run (docs/step_model.md, "The CPU's
issue cost"). Exit 0 when both figures were read, 2 otherwise.
"""
import argparse
import json
import os
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", help="a `maestro run -o` folder")
    ap.add_argument("--skip", type=int, default=20, help="steps left out at the start (default 20)")
    ap.add_argument("--label", default="step-vs-plan", help="the line's first word")
    args = ap.parse_args()
    plan_path = os.path.join(args.out_dir, "plan.json")
    metrics_path = os.path.join(args.out_dir, "run", "metrics.jsonl")
    try:
        with open(plan_path, encoding="utf-8") as f:
            planned = float(json.load(f)["predicted_step_seconds"])
        steps = {}
        with open(metrics_path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                if "step" in row and "step_seconds" in row:
                    steps[int(row["step"])] = float(row["step_seconds"])
    except (OSError, ValueError, KeyError) as e:
        print(f"{args.label}: cannot read {args.out_dir}: {e}", file=sys.stderr)
        return 2
    kept = [s for step, s in sorted(steps.items()) if step >= args.skip]
    if not kept or planned <= 0:
        print(f"{args.label}: no step after step {args.skip} in {metrics_path}, or no prediction in {plan_path}",
              file=sys.stderr)
        return 2
    measured = statistics.median(kept)
    print(f"{args.label}: measured median {measured:.4f} s over {len(kept)} steps after step {args.skip}; "
          f"planned {planned:.4f} s; measured / planned {measured / planned:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
