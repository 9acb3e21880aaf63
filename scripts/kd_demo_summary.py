#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The KD demo's last lines (scripts/demo.sh kd): what distillation bought
and what the plan saved, read from the runs' own files.

  kd_demo_summary.py TEACHER_OUT KD_OUT STUDENT_OUT FUSED_EVERY_EPOCH_OUT

Each *_OUT is a `maestro run -o` folder: its run/eval.json (the held-out
loss the run ended on), run/metrics.jsonl (each step's seconds; a step run
again after a resume counts once, its last line; an offline pass's seconds) and report.json (the
planner's alternatives priced over the whole job). Standard library only.
"""
import json
import os
import sys


def held_out(out):
    path = os.path.join(out, "run", "eval.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def training(out):
    """(seconds, steps, epochs) of the run's training steps, the offline
    pass's seconds included (an "offline" plan fills its spool first)."""
    steps, epochs, passes = {}, set(), 0.0
    try:
        with open(os.path.join(out, "run", "metrics.jsonl")) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if "step" in j and "step_seconds" in j:
                    steps[j["step"]] = j["step_seconds"]
                    epochs.add(j.get("epoch", 0))
                passes += j.get("offline_pass_s", 0.0)
    except OSError:
        return None
    return sum(steps.values()) + passes, len(steps), len(epochs)


def report(out):
    try:
        with open(os.path.join(out, "report.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    teacher, kd, student, fused = argv[1:]
    loss = {name: held_out(out) for name, out in (("teacher", teacher), ("kd", kd), ("student", student))}
    print()
    print("== What distillation bought: held-out loss on the demo text's held-out chunks (lower is better)")
    rows = (("teacher", "the teacher (4 layers, trained first)"),
            ("kd", "the student distilled from it"),
            ("student", "the same student trained without the teacher"))
    for key, label in rows:
        e = loss[key]
        print(f"  {label:<48} {e['loss']:.4f}" if e else f"  {label:<48} (not evaluated: no eval.json)")
    if loss["kd"] and loss["student"]:
        gain = loss["student"]["loss"] - loss["kd"]["loss"]
        verdict = "the teacher helped" if gain > 0 else "the teacher did not help here"
        print(f"  distillation changed the student's held-out loss by {-gain:+.4f} ({verdict})")

    print()
    chosen, every = training(kd), training(fused)
    js = report(kd)
    alternatives = {a["name"]: a for a in (js or {}).get("job_alternatives", [])}
    picked = next((a for a in alternatives.values() if a.get("chosen")), None)
    if chosen and every:
        print(f"== What the plan saved: {chosen[1]} steps over {chosen[2]} epoch(s), measured on this machine")
        name = picked["name"] if picked else "the planner's choice"
        pred = f" (predicted {picked['seconds']:.1f} s)" if picked else ""
        print(f"  {name + ', the planner' + chr(39) + 's choice':<48} {chosen[0]:7.1f} s{pred}")
        fe = alternatives.get("fused-every-epoch")
        pred = f" (predicted {fe['seconds']:.1f} s)" if fe else ""
        print(f"  {'fused, the teacher recomputed every epoch':<48} {every[0]:7.1f} s{pred}")
        if chosen[0] > 0:
            print(f"  the choice trained {every[0] / chosen[0]:.2f}x as fast as the fused plan without its spool")
    else:
        print("== What the plan saved: a run's metrics.jsonl is missing")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
