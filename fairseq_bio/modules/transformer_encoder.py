"""fairseq's transformer encoder, able to return every layer's per-head attention maps (before dropout) on request."""

from typing import List, Optional

import torch
import torch.nn.functional as F
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor


class BioTransformerEncoderLayer(TransformerEncoderLayerBase):
    """Post-LN (BERT/RoBERTa) or pre-LN (Megatron) layer; ``need_attn`` also returns the per-head attention
    probabilities before dropout, ``B x H x T x T``."""

    def forward(
        self,
        x: Tensor,
        encoder_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor] = None,
        need_attn: bool = False,
    ):
        """``T x B x C`` -> (``T x B x C``, per-head attention ``B x H x T x T`` or None)."""
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if need_attn:
            x, attn = self._attention_with_maps(x, encoder_padding_mask, attn_mask)
        else:
            x, attn = self.self_attn(
                query=x, key=x, value=x, key_padding_mask=encoder_padding_mask, need_weights=False, attn_mask=attn_mask
            )
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

    def _attention_with_maps(self, x: Tensor, key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor]):
        """``T x B x C`` -> (``T x B x C``, attention probabilities before dropout ``B x H x T x T``)."""
        # fairseq's MultiheadAttention averages the heads, and torch's F.multi_head_attention_forward gives back
        # the weights after dropout, which in training are not distributions. Distillation compares maps, so this
        # is their computation with the same parameters, keeping the heads apart and dropping out only the copy
        # that mixes the values.
        attn = self.self_attn
        if attn.bias_k is not None or attn.add_zero_attn:
            raise NotImplementedError("attention maps with add_bias_kv or add_zero_attn (encoders use neither)")
        T, B, C = x.shape
        H = attn.num_heads

        def heads(y: Tensor) -> Tensor:  # T x B x C -> B x H x T x D
            return y.view(T, B, H, attn.head_dim).permute(1, 2, 0, 3)

        q = heads(attn.q_proj(x) * attn.scaling)  # fairseq scales q after its projection (bias included)
        k, v = heads(attn.k_proj(x)), heads(attn.v_proj(x))
        scores = torch.matmul(q, k.transpose(-1, -2))  # B x H x T x T
        if attn_mask is not None:
            scores = scores + attn_mask  # additive T x T (the layer has turned a 0/1 mask into 0/-1e8)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask.view(B, 1, 1, T).to(torch.bool), float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
        mixed = torch.matmul(attn.dropout_module(probs), v)  # B x H x T x D
        return attn.out_proj(mixed.permute(2, 0, 1, 3).reshape(T, B, C)), probs


class BioTransformerEncoder(TransformerEncoder):
    """fairseq's ``TransformerEncoder`` built from ``BioTransformerEncoderLayer``s."""

    def build_encoder_layer(self, cfg):
        cfg = TransformerConfig.from_namespace(cfg)
        layer = BioTransformerEncoderLayer(cfg)
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        return_attn: bool = False,
    ):
        """As fairseq's encoder; with ``return_attn`` the dict also holds ``attn``: one ``B x H x T x T``
        tensor per layer, the attention probabilities before dropout. Nothing extra is computed or kept unless
        asked for."""
        padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = padding_mask.any()
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        if has_pads:
            x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        encoder_states: List[Tensor] = [x] if return_all_hiddens else []
        attn_maps: List[Tensor] = []
        for layer in self.layers:
            x, attn = layer(x, encoder_padding_mask=padding_mask if has_pads else None, need_attn=return_attn)
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
            "src_lengths": [src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)],
        }
