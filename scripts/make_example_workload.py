#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a tiny, complete example workload: Hugging Face models, a tokenized
corpus, images and audio clips with JSONL manifests, and the three specs that
train on them.

    scripts/make_example_workload.py OUT [--seed N] [--teacher-steps N] [--force]
    maestro run OUT/kd.toml -o out/kd        # distil the teacher into the student
    maestro run OUT/vlm.toml -o out/vlm      # a CLIP tower + a Qwen2 LLM on images and captions
    maestro run OUT/omni.toml -o out/omni    # + a Whisper-style audio encoder on audio clips

What it writes into OUT (every file deterministic in --seed):

  teacher/   a Qwen2 decoder (model_type "qwen2": GQA, q/k/v biases, tied
             embeddings) in Hugging Face layout: config.json + model.safetensors,
             bf16; trained here for --teacher-steps steps on the corpus, so the
             distillation has something to learn from.
  student/   a smaller Qwen2 of the same vocabulary, seeded weights, fp32, in two
             shards model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json.
  vit/       a CLIP vision tower (model_type "clip_vision_model", tensors under
             "vision_model."), bf16, seeded weights; preprocessor_config.json.
  llm/       the VLM's Qwen2 decoder, bf16, trained here briefly on the corpus.
  corpus/    train_text_document.{bin,idx} and heldout_text_document.{bin,idx}:
             Megatron-LM indexed datasets (MMIDIDX version 1, uint16 tokens, one
             sequence per document, no end-of-document token: the specs set
             eos_id). The text is a toy language (counting runs of "words")
             a model learns quickly.
  images/    PNG and JPEG pictures of coloured shapes (PIL).
  audio/     clips of a tone at one of 8 pitches with an overtone and a fade,
             0.5 to 1 s, as 16 kHz 16-bit WAV, 44.1 kHz float WAV and 8 kHz
             FLAC (python3-soundfile): the runtime resamples them to 16 kHz.
  manifest.jsonl  pretokenized VLM samples: input_ids with the image
             placeholders expanded (tokens_per_image = what the CLIP tower emits
             per image: its patches + the class token), labels (-100 on the
             prompt and the placeholders), 0, 1 or 2 images, image_positions.
  omni_manifest.jsonl  omni samples: text; an image; a clip; an image and a
             clip (captions name the colour, the shape and the pitch), with
             the audio placeholders expanded (tokens_per_audio = what the
             audio encoder emits per clip: ceil(audio_frames / 2)).
  kd.toml, vlm.toml, omni.toml  copies of specs/examples/hf_kd.toml, hf_vlm.toml
             and omni.toml; their paths are relative to OUT.
  tokens.json  what each token id means.

Needs python3 with torch (Debian python3-torch), PIL (python3-pil) and
soundfile (python3-soundfile). Exits 3 when one is missing (the tests then skip).
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import sys

NO_DEPENDENCY_EXIT = 3  # tests/fixtures/python3.h: kPythonNoTorchExit
DEBIAN_PYTHON = "/usr/bin/python3"  # where Debian's python3-torch and python3-pil are importable


def _rerun_with_debian_python(missing):
    """The first python3 on PATH (a pyenv, a venv) may lack Debian's
    packages: run this script again with the system interpreter, once."""
    if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.path.exists(DEBIAN_PYTHON) \
            and not os.environ.get("MAESTRO_EXAMPLE_REEXEC"):
        print(f"{sys.executable}: no {missing}; running {DEBIAN_PYTHON} instead", file=sys.stderr)
        os.environ["MAESTRO_EXAMPLE_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])


try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    _rerun_with_debian_python("torch")
    print(f"{sys.executable}: cannot import torch ({e}); install Debian's python3-torch", file=sys.stderr)
    sys.exit(NO_DEPENDENCY_EXIT)
try:
    from PIL import Image, ImageDraw
except ImportError as e:
    _rerun_with_debian_python("PIL")
    print(f"{sys.executable}: cannot import PIL ({e}); install Debian's python3-pil", file=sys.stderr)
    sys.exit(NO_DEPENDENCY_EXIT)

try:
    import soundfile
except ImportError as e:
    _rerun_with_debian_python("soundfile")
    print(f"{sys.executable}: cannot import soundfile ({e}); install Debian's python3-soundfile", file=sys.stderr)
    sys.exit(NO_DEPENDENCY_EXIT)

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "specs", "examples")

# ---- the token vocabulary ----------------------------------------------------

VOCAB = 320
PAD, EOS, PERIOD, IMAGE, DESCRIBE, AND, AUDIO = 0, 1, 3, 4, 5, 6, 7
COLOURS = ["red", "green", "blue", "yellow", "magenta", "cyan", "orange", "black"]
COLOUR_RGB = [(220, 30, 30), (30, 170, 40), (30, 60, 220), (230, 210, 20), (210, 40, 200), (40, 200, 210),
              (240, 130, 20), (10, 10, 10)]
SHAPES = ["square", "disc", "bar", "column"]
COLOUR_TOKEN0 = 8  # 8..15
SHAPE_TOKEN0 = 16  # 16..19
PITCHES_HZ = [220.0, 330.0, 440.0, 660.0, 880.0, 1320.0, 1760.0, 2640.0]
PITCH_TOKEN0 = 20  # 20..27
AUDIO_FRAMES = 100  # the audio encoder's log-mel frames: 1 s at hop 160 (the spec's audio_frames)
WORD0, WORDS = 32, VOCAB - 32  # the text's "words": ids 32..319

# ---- models: Hugging Face module structure, so state_dict() names are HF's ----


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Qwen2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c["hidden_size"] // self.heads
        h = c["hidden_size"]
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        scores = scores + torch.full((t, t), float("-inf")).triu(1)
        out = F.softmax(scores, dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Qwen2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen2Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Qwen2Attention(c)
        self.mlp = Qwen2MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Qwen2Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen2ForCausalLM(nn.Module):
    """transformers' Qwen2ForCausalLM with tie_word_embeddings (no lm_head tensor)."""

    def __init__(self, c):
        super().__init__()
        assert c["tie_word_embeddings"]
        self.c = c
        self.model = Qwen2Body(c)
        for name, p in self.named_parameters():  # Qwen2PreTrainedModel._init_weights
            with torch.no_grad():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.normal_(0.0, c["initializer_range"])

    def forward(self, ids):
        t = ids.shape[1]
        head_dim = self.c["hidden_size"] // self.c["num_attention_heads"]
        inv_freq = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(t).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return F.linear(self.model.norm(x), self.model.embed_tokens.weight)


def qwen2_config(hidden, layers, heads, kv_heads, intermediate, dtype):
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": VOCAB,
        "max_position_embeddings": 128,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": 128,
        "max_window_layers": layers,
        "bos_token_id": EOS,
        "eos_token_id": EOS,
        "torch_dtype": dtype,
        "use_cache": True,
    }


def clip_vision_tensors(c, generator):
    """CLIPVisionModel's tensors under HF names, seeded like CLIPPreTrainedModel._init_weights."""
    h, i, p = c["hidden_size"], c["intermediate_size"], c["patch_size"]
    n = (c["image_size"] // p) ** 2 + 1

    def normal(shape, std):
        return torch.randn(shape, generator=generator) * std

    t = {
        "vision_model.embeddings.class_embedding": normal((h,), h ** -0.5),
        "vision_model.embeddings.patch_embedding.weight": normal((h, c["num_channels"], p, p), 0.02),
        "vision_model.embeddings.position_embedding.weight": normal((n, h), 0.02),
        "vision_model.pre_layrnorm.weight": torch.ones(h),
        "vision_model.pre_layrnorm.bias": torch.zeros(h),
    }
    for layer in range(c["num_hidden_layers"]):
        pre = f"vision_model.encoder.layers.{layer}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            t[pre + f"self_attn.{proj}.weight"] = normal((h, h), (2 * c["num_hidden_layers"]) ** -0.5 * h ** -0.5)
            t[pre + f"self_attn.{proj}.bias"] = torch.zeros(h)
        t[pre + "layer_norm1.weight"], t[pre + "layer_norm1.bias"] = torch.ones(h), torch.zeros(h)
        t[pre + "mlp.fc1.weight"], t[pre + "mlp.fc1.bias"] = normal((i, h), (2 * h) ** -0.5), torch.zeros(i)
        t[pre + "mlp.fc2.weight"], t[pre + "mlp.fc2.bias"] = normal((h, i), h ** -0.5), torch.zeros(h)
        t[pre + "layer_norm2.weight"], t[pre + "layer_norm2.bias"] = torch.ones(h), torch.zeros(h)
    t["vision_model.post_layernorm.weight"], t["vision_model.post_layernorm.bias"] = torch.ones(h), torch.zeros(h)
    return t


# ---- Hugging Face checkpoint files ---------------------------------------------

ST_DTYPE = {torch.bfloat16: "BF16", torch.float32: "F32"}
TORCH_DTYPE = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def write_safetensors(path, tensors):
    """The safetensors format: u64 little-endian header size, the JSON header
    (padded with spaces to 8 bytes), then the tensors' bytes back to back."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    return offset


def write_hf_model(directory, config, tensors, shards=1, extra_files=None):
    """config.json + model.safetensors, or `shards` files with the index."""
    os.makedirs(directory, exist_ok=True)
    dtype = TORCH_DTYPE[config.get("torch_dtype", config.get("vision_config", {}).get("torch_dtype", "float32"))]
    tensors = {name: t.to(dtype) for name, t in tensors.items()}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    for name, content in (extra_files or {}).items():
        with open(os.path.join(directory, name), "w") as f:
            json.dump(content, f, indent=2)
            f.write("\n")
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
        return
    names = list(tensors)
    per = (len(names) + shards - 1) // shards
    weight_map, total = {}, 0
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
        total += write_safetensors(os.path.join(directory, file), part)
        weight_map.update({n: file for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


# ---- the corpus: Megatron-LM indexed dataset ------------------------------------


def text_document(rng):
    """1-6 sentences; a sentence counts through the words with a step of 1, 2
    or 3 from a random word (wrapping around), then a period."""
    doc = []
    for _ in range(rng.randint(1, 6)):
        start, step = rng.randrange(WORDS), rng.choice((1, 2, 3))
        doc += [WORD0 + (start + step * k) % WORDS for k in range(rng.randint(4, 12))]
        doc.append(PERIOD)
    return doc


def write_megatron(prefix, documents):
    """Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py,
    docs/data.md): one sequence per document, uint16 tokens (dtype code 8)."""
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            f.write(struct.pack(f"<{len(doc)}H", *doc))
    lengths = [len(d) for d in documents]
    pointers, at = [], 0
    for n in lengths:
        pointers.append(at)
        at += 2 * n
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))  # version
        f.write(struct.pack("<B", 8))  # uint16
        f.write(struct.pack("<Q", len(documents)))  # sequence count
        f.write(struct.pack("<Q", len(documents) + 1))  # document index entries
        f.write(struct.pack(f"<{len(lengths)}i", *lengths))
        f.write(struct.pack(f"<{len(pointers)}q", *pointers))
        f.write(struct.pack(f"<{len(documents) + 1}q", *range(len(documents) + 1)))


def packed_windows(documents, seq_len, eos):
    """docs/data.md "kPack": documents + eos back to back, windows of seq_len + 1
    tokens starting every seq_len tokens."""
    stream = [t for d in documents for t in d + [eos]]
    count = (len(stream) - 1) // seq_len
    return torch.tensor([stream[k * seq_len:k * seq_len + seq_len + 1] for k in range(count)])


def pretrain(model, windows, steps, lr, seed):
    """Next-token training, as a published model would have been pretrained."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    first = last = None
    for step in range(steps):
        batch = windows[torch.randint(0, windows.shape[0], (16,), generator=gen)]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    return first, last


# ---- images and the manifest ------------------------------------------------------


def write_images(directory, rng):
    """32 pictures: every colour x shape, PNG (32x32) and JPEG (48x48) alternately."""
    os.makedirs(directory, exist_ok=True)
    images = []
    for i in range(len(COLOURS) * len(SHAPES)):
        colour, shape = i % len(COLOURS), i // len(COLOURS)
        png = (colour + shape) % 2 == 0
        size = 32 if png else 48
        background = tuple(rng.randrange(200, 256) for _ in range(3))
        img = Image.new("RGB", (size, size), background)
        draw = ImageDraw.Draw(img)
        s = size / 32.0
        box = {
            "square": (6, 6, 26, 26),
            "disc": (5, 5, 27, 27),
            "bar": (2, 12, 30, 20),
            "column": (12, 2, 20, 30),
        }[SHAPES[shape]]
        box = tuple(round(v * s) for v in box)
        fill = COLOUR_RGB[colour]
        (draw.ellipse if SHAPES[shape] == "disc" else draw.rectangle)(box, fill=fill)
        name = f"{COLOURS[colour]}_{SHAPES[shape]}.{'png' if png else 'jpg'}"
        if png:
            img.save(os.path.join(directory, name), format="PNG", optimize=False)
        else:
            img.save(os.path.join(directory, name), format="JPEG", quality=95, subsampling=0)
        images.append({"path": f"images/{name}", "colour": colour, "shape": shape})
    return images


def write_manifest(path, images, tokens_per_image, seq_len, rng, lines):
    """One VLM sample per line: 0, 1 or 2 images (line k has k % 3)."""
    counts = {0: 0, 1: 0, 2: 0}
    with open(path, "w") as f:
        for k in range(lines):
            n = k % 3
            counts[n] += 1
            if n == 0:  # a text line: every token predicted
                ids = text_document(rng)[:seq_len] + [EOS]
                f.write(json.dumps({"id": f"text-{k}", "input_ids": ids}) + "\n")
                continue
            chosen = rng.sample(images, n)
            ids, labels, positions = [DESCRIBE], [-100], []
            for img in chosen:
                positions.append(len(ids))
                ids += [IMAGE] * tokens_per_image
                labels += [-100] * tokens_per_image
            caption = []
            for j, img in enumerate(chosen):
                caption += ([AND] if j else []) + [COLOUR_TOKEN0 + img["colour"], SHAPE_TOKEN0 + img["shape"]]
            caption += [PERIOD, EOS]
            ids += caption
            labels += caption
            assert len(ids) <= seq_len + 1
            f.write(json.dumps({"id": f"caption-{k}", "input_ids": ids, "labels": labels,
                                "images": [img["path"] for img in chosen], "image_positions": positions}) + "\n")
    return counts


def write_audio(directory, rng):
    """24 clips: every pitch in 3 formats (16 kHz int16 WAV, 44.1 kHz float WAV,
    8 kHz FLAC), 0.5 to 1 s long: a tone and its second harmonic under a
    Hann fade, so every file is band-limited below 4 kHz."""
    os.makedirs(directory, exist_ok=True)
    clips = []
    formats = [(16000, "wav", "PCM_16"), (44100, "wav", "FLOAT"), (8000, "flac", "PCM_16")]
    for pitch, hz in enumerate(PITCHES_HZ):
        for rate, ext, subtype in formats:
            seconds = rng.choice([0.5, 0.75, 1.0])
            n = int(rate * seconds)
            t = torch.arange(n, dtype=torch.float64) / rate
            fade = torch.hann_window(n, periodic=False, dtype=torch.float64)
            wave = fade * (0.5 * torch.sin(2 * math.pi * hz * t) + 0.15 * torch.sin(2 * math.pi * 2 * hz * t))
            name = f"pitch{pitch}_{rate}.{ext}"
            soundfile.write(os.path.join(directory, name), wave.numpy(), rate, subtype=subtype)
            clips.append({"path": f"audio/{name}", "pitch": pitch})
    return clips


def write_omni_manifest(path, images, clips, tokens_per_image, tokens_per_audio, seq_len, rng, lines):
    """Line k: k % 4 = 0 text, 1 an image, 2 a clip, 3 an image and a clip;
    the caption names the image's colour and shape and the clip's pitch."""
    counts = {"text": 0, "image": 0, "audio": 0, "both": 0}
    with open(path, "w") as f:
        for k in range(lines):
            kind = ["text", "image", "audio", "both"][k % 4]
            counts[kind] += 1
            if kind == "text":
                ids = text_document(rng)[:seq_len] + [EOS]
                f.write(json.dumps({"id": f"text-{k}", "input_ids": ids}) + "\n")
                continue
            line = {"id": f"{kind}-{k}"}
            ids, labels, caption = [DESCRIBE], [-100], []
            if kind in ("image", "both"):
                img = rng.choice(images)
                line["images"], line["image_positions"] = [img["path"]], [len(ids)]
                ids += [IMAGE] * tokens_per_image
                labels += [-100] * tokens_per_image
                caption += [COLOUR_TOKEN0 + img["colour"], SHAPE_TOKEN0 + img["shape"]]
            if kind in ("audio", "both"):
                clip = rng.choice(clips)
                line["audios"], line["audio_positions"] = [clip["path"]], [len(ids)]
                ids += [AUDIO] * tokens_per_audio
                labels += [-100] * tokens_per_audio
                caption += ([AND] if caption else []) + [PITCH_TOKEN0 + clip["pitch"]]
            caption += [PERIOD, EOS]
            ids += caption
            labels += caption
            assert len(ids) <= seq_len + 1
            line["input_ids"], line["labels"] = ids, labels
            f.write(json.dumps(line) + "\n")
    return counts


# ---- main ---------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See README.md, \"Train on your own models and data\", and docs/data.md.")
    ap.add_argument("out", help="the folder to write (created; must be empty unless --force)")
    ap.add_argument("--seed", type=int, default=20240615, help="seed of every random choice (default %(default)s)")
    ap.add_argument("--teacher-steps", type=int, default=200,
                    help="steps of pretraining for the teacher (the VLM's LLM gets half; default %(default)s)")
    ap.add_argument("--force", action="store_true", help="write into a non-empty OUT, replacing what is there")
    args = ap.parse_args()

    out = os.path.abspath(args.out)
    if os.path.isdir(out) and os.listdir(out) and not args.force:
        sys.exit(f"make_example_workload.py: {out} is not empty (pass --force to replace its contents)")
    os.makedirs(out, exist_ok=True)
    for sub in ("teacher", "student", "vit", "llm", "corpus", "images", "audio"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    wrote = []

    # The corpus.
    seq_len = 64
    os.makedirs(os.path.join(out, "corpus"), exist_ok=True)
    train_docs = [text_document(rng) for _ in range(600)]
    heldout_docs = [text_document(rng) for _ in range(60)]
    write_megatron(os.path.join(out, "corpus", "train_text_document"), train_docs)
    write_megatron(os.path.join(out, "corpus", "heldout_text_document"), heldout_docs)
    windows = packed_windows(train_docs, seq_len, EOS)
    wrote.append(("corpus/train_text_document.{bin,idx}",
                  f"{len(train_docs)} documents, {sum(map(len, train_docs))} tokens, "
                  f"{windows.shape[0]} packed samples of seq_len {seq_len} with eos_id {EOS}"))
    wrote.append(("corpus/heldout_text_document.{bin,idx}",
                  f"{len(heldout_docs)} documents, "
                  f"{packed_windows(heldout_docs, seq_len, EOS).shape[0]} packed samples"))

    # The teacher: pretrained on the corpus, stored in bf16.
    c = qwen2_config(hidden=64, layers=4, heads=4, kv_heads=2, intermediate=192, dtype="bfloat16")
    teacher = Qwen2ForCausalLM(c)
    first, last = pretrain(teacher, windows, args.teacher_steps, 3e-3, args.seed + 1)
    write_hf_model(os.path.join(out, "teacher"), c, teacher.state_dict())
    wrote.append(("teacher/", f"qwen2 hidden 64, 4 layers, GQA 4/2 heads, bf16; pretrained {args.teacher_steps} "
                              f"steps: loss {first:.3f} -> {last:.3f}"))

    # The student: seeded, fp32 (an exported student is compared bit for bit
    # with what the run computed), sharded.
    c = qwen2_config(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=96, dtype="float32")
    write_hf_model(os.path.join(out, "student"), c, Qwen2ForCausalLM(c).state_dict(), shards=2)
    wrote.append(("student/", "qwen2 hidden 32, 2 layers, GQA 4/2 heads, fp32, seeded; 2 shards + index"))

    # The VLM's LLM: pretrained briefly on the corpus, bf16.
    c = qwen2_config(hidden=48, layers=2, heads=4, kv_heads=2, intermediate=128, dtype="bfloat16")
    llm = Qwen2ForCausalLM(c)
    first, last = pretrain(llm, windows, args.teacher_steps // 2, 3e-3, args.seed + 2)
    write_hf_model(os.path.join(out, "llm"), c, llm.state_dict())
    wrote.append(("llm/", f"qwen2 hidden 48, 2 layers, bf16; pretrained {args.teacher_steps // 2} steps: "
                          f"loss {first:.3f} -> {last:.3f}"))

    # The vision tower.
    vc = {"architectures": ["CLIPVisionModel"], "model_type": "clip_vision_model", "hidden_size": 32,
          "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32,
          "patch_size": 8, "num_channels": 3, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
          "projection_dim": 32, "initializer_range": 0.02, "initializer_factor": 1.0, "attention_dropout": 0.0,
          "torch_dtype": "bfloat16"}
    tokens_per_image = (vc["image_size"] // vc["patch_size"]) ** 2 + 1  # patches + the class token
    preprocessor = {"image_processor_type": "CLIPImageProcessor", "do_resize": True,
                    "size": {"shortest_edge": vc["image_size"]}, "do_center_crop": True,
                    "crop_size": {"height": vc["image_size"], "width": vc["image_size"]}, "do_rescale": True,
                    "rescale_factor": 1 / 255, "do_normalize": True,
                    "image_mean": [0.48145466, 0.4578275, 0.40821073],
                    "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "do_convert_rgb": True}
    gen = torch.Generator().manual_seed(args.seed + 3)
    write_hf_model(os.path.join(out, "vit"), vc, clip_vision_tensors(vc, gen),
                   extra_files={"preprocessor_config.json": preprocessor})
    wrote.append(("vit/", f"clip_vision_model hidden 32, 2 layers, {vc['image_size']}x{vc['image_size']} images, "
                          f"patch {vc['patch_size']}: {tokens_per_image} tokens per image, bf16, seeded"))

    # Images and the manifest.
    images = write_images(os.path.join(out, "images"), rng)
    wrote.append(("images/", f"{len(images)} pictures (PNG 32x32, JPEG 48x48): {len(COLOURS)} colours x "
                             f"{len(SHAPES)} shapes"))
    counts = write_manifest(os.path.join(out, "manifest.jsonl"), images, tokens_per_image, 48, rng, 120)
    wrote.append(("manifest.jsonl", f"{sum(counts.values())} samples: {counts[0]} text, {counts[1]} with 1 image, "
                                    f"{counts[2]} with 2; image token {IMAGE} x {tokens_per_image} per image"))

    # Audio clips and the omni manifest.
    clips = write_audio(os.path.join(out, "audio"), rng)
    wrote.append(("audio/", f"{len(clips)} clips: {len(PITCHES_HZ)} pitches x (16 kHz WAV, 44.1 kHz float WAV, "
                            f"8 kHz FLAC), 0.5-1 s"))
    tokens_per_audio = (AUDIO_FRAMES + 1) // 2
    counts = write_omni_manifest(os.path.join(out, "omni_manifest.jsonl"), images, clips, tokens_per_image,
                                 tokens_per_audio, 96, rng, 96)
    wrote.append(("omni_manifest.jsonl", f"{sum(counts.values())} samples: {counts['text']} text, "
                                         f"{counts['image']} with an image, {counts['audio']} with a clip, "
                                         f"{counts['both']} with both; audio token {AUDIO} x {tokens_per_audio}"))

    tokens = {"vocab_size": VOCAB, "pad": PAD, "eos": EOS, "period": PERIOD, "image": IMAGE, "describe": DESCRIBE,
              "and": AND, "audio": AUDIO, "colours": {n: COLOUR_TOKEN0 + i for i, n in enumerate(COLOURS)},
              "shapes": {n: SHAPE_TOKEN0 + i for i, n in enumerate(SHAPES)},
              "pitches_hz": {str(hz): PITCH_TOKEN0 + i for i, hz in enumerate(PITCHES_HZ)},
              "words": [WORD0, VOCAB - 1], "tokens_per_image": tokens_per_image,
              "tokens_per_audio": tokens_per_audio}
    with open(os.path.join(out, "tokens.json"), "w") as f:
        json.dump(tokens, f, indent=2)
        f.write("\n")

    for template, name in (("hf_kd.toml", "kd.toml"), ("hf_vlm.toml", "vlm.toml"), ("omni.toml", "omni.toml")):
        shutil.copyfile(os.path.join(TEMPLATES, template), os.path.join(out, name))
        wrote.append((name, f"from specs/examples/{template}"))

    print(f"wrote {out}:")
    for what, detail in wrote:
        print(f"  {what:40s} {detail}")
    print(f"next: maestro run {os.path.join(out, 'kd.toml')} -o out/kd")


if __name__ == "__main__":
    main()
