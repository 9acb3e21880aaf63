#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference for tests/runtime/models_test.cc.

    python3 reference_models.py IN_DIR OUT_DIR

IN_DIR holds case.json ({"desc": ModelDesc fields + "extra"}) and tensors
(index.json + data.bin, see models_test.cc): "param/<name>" for every C++
parameter, the input ("ids" int64 (B,T) for the decoder, "x" float
otherwise) and "probe" (d loss / d output). This script builds the same model
in float64
independently of the C++ code -- the decoder as HF transformers writes
Llama / Mixtral, the encoders from torch.nn.TransformerEncoderLayer(
norm_first=True, batch_first=True) and nn.Conv1d/2d -- loads the weights by
name (every C++ parameter must land on exactly one PyTorch parameter and vice
versa), runs loss = sum(output * probe) forward and backward, and writes to
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


def rotary_cos_sin(seq_len, dim, base):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    t = torch.arange(seq_len, dtype=inv_freq.dtype)
    freqs = torch.einsum("i,j->ij", t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x, cos, sin):
        bsz, q_len, _ = x.size()
        q = self.q_proj(x).view(bsz, q_len, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.kv_heads, self.head_dim).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        causal_mask = torch.full((q_len, q_len), float("-inf")).triu(1)
        attn_weights = attn_weights + causal_mask
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


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, hidden, num_experts, top_k, intermediate):
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.router = nn.Linear(hidden, num_experts, bias=False)  # HF: "gate"
        self.experts = nn.ModuleList([LlamaMLP(hidden, intermediate) for _ in range(num_experts)])

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.router(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.promote_types(router_logits.dtype, torch.float))
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
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
        return final.reshape(batch_size, sequence_length, hidden_dim)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        heads = d["heads"]
        kv_heads = d["kv_heads"] or heads
        head_dim = d["head_dim"] or d["hidden"] // heads
        eps = d["extra"].get("rms_norm_eps", 1e-5)
        self.attn_norm = LlamaRMSNorm(d["hidden"], eps)
        self.attn = LlamaAttention(d["hidden"], heads, kv_heads, head_dim)
        self.mlp_norm = LlamaRMSNorm(d["hidden"], eps)
        if d["experts"]:
            self.moe = MixtralSparseMoeBlock(d["hidden"], d["experts"], d["experts_per_token"],
                                             d["moe_ffn_hidden"] or d["ffn_hidden"])
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
        self.blocks = nn.ModuleList([LlamaDecoderLayer(d) for _ in range(d["layers"])])
        self.final_norm = LlamaRMSNorm(d["hidden"], d["extra"].get("rms_norm_eps", 1e-5))
        if not d["tie_embeddings"]:
            self.lm_head = nn.Linear(d["hidden"], d["vocab"], bias=False)

    def param_map(self):
        return dict(self.named_parameters())

    def run(self, inputs, delta):
        embeds = self.embed_tokens(inputs["ids"]) + delta
        d = self.d
        cos, sin = rotary_cos_sin(embeds.shape[1], d["head_dim"] or d["hidden"] // d["heads"],
                                  d["extra"].get("rope_theta", 10000.0))
        x = embeds
        for block in self.blocks:
            x = block(x, cos, sin)
        hidden = self.final_norm(x)
        head = self.embed_tokens.weight if d["tie_embeddings"] else self.lm_head.weight
        return {"output": F.linear(hidden, head), "hidden": hidden}


# ---- encoders: torch.nn building blocks ----------------------------------------


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


class Vit(nn.Module):
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


def whisper_sinusoids(length, channels, max_timescale=10000):
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class AudioEncoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.conv1 = nn.Conv1d(d["mel_bins"], d["hidden"], kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d["hidden"], d["hidden"], kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", whisper_sinusoids((d["audio_frames"] + 1) // 2, d["hidden"]))
        self.layers = encoder_layers(d)
        self.ln_post = nn.LayerNorm(d["hidden"], eps=d["extra"].get("layer_norm_eps", 1e-5))

    def param_map(self):
        m = encoder_param_map(self.layers, self.ln_post)
        for name in ("conv1", "conv2"):
            m[name + ".weight"] = getattr(self, name).weight
            m[name + ".bias"] = getattr(self, name).bias
        return m

    def run(self, inputs, delta):
        x = F.gelu(self.conv1(inputs["x"] + delta))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = x + self.positional_embedding[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return {"output": self.ln_post(x)}


class Projector(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d["in_dim"], d["out_dim"]), nn.GELU(), nn.Linear(d["out_dim"], d["out_dim"]))

    def param_map(self):
        return {"fc1.weight": self.net[0].weight, "fc1.bias": self.net[0].bias,
                "fc2.weight": self.net[2].weight, "fc2.bias": self.net[2].bias}

    def run(self, inputs, delta):
        return {"output": self.net(inputs["x"] + delta)}


MODELS = {"decoder": LlamaForCausalLM, "vit": Vit, "audio_encoder": AudioEncoder, "projector": Projector}


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
    if "ids" in inputs:
        delta_shape = list(inputs["ids"].shape) + [desc["hidden"]]
    else:
        delta_shape = list(inputs["x"].shape)
    delta = torch.zeros(delta_shape, dtype=torch.float64, requires_grad=True)
    outputs = model.run(inputs, delta)
    (outputs["output"] * tensors["probe"].double()).sum().backward()

    result = dict(outputs)
    result["input_grad"] = delta.grad
    for name, p in pmap.items():
        result["grad/" + name] = p.grad if p.grad is not None else torch.zeros_like(p)
    write_tensors(out_dir, result)


if __name__ == "__main__":
    main(sys.argv)
