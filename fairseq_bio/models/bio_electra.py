"""bio_electra: ELECTRA's generator and discriminator (Clark et al. 2020; BioELECTRA, Kanakarajan et
al. 2021) as one fairseq model over the foundation's encoder.

The two encoders share the token and position embeddings and the embedding LayerNorm (one Parameter
each, owned by the discriminator and stored once in a checkpoint); the generator is narrower, with a
projection from the embedding width, and its MLM output is tied to the shared token embeddings. The
embedding width is the discriminator's hidden size by default, so the discriminator is exactly a
``bio_roberta`` encoder (``fairseq-bio-extract-encoder`` writes it as one); ``embedding_dim``
narrower than that (ELECTRA-small's 128-wide embeddings under 256-wide layers, which an imported HF
ELECTRA-small pair needs) projects them into the discriminator too, which then has no bio_roberta
form.
"""

import argparse
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.models.roberta.model import base_architecture
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from omegaconf import OmegaConf
from torch import Tensor, nn

from ..data.word_boundaries import special_symbols
from ..modules.electra import (
    DiscriminatorHead,
    GeneratorHead,
    ProjectedTransformerEncoder,
    sample_replacements,
)
from ..modules.masking import flat_positions, take_positions
from .bio_roberta import set_layer_norm_eps

logger = logging.getLogger(__name__)

# Named sizes (discriminator / generator). Generators are 1/3 wide for base (BioELECTRA Table 5:
# 768/256 hidden, 3072/1024 FFN, 12/4 heads) and 1/4 for small and large (ELECTRA's choices), with
# as many layers as the discriminator. ELECTRA-small's 128-wide embeddings are not the default
# (model.embedding_dim=128 gives them): the embeddings are as wide as the discriminator, so that it
# is a plain bio_roberta encoder.
ARCHITECTURES = {
    "bio_electra_tiny": dict(
        encoder_layers=4,
        encoder_embed_dim=256,
        encoder_ffn_embed_dim=1024,
        encoder_attention_heads=4,
        generator_embed_dim=64,
        generator_ffn_embed_dim=256,
        generator_attention_heads=1,
    ),
    "bio_electra_small": dict(
        encoder_layers=12,
        encoder_embed_dim=256,
        encoder_ffn_embed_dim=1024,
        encoder_attention_heads=4,
        generator_embed_dim=64,
        generator_ffn_embed_dim=256,
        generator_attention_heads=1,
    ),
    "bio_electra_base": dict(
        encoder_layers=12,
        encoder_embed_dim=768,
        encoder_ffn_embed_dim=3072,
        encoder_attention_heads=12,
        generator_embed_dim=256,
        generator_ffn_embed_dim=1024,
        generator_attention_heads=4,
    ),
    "bio_electra_large": dict(
        encoder_layers=24,
        encoder_embed_dim=1024,
        encoder_ffn_embed_dim=4096,
        encoder_attention_heads=16,
        generator_embed_dim=256,
        generator_ffn_embed_dim=1024,
        generator_attention_heads=4,
    ),
}
DEFAULT_ARCHITECTURE = "bio_electra_base"

# Parameters the generator shares with the discriminator (names inside each encoder).
SHARED = (
    "embed_tokens.weight",
    "embed_positions.weight",
    "segment_embeddings.weight",
    "layernorm_embedding.weight",
    "layernorm_embedding.bias",
)


@dataclass
class BioElectraConfig(FairseqDataclass):
    encoder_layers: Optional[int] = field(
        default=None, metadata={"help": "discriminator layers (default: the arch's)"}
    )
    encoder_embed_dim: Optional[int] = field(
        default=None,
        metadata={
            "help": "discriminator hidden size, and the embedding width unless embedding_dim is set (default: "
            "the arch's)"
        },
    )
    encoder_ffn_embed_dim: Optional[int] = field(
        default=None, metadata={"help": "discriminator feed-forward size (default: the arch's)"}
    )
    encoder_attention_heads: Optional[int] = field(
        default=None, metadata={"help": "discriminator attention heads (default: the arch's)"}
    )
    embedding_dim: Optional[int] = field(
        default=None,
        metadata={
            "help": "width of the shared embeddings (default: encoder_embed_dim); narrower ones are projected "
            "to each encoder's width, as ELECTRA-small's 128-wide ones are"
        },
    )
    generator_layers: Optional[int] = field(
        default=None, metadata={"help": "generator layers (default: as many as the discriminator)"}
    )
    generator_embed_dim: Optional[int] = field(
        default=None,
        metadata={"help": "generator hidden size; projected from the embeddings when narrower"},
    )
    generator_ffn_embed_dim: Optional[int] = field(
        default=None, metadata={"help": "generator feed-forward size (default: the arch's)"}
    )
    generator_attention_heads: Optional[int] = field(
        default=None, metadata={"help": "generator attention heads (default: the arch's)"}
    )
    encoder_normalize_before: bool = field(
        default=False,
        metadata={"help": "pre-LayerNorm in both encoders (no embedding LayerNorm unless asked)"},
    )
    layernorm_embedding: Optional[bool] = field(
        default=None,
        metadata={"help": "shared embedding LayerNorm (default: on for post-LN, off for pre-LN)"},
    )
    layer_norm_eps: Optional[float] = field(
        default=None, metadata={"help": "epsilon of every LayerNorm (1e-5)"}
    )
    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu", metadata={"help": "activation of the feed-forward layers and heads"}
    )
    dropout: float = field(default=0.1, metadata={"help": "dropout probability"})
    attention_dropout: float = field(
        default=0.1, metadata={"help": "dropout probability of attention weights"}
    )
    activation_dropout: float = field(
        default=0.0, metadata={"help": "dropout probability after the FFN activation"}
    )
    max_positions: int = field(default=512, metadata={"help": "number of learned positions"})
    token_types: int = field(
        default=0,
        metadata={
            "help": "token types (BERT's segment embeddings, shared by both encoders): 0, none; 2, an HF "
            "ELECTRA import's table, unused by pretraining (single texts), kept for the extracted "
            "discriminator and the export, which read pairs as BERT's <s> a </s> b </s>"
        },
    )


def apply_architecture(cfg, name: Optional[str]) -> None:
    """Fill the sizes ``cfg`` leaves unset from the named architecture (base when the name is not
    one), and every other option it leaves unset from ``BioElectraConfig``'s defaults: fairseq's
    command line (``fairseq-train --arch bio_electra_tiny``) gives the model only the options typed,
    leaving the rest to the architecture.
    """
    for key, value in ARCHITECTURES.get(name, ARCHITECTURES[DEFAULT_ARCHITECTURE]).items():
        if getattr(cfg, key, None) is None:
            setattr(cfg, key, value)
    for option in dataclasses.fields(BioElectraConfig):
        if (
            option.default not in (None, dataclasses.MISSING)
            and getattr(cfg, option.name, None) is None
        ):
            setattr(cfg, option.name, option.default)
    if getattr(cfg, "generator_layers", None) is None:
        cfg.generator_layers = cfg.encoder_layers
    if getattr(cfg, "embedding_dim", None) is None:
        cfg.embedding_dim = cfg.encoder_embed_dim
    if getattr(cfg, "layernorm_embedding", None) is None:
        cfg.layernorm_embedding = not cfg.encoder_normalize_before
    if getattr(cfg, "layer_norm_eps", None) is None:
        cfg.layer_norm_eps = 1e-5


def encoder_options(cfg, part: str) -> Dict:
    """The ``bio_roberta`` options of the ``part`` ("discriminator" or "generator") encoder."""
    prefix = "encoder" if part == "discriminator" else "generator"
    options = {
        "encoder_layers": getattr(cfg, f"{prefix}_layers"),
        "encoder_embed_dim": getattr(cfg, f"{prefix}_embed_dim"),
        "encoder_ffn_embed_dim": getattr(cfg, f"{prefix}_ffn_embed_dim"),
        "encoder_attention_heads": getattr(cfg, f"{prefix}_attention_heads"),
    }
    for key in (
        "encoder_normalize_before",
        "layernorm_embedding",
        "layer_norm_eps",
        "activation_fn",
        "dropout",
        "attention_dropout",
        "activation_dropout",
        "max_positions",
        "token_types",
    ):
        options[key] = getattr(cfg, key)
    return options


def _encoder_args(cfg, part: str) -> argparse.Namespace:
    args = argparse.Namespace(**encoder_options(cfg, part))
    base_architecture(args)  # fairseq's RoBERTa defaults for everything else the encoder reads
    return args


@register_model("bio_electra", dataclass=BioElectraConfig)
class BioElectraModel(BaseFairseqModel):
    """Generator (masked LM) and discriminator (replaced-token detection) with shared embeddings.

    ``forward`` runs ELECTRA's step: the generator predicts the masked positions, replacements are
    sampled from it (no gradient), and the discriminator scores every position of the corrupted
    sequence."""

    def __init__(self, cfg, dictionary):
        super().__init__()
        self.cfg = cfg
        embed_tokens = nn.Embedding(len(dictionary), cfg.embedding_dim, dictionary.pad())
        # Both are projected encoders: with the default embedding width the discriminator's
        # projection is absent (no parameter, the keys of a plain BioTransformerEncoder).
        self.discriminator = ProjectedTransformerEncoder(
            _encoder_args(cfg, "discriminator"), dictionary, embed_tokens, cfg.token_types
        )
        self.generator = ProjectedTransformerEncoder(
            _encoder_args(cfg, "generator"), dictionary, embed_tokens, cfg.token_types
        )
        # One copy of each shared module: the generator's own (built above) are replaced by the
        # discriminator's.
        self.generator.embed_positions = self.discriminator.embed_positions
        self.generator.layernorm_embedding = self.discriminator.layernorm_embedding
        self.generator.segment_embeddings = self.discriminator.segment_embeddings
        self.discriminator_head = DiscriminatorHead(cfg.encoder_embed_dim, cfg.activation_fn)
        self.generator_head = GeneratorHead(
            cfg.generator_embed_dim, embed_tokens.weight, cfg.activation_fn
        )
        self.apply(init_bert_params)
        set_layer_norm_eps(self, cfg.layer_norm_eps)
        forbidden = special_symbols(dictionary)
        forbidden[dictionary.unk()] = True
        self.register_buffer(
            "forbidden", forbidden, persistent=False
        )  # never sampled as replacements
        # Rows of the position table a loaded checkpoint had, when loading grew it (None otherwise):
        # the task grows the restored optimizer state to match before the first update.
        self.grown_positions_from: Optional[int] = None

    @classmethod
    def build_model(cls, cfg, task):
        if OmegaConf.is_config(cfg):
            OmegaConf.set_struct(cfg, False)
        apply_architecture(cfg, getattr(cfg, "_name", None) or getattr(cfg, "arch", None))
        if OmegaConf.is_config(cfg):
            OmegaConf.set_struct(cfg, True)
        return cls(cfg, task.source_dictionary)

    def max_positions(self):
        return self.cfg.max_positions

    def generator_logits(self, src_tokens: Tensor, masked_tokens: Tensor) -> Tensor:
        """``B x T`` generator input, ``B x T`` bool or ``N`` flat indices (``flat_positions``) ->
        ``N x V`` logits at the ``N`` masked positions."""
        features = self.generator(src_tokens)["encoder_out"][0].transpose(0, 1)  # B x T x H
        return self.generator_head(take_positions(features, masked_tokens))

    def discriminator_logits(self, src_tokens: Tensor) -> Tensor:
        """``B x T`` tokens -> ``B x T`` replaced-token logits."""
        return self.discriminator_head(
            self.discriminator(src_tokens)["encoder_out"][0].transpose(0, 1)
        )

    def forward(
        self,
        src_tokens: Tensor,
        original_tokens: Tensor,
        masked_tokens: Tensor,
        temperature: float = 1.0,
        generator: Optional[torch.Generator] = None,
        **unused,
    ) -> Dict[str, Tensor]:
        """``B x T`` masked input, ``B x T`` original tokens, ``B x T`` bool positions to predict ->
        dict: ``generator_logits`` ``N x V``, ``generator_targets`` ``N`` (the original tokens
        there), ``sampled_tokens`` ``N``, ``discriminator_tokens`` ``B x T`` (the original with the
        samples in place), ``replaced`` ``B x T`` bool (a sample equal to the original is not a
        replacement), ``discriminator_logits`` ``B x T``.
        """
        # The step's one host read (how many positions), before the generator's forward is queued:
        # on a GPU the host waits for the masking only; the positions then select without reading
        # anything back.
        positions = flat_positions(masked_tokens)
        generator_logits = self.generator_logits(src_tokens, positions)
        generator_targets = take_positions(original_tokens, positions)
        sampled = sample_replacements(
            generator_logits.detach(), self.forbidden, temperature, generator
        )
        corrupted = (
            original_tokens.flatten().index_copy(0, positions, sampled).view_as(original_tokens)
        )
        return {
            "generator_logits": generator_logits,
            "generator_targets": generator_targets,
            "sampled_tokens": sampled,
            "discriminator_tokens": corrupted,
            "replaced": corrupted.ne(original_tokens),
            "discriminator_logits": self.discriminator_logits(corrupted),
        }

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        # The shared parameters are stored once, under the discriminator.
        state = super().state_dict(
            *args, destination=destination, prefix=prefix, keep_vars=keep_vars
        )
        for key in SHARED:
            state.pop(f"{prefix}generator.{key}", None)
        state.pop(f"{prefix}generator_head.weight", None)
        return state

    def upgrade_state_dict_named(self, state_dict, name):
        prefix = name + "." if name else ""
        self._grow_positions(state_dict, prefix + "discriminator.embed_positions.weight")
        for key in SHARED:
            if prefix + "discriminator." + key in state_dict:
                state_dict.setdefault(
                    prefix + "generator." + key, state_dict[prefix + "discriminator." + key]
                )
        embed = state_dict.get(prefix + "discriminator.embed_tokens.weight")
        if embed is not None:
            state_dict.setdefault(prefix + "generator_head.weight", embed)
        super().upgrade_state_dict_named(state_dict, name)

    def _grow_positions(self, state_dict, key: str) -> None:
        # Phase 2 (512 tokens) restores phase 1 (128): the positions phase 1 never saw keep this
        # model's initialisation, the others are taken over.
        saved, current = state_dict.get(key), self.discriminator.embed_positions.weight
        if (
            saved is not None
            and saved.size(0) < current.size(0)
            and saved.size(1) == current.size(1)
        ):
            logger.info(
                "position embeddings grown from %d to %d rows", saved.size(0), current.size(0)
            )
            grown = current.detach().clone().to(saved)
            grown[: saved.size(0)] = saved
            state_dict[key] = grown
            self.grown_positions_from = saved.size(0)


def _register(name):
    @register_model_architecture("bio_electra", name)
    def architecture(cfg):
        apply_architecture(cfg, name)

    return architecture


for _name in ARCHITECTURES:
    _register(_name)
