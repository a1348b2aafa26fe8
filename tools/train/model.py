"""A qwen2-architecture decoder-only transformer in torch (Hugging Face semantics).

RMSNorm (weight * x / sqrt(mean(x^2) + eps)), RoPE in the "rotate half" layout
(non-interleaved, theta from the config), grouped-query attention with q/k/v
biases, SiLU-gated MLP, tied or untied lm_head. Parameter names are the
Hugging Face names, so state_dict() is the export (see export.py).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

TARGET = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=768)
DRAFT = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             intermediate_size=384)
COMMON = dict(vocab_size=4096, max_position_embeddings=1024, rope_theta=10000.0, rms_norm_eps=1e-6,
              tie_word_embeddings=True, bos_token_id=4093, eos_token_id=4093, hidden_act="silu",
              model_type="qwen2", architectures=["Qwen2ForCausalLM"], torch_dtype="float32",
              attention_dropout=0.0, initializer_range=0.02, use_sliding_window=False,
              sliding_window=1024, max_window_layers=0, use_cache=True)


def hf_config(geom):
    c = dict(COMMON)
    c.update(geom)
    c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    return c


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables(T, hd, theta):
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
    f = torch.outer(torch.arange(T).float(), inv)
    emb = torch.cat([f, f], -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.nh, self.nkv, self.hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = nn.Linear(d, self.nh * self.hd, bias=True)
        self.k_proj = nn.Linear(d, self.nkv * self.hd, bias=True)
        self.v_proj = nn.Linear(d, self.nkv * self.hd, bias=True)
        self.o_proj = nn.Linear(self.nh * self.hd, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        a = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        y = F.softmax(a, -1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, i, bias=False)
        self.up_proj = nn.Linear(d, i, bias=False)
        self.down_proj = nn.Linear(i, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attn(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class CausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Inner(c)
        self.tied = c["tie_word_embeddings"]
        if not self.tied:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        std = c["initializer_range"]
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std)
                if n.endswith("o_proj.weight") or n.endswith("down_proj.weight"):
                    p.data /= math.sqrt(2 * c["num_hidden_layers"])
            elif n.endswith(".bias"):
                nn.init.zeros_(p)
        self._tab = {}

    def forward(self, ids):
        B, T = ids.shape
        if T not in self._tab:
            cos, sin = rope_tables(T, self.c["head_dim"], self.c["rope_theta"])
            mask = torch.full((T, T), float("-inf")).triu(1)
            self._tab[T] = (cos, sin, mask)
        cos, sin, mask = self._tab[T]
        x = self.model.embed_tokens(ids)
        for l in self.model.layers:
            x = l(x, cos, sin, mask)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return x @ w.t()

    def export_state(self):
        """{HF name: float32 numpy array}, torch [out, in] convention."""
        sd = {k: v.detach().float().numpy().copy() for k, v in self.state_dict().items()}
        return sd
