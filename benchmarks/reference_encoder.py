"""The yardsticks of ``encoder_speed.py``: a RoBERTa-shaped masked-LM encoder written directly in
PyTorch (no fairseq), and HF transformers' ``RobertaForMaskedLM``, each as a training step on
fairseq's ``masked_lm`` batches.

The reference is what a plain PyTorch training loop of the same model looks like when written for
speed: one fused QKV matmul per layer, ``F.scaled_dot_product_attention`` (attention dropout inside
it), the LM head and the loss only on the masked positions, torch's fused AdamW (foreach where the
device has no fused kernel), bf16 autocast on CUDA, gradients set to None, and optionally
``torch.compile`` (of the encoder, and of the head with a dynamic number of masked positions, so
that the boolean selection between them is no graph break). It computes the gradient norm every step
as fairseq's Trainer does (``clip_grad_norm_`` with an infinite limit: the norm, no clipping) but
never reads it on the host.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ReferenceLayer(nn.Module):
    """One transformer layer, post- or pre-LayerNorm: ``B x T x C`` -> ``B x T x C``."""

    def __init__(self, dim, ffn, heads, dropout, attention_dropout, activation_dropout, pre_ln):
        super().__init__()
        self.heads, self.pre_ln = heads, pre_ln
        self.dropout, self.attention_dropout, self.activation_dropout = (
            dropout,
            attention_dropout,
            activation_dropout,
        )
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        h = self.norm1(x) if self.pre_ln else x
        q, k, v = (
            self.qkv(h).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        )
        p = self.attention_dropout if self.training else 0.0
        h = F.scaled_dot_product_attention(q, k, v, dropout_p=p).transpose(1, 2).reshape(b, t, c)
        x = x + F.dropout(self.out(h), self.dropout, self.training)
        if not self.pre_ln:
            x = self.norm1(x)
        h = self.norm2(x) if self.pre_ln else x
        h = self.fc2(F.dropout(F.gelu(self.fc1(h)), self.activation_dropout, self.training))
        x = x + F.dropout(h, self.dropout, self.training)
        return x if self.pre_ln else self.norm2(x)


class ReferenceMaskedLM(nn.Module):
    """RoBERTa's shape: learned positions numbered from ``pad + 1`` (fairseq's and HF's), an
    embedding LayerNorm (post-LN), a final one (pre-LN), the LM head (dense, GELU, LayerNorm, output
    tied to the embeddings).
    """

    def __init__(
        self,
        vocab,
        pad,
        layers,
        dim,
        ffn,
        heads,
        max_positions=512,
        dropout=0.1,
        attention_dropout=0.1,
        activation_dropout=0.0,
        pre_ln=False,
        layernorm_embedding=None,
    ):
        super().__init__()
        self.pad, self.dropout = pad, dropout
        self.embed = nn.Embedding(vocab, dim, padding_idx=pad)
        self.positions = nn.Embedding(max_positions + pad + 1, dim, padding_idx=pad)
        embed_norm = (not pre_ln) if layernorm_embedding is None else layernorm_embedding
        self.embed_norm = nn.LayerNorm(dim) if embed_norm else nn.Identity()
        args = (dim, ffn, heads, dropout, attention_dropout, activation_dropout, pre_ln)
        self.layers = nn.ModuleList(ReferenceLayer(*args) for _ in range(layers))
        self.final_norm = nn.LayerNorm(dim) if pre_ln else nn.Identity()
        self.head_dense, self.head_norm = nn.Linear(dim, dim), nn.LayerNorm(dim)
        self.head_bias = nn.Parameter(torch.zeros(vocab))
        for m in self.modules():  # BERT's initialisation, as fairseq's init_bert_params
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        for emb in (self.embed, self.positions):
            emb.weight.data[pad].zero_()

    def encode(self, tokens: Tensor) -> Tensor:
        """``B x T`` tokens -> ``B x T x C`` features."""
        mask = tokens.ne(self.pad)
        positions = torch.cumsum(mask, dim=1) * mask + self.pad
        x = self.embed_norm(self.embed(tokens) + self.positions(positions))
        x = F.dropout(x, self.dropout, self.training)
        for layer in self.layers:
            x = layer(x)
        return self.final_norm(x)

    def head_loss(self, features: Tensor, targets: Tensor) -> Tensor:
        """``N x C`` features of the masked positions, ``N`` targets -> mean cross-entropy (fp32
        logits)."""
        x = self.head_norm(F.gelu(self.head_dense(features)))
        return F.cross_entropy(F.linear(x, self.embed.weight, self.head_bias).float(), targets)


class ReferenceStep:
    """One training step of ``ReferenceMaskedLM`` on a fairseq masked_lm sample (its ``target`` is
    ``pad`` except at the masked positions)."""

    def __init__(self, model: ReferenceMaskedLM, device: str, bf16: bool, compile: bool = False):
        self.model, self.device, self.pad = model.to(device).train(), device, model.pad
        self.autocast = device == "cuda" and bf16
        self.encode = torch.compile(model.encode) if compile else model.encode
        self.head_loss = (
            torch.compile(model.head_loss, dynamic=True) if compile else model.head_loss
        )
        self.params, self.optimizer = adamw(model, device)

    def __call__(self, sample) -> None:
        tokens = sample["net_input"]["src_tokens"].to(self.device, non_blocking=True)
        targets = sample["target"].to(self.device, non_blocking=True)
        masked = targets.ne(self.pad)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            loss = self.head_loss(self.encode(tokens)[masked], targets[masked])
        update(loss, self.params, self.optimizer)


class HFStep:
    """One training step of HF ``RobertaForMaskedLM`` (``RobertaPreLayerNormForMaskedLM`` for a
    pre-LN shape) with sdpa attention on the same sample: labels -100 except at the masked
    positions. HF's head runs on every position (its logits are ``B x T x V``); the FLOP count
    credits only the masked ones, as for the others.
    """

    def __init__(
        self,
        vocab,
        pad,
        bos,
        eos,
        layers,
        dim,
        ffn,
        heads,
        max_positions=512,
        dropout=0.1,
        attention_dropout=0.1,
        pre_ln=False,
        device="cpu",
        bf16=False,
    ):
        from transformers import RobertaConfig, RobertaForMaskedLM, RobertaPreLayerNormConfig
        from transformers import RobertaPreLayerNormForMaskedLM

        pre_ln_classes = (RobertaPreLayerNormConfig, RobertaPreLayerNormForMaskedLM)
        config_class, model_class = (
            pre_ln_classes if pre_ln else (RobertaConfig, RobertaForMaskedLM)
        )
        config = config_class(
            vocab_size=vocab,
            hidden_size=dim,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=ffn,
            hidden_act="gelu",
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=attention_dropout,
            max_position_embeddings=max_positions + pad + 1,
            type_vocab_size=1,
            layer_norm_eps=1e-5,
            pad_token_id=pad,
            bos_token_id=bos,
            eos_token_id=eos,
            attn_implementation="sdpa",
        )
        self.model, self.device, self.pad = model_class(config).to(device).train(), device, pad
        self.autocast = device == "cuda" and bf16
        self.params, self.optimizer = adamw(self.model, device)

    def __call__(self, sample) -> None:
        tokens = sample["net_input"]["src_tokens"].to(self.device, non_blocking=True)
        targets = sample["target"].to(self.device, non_blocking=True)
        labels = targets.masked_fill(targets.eq(self.pad), -100)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            loss = self.model(input_ids=tokens, labels=labels).loss
        update(loss, self.params, self.optimizer)


def adamw(model: nn.Module, device: str):
    """(trainable parameters, torch's AdamW with the fairseq variants' settings): fused where this
    torch has the kernel for the device (CUDA; CPU since 2.4), else foreach."""
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    params = [p for p in model.parameters() if p.requires_grad]
    kernel = (
        {"fused": True} if device in _get_fused_kernels_supported_devices() else {"foreach": True}
    )
    return params, torch.optim.AdamW(
        params, lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01, **kernel
    )


def update(loss: Tensor, params, optimizer) -> None:
    """Backward, the gradient norm (computed as fairseq's Trainer does every step, not read), the
    update, and the gradients set to None."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, math.inf)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
