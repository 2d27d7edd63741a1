"""Each seed paper's pretraining recipe composes to the values its paper gives, value by value, with
the section that gives it (and the values a paper leaves open are the ones its header says it took
from elsewhere)."""

import pytest
import torch
from helpers.hydra_configs import composer, job_config
from helpers.small_models import DictionaryTask, make_dictionary, model_args

import fairseq_bio  # noqa: F401  (registers the architectures)
from fairseq_bio.models.bio_electra import ARCHITECTURES as ELECTRA_SIZES
from fairseq_bio.models.bio_roberta import PRE_LN_ARCHITECTURES, BioRobertaModel

REQUIRED = {"_512": ["checkpoint.restore_file=/phase1/checkpoint_last.pt"]}

# (config, dotted key, expected, source). "sequences" is batch_size x update_freq on one GPU.
TABLE = [
    # bio-lm, Lewis et al. 2020 (seed 000)
    (
        "bio_roberta_base",
        "task.tokens_per_sample",
        512,
        "000 sec. 5.1: input sequences of 512 tokens",
    ),
    ("bio_roberta_base", "task.mask_prob", 0.15, "000 sec. 5.1: 15 % masked"),
    ("bio_roberta_base", "task.mask_whole_words", False, "000 sec. 5.1: RoBERTa's token masking"),
    ("bio_roberta_base", "task.mask_prob_schedule", "", "000 sec. 5.1: a constant rate"),
    (
        "bio_roberta_base",
        "task.mask_budget",
        "words",
        "000 sec. 5.1: fairseq's masking (MaskTokensDataset)",
    ),
    (
        "bio_roberta_base",
        "task.exempt_from_weight_decay",
        False,
        "000: fairseq's adam decays every weight",
    ),
    ("bio_roberta_base", "optimizer._name", "adam", "000 sec. 5.1: fairseq's AdamW"),
    ("bio_roberta_base", "sequences", 8192, "000 sec. 5.1: batches of 8,192 sequences"),
    (
        "bio_roberta_base",
        "optimizer.adam_betas",
        "(0.9,0.98)",
        "000 sec. 5.1: AdamW beta1 0.9, beta2 0.98",
    ),
    ("bio_roberta_base", "optimizer.adam_eps", 1e-6, "000 sec. 5.1: eps 1e-6"),
    ("bio_roberta_base", "optimizer.weight_decay", 0.01, "000 sec. 5.1: weight decay 0.01"),
    ("bio_roberta_base", "model.dropout", 0.1, "000 sec. 5.1: dropout 0.1"),
    ("bio_roberta_base", "optimization.max_update", 500000, "000 sec. 5.1: 500k steps"),
    (
        "bio_roberta_base",
        "lr_scheduler.warmup_updates",
        25000,
        "000 sec. 5.1: warm-up over the first 5 %",
    ),
    ("bio_roberta_base", "lr_scheduler.end_learning_rate", 0.0, "000 sec. 5.1: linear decay to 0"),
    ("bio_roberta_base", "optimization.lr", [6e-4], "000 sec. 5.1: 6e-4 for base models"),
    ("bio_roberta_base", "common.fp16", True, "000 sec. 5.1: mixed precision"),
    ("bio_roberta_large", "optimization.lr", [4e-4], "000 sec. 5.1: 4e-4 for large models"),
    ("bio_roberta_large", "task.mask_whole_words", False, "000 sec. 5.1"),
    # BioELECTRA, Kanakarajan et al. 2021 (seed 003)
    ("bio_electra_base", "task.mask_prob", 0.15, "003 Table 5: mask percent 15"),
    (
        "bio_electra_base",
        "task.mask_whole_words",
        False,
        "003 App. A: the original ELECTRA code (token masking)",
    ),
    ("bio_electra_base", "task.tokens_per_sample", 128, "003 App. A: phase 1 on 128 tokens"),
    (
        "bio_electra_base",
        "task.mask_budget",
        "tokens",
        "ELECTRA's mask(): round(0.15 x tokens) positions",
    ),
    (
        "bio_electra_base",
        "task.leave_unmasked_prob",
        0.15,
        "ELECTRA's mask(): [MASK] at 85 %, the token kept at 15 %",
    ),
    ("bio_electra_base", "task.random_token_prob", 0.0, "ELECTRA's mask(): no random replacement"),
    (
        "bio_electra_base",
        "task.exempt_from_weight_decay",
        True,
        "ELECTRA's optimizer: LayerNorm, biases not decayed",
    ),
    (
        "bio_electra_base",
        "optimizer._name",
        "bio_adamw",
        "the exemption needs an optimizer that reads it",
    ),
    (
        "bio_electra_base",
        "common.fp16_no_flatten_grads",
        True,
        "the exemption needs per-parameter master weights",
    ),
    ("bio_electra_base", "optimization.max_update", 900000, "003 App. A: 90 % of the 1M steps"),
    ("bio_electra_base", "lr_scheduler.total_num_update", 1000000, "003 Table 5: 1M train steps"),
    ("bio_electra_base", "lr_scheduler.warmup_updates", 10000, "003 Table 5: warm-up 10,000"),
    ("bio_electra_base", "optimization.lr", [2e-4], "003 Table 5: learning rate 2e-4"),
    ("bio_electra_base", "optimizer.adam_eps", 1e-6, "003 Table 5: Adam eps 1e-6"),
    (
        "bio_electra_base",
        "optimizer.adam_betas",
        "(0.9,0.999)",
        "003 Table 5: beta1 0.9, beta2 0.999",
    ),
    ("bio_electra_base", "optimizer.weight_decay", 0.01, "003 Table 5: weight decay 0.01"),
    ("bio_electra_base", "model.attention_dropout", 0.1, "003 Table 5: attention dropout 0.1"),
    ("bio_electra_base", "sequences", 512, "003 Table 5: batch size 512"),
    ("bio_electra_base_512", "task.tokens_per_sample", 512, "003 App. A: phase 2 on 512 tokens"),
    ("bio_electra_base_512", "optimization.max_update", 1000000, "003 App. A: the last 10 %"),
    ("bio_electra_base_512", "task.mask_whole_words", False, "003 App. A"),
    # PubMedBERT, Gu et al. 2020 (seed 001)
    ("bio_pubmedbert", "task.mask_whole_words", True, "001 sec. 6.1: whole-word masking"),
    ("bio_pubmedbert", "task.mask_prob", 0.15, "001 sec. 6.1: masking rate of 15 %"),
    (
        "bio_pubmedbert",
        "task.mask_prob_schedule",
        "",
        "001 sec. 6.1: a constant rate (sec. 2.3's rise is [36]'s)",
    ),
    (
        "bio_pubmedbert",
        "task.mask_budget",
        "tokens",
        "BERT's create_pretraining_data.py: 15 % of the tokens",
    ),
    (
        "bio_pubmedbert",
        "task.mask_decision",
        "token",
        "BERT's create_pretraining_data.py: 80/10/10 per token",
    ),
    (
        "bio_pubmedbert",
        "task.exempt_from_weight_decay",
        True,
        "BERT's optimizer: LayerNorm and biases not decayed",
    ),
    (
        "bio_pubmedbert",
        "optimizer._name",
        "bio_adamw",
        "the exemption needs an optimizer that reads it",
    ),
    (
        "bio_pubmedbert",
        "common.fp16_no_flatten_grads",
        True,
        "the exemption needs per-parameter master weights",
    ),
    ("bio_pubmedbert", "optimization.lr", [6e-4], "001 sec. 6.1: peak rate 6e-4"),
    (
        "bio_pubmedbert",
        "lr_scheduler.warmup_updates",
        6250,
        "001 sec. 6.1: warm-up in the first 10 % of steps",
    ),
    ("bio_pubmedbert", "lr_scheduler.total_num_update", 62500, "001 sec. 6.1: 62,500 steps"),
    (
        "bio_pubmedbert",
        "lr_scheduler.end_learning_rate",
        0.0,
        "001 sec. 6.1: decays linearly to zero",
    ),
    ("bio_pubmedbert", "sequences", 8192, "001 sec. 6.1: batch size of 8,192"),
    (
        "bio_pubmedbert",
        "model._name",
        "bio_roberta_base",
        "001 sec. 6.1: BERT-base (Table 5 compares base models)",
    ),
    (
        "bio_pubmedbert",
        "model.layer_norm_eps",
        1e-12,
        "BERT's, which PubMedBERT is (the released config)",
    ),
    (
        "bio_pubmedbert",
        "task.tokens_per_sample",
        128,
        "NVIDIA's BERT recipe (001 footnote 5): phase 1 on 128",
    ),
    (
        "bio_pubmedbert",
        "optimization.max_update",
        56250,
        "NVIDIA's BERT recipe: 90 % of the steps in phase 1",
    ),
    ("bio_pubmedbert_512", "task.tokens_per_sample", 512, "NVIDIA's BERT recipe: phase 2 on 512"),
    ("bio_pubmedbert_512", "optimization.max_update", 62500, "001 sec. 6.1: 62,500 steps in all"),
    ("bio_pubmedbert_512", "sequences", 8192, "001 sec. 6.1"),
    ("bio_pubmedbert_512", "task.mask_whole_words", True, "001 sec. 6.1"),
    ("bio_pubmedbert_512", "task.mask_budget", "tokens", "BERT's create_pretraining_data.py"),
    # BioMegatron, Shin et al. 2020 (seed 002); optimisation from Megatron-LM, the code sec. 3 names
    *[
        (
            f"bio_megatron_{size}",
            "model._name",
            f"bio_megatron_{size}",
            "002 sec. 3: 345m, 800m and 1.2b",
        )
        for size in ("345m", "800m", "1_2b")
    ],
    *[
        (
            f"bio_megatron_{size}",
            "model.encoder_normalize_before",
            True,
            "002 sec. 3: pre-LayerNorm (Megatron-LM's)",
        )
        for size in ("345m", "800m", "1_2b")
    ],
    ("bio_megatron_345m", "task.tokens_per_sample", 512, "Megatron-LM BERT: sequence length 512"),
    ("bio_megatron_345m", "sequences", 1024, "Megatron-LM BERT: batch size 1,024"),
    ("bio_megatron_345m", "optimization.lr", [1e-4], "Megatron-LM BERT: lr 1e-4"),
    (
        "bio_megatron_345m",
        "lr_scheduler.warmup_updates",
        10000,
        "Megatron-LM BERT: warm-up 10,000 iterations",
    ),
    ("bio_megatron_345m", "optimization.max_update", 2000000, "Megatron-LM BERT: 2M iterations"),
    ("bio_megatron_1_2b", "sequences", 1024, "Megatron-LM BERT"),
    (
        "bio_megatron_800m",
        "task.mask_whole_words",
        True,
        "Megatron-LM BERT data: whole words (do_whole_word_mask)",
    ),
    (
        "bio_megatron_800m",
        "task.mask_budget",
        "tokens",
        "Megatron-LM create_masked_lm_predictions: 15 % of tokens",
    ),
    (
        "bio_megatron_800m",
        "task.mask_decision",
        "token",
        "Megatron-LM create_masked_lm_predictions: per token",
    ),
    (
        "bio_megatron_345m",
        "task.exempt_from_weight_decay",
        True,
        "Megatron-LM: LayerNorm and biases not decayed",
    ),
    (
        "bio_megatron_345m",
        "optimizer._name",
        "bio_adamw",
        "the exemption needs an optimizer that reads it",
    ),
]

# Sizes (layers, width, FFN, heads) and, for the vocabulary the paper used, the parameter count it
# is named by.
MEGATRON = {
    "bio_megatron_345m": ((24, 1024, 4096, 16), 50000, 345e6),  # Bio-vocab-50k (Table 1)
    "bio_megatron_800m": ((36, 1280, 5120, 20), 50000, 800e6),
    "bio_megatron_1_2b": ((24, 2048, 8192, 32), 30522, 1.2e9),  # BERT-uncased (Table 1)
}


@pytest.fixture(scope="module")
def compose():
    """One hydra composer for the module (hydra holds one global config directory at a time)."""
    with composer() as compose:
        yield compose


@pytest.fixture(scope="module")
def jobs(compose):
    """Each config of TABLE composed and resolved as fairseq-hydra-train's job gets it."""
    names = sorted({row[0] for row in TABLE})
    return {
        name: job_config(compose(name, ["task.data=/data", *REQUIRED.get(name[-4:], [])]))
        for name in names
    }


def value(job, key):
    if key == "sequences":
        return job.dataset.batch_size * job.optimization.update_freq[0]
    node = job
    for part in key.split("."):
        node = node[part]
    return node


@pytest.mark.parametrize(
    "config, key, expected, source", TABLE, ids=[f"{r[0]}:{r[1]}" for r in TABLE]
)
def test_recipe_value_is_the_papers(jobs, config, key, expected, source):
    got = value(jobs[config], key)
    if isinstance(expected, float):
        assert got == pytest.approx(expected), source
    else:
        assert got == expected, source


def test_phase_two_changes_only_the_block_length_and_the_steps(jobs):
    for first, second in (
        ("bio_pubmedbert", "bio_pubmedbert_512"),
        ("bio_electra_base", "bio_electra_base_512"),
    ):
        a, b = jobs[first], jobs[second]
        assert (
            a.lr_scheduler == b.lr_scheduler
            and a.optimizer == b.optimizer
            and a.criterion == b.criterion
        )
        assert (
            a.model.max_positions == b.model.max_positions == 512
        )  # phase 1 already holds 512 positions
        assert value(a, "sequences") == value(b, "sequences")


def test_electra_sizes_are_table_5s():
    base = ELECTRA_SIZES["bio_electra_base"]
    assert (base["encoder_layers"], base["encoder_embed_dim"], base["generator_embed_dim"]) == (
        12,
        768,
        256,
    )
    assert (base["encoder_ffn_embed_dim"], base["generator_ffn_embed_dim"]) == (3072, 1024)
    assert (base["encoder_attention_heads"], base["generator_attention_heads"]) == (12, 4)


@pytest.mark.parametrize("arch", sorted(MEGATRON))
def test_megatron_sizes_are_pre_ln_and_their_parameter_counts(arch, monkeypatch):
    """Built on the meta device (no memory): pre-LN by name, even where a config says otherwise, and
    within 10 % of the size the paper names it by, at the vocabulary the paper paired it with."""
    import fairseq.models.roberta.model as roberta

    import fairseq_bio.models.bio_roberta as bio_roberta

    for module in (
        roberta,
        bio_roberta,
    ):  # BERT's init copies through the CPU, which a meta tensor cannot
        monkeypatch.setattr(module, "init_bert_params", lambda m: None)
    (layers, width, ffn, heads), vocab, named = MEGATRON[arch]
    dictionary, _ = make_dictionary([f"w{i}" for i in range(vocab - 5)])
    args = model_args(arch, encoder_normalize_before=False)
    assert (
        arch in PRE_LN_ARCHITECTURES
        and args.encoder_normalize_before
        and not args.layernorm_embedding
    )
    assert (args.encoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim) == (
        layers,
        width,
        ffn,
    )
    assert args.encoder_attention_heads == heads and width // heads == 64
    with torch.device("meta"):
        model = BioRobertaModel.build_model(args, DictionaryTask(dictionary))
    encoder = model.encoder.sentence_encoder
    assert len(encoder.layers) == layers and encoder.layer_norm is not None  # pre-LN's final norm
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - named) / named < 0.1, count


# The papers' fine-tuning recipes (recipe/finetune_*): (config, recipe, dotted key, expected,
# source). "sequences" as above; "head" the hidden layers' (count, width, dropout); "layers" the
# model's parameters by lr scale.
FINETUNE_CONFIGS = {
    "bio_tagging_ner": [],
    "bio_sentence_prediction": ["sentence_task=re_gad"],
    "bio_extractive_qa": [],
}
FINETUNE = [
    # BioELECTRA, Kanakarajan et al. 2021 (seed 003), Tables 6-7
    *[
        (config, "finetune_bioelectra", key, expected, source)
        for config in ("bio_tagging_ner", "bio_sentence_prediction")
        for key, expected, source in [
            ("optimizer.groups.default.optimizer.adam_eps", 1e-6, "003 Table 6: Adam eps 1e-6"),
            (
                "optimizer.groups.default.optimizer.adam_betas",
                "(0.9,0.999)",
                "003 Table 6: beta1 0.9, beta2 0.999",
            ),
            ("optimizer.groups.default.optimizer.weight_decay", 0.0, "003 Table 6: weight decay 0"),
            ("task.layer_lr_decay", 0.8, "003 Table 6: layer-wise lr decay 0.8"),
            (
                "optimizer.groups.default.lr_scheduler.end_learning_rate",
                0.0,
                "003 Table 6: linear decay",
            ),
            ("warmup_fraction", 0.1, "003 Table 6: warm-up fraction 0.1"),
            ("model.dropout", 0.1, "003 Table 6: dropout 0.1"),
            ("model.attention_dropout", 0.1, "003 Table 6: attention dropout 0.1"),
            ("task.head_hidden_layers", 0, "003 sec. 4: a simple linear layer"),
        ]
    ],
    ("bio_tagging_ner", "finetune_bioelectra", "task.crf", False, "003 sec. 4: no LSTM or CRF"),
    ("bio_tagging_ner", "finetune_bioelectra", "task.lstm_layers", 0, "003 sec. 4: no LSTM or CRF"),
    (
        "bio_tagging_ner",
        "finetune_bioelectra",
        "optimizer.groups.default.lr_float",
        2e-4,
        "003 Table 7: lr 2e-4",
    ),
    (
        "bio_tagging_ner",
        "finetune_bioelectra",
        "sequences",
        32,
        "003 Table 7: NCBI-disease batch 32",
    ),
    (
        "bio_tagging_ner",
        "finetune_bioelectra",
        "optimization.max_epoch",
        5,
        "003 Table 7: NCBI-disease 5 epochs",
    ),
    (
        "bio_tagging_ner",
        "finetune_bioelectra",
        "optimization.max_update",
        5 * 170,
        "5 epochs of 5,424 at 32",
    ),
    # BioMegatron, Shin et al. 2020 (seed 002), Table 1 (NER, RE) and Table 2 (QA)
    *[
        (config, "finetune_biomegatron", key, expected, source)
        for config in ("bio_tagging_ner", "bio_sentence_prediction")
        for key, expected, source in [
            (
                "head",
                (1, 1024, 0.5),
                "002 Table 1: num-fc-layers 2 (output layer counted), fc-hidden-size 1024, "
                "fc-dropout 0.5",
            ),
            ("task.max_positions", 128, "002 Table 1: max-seq-length 128"),
            ("optimizer.groups.default.optimizer._name", "adam", "002 Table 1: Adam"),
        ]
    ],
    # (bio_sentence_prediction's sentence_task preset comes after the recipe: its epochs, batch and
    # lr win there)
    (
        "bio_tagging_ner",
        "finetune_biomegatron",
        "optimizer.groups.default.lr_float",
        5e-5,
        "002 Table 1: lr 5e-5",
    ),
    (
        "bio_tagging_ner",
        "finetune_biomegatron",
        "optimization.max_epoch",
        30,
        "002 Table 1: 30 epochs",
    ),
    (
        "bio_tagging_ner",
        "finetune_biomegatron",
        "optimization.max_update",
        30 * 170,
        "30 epochs of 5,424 at 32",
    ),
    (
        "bio_extractive_qa",
        "finetune_biomegatron_qa",
        "head",
        (1, 2048, 0.1),
        "002 Table 2: num-fc-layers 2, fc-hidden-size 2048, fc-dropout 0.1",
    ),
    (
        "bio_extractive_qa",
        "finetune_biomegatron_qa",
        "task.max_positions",
        512,
        "002 Table 2: max-seq-length 512",
    ),
    (
        "bio_extractive_qa",
        "finetune_biomegatron_qa",
        "optimizer.groups.default.lr_float",
        3e-5,
        "002 Table 2: 3e-5",
    ),
    (
        "bio_extractive_qa",
        "finetune_biomegatron_qa",
        "optimization.max_epoch",
        30,
        "002 Table 2: 30 epochs on BioASQ",
    ),
    (
        "bio_extractive_qa",
        "finetune_biomegatron_qa",
        "sequences",
        1024,
        "002 sec. 5.3: 64 per GPU x 16 GPUs",
    ),
    (
        "bio_extractive_qa",
        "finetune_biomegatron_qa",
        "optimization.max_update",
        30 * 6,
        "30 epochs of 5,537 at 1,024",
    ),
    # Compact models, Rohanian et al. 2022 (seed 004), sec. 5
    (
        "bio_tagging_ner",
        "finetune_compact_ner",
        "optimization.max_epoch",
        5,
        "004 sec. 5: 5 epochs",
    ),
    ("bio_tagging_ner", "finetune_compact_ner", "sequences", 16, "004 sec. 5: batch size 16"),
    (
        "bio_tagging_ner",
        "finetune_compact_ner",
        "optimizer.groups.default.lr_float",
        5e-5,
        "004 sec. 5: lr 5e-5",
    ),
    ("bio_tagging_ner", "finetune_compact_ner", "optimization.lr", [5e-5], "004 sec. 5: lr 5e-5"),
    (
        "bio_tagging_ner",
        "finetune_compact_ner",
        "task.label_all_subtokens",
        True,
        "004 sec. 5: labels on all sub-words",
    ),
    (
        "bio_tagging_ner",
        "finetune_compact_ner",
        "optimization.max_update",
        5 * 339,
        "5 epochs of 5,424 at 16",
    ),
]


@pytest.fixture(scope="module")
def finetune_jobs(compose):
    """Each (config, recipe) of FINETUNE composed and resolved as fairseq-hydra-train's job gets
    it."""
    required = ["task.data=/data", "checkpoint.restore_file=/encoder/checkpoint_best.pt"]
    return {
        (config, recipe): job_config(
            compose(config, [*required, *FINETUNE_CONFIGS[config], f"recipe={recipe}"])
        )
        for config, recipe in sorted({row[:2] for row in FINETUNE})
    }


def finetune_value(job, key):
    if key == "warmup_fraction":
        return (
            job.optimizer.groups.default.lr_scheduler.warmup_updates / job.optimization.max_update
        )
    if key == "head":
        return (job.task.head_hidden_layers, job.task.head_hidden_size, job.task.head_dropout)
    return value(job, key)


@pytest.mark.parametrize(
    "config, recipe, key, expected, source",
    FINETUNE,
    ids=[f"{r[0]}:{r[1]}:{r[2]}" for r in FINETUNE],
)
def test_finetune_recipe_value_is_the_papers(finetune_jobs, config, recipe, key, expected, source):
    got = finetune_value(finetune_jobs[config, recipe], key)
    if isinstance(expected, float):
        assert got == pytest.approx(expected), source
    else:
        assert got == expected, source


def test_finetune_recipes_keep_the_schedule_consistent(finetune_jobs):
    """Every recipe's scheduler runs over its own max_update, with the warm-up 10 % of it
    (PubMedBERT's)."""
    for (config, recipe), job in finetune_jobs.items():
        scheduler = job.optimizer.groups.default.lr_scheduler
        assert scheduler.total_num_update == job.optimization.max_update, (config, recipe)
        assert scheduler.warmup_updates == round(job.optimization.max_update / 10), (config, recipe)
        assert job.optimization.lr == [job.optimizer.groups.default.lr_float], (config, recipe)


# Pretraining recipes on a tiny model, CPU: the BERT/ELECTRA/Megatron-LM ones leave biases and
# LayerNorm weights out of weight decay (their code's exclusion lists), bio-lm decays every
# parameter (fairseq's RoBERTa).
TINY = {
    "bio_pubmedbert": [
        "model.encoder_layers=1",
        "model.encoder_embed_dim=32",
        "model.encoder_ffn_embed_dim=64",
        "model.encoder_attention_heads=2",
    ],
    "bio_megatron_345m": [
        "model.encoder_layers=1",
        "model.encoder_embed_dim=32",
        "model.encoder_ffn_embed_dim=64",
        "model.encoder_attention_heads=2",
    ],
    "bio_electra_base": [
        "model.encoder_layers=1",
        "model.encoder_embed_dim=32",
        "model.encoder_ffn_embed_dim=64",
        "model.encoder_attention_heads=2",
        "model.generator_embed_dim=16",
        "model.generator_ffn_embed_dim=32",
        "model.generator_attention_heads=2",
    ],
}


def tiny_trainer(compose, data, config, *overrides):
    from fairseq import tasks
    from fairseq.trainer import Trainer

    cfg = job_config(
        compose(
            config,
            [
                f"task.data={data}",
                "common.cpu=true",
                "optimization.lr=[1.0]",
                "lr_scheduler.warmup_updates=0",
                *TINY.get(config, TINY["bio_pubmedbert"]),
                *overrides,
            ],
        )
    )
    task = tasks.setup_task(cfg.task)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    return task, model, Trainer(cfg, task, model, criterion)


def is_exempt(model, name):
    norms = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    return name.rpartition(".")[2].startswith("bias") or name in norms


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("config", sorted(TINY))
def test_bert_recipes_do_not_decay_biases_and_layer_norms(compose, data_bin, config, precision):
    """One AdamW step with zero gradients is weight decay alone: every weight is scaled by 1 - lr x
    0.01, biases and LayerNorm weights stay (in fp16 too, where the optimizer holds one fp32 master
    copy per parameter), and the optimizer's state, two groups, loads back into a new one (a resumed
    run)."""
    from fairseq_bio.tasks.bio_masked_lm import check_weight_decay_exemption

    task, model, trainer = tiny_trainer(
        compose, data_bin("wordpiece"), config, f"precision={precision}"
    )
    with torch.no_grad():
        for param in model.parameters():
            param.fill_(
                1.0
            )  # before the optimizer copies them: biases start at 0, where decay shows nothing
    optimizer = trainer.optimizer
    assert type(getattr(optimizer, "fp32_optimizer", optimizer)).__name__ == "BioAdamW"
    assert sorted(g["weight_decay"] for g in optimizer.param_groups) == [0.0, 0.01]
    check_weight_decay_exemption(optimizer)  # what train_step checks at the first update
    optimizer.backward(
        sum(param.sum() for param in trainer.model.parameters()) * 0.0
    )  # zero gradients
    optimizer.step()
    exempt = 0
    for name, param in trainer.model.named_parameters():
        expected = 1.0 if is_exempt(model, name) else 1.0 - 0.01
        exempt += expected == 1.0
        assert param.float().sub(expected).abs().max() < 1e-3, name
    assert (
        exempt >= 8
    )  # the embedding LayerNorm, each layer's two LayerNorms, their biases and the heads'
    trainer2 = tiny_trainer(compose, data_bin("wordpiece"), config, f"precision={precision}")[2]
    trainer2.optimizer.load_state_dict(optimizer.state_dict())


def test_biolm_recipe_decays_every_weight_and_refuses_the_exemption_with_fairseqs_adam(
    compose, data_bin
):
    """bio-lm keeps fairseq's adam, which decays every parameter; asking it for the exemption stops
    at the first update with the option to change, as does an optimizer over fairseq's flat fp16
    master copy (no parameter carries the mark)."""
    from fairseq_bio.errors import BioConfigError
    from fairseq_bio.optim.bio_adamw import BioAdamW, BioAdamWConfig
    from fairseq_bio.tasks.bio_masked_lm import check_weight_decay_exemption

    data = data_bin("wordpiece")
    _, _, trainer = tiny_trainer(compose, data, "bio_roberta_base", "precision=fp32")
    assert [g["weight_decay"] for g in trainer.optimizer.param_groups] == [0.01]
    exempt = ("precision=fp32", "task.exempt_from_weight_decay=true")
    _, _, trainer = tiny_trainer(compose, data, "bio_roberta_base", *exempt)
    with pytest.raises(
        BioConfigError, match=r"^task.exempt_from_weight_decay=true: .* optimizer._name=bio_adamw"
    ):
        check_weight_decay_exemption(trainer.optimizer)
    flat = BioAdamW(
        BioAdamWConfig(weight_decay=0.01, lr=[1e-3]), [torch.nn.Parameter(torch.zeros(10))]
    )
    with pytest.raises(BioConfigError, match="fp16_no_flatten_grads=true"):
        check_weight_decay_exemption(flat)
