#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tiny Hugging Face checkpoints for tests/hf/hf_weights_test.cc.

    python3 make_tiny_checkpoints.py OUT_DIR

For every architecture the runtime loads (llama, mistral, qwen2, qwen3, gemma3_text, mixtral,
qwen2_moe, qwen3_moe, qwen3_moe with dense layers, clip, siglip (with its pooling head) and
siglip_vision_model (without), qwen2_vl's vision tower and its language model (M-RoPE), qwen2_5_vl's
vision tower (window attention), whisper's encoder,
llava's projector) and for
bf16 and fp32, writes OUT_DIR/<arch>_<dtype>/ as a checkpoint directory --
config.json and model.safetensors (qwen2 fp32 as two shards with
model.safetensors.index.json) under Hugging Face's tensor names, random
weights -- plus OUT_DIR/<arch>_<dtype>/expect/ (tensor files as
reference_models.py writes them): "input" and "output", the model's output
computed here in float64 on exactly the stored weights (SigLIP with its head:
"pooled" too, HF's pooler_output).

The models are tests/runtime/reference_models.py's PyTorch modules; the HF
names come from this file's own tables (each written from transformers'
modeling_*.py module structure), not from Maestro's hf/name_map.cc, so a wrong
row in either shows. Files of multi-tower models carry the other towers'
tensors too (CLIP's text model, Qwen2-VL's LLM, Whisper's decoder), which the
loader must pass over. safetensors is written by hand: 8-byte little-endian
header size, the JSON header padded with spaces to 8 bytes, the data.
"""
import json
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime"))
import reference_models as ref  # noqa: E402  (exits 3 when torch is missing)

torch = ref.torch

# ---- safetensors -----------------------------------------------------------


def tensor_bytes(t, dtype):
    t = t.detach().contiguous()
    if dtype == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    if dtype == "I64":
        return t.to(torch.int64).numpy().tobytes()
    return t.to(torch.float32).numpy().tobytes()


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, torch tensor)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dtype, t in tensors:
        raw = tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def write_checkpoint(directory, config, tensors, shards=1):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
        return
    per = (len(tensors) + shards - 1) // shards
    weight_map = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = tensors[s * per:(s + 1) * per]
        write_safetensors(os.path.join(directory, name), part)
        weight_map.update({n: name for n, _, _ in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


# ---- reference module names -> Hugging Face names ----------------------------

DECODER = [
    (r"^embed_tokens\.", "model.embed_tokens."),
    (r"^blocks\.(\d+)\.attn_norm\.", r"model.layers.\1.input_layernorm."),
    (r"^blocks\.(\d+)\.attn\.([qkvo])_proj\.", r"model.layers.\1.self_attn.\2_proj."),
    (r"^blocks\.(\d+)\.mlp_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^blocks\.(\d+)\.mlp\.", r"model.layers.\1.mlp."),
    (r"^blocks\.(\d+)\.moe\.router\.", r"model.layers.\1.block_sparse_moe.gate."),
    (r"^blocks\.(\d+)\.moe\.experts\.(\d+)\.gate_proj\.", r"model.layers.\1.block_sparse_moe.experts.\2.w1."),
    (r"^blocks\.(\d+)\.moe\.experts\.(\d+)\.down_proj\.", r"model.layers.\1.block_sparse_moe.experts.\2.w2."),
    (r"^blocks\.(\d+)\.moe\.experts\.(\d+)\.up_proj\.", r"model.layers.\1.block_sparse_moe.experts.\2.w3."),
    (r"^final_norm\.", "model.norm."),
    (r"^lm_head\.", "lm_head."),
]
# Qwen3's q_norm / k_norm, dense and MoE.
QK_NORM = [(r"^blocks\.(\d+)\.attn\.([qk])_norm\.", r"model.layers.\1.self_attn.\2_norm.")]
# Qwen3 (modeling_qwen3.py): the dense decoder with them.
QWEN3 = QK_NORM + DECODER
# Qwen2-MoE / Qwen3-MoE (modeling_qwen2_moe.py, modeling_qwen3_moe.py): the
# MoE block is "mlp" with its router "gate".
QWEN_MOE = QK_NORM + [
    (r"^blocks\.(\d+)\.moe\.router\.", r"model.layers.\1.mlp.gate."),
    (r"^blocks\.(\d+)\.moe\.experts\.", r"model.layers.\1.mlp.experts."),
    (r"^blocks\.(\d+)\.moe\.shared_expert_gate\.", r"model.layers.\1.mlp.shared_expert_gate."),
    (r"^blocks\.(\d+)\.moe\.shared_expert\.", r"model.layers.\1.mlp.shared_expert."),
] + DECODER
# Gemma 3 text (modeling_gemma3.py Gemma3DecoderLayer): four norms per layer;
# post_attention_layernorm normalizes the attention's output there.
GEMMA3 = [
    (r"^embed_tokens\.", "model.embed_tokens."),
    (r"^blocks\.(\d+)\.attn_norm\.", r"model.layers.\1.input_layernorm."),
    (r"^blocks\.(\d+)\.attn\.([qkvo])_proj\.", r"model.layers.\1.self_attn.\2_proj."),
    (r"^blocks\.(\d+)\.attn\.([qk])_norm\.", r"model.layers.\1.self_attn.\2_norm."),
    (r"^blocks\.(\d+)\.post_attn_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^blocks\.(\d+)\.mlp_norm\.", r"model.layers.\1.pre_feedforward_layernorm."),
    (r"^blocks\.(\d+)\.post_mlp_norm\.", r"model.layers.\1.post_feedforward_layernorm."),
    (r"^blocks\.(\d+)\.mlp\.", r"model.layers.\1.mlp."),
    (r"^final_norm\.", "model.norm."),
]
CLIP = [
    (r"^class_embedding$", "vision_model.embeddings.class_embedding"),
    (r"^(patch|position)_embedding\.", r"vision_model.embeddings.\1_embedding."),
    (r"^(pre_layrnorm|post_layernorm)\.", r"vision_model.\1."),
    (r"^layers\.(\d+)\.(fc\d)\.", r"vision_model.encoder.layers.\1.mlp.\2."),
    (r"^layers\.", "vision_model.encoder.layers."),
]
# SiglipVisionModel (modeling_siglip.py): CLIP's layer names, a biased patch
# conv, no class token or pre-norm; the head's MLP is head.mlp.fc1 / fc2.
SIGLIP = [
    (r"^head\.(fc\d)\.", r"vision_model.head.mlp.\1."),
    (r"^head\.", "vision_model.head."),
    (r"^(patch|position)_embedding\.", r"vision_model.embeddings.\1_embedding."),
    (r"^post_layernorm\.", "vision_model.post_layernorm."),
    (r"^layers\.(\d+)\.(fc\d)\.", r"vision_model.encoder.layers.\1.mlp.\2."),
    (r"^layers\.", "vision_model.encoder.layers."),
]
QWEN2_VL = [
    (r"^proj\.", "visual.patch_embed.proj."),
    (r"^blocks\.(\d+)\.(qkv|proj)\.", r"visual.blocks.\1.attn.\2."),
    (r"^blocks\.(\d+)\.(fc\d)\.", r"visual.blocks.\1.mlp.\2."),
    (r"^blocks\.", "visual.blocks."),
    (r"^ln_q\.", "visual.merger.ln_q."),
    (r"^mlp0\.", "visual.merger.mlp.0."),
    (r"^mlp2\.", "visual.merger.mlp.2."),
]
# Qwen2.5-VL's tower (modeling_qwen2_5_vl.py): Qwen2_5_VLMLP's gate/up/down
# under mlp., RMSNorm norm1 / norm2 / merger.ln_q.
QWEN25_VL = [(r"^blocks\.(\d+)\.(gate_proj|up_proj|down_proj)\.", r"visual.blocks.\1.mlp.\2.")] + QWEN2_VL
WHISPER = [(r"^", "model.encoder.")]
PROJECTOR = [(r"^net\.0\.", "multi_modal_projector.linear_1."), (r"^net\.2\.", "multi_modal_projector.linear_2.")]


def hf_name(rules, name):
    for pattern, repl in rules:
        if re.search(pattern, name):
            return re.sub(pattern, repl, name, count=1)
    sys.exit(f"no Hugging Face name for reference parameter {name}")


# ---- the cases ---------------------------------------------------------------


def desc(kind, **kw):
    d = {"kind": kind, "hidden": 0, "layers": 0, "heads": 0, "kv_heads": 0, "head_dim": 0, "ffn_hidden": 0,
         "vocab": 0, "tie_embeddings": False, "experts": 0, "experts_per_token": 0, "moe_ffn_hidden": 0,
         "image_size": 0, "patch_size": 0, "channels": 0, "mel_bins": 0, "audio_frames": 0, "in_dim": 0,
         "out_dim": 0, "extra": {}}
    d.update(kw)
    return d


def llm_config(model_type, **kw):
    c = {"model_type": model_type, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 50, "rms_norm_eps": 1e-6,
         "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"}
    c.update(kw)
    return c


def llm_desc(c):
    if c["model_type"] in ("qwen2_moe", "qwen3_moe"):
        qwen2 = c["model_type"] == "qwen2_moe"
        # Dense layers (decoder_sparse_step, mlp_only_layers) are MLPs of intermediate_size.
        extra = {"rope_theta": c["rope_theta"], "rms_norm_eps": c["rms_norm_eps"],
                 "qkv_bias": 1 if qwen2 else 0, "qk_norm": 0 if qwen2 else 1,
                 "norm_topk_prob": 1 if c["norm_topk_prob"] else 0,
                 "shared_expert_ffn_hidden": c.get("shared_expert_intermediate_size", 0),
                 "decoder_sparse_step": c.get("decoder_sparse_step", 1)}
        extra.update({"mlp_only_layers.%d" % i: 1 for i in c.get("mlp_only_layers", [])})
        return desc("decoder", hidden=c["hidden_size"], layers=c["num_hidden_layers"],
                    heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"], head_dim=c.get("head_dim", 0),
                    ffn_hidden=c["intermediate_size"], vocab=c["vocab_size"],
                    tie_embeddings=c["tie_word_embeddings"], experts=c["num_experts"],
                    experts_per_token=c["num_experts_per_tok"], moe_ffn_hidden=c["moe_intermediate_size"],
                    extra=extra)
    return desc("decoder", hidden=c["hidden_size"], layers=c["num_hidden_layers"], heads=c["num_attention_heads"],
                kv_heads=c["num_key_value_heads"], head_dim=c.get("head_dim", 0),
                ffn_hidden=0 if c.get("num_local_experts") else c["intermediate_size"], vocab=c["vocab_size"],
                tie_embeddings=c["tie_word_embeddings"], experts=c.get("num_local_experts", 0),
                experts_per_token=c.get("num_experts_per_tok", 0),
                moe_ffn_hidden=c["intermediate_size"] if c.get("num_local_experts") else 0,
                extra={"rope_theta": c["rope_theta"], "rms_norm_eps": c["rms_norm_eps"],
                       "qkv_bias": 1 if c["model_type"] == "qwen2" else 0,
                       "qk_norm": 1 if c["model_type"] == "qwen3" else 0})


def cases():
    out = []
    for name, c in [("llama", llm_config("llama", head_dim=12)),
                     ("mistral", llm_config("mistral", sliding_window=16, rope_theta=500000.0)),
                     ("qwen2", llm_config("qwen2", tie_word_embeddings=True, rope_theta=1e6,
                                          use_sliding_window=False, sliding_window=32)),
                     ("mixtral", llm_config("mixtral", num_local_experts=4, num_experts_per_tok=2,
                                            intermediate_size=24, rms_norm_eps=1e-5))]:
        out.append({"name": name, "config": c, "desc": llm_desc(c), "rules": DECODER,
                    "input": ("ids", torch.randint(0, c["vocab_size"], (2, 6)))})
    qwen3 = llm_config("qwen3", head_dim=12, rope_theta=1e6, attention_bias=False, use_sliding_window=False)
    out.append({"name": "qwen3", "config": qwen3, "desc": llm_desc(qwen3), "rules": QWEN3,
                "input": ("ids", torch.randint(0, qwen3["vocab_size"], (2, 6)))})
    # Gemma 3 text: 10 tokens through layers 0 and 2's window of 4 (layer 1
    # global, by layer_types), head_dim 16, query_pre_attn_scalar 24, linear
    # rope scaling on the global layer only.
    gemma = {"model_type": "gemma3_text", "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48, "vocab_size": 50,
             "rms_norm_eps": 1e-6, "rope_theta": 1e6, "rope_local_base_freq": 10000.0,
             "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "sliding_window": 4,
             "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
             "query_pre_attn_scalar": 24, "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False,
             "attn_logit_softcapping": None, "final_logit_softcapping": None, "tie_word_embeddings": True}
    gemma_desc = desc("decoder", hidden=32, layers=3, heads=4, kv_heads=2, head_dim=16, ffn_hidden=48, vocab=50,
                      tie_embeddings=True,
                      extra={"gemma3": 1, "qk_norm": 1, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
                             "rope_local_base_freq": 10000.0, "rope_scaling_type": 1, "rope_scaling_factor": 2.0,
                             "sliding_window": 4, "full_attention_layers.1": 1, "query_pre_attn_scalar": 24})
    out.append({"name": "gemma3_text", "config": gemma, "desc": gemma_desc, "rules": GEMMA3,
                "input": ("ids", torch.randint(0, 50, (2, 10)))})
    for name, c in [("qwen2_moe", llm_config("qwen2_moe", num_experts=4, num_experts_per_tok=2,
                                              moe_intermediate_size=24, shared_expert_intermediate_size=40,
                                              norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
                                              rope_theta=1e6)),
                    ("qwen3_moe", llm_config("qwen3_moe", num_experts=4, num_experts_per_tok=2,
                                              moe_intermediate_size=24, norm_topk_prob=True, head_dim=12,
                                              mlp_only_layers=[], rope_theta=1e6)),
                    # Dense layers between the MoE ones: layers 1 and 3 sparse by the step, 3 dense by
                    # mlp_only_layers, so layer 1 alone is a MoE layer.
                    ("qwen3_moe_mixed", llm_config("qwen3_moe", num_hidden_layers=4, num_experts=4,
                                                    num_experts_per_tok=2, moe_intermediate_size=24,
                                                    norm_topk_prob=True, head_dim=12, decoder_sparse_step=2,
                                                    mlp_only_layers=[3], rope_theta=1e6))]:
        out.append({"name": name, "config": c, "desc": llm_desc(c), "rules": QWEN_MOE,
                    "input": ("ids", torch.randint(0, c["vocab_size"], (2, 6)))})

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "image_size": 8, "patch_size": 4, "num_channels": 3, "hidden_act": "quick_gelu",
              "layer_norm_eps": 1e-5, "model_type": "clip_vision_model"}
    out.append({"name": "clip", "config": {"model_type": "clip", "vision_config": vision,
                                           "text_config": {"hidden_size": 16}},
                "desc": desc("vit", hidden=32, layers=2, heads=4, ffn_hidden=64, image_size=8, patch_size=4,
                             channels=3, extra={"vit_layout": 1, "quick_gelu": 1, "layer_norm_eps": 1e-5}),
                "rules": CLIP, "input": ("x", torch.randn(2, 3, 8, 8)),
                "others": [("text_model.embeddings.token_embedding.weight", (10, 16)),
                           ("text_model.final_layer_norm.weight", (16,)), ("visual_projection.weight", (8, 32)),
                           ("logit_scale", ())],
                "buffers": [("vision_model.embeddings.position_ids", torch.arange(5)[None])]})

    # SigLIP as a full siglip checkpoint (the text tower passed over): 10 px
    # images in 4 px patches (the "valid" conv drops 2 px), its pooling head;
    # and the vision config alone without the head.
    siglip = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "image_size": 10, "patch_size": 4, "num_channels": 3, "hidden_act": "gelu_pytorch_tanh",
              "layer_norm_eps": 1e-6, "model_type": "siglip_vision_model"}
    out.append({"name": "siglip", "config": {"model_type": "siglip", "vision_config": siglip,
                                             "text_config": {"hidden_size": 16, "model_type": "siglip_text_model"}},
                "desc": desc("vit", hidden=32, layers=2, heads=4, ffn_hidden=64, image_size=10, patch_size=4,
                             channels=3, extra={"vit_layout": 4, "attn_pool_head": 1, "layer_norm_eps": 1e-6}),
                "rules": SIGLIP, "input": ("x", torch.randn(2, 3, 10, 10)),
                "others": [("text_model.embeddings.token_embedding.weight", (10, 16)),
                           ("text_model.head.weight", (16, 16)), ("logit_scale", (1,)), ("logit_bias", (1,))]})
    bare = dict(siglip, image_size=8, vision_use_head=False, layer_norm_eps=1e-5)
    out.append({"name": "siglip_vision", "config": bare,
                "desc": desc("vit", hidden=32, layers=2, heads=4, ffn_hidden=64, image_size=8, patch_size=4,
                             channels=3, extra={"vit_layout": 4, "attn_pool_head": 0, "layer_norm_eps": 1e-5}),
                "rules": SIGLIP, "input": ("x", torch.randn(2, 3, 8, 8))})

    vl = {"depth": 2, "embed_dim": 32, "mlp_ratio": 4, "num_heads": 4, "in_chans": 3, "hidden_size": 24,
          "patch_size": 4, "spatial_merge_size": 2, "temporal_patch_size": 2, "image_size": 16}
    out.append({"name": "qwen2_vl", "config": dict(llm_config("qwen2_vl", hidden_size=24), vision_config=vl),
                "desc": desc("vit", hidden=32, layers=2, heads=4, ffn_hidden=128, image_size=16, patch_size=4,
                             channels=3, out_dim=24,
                             extra={"vit_layout": 2, "temporal_patch": 2, "spatial_merge": 2, "quick_gelu": 1,
                                    "layer_norm_eps": 1e-6}),
                "rules": QWEN2_VL, "input": ("x", torch.randn(2, 3, 16, 16)),
                "others": [("model.embed_tokens.weight", (50, 24)), ("model.layers.0.self_attn.q_proj.bias", (24,)),
                           ("lm_head.weight", (50, 24))]})

    # Qwen2-VL's language model (part = "text"): Qwen2's tensors and an M-RoPE
    # split of its 4 frequencies; the file carries the vision tower too.
    text = llm_config("qwen2_vl", rope_theta=1e6, rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]})
    text_desc = llm_desc(dict(text, model_type="qwen2"))
    text_desc["extra"].update({"mrope_section_t": 1, "mrope_section_h": 1, "mrope_section_w": 2})
    out.append({"name": "qwen2_vl_text", "config": dict(text, vision_config=dict(vl, hidden_size=32)),
                "desc": text_desc, "rules": DECODER, "input": ("ids", torch.randint(0, text["vocab_size"], (2, 6))),
                "others": [("visual.patch_embed.proj.weight", (32, 3, 2, 4, 4)), ("visual.merger.ln_q.weight", (32,))]})

    # Qwen2.5-VL's tower: 24 px images are 3 x 3 merged units, cut into windows
    # of 2 x 2 (16 px): padded windows; block 1 attends over the whole image.
    vl25 = {"depth": 3, "hidden_size": 32, "intermediate_size": 64, "num_heads": 4, "in_chans": 3,
            "out_hidden_size": 24, "patch_size": 4, "spatial_merge_size": 2, "temporal_patch_size": 2,
            "window_size": 16, "fullatt_block_indexes": [1], "hidden_act": "silu", "image_size": 24}
    out.append({"name": "qwen2_5_vl", "config": dict(llm_config("qwen2_5_vl", hidden_size=24), vision_config=vl25),
                "desc": desc("vit", hidden=32, layers=3, heads=4, ffn_hidden=64, image_size=24, patch_size=4,
                             channels=3, out_dim=24,
                             extra={"vit_layout": 5, "temporal_patch": 2, "spatial_merge": 2, "window_size": 16,
                                    "fullatt_block_indexes.1": 1}),
                "rules": QWEN25_VL, "input": ("x", torch.randn(2, 3, 24, 24)),
                "others": [("model.embed_tokens.weight", (50, 24)), ("lm_head.weight", (50, 24))]})

    out.append({"name": "whisper", "config": {"model_type": "whisper", "d_model": 32, "encoder_layers": 2,
                                              "encoder_attention_heads": 4, "encoder_ffn_dim": 64,
                                              "num_mel_bins": 10, "max_source_positions": 6,
                                              "decoder_layers": 1, "activation_function": "gelu"},
                "desc": desc("audio_encoder", hidden=32, layers=2, heads=4, ffn_hidden=64, mel_bins=10,
                             audio_frames=12, extra={"max_source_positions": 6}),
                "rules": WHISPER, "input": ("x", torch.randn(2, 10, 12)),
                "others": [("model.decoder.embed_tokens.weight", (40, 32)),
                           ("model.decoder.layers.0.fc1.weight", (64, 32))]})

    out.append({"name": "llava_projector", "config": {"model_type": "llava", "projector_hidden_act": "gelu"},
                "desc": desc("projector", in_dim=24, out_dim=32), "rules": PROJECTOR,
                "input": ("x", torch.randn(2, 5, 24)),
                "others": [("language_model.model.norm.weight", (32,))]})
    return out


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: make_tiny_checkpoints.py OUT_DIR")
    torch.manual_seed(20240615)
    torch.set_num_threads(1)
    for case in cases():
        model = ref.MODELS[case["desc"]["kind"]](case["desc"]).double()
        params = dict(model.named_parameters())
        # Random weights that exercise every entry: norms around 1, the rest around 0.
        values = {}
        for name, p in params.items():
            base = 1.0 if re.search(r"(norm\d?|layrnorm|ln_q)\.weight$", name) else 0.0
            values[name] = base + 0.2 * torch.randn(p.shape, dtype=torch.float64)
        for dtype in ("BF16", "F32"):
            stored = {n: (v.to(torch.bfloat16) if dtype == "BF16" else v.float()) for n, v in values.items()}
            tensors = [(hf_name(case["rules"], n), dtype, t) for n, t in stored.items()]
            for other, shape in case.get("others", []):
                tensors.append((other, dtype, torch.randn(shape)))
            for buffer, t in case.get("buffers", []):
                tensors.append((buffer, "I64", t))
            directory = os.path.join(argv[1], f"{case['name']}_{dtype.lower()}")
            shards = 2 if (case["name"], dtype) == ("qwen2", "F32") else 1
            write_checkpoint(directory, case["config"], tensors, shards)

            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(stored[n].double())
            key, value = case["input"]
            inputs = {key: value if key == "ids" else value.double()}
            shape = list(value.shape) + ([case["desc"]["hidden"]] if key == "ids" else [])
            with torch.no_grad():
                outputs = model.run(inputs, torch.zeros(shape, dtype=torch.float64))
            expect = {"input": value, "output": outputs["output"]}
            if "pooled" in outputs:
                expect["pooled"] = outputs["pooled"]
            ref.write_tensors(os.path.join(directory, "expect"), expect)


if __name__ == "__main__":
    main(sys.argv)
