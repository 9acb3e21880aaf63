# SPDX-License-Identifier: Apache-2.0
"""The vision towers of the PyTorch reference (reference_models.py imports
them): the encoders' torch.nn building blocks, CLIP, SigLIP, Qwen2-VL and
Qwen2.5-VL's towers, Maestro's built-in ViT -- each written from the
published model (HF transformers' modules), independently of the C++ code.
The Qwen towers run HF's forward(pixel_values, grid_thw) on packed input
(inputs "x" (N, C*T*P*P) and "grid_thw" (items, 3)), or on fixed-size
images "x" (B, C, S, S) flattened the way Qwen2VLImageProcessor does."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)




def encoder_layers(d):
    eps = d["extra"].get("layer_norm_eps", 1e-5)
    return nn.ModuleList([
        nn.TransformerEncoderLayer(d["hidden"], d["heads"], dim_feedforward=d["ffn_hidden"], dropout=0.0,
                                   activation="gelu", layer_norm_eps=eps, batch_first=True, norm_first=True)
        for _ in range(d["layers"])
    ])


def encoder_param_map(layers, final_norm):
    m = {}
    for i, layer in enumerate(layers):
        p = f"blocks.{i}."
        m[p + "attn_norm.weight"] = layer.norm1.weight
        m[p + "attn_norm.bias"] = layer.norm1.bias
        m[p + "attn.qkv.weight"] = layer.self_attn.in_proj_weight
        m[p + "attn.qkv.bias"] = layer.self_attn.in_proj_bias
        m[p + "attn.out.weight"] = layer.self_attn.out_proj.weight
        m[p + "attn.out.bias"] = layer.self_attn.out_proj.bias
        m[p + "mlp_norm.weight"] = layer.norm2.weight
        m[p + "mlp_norm.bias"] = layer.norm2.bias
        m[p + "fc1.weight"] = layer.linear1.weight
        m[p + "fc1.bias"] = layer.linear1.bias
        m[p + "fc2.weight"] = layer.linear2.weight
        m[p + "fc2.bias"] = layer.linear2.bias
    m["final_norm.weight"] = final_norm.weight
    m["final_norm.bias"] = final_norm.bias
    return m


# ---- published encoders, written after their HF module structure ------------


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


class SeparateQkvAttention(nn.Module):
    """CLIPAttention / WhisperAttention: q, k, v, out_proj; q scaled by D^-0.5."""

    def __init__(self, dim, heads, k_bias=True):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.k_proj = nn.Linear(dim, dim, bias=k_bias)
        self.v_proj = nn.Linear(dim, dim)
        self.q_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        shape = lambda y: y.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        q = shape(self.q_proj(x) * self.head_dim ** -0.5)
        k, v = shape(self.k_proj(x)), shape(self.v_proj(x))
        probs = F.softmax(q @ k.transpose(2, 3), dim=-1)
        return self.out_proj((probs @ v).transpose(1, 2).reshape(b, t, c))


def clip_layer_params(layers):
    """Maestro's names of CLIP-shaped encoder layers (CLIP, SigLIP): separate
    q/k/v/out projections with biases, two LayerNorms, fc1/fc2."""
    m = {}
    for i, layer in enumerate(layers):
        for ours, theirs in [("attn.q_proj", layer.self_attn.q_proj), ("attn.k_proj", layer.self_attn.k_proj),
                             ("attn.v_proj", layer.self_attn.v_proj), ("attn.out", layer.self_attn.out_proj),
                             ("attn_norm", layer.layer_norm1), ("mlp_norm", layer.layer_norm2),
                             ("fc1", layer.fc1), ("fc2", layer.fc2)]:
            m[f"blocks.{i}.{ours}.weight"] = theirs.weight
            m[f"blocks.{i}.{ours}.bias"] = theirs.bias
    return m


class ClipEncoderLayer(nn.Module):
    def __init__(self, d, act):
        super().__init__()
        eps = d["extra"].get("layer_norm_eps", 1e-5)
        self.self_attn = SeparateQkvAttention(d["hidden"], d["heads"])
        self.layer_norm1 = nn.LayerNorm(d["hidden"], eps=eps)
        self.fc1 = nn.Linear(d["hidden"], d["ffn_hidden"])
        self.fc2 = nn.Linear(d["ffn_hidden"], d["hidden"])
        self.layer_norm2 = nn.LayerNorm(d["hidden"], eps=eps)
        self.act = act

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.fc2(self.act(self.fc1(self.layer_norm2(x))))


class ClipVision(nn.Module):
    """CLIPVisionTransformer; the output is last_hidden_state (CLS row first)."""

    def __init__(self, d):
        super().__init__()
        c, eps = d["hidden"], d["extra"].get("layer_norm_eps", 1e-5)
        n = (d["image_size"] // d["patch_size"]) ** 2
        act = quick_gelu if d["extra"].get("quick_gelu", 1) else F.gelu
        self.class_embedding = nn.Parameter(torch.randn(c))
        self.patch_embedding = nn.Conv2d(d["channels"], c, d["patch_size"], stride=d["patch_size"], bias=False)
        self.position_embedding = nn.Embedding(n + 1, c)
        self.pre_layrnorm = nn.LayerNorm(c, eps=eps)
        self.layers = nn.ModuleList([ClipEncoderLayer(d, act) for _ in range(d["layers"])])
        self.post_layernorm = nn.LayerNorm(c, eps=eps)

    def param_map(self):
        m = {"class_embedding": self.class_embedding, "patch_embed.weight": self.patch_embedding.weight,
             "pos_embed": self.position_embedding.weight, "pre_norm.weight": self.pre_layrnorm.weight,
             "pre_norm.bias": self.pre_layrnorm.bias, "final_norm.weight": self.post_layernorm.weight,
             "final_norm.bias": self.post_layernorm.bias}
        m.update(clip_layer_params(self.layers))
        return m

    def run(self, inputs, delta):
        pixel_values = inputs["x"] + delta
        b = pixel_values.shape[0]
        patches = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_embedding.expand(b, 1, -1), patches], dim=1)
        x = x + self.position_embedding(torch.arange(x.shape[1]))
        x = self.pre_layrnorm(x)
        for layer in self.layers:
            x = layer(x)
        # HF's pooler_output = post_layernorm(x[:, 0]); the section hands on last_hidden_state.
        return {"output": x}


def gelu_tanh(x):
    """gelu_pytorch_tanh, written out: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class SiglipPoolingHead(nn.Module):
    """SiglipMultiheadAttentionPoolingHead: a probe attends over the rows
    (torch.nn.MultiheadAttention, batch first), then y + mlp(layernorm(y))."""

    def __init__(self, d, eps):
        super().__init__()
        c = d["hidden"]
        self.probe = nn.Parameter(torch.randn(1, 1, c))
        self.attention = nn.MultiheadAttention(c, d["heads"], batch_first=True)
        self.layernorm = nn.LayerNorm(c, eps=eps)
        self.fc1 = nn.Linear(c, d["ffn_hidden"])
        self.fc2 = nn.Linear(d["ffn_hidden"], c)

    def forward(self, x):
        y = self.attention(self.probe.repeat(x.shape[0], 1, 1), x, x, need_weights=False)[0]
        y = y + self.fc2(gelu_tanh(self.fc1(self.layernorm(y))))
        return y[:, 0]


class SiglipVision(nn.Module):
    """SiglipVisionTransformer: a biased "valid" patch conv (no class token),
    N positions, CLIP-shaped pre-LN layers with gelu_pytorch_tanh,
    post_layernorm. The section's output is last_hidden_state (after
    post_layernorm); "pooled" is HF's pooler_output (the head), when built."""

    def __init__(self, d):
        super().__init__()
        c, ex = d["hidden"], d["extra"]
        eps = ex.get("layer_norm_eps", 1e-6)
        d = dict(d, extra=dict(ex, layer_norm_eps=eps))
        n = (d["image_size"] // d["patch_size"]) ** 2
        self.patch_embedding = nn.Conv2d(d["channels"], c, d["patch_size"], stride=d["patch_size"], padding="valid")
        self.position_embedding = nn.Embedding(n, c)
        self.layers = nn.ModuleList([ClipEncoderLayer(d, gelu_tanh) for _ in range(d["layers"])])
        self.post_layernorm = nn.LayerNorm(c, eps=eps)
        self.head = SiglipPoolingHead(d, eps) if ex.get("attn_pool_head", 0) else None

    def param_map(self):
        m = {"patch_embed.weight": self.patch_embedding.weight, "patch_embed.bias": self.patch_embedding.bias,
             "pos_embed": self.position_embedding.weight, "final_norm.weight": self.post_layernorm.weight,
             "final_norm.bias": self.post_layernorm.bias}
        m.update(clip_layer_params(self.layers))
        if self.head is not None:
            h = self.head
            m.update({"head.probe": h.probe, "head.in_proj.weight": h.attention.in_proj_weight,
                      "head.in_proj.bias": h.attention.in_proj_bias, "head.out_proj.weight": h.attention.out_proj.weight,
                      "head.out_proj.bias": h.attention.out_proj.bias})
            for ours, theirs in [("head.norm", h.layernorm), ("head.mlp_fc1", h.fc1), ("head.mlp_fc2", h.fc2)]:
                m[ours + ".weight"], m[ours + ".bias"] = theirs.weight, theirs.bias
        return m

    def run(self, inputs, delta):
        x = self.patch_embedding(inputs["x"] + delta).flatten(2).transpose(1, 2)
        x = x + self.position_embedding(torch.arange(x.shape[1]))
        for layer in self.layers:
            x = layer(x)
        x = self.post_layernorm(x)
        out = {"output": x}
        if self.head is not None:
            out["pooled"] = self.head(x)
        return out


def vision_rotary(grid_thw, m, head_dim):
    """HF's rot_pos_emb: per patch in the processor's order, its (row, column)
    angles (N, head_dim / 2) from VisionRotaryEmbedding(head_dim / 2)."""
    dim = head_dim // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    pos_ids = []
    for t, h, w in grid_thw.tolist():
        hpos = torch.arange(h).unsqueeze(1).expand(-1, w).reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
        wpos = torch.arange(w).unsqueeze(0).expand(h, -1).reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
        pos_ids.append(torch.stack([hpos, wpos], dim=-1).repeat(t, 1))
    pos_ids = torch.cat(pos_ids, dim=0)
    full = torch.outer(torch.arange(int(grid_thw[:, 1:].max()), dtype=torch.float64), inv_freq)
    return full[pos_ids].flatten(1)


def segment_lengths(cu_seqlens):
    return (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()


class Qwen2VlVisionBlock(nn.Module):
    def __init__(self, d, act):
        super().__init__()
        c = d["hidden"]
        eps = d["extra"].get("layer_norm_eps", 1e-6)
        self.heads = d["heads"]
        self.norm1 = nn.LayerNorm(c, eps=eps)
        self.norm2 = nn.LayerNorm(c, eps=eps)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.fc1 = nn.Linear(c, d["ffn_hidden"])
        self.fc2 = nn.Linear(d["ffn_hidden"], c)
        self.act = act

    def attn(self, x, cos, sin, lengths):
        # x: (L, C) over every segment's patches; attention inside each segment only.
        seq = x.shape[0]
        q, k, v = self.qkv(x).reshape(seq, 3, self.heads, -1).permute(1, 0, 2, 3).unbind(0)  # (L, H, D)
        q = q * cos[:, None, :] + rotate_half(q) * sin[:, None, :]
        k = k * cos[:, None, :] + rotate_half(k) * sin[:, None, :]
        outs = []
        for qi, ki, vi in zip(q.split(lengths), k.split(lengths), v.split(lengths)):
            qi, ki, vi = (t.transpose(0, 1) for t in (qi, ki, vi))  # (H, l, D)
            probs = F.softmax(qi @ ki.transpose(1, 2) * qi.shape[-1] ** -0.5, dim=-1)
            outs.append((probs @ vi).transpose(0, 1).reshape(-1, x.shape[1]))
        return self.proj(torch.cat(outs, dim=0))

    def mlp(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def forward(self, x, cos, sin, lengths):
        x = x + self.attn(self.norm1(x), cos, sin, lengths)
        return x + self.mlp(self.norm2(x))

    def param_map(self, prefix):
        m = {}
        for ours, theirs in [("attn_norm", self.norm1), ("mlp_norm", self.norm2), ("attn.qkv", self.qkv),
                             ("attn.out", self.proj), ("fc1", self.fc1), ("fc2", self.fc2)]:
            m[f"{prefix}{ours}.weight"], m[f"{prefix}{ours}.bias"] = theirs.weight, theirs.bias
        return m


class Qwen2VlVision(nn.Module):
    """Qwen2VisionTransformerPretrainedModel.forward(pixel_values, grid_thw).
    Packed input: "x" is pixel_values (N, C*T*P*P) in the processor's order,
    "grid_thw" one (t, h, w) per item; the output is (N / m^2, out_dim).
    Fixed-size images "x" (B, C, S, S) are flattened as Qwen2VLImageProcessor
    does a still image (repeated over temporal_patch_size frames, patches
    merge window by merge window) with grids (1, S/P, S/P); the output is
    (B, (S/P)^2 / m^2, out_dim)."""

    def __init__(self, d):
        super().__init__()
        self.d = d
        c, ex = d["hidden"], d["extra"]
        self.t = int(ex.get("temporal_patch", 2))
        self.m = int(ex["spatial_merge"])
        p = d["patch_size"]
        self.proj = nn.Conv3d(d["channels"], c, kernel_size=[self.t, p, p], stride=[self.t, p, p], bias=False)
        self.blocks = nn.ModuleList([self.make_block(d) for _ in range(d["layers"])])
        g = c * self.m * self.m
        self.ln_q = self.make_norm(c, ex.get("layer_norm_eps", 1e-6))
        self.mlp0 = nn.Linear(g, g)
        self.mlp2 = nn.Linear(g, d["out_dim"])

    def make_block(self, d):
        return Qwen2VlVisionBlock(d, quick_gelu if d["extra"].get("quick_gelu", 1) else F.gelu)

    def make_norm(self, c, eps):
        return nn.LayerNorm(c, eps=eps)

    def param_map(self):
        m = {"patch_embed.weight": self.proj.weight}
        for ours, theirs in [("merger_norm", self.ln_q), ("merger_fc1", self.mlp0), ("merger_fc2", self.mlp2)]:
            m[ours + ".weight"] = theirs.weight
            if getattr(theirs, "bias", None) is not None:
                m[ours + ".bias"] = theirs.bias
        for i, blk in enumerate(self.blocks):
            m.update(blk.param_map(f"blocks.{i}."))
        return m

    def flatten_patches(self, images):
        b, ch, s, _ = images.shape
        p, m, t = self.d["patch_size"], self.m, self.t
        g = s // p
        frames = images[:, None].expand(b, t, ch, s, s)  # (B, T, C, S, S)
        x = frames.reshape(b, t, ch, g // m, m, p, g // m, m, p)
        x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # (B, gh/m, gw/m, m, m, C, T, P, P)
        return x.reshape(b * g * g, ch * t * p * p), g

    def merger(self, x):
        return self.mlp2(F.gelu(self.mlp0(self.ln_q(x).view(-1, self.d["hidden"] * self.m * self.m))))

    def tower(self, pixel_values, grid_thw):
        c, p = self.d["hidden"], self.d["patch_size"]
        x = self.proj(pixel_values.view(-1, self.d["channels"], self.t, p, p)).view(-1, c)
        rot = vision_rotary(grid_thw, self.m, c // self.d["heads"])
        emb = torch.cat([rot, rot], dim=-1)
        cu_seqlens = F.pad(torch.repeat_interleave(grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]).cumsum(0), (1, 0))
        for blk in self.blocks:
            x = blk(x, emb.cos(), emb.sin(), segment_lengths(cu_seqlens))
        return self.merger(x)

    def run(self, inputs, delta):
        x = inputs["x"] + delta
        if "grid_thw" in inputs:
            return {"output": self.tower(x, inputs["grid_thw"])}
        flat, g = self.flatten_patches(x)
        merged = self.tower(flat, torch.tensor([[1, g, g]] * x.shape[0]))
        return {"output": merged.view(x.shape[0], -1, merged.shape[-1])}


class Qwen2RMSNorm(nn.Module):
    """Qwen2RMSNorm: weight * x * rsqrt(mean(x^2) + eps) (fp32 in HF; the reference runs in fp64)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * x * torch.rsqrt(variance + self.eps)


class Qwen25VlVisionBlock(Qwen2VlVisionBlock):
    """Qwen2_5_VLVisionBlock: RMSNorm norm1 / norm2, the Qwen2-VL attention,
    Qwen2_5_VLMLP (gate_proj, up_proj, down_proj with biases):
    down(act(gate(x)) * up(x)), act = silu (hidden_act)."""

    def __init__(self, d):
        super().__init__(d, F.silu)
        c, f = d["hidden"], d["ffn_hidden"]
        eps = d["extra"].get("layer_norm_eps", 1e-6)
        self.norm1, self.norm2 = Qwen2RMSNorm(c, eps), Qwen2RMSNorm(c, eps)
        del self.fc1, self.fc2
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(c, f), nn.Linear(c, f), nn.Linear(f, c)

    def mlp(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))

    def param_map(self, prefix):
        m = {prefix + "attn_norm.weight": self.norm1.weight, prefix + "mlp_norm.weight": self.norm2.weight}
        for ours, theirs in [("attn.qkv", self.qkv), ("attn.out", self.proj), ("mlp.gate_proj", self.gate_proj),
                             ("mlp.up_proj", self.up_proj), ("mlp.down_proj", self.down_proj)]:
            m[f"{prefix}{ours}.weight"], m[f"{prefix}{ours}.bias"] = theirs.weight, theirs.bias
        return m


class Qwen25VlVision(Qwen2VlVision):
    """Qwen2_5_VisionTransformerPretrainedModel: the Qwen2-VL tower with
    Qwen2_5_VLVisionBlock, an RMSNorm ln_q, and window attention (HF's
    get_window_index): merge groups and rotary reordered window by window,
    blocks not in fullatt_block_indexes attending per window
    (cu_window_seqlens), the merged rows put back by argsort(window_index)."""

    def make_block(self, d):
        return Qwen25VlVisionBlock(d)

    def make_norm(self, c, eps):
        return Qwen2RMSNorm(c, eps)

    def get_window_index(self, grid_thw):
        window_index, cu_window_seqlens, window_index_id = [], [0], 0
        ws = int(self.d["extra"]["window_size"]) // self.m // self.d["patch_size"]
        for grid_t, grid_h, grid_w in grid_thw.tolist():
            llm_h, llm_w = grid_h // self.m, grid_w // self.m
            index = torch.arange(grid_t * llm_h * llm_w).reshape(grid_t, llm_h, llm_w)
            pad_h, pad_w = ws - llm_h % ws, ws - llm_w % ws
            nh, nw = (llm_h + pad_h) // ws, (llm_w + pad_w) // ws
            padded = F.pad(index, (0, pad_w, 0, pad_h), "constant", -100)
            padded = padded.reshape(grid_t, nh, ws, nw, ws).permute(0, 1, 3, 2, 4).reshape(grid_t, nh * nw, ws, ws)
            seqlens = (padded != -100).sum([2, 3]).reshape(-1)
            padded = padded.reshape(-1)
            window_index.append(padded[padded != -100] + window_index_id)
            cu = seqlens.cumsum(0) * self.m * self.m + cu_window_seqlens[-1]
            cu_window_seqlens.extend(cu.tolist())
            window_index_id += grid_t * llm_h * llm_w
        return torch.cat(window_index), torch.unique_consecutive(torch.tensor(cu_window_seqlens))

    def tower(self, pixel_values, grid_thw):
        c, p, unit = self.d["hidden"], self.d["patch_size"], self.m * self.m
        x = self.proj(pixel_values.view(-1, self.d["channels"], self.t, p, p)).view(-1, c)
        rot = vision_rotary(grid_thw, self.m, c // self.d["heads"])
        window_index, cu_window_seqlens = self.get_window_index(grid_thw)
        seq = x.shape[0]
        x = x.reshape(seq // unit, unit, -1)[window_index].reshape(seq, -1)
        rot = rot.reshape(seq // unit, unit, -1)[window_index].reshape(seq, -1)
        emb = torch.cat([rot, rot], dim=-1)
        cu_seqlens = F.pad(torch.repeat_interleave(grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0]).cumsum(0), (1, 0))
        full = {i for i in range(self.d["layers"]) if self.d["extra"].get(f"fullatt_block_indexes.{i}", 0)}
        for i, blk in enumerate(self.blocks):
            lengths = segment_lengths(cu_seqlens if i in full else cu_window_seqlens)
            x = blk(x, emb.cos(), emb.sin(), lengths)
        return self.merger(x)[torch.argsort(window_index)]


class BuiltinVit(nn.Module):
    """Maestro's own ViT: torch.nn.TransformerEncoderLayer blocks."""

    def __init__(self, d):
        super().__init__()
        n = (d["image_size"] // d["patch_size"]) ** 2
        self.conv = nn.Conv2d(d["channels"], d["hidden"], d["patch_size"], stride=d["patch_size"])
        self.pos = nn.Parameter(torch.zeros(1, n, d["hidden"]))
        self.layers = encoder_layers(d)
        self.norm = nn.LayerNorm(d["hidden"], eps=d["extra"].get("layer_norm_eps", 1e-5))

    def param_map(self):
        m = encoder_param_map(self.layers, self.norm)
        m.update({"patch_embed.weight": self.conv.weight, "patch_embed.bias": self.conv.bias, "pos_embed": self.pos})
        return m

    def run(self, inputs, delta):
        x = self.conv(inputs["x"] + delta).flatten(2).transpose(1, 2) + self.pos
        for layer in self.layers:
            x = layer(x)
        return {"output": self.norm(x)}


def Vit(d):
    layout = d["extra"].get("vit_layout")
    if layout is None:
        layout = 2 if d["extra"].get("pos_embed", 1) == 0 else 0
    return {0: BuiltinVit, 1: ClipVision, 2: Qwen2VlVision, 4: SiglipVision, 5: Qwen25VlVision}[int(layout)](d)
