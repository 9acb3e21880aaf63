#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference for tests/runtime/models_test.cc.

    python3 reference_models.py IN_DIR OUT_DIR

IN_DIR holds case.json ({"desc": ModelDesc fields + "extra"}) and tensors
(index.json + data.bin, see models_test.cc): "param/<name>" for every C++
parameter, the input ("ids" int64 (B,T) for the decoder, "x" float
otherwise), "probe" (d loss / d output) and, for other outputs that join the
loss, "probe/<output name>". This script builds the same model
in float64
independently of the C++ code -- the decoder as HF transformers writes
Llama / Mixtral (Gemma 3 text when extra.gemma3), the encoders from torch.nn.TransformerEncoderLayer(
norm_first=True, batch_first=True) and nn.Conv1d/2d -- loads the weights by
name (every C++ parameter must land on exactly one PyTorch parameter and vice
versa), runs loss = sum(output * probe) (+ sum(router_balance), the MoE
load-balancing term, when the decoder has experts) forward and backward, and writes to
OUT_DIR: "output" (the decoder's logits; "hidden" too), "input_grad" (d loss /
d the float input the model sees: the token embeddings for the decoder) and
"grad/<name>" for every parameter (zeros where PyTorch has none).
"""
import json
import math
import os
import sys

NO_TORCH_EXIT_CODE = 3  # models_test.cc knows it

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # models_test.cc then tries the next python3
    print(f"{sys.executable}: cannot import torch ({e}); install python3-torch", file=sys.stderr)
    sys.exit(NO_TORCH_EXIT_CODE)

from reference_vision import SeparateQkvAttention, Vit, gelu_tanh, rotate_half  # noqa: E402

# ---- tensor files ----------------------------------------------------------


def read_tensors(directory):
    with open(os.path.join(directory, "index.json")) as f:
        index = json.load(f)
    with open(os.path.join(directory, "data.bin"), "rb") as f:
        data = f.read()
    out = {}
    for e in index:
        dtype = torch.int64 if e["dtype"] == "i64" else torch.float32
        count = math.prod(e["shape"])
        nbytes = count * (8 if dtype == torch.int64 else 4)
        chunk = bytearray(data[e["offset"]:e["offset"] + nbytes])
        t = torch.frombuffer(chunk, dtype=dtype) if count else torch.empty(0, dtype=dtype)
        out[e["name"]] = t.reshape(e["shape"]).clone()
    return out


def write_tensors(directory, tensors):
    os.makedirs(directory, exist_ok=True)
    index, offset = [], 0
    with open(os.path.join(directory, "data.bin"), "wb") as f:
        for name, t in tensors.items():
            t = t.detach().cpu().contiguous()
            kind = "i64" if t.dtype == torch.int64 else "f32"
            t = t if kind == "i64" else t.to(torch.float32)
            raw = t.numpy().tobytes() if t.numel() else b""
            f.write(raw)
            index.append({"name": name, "dtype": kind, "shape": list(t.shape), "offset": offset})
            offset += len(raw)
    with open(os.path.join(directory, "index.json"), "w") as f:
        json.dump(index, f)


# ---- decoder: HF Llama / Mixtral style --------------------------------------


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.promote_types(input_dtype, torch.float32))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rope_frequencies(dim, base, extra):
    """The dim/2 rotary inverse frequencies and the factor cos and sin are
    scaled by, in float64, from the published rules (extra.rope_scaling_type:
    0 none, 1 linear, 2 llama3, 3 yarn; the other rope_scaling_* keys are the
    config's rope_scaling numbers):
      none    theta_i = base^(-2i/dim)                       (RoFormer)
      linear  theta_i / s                                    (position interpolation, Chen et al. 2023)
      llama3  wavelength w_i = 2 pi / theta_i against the original context L:
              w < L / high_freq_factor keeps theta_i, w > L / low_freq_factor takes theta_i / s,
              between: (1 - a) theta_i / s + a theta_i, a = (L / w - low) / (high - low)
              (Meta's Llama 3.1 apply_scaling)
      yarn    NTK-by-parts (Peng et al. 2023 and their reference code): the
              dimension d(r) at which theta_d turns r times over L solves
              L theta_d / (2 pi) = r; with lo = d(beta_fast), hi = d(beta_slow)
              (floor and ceil unless truncate is 0), clamped to [0, dim - 1],
              g_i = clamp((i - lo) / (hi - lo), 0, 1) and
              theta'_i = g_i theta_i / s + (1 - g_i) theta_i; cos and sin are
              scaled by sqrt(1/t) = 0.1 ln s + 1, or the config's
              attention_factor, or the mscale / mscale_all_dim ratio.
    """
    i = torch.arange(dim // 2, dtype=torch.float64)
    theta = base ** (-2.0 * i / dim)
    kind = int(extra.get("rope_scaling_type", 0))
    s = extra.get("rope_scaling_factor", 1.0)
    original = extra.get("rope_scaling_original_max_position_embeddings", 0.0)
    if kind == 0:
        return theta, 1.0
    if kind == 1:
        return theta / s, 1.0
    if kind == 2:
        low = extra.get("rope_scaling_low_freq_factor", 1.0)
        high = extra.get("rope_scaling_high_freq_factor", 4.0)
        w = 2 * math.pi / theta
        a = (original / w - low) / (high - low)
        blended = (1 - a) * theta / s + a * theta
        out = torch.where(w < original / high, theta, blended)
        return torch.where(w > original / low, theta / s, out), 1.0
    if kind == 3:
        def dim_turning(r):  # solves original * base^(-2d/dim) / (2 pi) = r for d
            return dim * math.log(original / (2 * math.pi * r)) / (2 * math.log(base))
        lo = dim_turning(extra.get("rope_scaling_beta_fast", 32.0))
        hi = dim_turning(extra.get("rope_scaling_beta_slow", 1.0))
        if extra.get("rope_scaling_truncate", 1):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        g = ((i - lo) / (hi - lo)).clamp(0, 1)
        scaled = g * theta / s + (1 - g) * theta

        def m(scale, k):
            return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
        if extra.get("rope_scaling_attention_factor", 0):
            return scaled, extra["rope_scaling_attention_factor"]
        if extra.get("rope_scaling_mscale", 0) and extra.get("rope_scaling_mscale_all_dim", 0):
            return scaled, m(s, extra["rope_scaling_mscale"]) / m(s, extra["rope_scaling_mscale_all_dim"])
        return scaled, m(s, 1.0)
    sys.exit(f"rope_scaling_type {kind}: the C++ side must have refused it")


def rotary_cos_sin(seq_len, dim, base, extra):
    inv_freq, scale = rope_frequencies(dim, base, extra)
    t = torch.arange(seq_len, dtype=inv_freq.dtype)
    freqs = torch.einsum("i,j->ij", t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * scale, emb.sin() * scale


# ---- M-RoPE: the Qwen2-VL family's 3-D positions -----------------------------
# Written from transformers' modeling_qwen2_vl.py (Qwen2VLModel.get_rope_index,
# Qwen2VLRotaryEmbedding, apply_multimodal_rotary_pos_emb) and
# modeling_qwen3_vl.py (apply_interleaved_mrope), not from Maestro's C++.


def get_rope_index(input_ids, image_token_id, grids, counts, video_token_id=-1, kinds=None, seconds=None,
                   tokens_per_second=0):
    """position_ids (3, B, T): text one position per token on all three rows;
    an image or video of LLM grid (t, h, w) (grids: (items, 3), already
    merged, in sample order; counts: items per sample; kinds: 1 for a video,
    else an image; seconds: a video's second_per_grid_t) takes st_idx + its
    t, h, w indices, st_idx = previous max + 1; text resumes at the item's
    max + 1. As transformers' Qwen2.5-VL get_rope_index: the images and the
    videos are two lists, each item is the earlier of the next image token
    and the next video token, and with tokens_per_second a video's time
    index is arange(t) * second_per_grid_t * tokens_per_second, the seconds
    first cast to the index's dtype (int64), the product then .long()."""
    batch, seq = input_ids.shape
    n = len(grids)
    kinds = [0] * n if kinds is None else [int(k) for k in kinds]
    seconds = [0.0] * n if seconds is None else [float(x) for x in seconds]
    image_grids = [grids[i] for i in range(n) if kinds[i] != 1]
    video_grids = [(grids[i], seconds[i]) for i in range(n) if kinds[i] == 1]
    position_ids = torch.ones(3, batch, seq, dtype=torch.long)
    image_index = video_index = item = 0
    for i in range(batch):
        input_tokens = input_ids[i].tolist()
        sample_kinds = kinds[item:item + int(counts[i])]
        item += int(counts[i])
        remain_images = sum(1 for k in sample_kinds if k != 1)
        remain_videos = len(sample_kinds) - remain_images
        llm_pos_ids_list = []
        st = 0
        for _ in range(len(sample_kinds)):
            big = len(input_tokens) + 1
            ed_image = input_tokens.index(image_token_id, st) if remain_images > 0 and image_token_id in input_tokens[st:] else big
            ed_video = input_tokens.index(video_token_id, st) if remain_videos > 0 and video_token_id in input_tokens[st:] else big
            if ed_image < ed_video:
                t, h, w = (int(v) for v in image_grids[image_index])
                second_per_grid_t = 0
                image_index += 1
                remain_images -= 1
                ed = ed_image
            else:
                grid, second_per_grid_t = video_grids[video_index]
                t, h, w = (int(v) for v in grid)
                video_index += 1
                remain_videos -= 1
                ed = ed_video
            text_len = ed - st
            st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
            llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
            range_tensor = torch.arange(t).view(-1, 1)
            expanded_range = range_tensor.expand(-1, h * w)
            if tokens_per_second:
                second = torch.as_tensor(second_per_grid_t, dtype=range_tensor.dtype)
                t_index = (expanded_range * second * tokens_per_second).long().flatten()
            else:
                t_index = expanded_range.flatten()
            h_index = torch.arange(h).view(1, -1, 1).expand(t, -1, w).flatten()
            w_index = torch.arange(w).view(1, 1, -1).expand(t, h, -1).flatten()
            llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]) + text_len + st_idx)
            st = ed + t * h * w
        if st < len(input_tokens):
            st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
            text_len = len(input_tokens) - st
            llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        position_ids[:, i, :] = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1)
    return position_ids


def mrope_cos_sin(position_ids, dim, base, extra):
    """cos, sin (B, 1, T, D): the rotary angles of each row of position_ids
    (3, B, T), then Qwen2-VL's split of cos/sin into mrope_section * 2 chunks
    (chunk i from row i % 3), or Qwen3-VL's interleaving of the frequencies."""
    inv_freq, scale = rope_frequencies(dim, base, extra)
    section = [int(extra[k]) for k in ("mrope_section_t", "mrope_section_h", "mrope_section_w")]
    freqs = position_ids[..., None].to(inv_freq.dtype) * inv_freq  # (3, B, T, D/2)
    if extra.get("mrope_interleaved", 0):
        freqs_t = freqs[0].clone()
        for axis, offset in ((1, 1), (2, 2)):
            idx = slice(offset, section[axis] * 3, 3)
            freqs_t[..., idx] = freqs[axis, ..., idx]
        emb = torch.cat((freqs_t, freqs_t), dim=-1)  # (B, T, D)
        cos, sin = emb.cos() * scale, emb.sin() * scale
    else:
        emb = torch.cat((freqs, freqs), dim=-1)  # (3, B, T, D)
        cos, sin = emb.cos() * scale, emb.sin() * scale
        split = section * 2
        cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(split, dim=-1))], dim=-1)
        sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(split, dim=-1))], dim=-1)
    return cos.unsqueeze(1), sin.unsqueeze(1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    """Llama / Mistral attention; Qwen2's when bias (q/k/v biases, o without);
    Qwen3's when qk_norm_eps (RMSNorm of every q and k head before RoPE).
    Mistral's sliding window when window > 0: transformers' masking_utils
    (sliding_window_overlay) lets query q_idx see key kv_idx when
    kv_idx > q_idx - window, on top of the causal kv_idx <= q_idx."""

    def __init__(self, hidden, heads, kv_heads, head_dim, bias=False, qk_norm_eps=0.0, window=0):
        super().__init__()
        self.window = window
        if qk_norm_eps:
            self.q_norm = LlamaRMSNorm(head_dim, qk_norm_eps)
            self.k_norm = LlamaRMSNorm(head_dim, qk_norm_eps)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x, cos, sin):
        bsz, q_len, _ = x.size()
        q = self.q_proj(x).view(bsz, q_len, self.heads, self.head_dim)
        k = self.k_proj(x).view(bsz, q_len, self.kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.kv_heads, self.head_dim).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        q_idx = torch.arange(q_len).unsqueeze(1)
        kv_idx = torch.arange(q_len).unsqueeze(0)
        visible = kv_idx <= q_idx
        if self.window:
            visible = visible & (kv_idx > q_idx - self.window)
        attn_weights = attn_weights.masked_fill(~visible, float("-inf"))
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.promote_types(q.dtype, torch.float32)).to(q.dtype)
        out = torch.matmul(attn_weights, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def load_balancing_loss(gate_logits, num_experts, top_k):
    """transformers' load_balancing_loss_func (Switch / Mixtral) over one
    sample's tokens: E * sum_e f_e * P_e, f_e the fraction of token-slots
    routed to e, P_e the mean router probability."""
    routing_weights = F.softmax(gate_logits, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.to(routing_weights.dtype), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


class SparseMoeBlock(nn.Module):
    """Mixtral's MixtralSparseMoeBlock; with a shared expert and
    norm_topk_prob = False, Qwen2-MoE's Qwen2MoeSparseMoeBlock; Qwen3-MoE's is
    Mixtral's with norm_topk_prob from the config."""

    def __init__(self, hidden, num_experts, top_k, intermediate, shared_intermediate, norm_topk_prob):
        super().__init__()
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.router = nn.Linear(hidden, num_experts, bias=False)  # HF: "gate"
        self.experts = nn.ModuleList([LlamaMLP(hidden, intermediate) for _ in range(num_experts)])
        if shared_intermediate:
            self.shared_expert = LlamaMLP(hidden, shared_intermediate)
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)
        self.balance = None  # (B): the last forward's per-sample load-balancing term

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        self.balance = torch.stack([
            load_balancing_loss(self.router(hidden_states[b]), self.num_experts, self.top_k)
            for b in range(batch_size)
        ])
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.router(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.promote_types(router_logits.dtype, torch.float))
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            if top_x.shape[0] == 0:
                continue
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current = self.experts[expert_idx](current_state) * routing_weights[top_x, idx, None]
            final = final.index_add(0, top_x, current.to(hidden_states.dtype))
        if hasattr(self, "shared_expert"):
            shared = self.shared_expert(hidden_states)
            final = final + torch.sigmoid(self.shared_expert_gate(hidden_states)) * shared
        return final.reshape(batch_size, sequence_length, hidden_dim)


def is_sparse_layer(d, layer_idx):
    """transformers' Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: a sparse
    (MoE) MLP when layer_idx is not in config.mlp_only_layers and
    config.num_experts > 0 and (layer_idx + 1) % config.decoder_sparse_step
    == 0; otherwise the dense MLP of config.intermediate_size. The desc
    carries mlp_only_layers as extra["mlp_only_layers.<i>"] = 1."""
    extra = d["extra"]
    mlp_only_layers = [i for i in range(d["layers"]) if extra.get("mlp_only_layers.%d" % i, 0)]
    step = int(extra.get("decoder_sparse_step", 1))
    return layer_idx not in mlp_only_layers and d["experts"] > 0 and (layer_idx + 1) % step == 0


class LlamaDecoderLayer(nn.Module):
    def __init__(self, d, layer_idx):
        super().__init__()
        heads = d["heads"]
        kv_heads = d["kv_heads"] or heads
        head_dim = d["head_dim"] or d["hidden"] // heads
        eps = d["extra"].get("rms_norm_eps", 1e-5)
        self.attn_norm = LlamaRMSNorm(d["hidden"], eps)
        self.attn = LlamaAttention(d["hidden"], heads, kv_heads, head_dim, bias=bool(d["extra"].get("qkv_bias", 0)),
                                   qk_norm_eps=eps if d["extra"].get("qk_norm", 0) else 0.0,
                                   window=int(d["extra"].get("sliding_window", 0)))
        self.mlp_norm = LlamaRMSNorm(d["hidden"], eps)
        if is_sparse_layer(d, layer_idx):
            self.moe = SparseMoeBlock(d["hidden"], d["experts"], d["experts_per_token"],
                                      d["moe_ffn_hidden"] or d["ffn_hidden"],
                                      int(d["extra"].get("shared_expert_ffn_hidden", 0)),
                                      bool(d["extra"].get("norm_topk_prob", 1)))
        else:
            self.mlp = LlamaMLP(d["hidden"], d["ffn_hidden"])

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        ffn = self.moe if hasattr(self, "moe") else self.mlp
        return x + ffn(self.mlp_norm(x))


class LlamaForCausalLM(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.embed_tokens = nn.Embedding(d["vocab"], d["hidden"])
        self.blocks = nn.ModuleList([LlamaDecoderLayer(d, i) for i in range(d["layers"])])
        self.final_norm = LlamaRMSNorm(d["hidden"], d["extra"].get("rms_norm_eps", 1e-5))
        if not d["tie_embeddings"]:
            self.lm_head = nn.Linear(d["hidden"], d["vocab"], bias=False)

    def param_map(self):
        return dict(self.named_parameters())

    def run(self, inputs, delta):
        embeds = self.embed_tokens(inputs["ids"]) + delta
        d = self.d
        head_dim = d["head_dim"] or d["hidden"] // d["heads"]
        if "mrope_grids" in inputs:
            video = "mrope_video_token" in inputs
            position_ids = get_rope_index(
                inputs["ids"], int(inputs["mrope_image_token"][0]), inputs["mrope_grids"], inputs["mrope_counts"],
                int(inputs["mrope_video_token"][0]) if video else -1, inputs["mrope_kinds"].tolist() if video else None,
                inputs["mrope_seconds"].tolist() if video else None,
                int(d["extra"].get("mrope_tokens_per_second", 0)))
            cos, sin = mrope_cos_sin(position_ids, head_dim, d["extra"].get("rope_theta", 10000.0), d["extra"])
        else:
            cos, sin = rotary_cos_sin(embeds.shape[1], head_dim, d["extra"].get("rope_theta", 10000.0), d["extra"])
        x = embeds
        for block in self.blocks:
            x = block(x, cos, sin)
        hidden = self.final_norm(x)
        head = self.embed_tokens.weight if d["tie_embeddings"] else self.lm_head.weight
        out = {"output": F.linear(hidden, head), "hidden": hidden}
        sparse = [block.moe.balance for block in self.blocks if hasattr(block, "moe")]
        if sparse:  # the mean over the MoE layers of the per-sample load-balancing term, (B)
            out["router_balance"] = torch.stack(sparse).mean(0)
        return out


# ---- decoder: HF Gemma 3 text (modeling_gemma3.py) ----------------------------
# Written from Gemma 3's published math (the Gemma 3 technical report and
# transformers' Gemma3ForCausalLM), not from Maestro's C++:
#   RMSNorm x / sqrt(mean(x^2) + eps) * (1 + w) in (at least) float32, cast back;
#   embeddings * sqrt(hidden) (a float32 scalar cast to the weights' dtype);
#   h = x + post_attention_layernorm(attn(input_layernorm(x)));
#   out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
#   attn: q_norm / k_norm per head before RoPE, scores * query_pre_attn_scalar^-0.5;
#   mlp: down(gelu_tanh(gate(x)) * up(x));
#   local (sliding) layers: window mask kv_idx > q_idx - W, RoPE base
#   rope_local_base_freq unscaled; global layers: rope_theta with rope_scaling.
# Parameter names are Maestro's (blocks.<i>.post_attn_norm = HF's
# post_attention_layernorm, mlp_norm = pre_feedforward_layernorm,
# post_mlp_norm = post_feedforward_layernorm).


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        wide = torch.promote_types(x.dtype, torch.float32)
        h = x.to(wide)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.to(wide))).to(x.dtype)


def gemma_is_sliding(d, layer):
    """Layer kinds as the desc encodes Gemma 3's config (plan/model_desc.h):
    no window, no sliding layer; an explicit full_attention_layers.<i> is
    global; else layer i is global iff (i + 1) % sliding_window_pattern == 0."""
    extra = d["extra"]
    if not extra.get("sliding_window", 0):
        return False
    if extra.get(f"full_attention_layers.{layer}", 0):
        return False
    pattern = int(extra.get("sliding_window_pattern", 0))
    return not (pattern and (layer + 1) % pattern == 0)


class Gemma3Attention(nn.Module):
    def __init__(self, d, head_dim, eps, window):
        super().__init__()
        hidden, heads = d["hidden"], d["heads"]
        kv_heads = d["kv_heads"] or heads
        self.heads, self.kv_heads, self.head_dim, self.window = heads, kv_heads, head_dim, window
        self.scaling = d["extra"].get("query_pre_attn_scalar", head_dim) ** -0.5
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.q_norm = GemmaRMSNorm(head_dim, eps)
        self.k_norm = GemmaRMSNorm(head_dim, eps)

    def forward(self, x, cos, sin):
        bsz, q_len, _ = x.size()
        q = self.q_norm(self.q_proj(x).view(bsz, q_len, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(bsz, q_len, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.kv_heads, self.head_dim).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        q_idx = torch.arange(q_len).unsqueeze(1)
        kv_idx = torch.arange(q_len).unsqueeze(0)
        visible = kv_idx <= q_idx
        if self.window:
            visible = visible & (kv_idx > q_idx - self.window)
        scores = scores.masked_fill(~visible, float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.promote_types(q.dtype, torch.float32)).to(q.dtype)
        return self.o_proj(torch.matmul(probs, v).transpose(1, 2).reshape(bsz, q_len, -1))


class GeGluMLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(gelu_tanh(self.gate_proj(x)) * self.up_proj(x))


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, d, layer):
        super().__init__()
        head_dim = d["head_dim"] or d["hidden"] // d["heads"]
        eps = d["extra"].get("rms_norm_eps", 1e-6)
        self.sliding = gemma_is_sliding(d, layer)
        window = int(d["extra"]["sliding_window"]) if self.sliding else 0
        self.attn_norm = GemmaRMSNorm(d["hidden"], eps)
        self.attn = Gemma3Attention(d, head_dim, eps, window)
        self.post_attn_norm = GemmaRMSNorm(d["hidden"], eps)
        self.mlp_norm = GemmaRMSNorm(d["hidden"], eps)
        self.mlp = GeGluMLP(d["hidden"], d["ffn_hidden"])
        self.post_mlp_norm = GemmaRMSNorm(d["hidden"], eps)

    def forward(self, x, rope_global, rope_local):
        cos, sin = rope_local if self.sliding else rope_global
        x = x + self.post_attn_norm(self.attn(self.attn_norm(x), cos, sin))
        return x + self.post_mlp_norm(self.mlp(self.mlp_norm(x)))


class Gemma3ForCausalLM(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.embed_tokens = nn.Embedding(d["vocab"], d["hidden"])
        self.blocks = nn.ModuleList([Gemma3DecoderLayer(d, i) for i in range(d["layers"])])
        self.final_norm = GemmaRMSNorm(d["hidden"], d["extra"].get("rms_norm_eps", 1e-6))
        if not d["tie_embeddings"]:
            self.lm_head = nn.Linear(d["hidden"], d["vocab"], bias=False)

    def param_map(self):
        return dict(self.named_parameters())

    def run(self, inputs, delta):
        d, extra = self.d, self.d["extra"]
        scale = torch.tensor(math.sqrt(d["hidden"]), dtype=torch.float32).to(self.embed_tokens.weight.dtype)
        embeds = self.embed_tokens(inputs["ids"]) * scale + delta
        seq_len, head_dim = embeds.shape[1], d["head_dim"] or d["hidden"] // d["heads"]
        rope_global = rotary_cos_sin(seq_len, head_dim, extra.get("rope_theta", 10000.0), extra)
        rope_local = rotary_cos_sin(seq_len, head_dim, extra.get("rope_local_base_freq", extra.get("rope_theta", 10000.0)),
                                    {})
        x = embeds
        for block in self.blocks:
            x = block(x, rope_global, rope_local)
        hidden = self.final_norm(x)
        head = self.embed_tokens.weight if d["tie_embeddings"] else self.lm_head.weight
        return {"output": F.linear(hidden, head), "hidden": hidden}


def Decoder(d):
    return Gemma3ForCausalLM(d) if d["extra"].get("gemma3", 0) else LlamaForCausalLM(d)


class WhisperEncoderLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        c = d["hidden"]
        self.self_attn = SeparateQkvAttention(c, d["heads"], k_bias=False)
        self.self_attn_layer_norm = nn.LayerNorm(c)
        self.fc1 = nn.Linear(c, d["ffn_hidden"])
        self.fc2 = nn.Linear(d["ffn_hidden"], c)
        self.final_layer_norm = nn.LayerNorm(c)

    def forward(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    """WhisperEncoder (embed_positions frozen, Whisper's sinusoids at init)."""

    def __init__(self, d):
        super().__init__()
        c = d["hidden"]
        positions = int(d["extra"].get("max_source_positions", (d["audio_frames"] + 1) // 2))
        self.conv1 = nn.Conv1d(d["mel_bins"], c, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(c, c, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(positions, c)
        self.embed_positions.requires_grad_(False)
        self.layers = nn.ModuleList([WhisperEncoderLayer(d) for _ in range(d["layers"])])
        self.layer_norm = nn.LayerNorm(c)

    def param_map(self):
        m = {"embed_positions": self.embed_positions.weight, "final_norm.weight": self.layer_norm.weight,
             "final_norm.bias": self.layer_norm.bias}
        for name in ("conv1", "conv2"):
            m[name + ".weight"] = getattr(self, name).weight
            m[name + ".bias"] = getattr(self, name).bias
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            m[f"blocks.{i}.attn.k_proj.weight"] = a.k_proj.weight
            for ours, theirs in [("attn.q_proj", a.q_proj), ("attn.v_proj", a.v_proj), ("attn.out", a.out_proj),
                                 ("attn_norm", layer.self_attn_layer_norm), ("mlp_norm", layer.final_layer_norm),
                                 ("fc1", layer.fc1), ("fc2", layer.fc2)]:
                m[f"blocks.{i}.{ours}.weight"], m[f"blocks.{i}.{ours}.bias"] = theirs.weight, theirs.bias
        return m

    def run(self, inputs, delta):
        x = F.gelu(self.conv1(inputs["x"] + delta))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        # HF requires exactly 2 * max_source_positions frames and adds the whole
        # table; a shorter input takes the table's first rows.
        x = x + self.embed_positions.weight[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return {"output": self.layer_norm(x)}


class Projector(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d["in_dim"], d["out_dim"]), nn.GELU(), nn.Linear(d["out_dim"], d["out_dim"]))

    def param_map(self):
        return {"fc1.weight": self.net[0].weight, "fc1.bias": self.net[0].bias,
                "fc2.weight": self.net[2].weight, "fc2.bias": self.net[2].bias}

    def run(self, inputs, delta):
        return {"output": self.net(inputs["x"] + delta)}


MODELS = {"decoder": Decoder, "vit": Vit, "audio_encoder": AudioEncoder, "projector": Projector}


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: reference_models.py IN_DIR OUT_DIR")
    in_dir, out_dir = argv[1], argv[2]
    torch.set_num_threads(1)
    with open(os.path.join(in_dir, "case.json")) as f:
        desc = json.load(f)["desc"]
    tensors = read_tensors(in_dir)
    # fp64: the reference is as exact as it gets, and clear of Debian 1.13's
    # wrong fp32 GELU gradient for non-contiguous incoming gradients.
    model = MODELS[desc["kind"]](desc).double()
    model.train()

    # Every C++ parameter lands on exactly one PyTorch parameter, and back.
    pmap = model.param_map()
    cpp_names = {k[len("param/"):] for k in tensors if k.startswith("param/")}
    if cpp_names != set(pmap):
        sys.exit(f"parameter names differ: C++ only {sorted(cpp_names - set(pmap))}, "
                 f"PyTorch only {sorted(set(pmap) - cpp_names)}")
    if {id(p) for p in pmap.values()} != {id(p) for p in model.parameters()}:
        sys.exit("the PyTorch model has parameters the C++ model does not")
    with torch.no_grad():
        for name, p in pmap.items():
            src = tensors["param/" + name]
            if src.shape != p.shape:
                sys.exit(f"{name}: C++ shape {list(src.shape)}, PyTorch shape {list(p.shape)}")
            p.copy_(src)

    inputs = {k: (v if k == "ids" else v.double()) for k, v in tensors.items() if k in ("ids", "x")}
    inputs.update({k: v for k, v in tensors.items() if k.startswith("mrope_")})  # M-RoPE: grids and counts
    if "grid_thw" in tensors:  # the Qwen vision towers' packed input: one (t, h, w) per item
        inputs["grid_thw"] = tensors["grid_thw"]
    if "ids" in inputs:
        delta_shape = list(inputs["ids"].shape) + [desc["hidden"]]
    else:
        delta_shape = list(inputs["x"].shape)
    delta = torch.zeros(delta_shape, dtype=torch.float64, requires_grad=True)
    outputs = model.run(inputs, delta)
    loss = (outputs["output"] * tensors["probe"].double()).sum()
    if "router_balance" in outputs:  # the MoE load-balancing term joins the loss (its gradient is checked)
        loss = loss + outputs["router_balance"].sum()
    for key, probe in tensors.items():  # other outputs the case probes (SigLIP's pooled output)
        if key.startswith("probe/"):
            loss = loss + (outputs[key[len("probe/"):]] * probe.double()).sum()
    loss.backward()

    result = dict(outputs)
    result["input_grad"] = delta.grad
    for name, p in pmap.items():
        result["grad/" + name] = p.grad if p.grad is not None else torch.zeros_like(p)
    write_tensors(out_dir, result)


if __name__ == "__main__":
    main(sys.argv)
