"""bio_roberta: fairseq's RoBERTa with a config dataclass, named sizes, a pre-LN option, and
per-layer hidden states and attention maps on request."""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta.model import (
    RobertaEncoder,
    RobertaLMHead,
    RobertaModel,
    base_architecture,
)
from fairseq.models.transformer import DEFAULT_MIN_PARAMS_TO_WRAP
from fairseq.modules import layer_norm
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from omegaconf import OmegaConf
from torch import Tensor, nn

from ..errors import BioConfigError
from ..hub import hub_interface
from ..modules.masking import take_positions
from ..modules.tagging_head import TokenClassificationHead, head_options
from ..modules.transformer_encoder import BioTransformerEncoder

logger = logging.getLogger(__name__)

# Named sizes. A size left unset in the config (None) is taken from the architecture named by
# ``model._name`` (hydra) or ``--arch`` (argparse); "bio_roberta" itself means base.
ARCHITECTURES = {
    "bio_roberta_tiny": dict(
        encoder_layers=4,
        encoder_embed_dim=256,
        encoder_ffn_embed_dim=1024,
        encoder_attention_heads=4,
    ),
    "bio_roberta_base": dict(
        encoder_layers=12,
        encoder_embed_dim=768,
        encoder_ffn_embed_dim=3072,
        encoder_attention_heads=12,
    ),
    "bio_roberta_large": dict(
        encoder_layers=24,
        encoder_embed_dim=1024,
        encoder_ffn_embed_dim=4096,
        encoder_attention_heads=16,
    ),
    # BioMegatron (seed 002, sec. 3): Megatron-LM's BERT, pre-LayerNorm, in three sizes. 345m: 24 x
    # 1024, 16 heads (NVIDIA's released BioMegatron345m). 1.2b: the general Megatron-LM BERT it
    # continued, 24 x 2048, 32 heads (1.21B in the layers + 62M embeddings with BERT's 30,522
    # uncased pieces). 800m: the paper gives no shape; ours is 36 x 1280, 20 heads (64 per head like
    # the others): 0.71B in the layers + 64M embeddings at 50k.
    "bio_megatron_345m": dict(
        encoder_layers=24,
        encoder_embed_dim=1024,
        encoder_ffn_embed_dim=4096,
        encoder_attention_heads=16,
    ),
    "bio_megatron_800m": dict(
        encoder_layers=36,
        encoder_embed_dim=1280,
        encoder_ffn_embed_dim=5120,
        encoder_attention_heads=20,
    ),
    "bio_megatron_1_2b": dict(
        encoder_layers=24,
        encoder_embed_dim=2048,
        encoder_ffn_embed_dim=8192,
        encoder_attention_heads=32,
    ),
}
# Architectures that are pre-LayerNorm by definition: the name sets model.encoder_normalize_before.
PRE_LN_ARCHITECTURES = ("bio_megatron_345m", "bio_megatron_800m", "bio_megatron_1_2b")
DEFAULT_ARCHITECTURE = "bio_roberta_base"


@dataclass
class BioRobertaConfig(FairseqDataclass):
    encoder_layers: Optional[int] = field(
        default=None,
        metadata={"help": "number of transformer layers (default: the architecture's)"},
    )
    encoder_embed_dim: Optional[int] = field(
        default=None, metadata={"help": "hidden size (default: the architecture's)"}
    )
    encoder_ffn_embed_dim: Optional[int] = field(
        default=None, metadata={"help": "feed-forward inner size (default: the architecture's)"}
    )
    encoder_attention_heads: Optional[int] = field(
        default=None, metadata={"help": "attention heads per layer (default: the architecture's)"}
    )
    encoder_normalize_before: bool = field(
        default=False,
        metadata={
            "help": "pre-LayerNorm (BioMegatron/Megatron-LM ordering): normalise before attention and FFN, "
            "add a final layer norm, and drop the embedding layer norm unless layernorm_embedding is set"
        },
    )
    layernorm_embedding: Optional[bool] = field(
        default=None,
        metadata={"help": "layer norm on the embeddings (default: on for post-LN, off for pre-LN)"},
    )
    layer_norm_eps: Optional[float] = field(
        default=None,
        metadata={
            "help": "epsilon of every LayerNorm of encoder and LM head (default 1e-5; BERT checkpoints: 1e-12)"
        },
    )
    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu", metadata={"help": "activation function of the feed-forward layers"}
    )
    pooler_activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="tanh", metadata={"help": "activation function of classification heads"}
    )
    dropout: float = field(default=0.1, metadata={"help": "dropout probability"})
    attention_dropout: float = field(
        default=0.1, metadata={"help": "dropout probability of attention weights"}
    )
    activation_dropout: float = field(
        default=0.0, metadata={"help": "dropout probability after the FFN activation"}
    )
    pooler_dropout: float = field(
        default=0.0, metadata={"help": "dropout probability in classification heads"}
    )
    max_positions: int = field(default=512, metadata={"help": "number of learned positions"})
    token_types: int = field(
        default=0,
        metadata={
            "help": "token types (BERT's segment embeddings): 0, none, pairs are RoBERTa's <s> a </s></s> b "
            "</s>; 2 (BERT, ELECTRA, MegatronBERT imports): pairs are BERT's <s> a </s> b </s>, b of type 1"
        },
    )
    bert_pairs: bool = field(
        default=False,
        metadata={
            "help": "pairs as BERT's <s> a </s> b </s> without token types (DistilBERT imports); "
            "token_types > 0 implies it"
        },
    )
    untie_weights_roberta: bool = field(
        default=False,
        metadata={"help": "untie the masked-LM output projection from the input embeddings"},
    )
    encoder_layerdrop: float = field(default=0.0, metadata={"help": "LayerDrop probability"})
    encoder_layers_to_keep: Optional[str] = field(
        default=None,
        metadata={"help": "comma-separated layers to keep when pruning a LayerDrop model"},
    )
    load_checkpoint_heads: bool = field(
        default=False,
        metadata={"help": "(re-)register and load classification heads found in checkpoints"},
    )
    spectral_norm_classification_head: bool = field(
        default=False, metadata={"help": "spectral normalisation on classification heads"}
    )
    checkpoint_activations: bool = field(
        default=False,
        metadata={"help": "recompute layer activations in the backward pass to save memory"},
    )
    offload_activations: bool = field(
        default=False,
        metadata={
            "help": "offload checkpointed activations to CPU (implies checkpoint_activations)"
        },
    )
    min_params_to_wrap: int = field(
        default=DEFAULT_MIN_PARAMS_TO_WRAP,
        metadata={"help": "smallest layer FSDP wraps on its own"},
    )
    compile_encoder_layers: bool = field(
        default=False,
        metadata={
            "help": "torch.compile each encoder layer (fuses the layer's elementwise work; the first batches of "
            "each shape compile for seconds to minutes; not with checkpoint_activations)"
        },
    )
    compile_model: bool = field(
        default=False,
        metadata={
            "help": "torch.compile the whole model in place (embeddings, every layer, the heads: fusions across "
            "layers, one call instead of one per layer); graph breaks where a step reads a value (padding or not, "
            "the masked positions); the first batches of each shape compile for minutes; not with "
            "compile_encoder_layers or checkpoint_activations"
        },
    )
    lm_head_vocab_multiple: int = field(
        default=64,
        metadata={
            "help": "on CUDA, the masked-LM head multiplies by its output matrix padded to a multiple of this many "
            "rows (tensor-core tiles) and slices the padding off the logits; parameters keep their shape; 1: off"
        },
    )


# Options added after checkpoints were first saved, with the defaults such a checkpoint's config
# gets.
LATER_OPTIONS = {
    "compile_encoder_layers": False,
    "compile_model": False,
    "lm_head_vocab_multiple": 64,
    "token_types": 0,
    "bert_pairs": False,
}


def apply_architecture(cfg, name: Optional[str]) -> None:
    """Fill the sizes ``cfg`` leaves unset from the named architecture (base when the name is not
    one)."""
    sizes = ARCHITECTURES.get(name, ARCHITECTURES[DEFAULT_ARCHITECTURE])
    for key, value in sizes.items():
        if getattr(cfg, key, None) is None:
            setattr(cfg, key, value)
    if name in PRE_LN_ARCHITECTURES:
        cfg.encoder_normalize_before = True
    elif getattr(cfg, "encoder_normalize_before", None) is None:
        cfg.encoder_normalize_before = False
    if getattr(cfg, "layernorm_embedding", None) is None:
        cfg.layernorm_embedding = not cfg.encoder_normalize_before
    if getattr(cfg, "layer_norm_eps", None) is None:  # also checkpoints from before the option
        cfg.layer_norm_eps = 1e-5
    if getattr(cfg, "offload_activations", False):
        cfg.checkpoint_activations = True
    # Checkpoints from before these options hold none: they get the defaults.
    for key, default in LATER_OPTIONS.items():
        if getattr(cfg, key, None) is None:
            setattr(cfg, key, default)


def is_bio_roberta(name: Optional[str]) -> bool:
    """Whether ``name`` (a checkpoint's ``model._name`` or ``--arch``) is model ``bio_roberta`` or
    one of the architectures registered for it (bio_roberta_*, bio_megatron_*): the checkpoints
    every bio_roberta consumer takes.
    """
    return name == "bio_roberta" or name in ARCHITECTURES


def read_bio_roberta_checkpoint(path, label: str, error=BioConfigError):
    """(state, weights, recorded model cfg) of a ``bio_roberta`` checkpoint, read with
    ``weights_only=True``; an ELECTRA checkpoint (extract its discriminator first) or anything else
    is refused as ``error`` in one line that starts with ``label`` (the option or path the user
    gave)."""
    from ..checkpoints import load_checkpoint

    if not path or not os.path.isfile(path):
        raise error(f"{label}: no such checkpoint")
    state = load_checkpoint(path)
    weights = state.get("model") or {}
    if "discriminator.embed_tokens.weight" in weights:
        raise error(
            f"{label}: an ELECTRA checkpoint; extract its discriminator first: "
            f"fairseq-bio-extract-encoder --checkpoint {path} --out <dir>/discriminator.pt"
        )
    recorded = (state.get("cfg") or {}).get("model") or {}
    name = recorded.get("_name") or ""
    if not is_bio_roberta(name) or "encoder.sentence_encoder.embed_tokens.weight" not in weights:
        raise error(f"{label}: not a bio_roberta checkpoint (model {name or 'unknown'})")
    return state, weights, recorded


def set_layer_norm_eps(module: nn.Module, eps: float) -> None:
    """Set ``eps`` on every LayerNorm in ``module`` (fairseq builds them all with 1e-5)."""
    for m in module.modules():
        if isinstance(m, nn.LayerNorm) or (
            layer_norm.has_fused_layernorm and isinstance(m, layer_norm.FusedLayerNorm)
        ):
            m.eps = eps


@register_model("bio_roberta", dataclass=BioRobertaConfig)
class BioRobertaModel(RobertaModel):
    """RoBERTa whose forward can also return per-layer states (``return_all_hiddens``) and per-head
    attention maps (``return_attn``): ``extra["inner_states"]`` holds ``T x B x C`` tensors
    (embeddings first), ``extra["attn"]`` one ``B x H x T x T`` tensor per layer."""

    def __init__(self, args, encoder):
        super().__init__(args, encoder)
        # Token heads whose checkpoint weights the next state dict loaded must not replace
        # (reinitialise_on_load).
        self.heads_to_reinitialise = set()

    @classmethod
    def hub_models(cls):
        return {}

    @classmethod
    def build_model(cls, cfg, task):
        if OmegaConf.is_config(cfg):
            OmegaConf.set_struct(cfg, False)  # fairseq's encoder adds its own defaults below
        apply_architecture(cfg, getattr(cfg, "_name", None) or getattr(cfg, "arch", None))
        base_architecture(cfg)
        for key in ("compile_encoder_layers", "compile_model"):
            if getattr(cfg, key) and getattr(cfg, "checkpoint_activations", False):
                raise BioConfigError(f"model.{key}=true with checkpoint_activations: choose one")
        if cfg.compile_encoder_layers and cfg.compile_model:
            raise BioConfigError(
                "model.compile_encoder_layers=true with model.compile_model=true: choose one"
            )
        if cfg.lm_head_vocab_multiple < 1:
            raise BioConfigError(
                f"model.lm_head_vocab_multiple={cfg.lm_head_vocab_multiple}: must be >= 1"
            )
        if cfg.token_types < 0 or cfg.token_types == 1:
            raise BioConfigError(
                f"model.token_types={cfg.token_types}: 0 (none) or at least 2 (a pair's two segments)"
            )
        encoder = BioRobertaEncoder(cfg, task.source_dictionary)
        set_layer_norm_eps(encoder, cfg.layer_norm_eps)
        if cfg.compile_encoder_layers:
            for layer in encoder.sentence_encoder.layers:
                layer.compile()  # in place: parameter names and state-dict keys stay as they are
        if OmegaConf.is_config(cfg):
            OmegaConf.set_struct(cfg, True)
        model = cls(cfg, encoder)
        if cfg.compile_model:
            model.compile()  # in place, as the layers above: the state dict keeps its keys
        return model

    def register_tagging_head(self, name: str, num_classes: int, **options):
        """Register a per-token head (``TokenClassificationHead``; ``options``: its dropout, crf,
        lstm_layers, lstm_hidden_size, hidden_layers, hidden_size) under ``name`` in
        ``classification_heads``; ``model(tokens,
        features_only=True, classification_head_name=name)`` then gives ``B x T x K`` scores."""
        head = TokenClassificationHead(self.args.encoder_embed_dim, num_classes, **options)
        self.classification_heads[name] = head.train(
            self.training
        )  # a head made while loading follows eval()

    def reinitialise_on_load(self, name: str) -> None:
        """The next state dict loaded (the checkpoint a fine-tuning run starts from) leaves the
        token head ``name`` with this model's own initial weights even when the checkpoint has a
        head of that name and shape (a QA run from a QA checkpoint with
        ``task.restore_head=false``); later loads (resuming) restore it as usual.
        """
        self.heads_to_reinitialise.add(name)

    def forward(
        self,
        src_tokens,
        features_only=False,
        return_all_hiddens=False,
        classification_head_name=None,
        **kw,
    ):
        """fairseq's RoBERTa forward; a token head is also given the rows' padding mask (its BiLSTM
        reads each row up to its padding)."""
        head = (
            self.classification_heads[classification_head_name]
            if classification_head_name is not None
            else None
        )
        if not isinstance(head, TokenClassificationHead):
            return super().forward(
                src_tokens, features_only, return_all_hiddens, classification_head_name, **kw
            )
        x, extra = self.encoder(src_tokens, True, return_all_hiddens, **kw)
        return head(x, padding_mask=src_tokens.eq(self.encoder.sentence_encoder.padding_idx)), extra

    def upgrade_state_dict_named(self, state_dict, name):
        # fairseq's head handling reads every head's ``dense`` layer, which token heads do not have:
        # token heads are handled here (kept, re-registered with load_checkpoint_heads, or dropped,
        # as fairseq does for sentence heads) and hidden from it.
        prefix = (name + "." if name != "" else "") + "classification_heads."
        reinitialise, self.heads_to_reinitialise = (
            self.heads_to_reinitialise,
            set(),
        )  # for this load only
        token_heads = {}
        for key in state_dict:
            if key.startswith(prefix) and key.endswith(".out_proj.weight"):
                head = key[len(prefix) : -len(".out_proj.weight")]
                if prefix + head + ".dense.weight" not in state_dict:
                    token_heads[head] = {
                        k: v for k, v in state_dict.items() if k.startswith(prefix + head + ".")
                    }
        for head, params in token_heads.items():
            for key in params:
                del state_dict[key]
            options = head_options(params, prefix + head + ".")
            current = self.classification_heads[head] if head in self.classification_heads else None
            if current is None and getattr(self.args, "load_checkpoint_heads", False):
                self.register_tagging_head(head, **options)
                current = self.classification_heads[head]
            if current is None:
                logger.warning(
                    "deleting token head %s from the checkpoint: not in the current model", head
                )
                token_heads[head] = None
            elif head in reinitialise:
                logger.info(
                    "token head %s: in the checkpoint, but not restored (initialised)", head
                )
                token_heads[head] = None
            elif not isinstance(current, TokenClassificationHead) or current.options() != options:
                logger.warning(
                    "deleting token head %s from the checkpoint: the current model's differs", head
                )
                token_heads[head] = None
        hidden = {
            h: m
            for h, m in self.classification_heads.items()
            if isinstance(m, TokenClassificationHead)
        }
        for head in hidden:
            del self.classification_heads[head]
        try:
            super().upgrade_state_dict_named(state_dict, name)
        finally:
            for head, module in hidden.items():
                self.classification_heads[head] = module
        for head, module in hidden.items():
            params = token_heads.get(head)
            if params is None:  # a new head (fine-tuning starts): it keeps its initial weights
                if head not in token_heads:  # (a checkpoint head not taken was logged above)
                    logger.info("token head %s: not in the checkpoint, initialised", head)
                params = {prefix + head + "." + k: v for k, v in module.state_dict().items()}
            state_dict.update(params)

    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path,
        checkpoint_file="checkpoint_best.pt",
        data_name_or_path=".",
        **kwargs,
    ):
        """A ``RobertaHubInterface`` (encode/decode/fill_mask/extract_features; pairs in the model's
        own format) for a local checkpoint, loaded as every model for inference is
        (``hub.hub_interface``).

        The vocabulary (dict.txt, bpe.json) is ``data_name_or_path``, relative to
        ``model_name_or_path`` when it starts with "."; other keyword arguments are fairseq's
        ``arg_overrides`` (``bpe=`` replaces bpe.json's).
        """
        data_dir = (
            os.path.join(model_name_or_path, data_name_or_path)
            if data_name_or_path.startswith(".")
            else data_name_or_path
        )
        checkpoint = os.path.join(model_name_or_path, checkpoint_file)
        return hub_interface(checkpoint, data_dir, overrides=kwargs)


class BioRobertaLMHead(RobertaLMHead):
    """fairseq's RoBERTa masked-LM head (same parameters and keys): ``N x C`` features -> ``N x V``
    logits. On CUDA the output matmul runs on the ``V x C`` matrix padded with zero rows to a
    multiple of ``vocab_multiple``, and the padding's logits are sliced off, so they are never
    predicted. ``pad_on_cpu=True`` takes that path on CPU tensors too (slower there): how the tests
    run it without a GPU."""

    def __init__(
        self,
        embed_dim,
        output_dim,
        activation_fn,
        weight=None,
        vocab_multiple: int = 64,
        pad_on_cpu: bool = False,
    ):
        super().__init__(embed_dim, output_dim, activation_fn, weight)
        self.vocab_multiple = vocab_multiple
        self.pad_on_cpu = pad_on_cpu

    def forward(
        self, features, masked_tokens=None, targets=None, ignore_index: int = -100, **kwargs
    ):
        """Logits, or with ``targets`` (one per predicted position) the summed cross-entropy of
        them, computed by ``fused_lm_loss`` without the logits (the criterion ``bio_masked_lm``)."""
        if (
            masked_tokens is not None
        ):  # only the predicted positions: fairseq masked_lm's B x T mask, bio_masked_lm's
            features = take_positions(features, masked_tokens)  # flat indices (flat_positions)
        x = self.layer_norm(self.activation_fn(self.dense(features)))
        if targets is not None:
            return fused_lm_loss(x, self.weight, self.bias, targets, ignore_index)
        # Tensor cores want the output width in whole tiles, and dictionaries with <mask> added are
        # often odd-sized (RoBERTa's 50,265; the demo's 16,005). CPU BLAS gains nothing from it
        # (measured slower: the copy and the slice), so it stays off there unless pad_on_cpu asks
        # for it.
        pad = x.is_cuda or self.pad_on_cpu
        return padded_linear(x, self.weight, self.bias, self.vocab_multiple if pad else 1)


FUSED_LM_LOSS = hasattr(F, "linear_cross_entropy")  # torch >= 2.12


def fused_lm_loss(
    x: Tensor, weight: Tensor, bias: Optional[Tensor], targets: Tensor, ignore_index: int
) -> Tensor:
    """The summed cross-entropy of ``x @ weight.T + bias`` (``N x V`` logits) against ``targets``,
    by torch's chunked ``linear_cross_entropy``: the logits are made and reduced a chunk of rows at
    a time, in the inputs' precision with the softmax accumulated in fp32, so the ``N x V`` fp32
    log-probabilities fairseq's masked_lm keeps for the backward pass are never held. Without it (an
    older torch), the logits' fp32 log-softmax as fairseq's.
    """
    if not FUSED_LM_LOSS:
        logits = F.linear(x, weight, bias)
        return F.nll_loss(
            F.log_softmax(logits, dim=-1, dtype=torch.float32),
            targets,
            reduction="sum",
            ignore_index=ignore_index,
        )
    # torch's "sum" is in the inputs' precision: for bf16 inputs 1.3 % off over 3,000 rows
    # (fairseq's fp32 sum: within 0.01 %), so half-precision rows are summed in fp32; fp32 rows
    # keep "sum", which is faster than "none"
    half = x.dtype in (torch.float16, torch.bfloat16)
    loss = F.linear_cross_entropy(
        x,
        weight,
        targets,
        linear_bias=bias,
        reduction="none" if half else "sum",
        ignore_index=ignore_index,
        options=nn.LinearCrossEntropyOptions(),
    )
    return loss.float().sum() if half else loss


def padded_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], multiple: int) -> Tensor:
    """``N x C`` features, ``V x C`` weight, ``V`` bias -> ``N x V`` logits, the matmul run on the
    weight padded with zero rows to a multiple of ``multiple`` and the padding's columns sliced
    off."""
    # Padding per forward copies V x C, cheap against the N x C x V matmul, and keeps the parameter
    # (tied to the embeddings), its optimizer state and every checkpoint as they are.
    vocab = weight.size(0)
    pad = -vocab % multiple
    if pad == 0:
        return F.linear(x, weight, bias)
    bias = F.pad(bias, (0, pad)) if bias is not None else None
    return F.linear(x, F.pad(weight, (0, 0, 0, pad)), bias)[..., :vocab]


class BioRobertaEncoder(RobertaEncoder):
    """RoBERTa encoder over ``BioTransformerEncoder``."""

    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = BioTransformerEncoder(args, dictionary, embed_tokens, args.token_types)
        encoder.apply(init_bert_params)
        return encoder

    def build_lm_head(self, embed_dim, output_dim, activation_fn, weight):
        return BioRobertaLMHead(
            embed_dim, output_dim, activation_fn, weight, self.args.lm_head_vocab_multiple
        )

    def forward(
        self,
        src_tokens,
        features_only=False,
        return_all_hiddens=False,
        masked_tokens=None,
        return_attn=False,
        lm_targets=None,
        lm_ignore_index: int = -100,
        segment_labels=None,
        **unused,
    ):
        """``B x T`` tokens -> (``B x T x V`` logits, or ``B x T x C`` features with
        ``features_only``; only the ``masked_tokens`` positions when given) and the extras dict.
        With ``lm_targets`` (the targets of the ``masked_tokens`` positions) the first is their
        summed cross-entropy instead of the logits (computed inside the forward, so that
        data-parallel and sharded wrappers see the head's weights used there). ``segment_labels``
        (``B x T``): the token types of a model with ``token_types``.
        """
        x, extra = self.extract_features(
            src_tokens,
            return_all_hiddens=return_all_hiddens,
            return_attn=return_attn,
            segment_labels=segment_labels,
        )
        if lm_targets is not None:
            return (
                self.lm_head(
                    x, masked_tokens=masked_tokens, targets=lm_targets, ignore_index=lm_ignore_index
                ),
                extra,
            )
        if not features_only:
            x = self.output_layer(x, masked_tokens=masked_tokens)
        return x, extra

    def extract_features(self, src_tokens, return_all_hiddens=False, return_attn=False, **kwargs):
        encoder_out = self.sentence_encoder(
            src_tokens,
            return_all_hiddens=return_all_hiddens,
            token_embeddings=kwargs.get("token_embeddings", None),
            return_attn=return_attn,
            segment_labels=kwargs.get("segment_labels", None),
        )
        features = encoder_out["encoder_out"][0].transpose(0, 1)  # T x B x C -> B x T x C
        return features, {
            "inner_states": encoder_out["encoder_states"] if return_all_hiddens else None,
            "attn": encoder_out["attn"] if return_attn else None,
        }


def _register(name):
    @register_model_architecture("bio_roberta", name)
    def architecture(cfg):
        apply_architecture(cfg, name)
        base_architecture(cfg)

    return architecture


for _name in ARCHITECTURES:
    _register(_name)
