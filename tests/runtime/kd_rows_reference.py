#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Torch reference for tests/runtime/kd_rows_test.cc (runtime/kd_rows.h).

    python3 kd_rows_reference.py DIR

DIR holds case.txt ("B L V N K T") and float32 files, native byte order,
row-major: teacher.f32 and student.f32 (B, L, V) logits, probe.f32 (B, L),
sampled_rows.f32 (B, L, N + 1) the C++'s sampled rows (N ids as floats, then
the entropy). In float64, from the published formulas, with the gradients
written out by hand (no autograd), it writes to DIR:

  entropy.f32       (B, L)    H(p_T) = -sum_v p_T log p_T, p_T = softmax(teacher / T)
  topk_rows.f32     (B, L, 2K) the K largest raw teacher logits in descending
                              order (a full descending sort), then their ids
  kl_sampled.f32    (B, L)    KL_hat = (1/N) sum_j -log s_T[id_j] - H, H the
                              rows' own entropy column, s_T = softmax(student / T)
  grad_sampled.f32  (B, L, V) d sum(probe * KL_hat) / d student
                              = probe * (s_T - c / N) / T, c the ids' counts
  kl_topk.f32       (B, L)    sum_k t_k (log t_k - log s_T[id_k]), t =
                              softmax(top values / T) over the K
  grad_topk.f32     (B, L, V) d sum(probe * KL_topk) / d student
                              = probe * (s_T * sum_k t_k - scatter(t)) / T

It checks the sampled ids are integers in [0, V). Written from the formulas
of Anshumann et al., "Sparse Logit Sampling: Accelerating Knowledge
Distillation in LLMs" (ACL 2025, arXiv:2503.16870) and of top-k KD, not from
the C++ (runtime/kd_rows.cc). Exits 3 when torch cannot be imported (the
test's fixture then tries the next python3).
"""
import array
import os
import sys

NO_TORCH_EXIT_CODE = 3  # tests/fixtures/python3.h knows it

try:
    import torch
except ImportError as e:  # pragma: no cover
    print(f"cannot import torch: {e}")
    sys.exit(NO_TORCH_EXIT_CODE)


def read(path, shape):
    data = array.array("f")
    with open(path, "rb") as f:
        data.frombytes(f.read())
    return torch.tensor(data.tolist(), dtype=torch.float64).reshape(shape)


def write(path, t):
    with open(path, "wb") as f:
        f.write(array.array("f", t.to(torch.float64).flatten().tolist()).tobytes())


def log_softmax(x):
    """x - log(sum(exp(x))) over the last axis, shifted by the max."""
    m = x.max(dim=-1, keepdim=True).values
    return x - m - torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))


def main():
    folder = sys.argv[1]
    with open(os.path.join(folder, "case.txt")) as f:
        fields = f.read().split()
    b, l, v, n, k = (int(x) for x in fields[:5])
    temperature = float(fields[5])
    teacher = read(os.path.join(folder, "teacher.f32"), (b, l, v))
    student = read(os.path.join(folder, "student.f32"), (b, l, v))
    probe = read(os.path.join(folder, "probe.f32"), (b, l))
    sampled = read(os.path.join(folder, "sampled_rows.f32"), (b, l, n + 1))

    # The teacher's side: its entropy at T and its top K.
    t_logp = log_softmax(teacher / temperature)
    entropy = -(torch.exp(t_logp) * t_logp).sum(dim=-1)
    order = torch.sort(teacher, dim=-1, descending=True)
    top_values, top_ids = order.values[..., :k], order.indices[..., :k]
    write(os.path.join(folder, "entropy.f32"), entropy)
    write(os.path.join(folder, "topk_rows.f32"), torch.cat([top_values, top_ids.to(torch.float64)], dim=-1))

    # The student's side.
    s_logp = log_softmax(student / temperature)  # (B, L, V)
    s_prob = torch.exp(s_logp)

    ids_float = sampled[..., :n]
    if not bool((ids_float == torch.round(ids_float)).all()) or ids_float.min() < 0 or ids_float.max() >= v:
        print(f"sampled ids are not integers in [0, {v}): {ids_float}")
        return 1
    ids = ids_float.to(torch.int64)
    counts = torch.zeros(b, l, v, dtype=torch.float64)
    for bi in range(b):
        for li in range(l):
            for j in range(n):
                counts[bi, li, ids[bi, li, j]] += 1.0
    kl_sampled = -(counts * s_logp).sum(dim=-1) / n - sampled[..., n]
    grad_sampled = probe[..., None] * (s_prob - counts / n) / temperature
    write(os.path.join(folder, "kl_sampled.f32"), kl_sampled)
    write(os.path.join(folder, "grad_sampled.f32"), grad_sampled)

    t_top = torch.exp(log_softmax(top_values / temperature))  # (B, L, K), sums to 1
    target = torch.zeros(b, l, v, dtype=torch.float64)
    for bi in range(b):
        for li in range(l):
            for j in range(k):
                target[bi, li, top_ids[bi, li, j]] += t_top[bi, li, j]
    kl_topk = (t_top * (torch.log(t_top) - torch.gather(s_logp, -1, top_ids))).sum(dim=-1)
    grad_topk = probe[..., None] * (s_prob * t_top.sum(dim=-1, keepdim=True) - target) / temperature
    write(os.path.join(folder, "kl_topk.f32"), kl_topk)
    write(os.path.join(folder, "grad_topk.f32"), grad_topk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
