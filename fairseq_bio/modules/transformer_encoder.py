"""fairseq's transformer encoder with a faster attention (one fused QKV projection, torch's
scaled_dot_product_attention) that keeps fairseq's parameters and state-dict keys, returns every
layer's per-head attention maps (before dropout) on request, and optionally embeds token types
(BERT's segments)."""

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor, nn


class BioTransformerEncoderLayer(TransformerEncoderLayerBase):
    """Post-LN (BERT/RoBERTa) or pre-LN (Megatron) layer; ``need_attn`` also returns the per-head
    attention probabilities before dropout, ``B x H x T x T``.

    The parameters are fairseq's ``MultiheadAttention``
    ``q_proj``/``k_proj``/``v_proj``/``out_proj`` (so stock RoBERTa checkpoints, ours and the HF
    converters keep their keys), but its forward is not used: the three projections run as one
    ``3C x C`` matmul on their concatenated weights, and attention goes through
    ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels) unless the maps are asked
    for.
    """

    def forward(
        self,
        x: Tensor,
        encoder_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor] = None,
        need_attn: bool = False,
    ):
        """``T x B x C`` -> (``T x B x C``, per-head attention ``B x H x T x T`` or None)."""
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(
                attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4
            )
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if need_attn or attn_mask is not None or self._explicit_is_faster(x):
            x, attn = self._attention_with_maps(x, encoder_padding_mask, attn_mask)
            attn = attn if need_attn else None
        else:
            x, attn = self._attention(x, encoder_padding_mask), None
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        x = self.residual_connection(self.dropout_module(self.fc2(x)), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, attn

    def _attention_dropout(self) -> float:
        """The attention-probability dropout in force now (0 in eval, as fairseq's
        ``FairseqDropout``)."""
        dropout = self.self_attn.dropout_module
        return dropout.p if dropout.training or dropout.apply_during_inference else 0.0

    def _explicit_is_faster(self, x: Tensor) -> bool:
        # With attention dropout torch's CPU SDPA has no fused kernel and falls back to its
        # math path (scores, "safe" softmax with extra masking passes, dropout, matmul), slower
        # than the explicit path below (at base's 12 heads x 512 tokens, forward + backward);
        # CUDA's flash / memory-efficient kernels fuse dropout.
        return x.device.type == "cpu" and self._attention_dropout() > 0

    def _project_qkv(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """``T x B x C`` -> q, k, v, each ``B x H x T x D`` (q not yet scaled)."""
        attn = self.self_attn
        if attn.bias_k is not None or attn.add_zero_attn or not attn.self_attention:
            raise NotImplementedError(
                "bio encoder layers: add_bias_kv / add_zero_attn / cross attention"
            )
        T, B, C = x.shape
        projs = (attn.q_proj, attn.k_proj, attn.v_proj)
        if any(
            p._forward_pre_hooks or p._forward_hooks for p in projs
        ):  # quant-noise hooks rewrite the weights
            qkv = torch.cat([p(x) for p in projs], dim=-1)
        else:
            # One matmul instead of three; concatenating the weights costs 3C x C copies per forward
            # against a T*B x C x 3C matmul, and keeps fairseq's three parameters (and keys) as they
            # are.
            weight = torch.cat([p.weight for p in projs])
            bias = torch.cat([p.bias for p in projs]) if attn.q_proj.bias is not None else None
            qkv = F.linear(x, weight, bias)
        q, k, v = qkv.view(T, B, 3, attn.num_heads, attn.head_dim).permute(2, 1, 3, 0, 4).unbind(0)
        return q, k, v

    def _attention(self, x: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """``T x B x C`` -> ``T x B x C`` through ``scaled_dot_product_attention``; no mask on
        unpadded batches."""
        T, B, C = x.shape
        q, k, v = self._project_qkv(x)
        mask = None
        if key_padding_mask is not None:
            mask = ~key_padding_mask.view(B, 1, 1, T).to(torch.bool)  # True: attend
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self._attention_dropout(),
            scale=self.self_attn.scaling,
        )  # B x H x T x D
        return self.self_attn.out_proj(out.permute(2, 0, 1, 3).reshape(T, B, C))

    def _attention_with_maps(
        self, x: Tensor, key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor]
    ):
        """``T x B x C`` -> (``T x B x C``, attention probabilities before dropout
        ``B x H x T x T``)."""
        # fairseq's MultiheadAttention averages the heads, and torch's
        # F.multi_head_attention_forward gives back the weights after dropout, which in training are
        # not distributions. Distillation compares maps, so this is their computation with the same
        # parameters, keeping the heads apart and dropping out only the copy that mixes the values.
        attn = self.self_attn
        T, B, C = x.shape
        q, k, v = self._project_qkv(x)
        scores = torch.matmul(
            q * attn.scaling, k.transpose(-1, -2)
        )  # B x H x T x T; fairseq scales q (bias too)
        if attn_mask is not None:
            scores = (
                scores + attn_mask
            )  # additive T x T (the layer has turned a 0/1 mask into 0/-1e8)
        if key_padding_mask is not None:
            scores = scores.masked_fill(
                key_padding_mask.view(B, 1, 1, T).to(torch.bool), float("-inf")
            )
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
        mixed = torch.matmul(attn.dropout_module(probs), v)  # B x H x T x D
        return attn.out_proj(mixed.permute(2, 0, 1, 3).reshape(T, B, C)), probs


class BioTransformerEncoder(TransformerEncoder):
    """fairseq's ``TransformerEncoder`` built from ``BioTransformerEncoderLayer``s; with
    ``token_types`` > 0 also a ``token_types x C`` table ``segment_embeddings`` whose row of each
    token's segment id is added to its embedding (BERT's token types).

    Row 0 is zero and stays so (its padding row): segment 0's own embedding lives in the positions,
    where an HF import folds it, so a row without segment ids, or with ids 0 only, computes exactly
    what a model without the table computes. Rows 1.. hold each type's difference from type 0.
    """

    def __init__(self, args, dictionary, embed_tokens, token_types: int = 0):
        super().__init__(args, dictionary, embed_tokens)
        self.segment_embeddings = (
            nn.Embedding(token_types, embed_tokens.embedding_dim, padding_idx=0)
            if token_types > 0
            else None
        )

    def build_encoder_layer(self, cfg):
        cfg = TransformerConfig.from_namespace(cfg)
        layer = BioTransformerEncoderLayer(cfg)
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def forward_embedding(
        self,
        src_tokens: Tensor,
        token_embedding: Optional[Tensor] = None,
        segment_labels: Optional[Tensor] = None,
    ):
        """fairseq's embedding of ``B x T`` tokens (scaled tokens + positions, LayerNorm, dropout)
        with the segments' rows added before the LayerNorm: (``B x T x C``, the scaled tokens)."""
        if segment_labels is None:
            return super().forward_embedding(src_tokens, token_embedding)
        if self.segment_embeddings is None:
            raise ValueError("segment labels given to an encoder without token types")
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = embed = self.embed_scale * token_embedding
        if self.embed_positions is not None:
            x = embed + self.embed_positions(src_tokens)
        x = x + self.segment_embeddings(segment_labels)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        return x, embed

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        return_attn: bool = False,
        segment_labels: Optional[Tensor] = None,
    ):
        """As fairseq's encoder; with ``return_attn`` the dict also holds ``attn``: one
        ``B x H x T x T`` tensor per layer, the attention probabilities before dropout;
        ``segment_labels`` (``B x T``) are the token types of a model that has them. Nothing
        extra is computed or kept unless asked for."""
        padding_mask = src_tokens.eq(self.padding_idx)
        # Read once: a tensor's truth value waits for the GPU, and this encoder (as fairseq's) asked
        # it again before every layer, so the host stopped launching at each layer boundary until
        # the device had caught up.
        has_pads = bool(padding_mask.any())
        if segment_labels is None:  # bio_electra's projected encoders embed without segments
            x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        else:
            x, encoder_embedding = self.forward_embedding(
                src_tokens, token_embeddings, segment_labels
            )
        if has_pads:
            x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        # B x T x C -> T x B x C, contiguous like every later layer's input (one compiled graph
        # serves all layers)
        x = x.transpose(0, 1).contiguous()

        encoder_states: List[Tensor] = [x] if return_all_hiddens else []
        attn_maps: List[Tensor] = []
        for layer in self.layers:
            x, attn = layer(
                x, encoder_padding_mask=padding_mask if has_pads else None, need_attn=return_attn
            )
            if return_all_hiddens:
                encoder_states.append(x)
            if return_attn:
                attn_maps.append(attn)
        if self.layer_norm is not None:
            x = self.layer_norm(x)

        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "attn": attn_maps,  # List[B x H x T x T]
            "src_tokens": [],
            "src_lengths": [
                src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)
            ],
        }
