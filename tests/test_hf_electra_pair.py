"""HF ELECTRA pairs (discriminator ElectraForPreTraining + generator ElectraForMaskedLM, embeddings
shared as ELECTRA trains them) <-> bio_electra, on tiny random pairs built here with a WordPiece
vocabulary learned on PubMed: the import's discriminator and generator logits equal transformers' on
real PubMed sentences (batched, padded, masked), the export gives back the original pair's logits,
ELECTRA pretraining continues from the import through fairseq-hydra-train, ELECTRA-small's narrow
embeddings (projected into both encoders) round-trip too, and inputs the pair's contract excludes
are refused in one line with nothing written."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import logged, run_cli
from helpers.hf_models import (
    BERT_SPECIALS,
    TOL,
    fairseq_ids_of_hf_tokens,
    pair_differences,
    randomise_parameters,
    real_sentences,
)
from omegaconf import OmegaConf

from fairseq_bio import checkpoints, runs
from fairseq_bio.cli.export_hf import cli_main as export_main
from fairseq_bio.cli.import_hf import cli_main as import_main
from fairseq_bio.hf import import_electra_pair, import_hf

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")
TOL = 1e-4
# (discriminator, generator) sizes. "base": embeddings as wide as the discriminator, a 1/2-wide
# generator behind a projection (ELECTRA-base's shape); "small": 16-wide embeddings under a 32-wide
# discriminator and a 24-wide generator, both projected (ELECTRA-small's factorised embeddings).
STYLES = {
    "base": (
        dict(embedding_size=32, hidden_size=32, num_attention_heads=4, intermediate_size=64),
        dict(embedding_size=32, hidden_size=16, num_attention_heads=2, intermediate_size=32),
    ),
    "small": (
        dict(embedding_size=16, hidden_size=32, num_attention_heads=4, intermediate_size=64),
        dict(embedding_size=16, hidden_size=24, num_attention_heads=2, intermediate_size=48),
    ),
}


def save_pair(directory, wordpiece_vocab, style="base", **config):
    """A random tiny HF ELECTRA pair whose generator shares the discriminator's embeddings, each
    saved with the WordPiece tokenizer; returns (discriminator dir, generator dir)."""
    tokenizer = transformers.BertTokenizer(
        vocab=str(wordpiece_vocab / "vocab.txt"), do_lower_case=True
    )
    common = dict(
        vocab_size=len(tokenizer), num_hidden_layers=2, max_position_embeddings=512, **config
    )
    disc_size, gen_size = STYLES[style]
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(**common, **disc_size))
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(**common, **gen_size))
    randomise_parameters(disc, seed=0)
    randomise_parameters(gen, seed=1)
    gen.electra.embeddings.load_state_dict(
        disc.electra.embeddings.state_dict()
    )  # one set, as ELECTRA trains
    assert gen.generator_lm_head.weight is gen.electra.embeddings.word_embeddings.weight  # tied
    dirs = []
    for name, model in (("discriminator", disc), ("generator", gen)):
        model.save_pretrained(Path(directory) / name)
        tokenizer.save_pretrained(Path(directory) / name)
        shutil.copy(wordpiece_vocab / "vocab.txt", Path(directory) / name)
        dirs.append(Path(directory) / name)
    return tuple(dirs)


@pytest.fixture(scope="module")
def pairs(learned_vocab, tmp_path_factory):
    """{style: (discriminator dir, generator dir)}."""
    root = tmp_path_factory.mktemp("pairs")
    return {style: save_pair(root / style, learned_vocab("wordpiece"), style) for style in STYLES}


@pytest.fixture(scope="module")
def imported(pairs, tmp_path_factory):
    """{style: (import dir, what the import printed)}: "base" through the installed console script,
    "small" through the library call."""
    root = tmp_path_factory.mktemp("imported")
    disc, gen = pairs["base"]
    result = run_cli(
        ["fairseq-bio-import-hf", "--checkpoint", disc, "--out", root / "base", "--generator", gen],
        cwd=root,
    )
    lines = []
    import_electra_pair(*pairs["small"], root / "small", log=lines.append)
    return {"base": (root / "base", result.stdout), "small": (root / "small", "\n".join(lines))}


def load_electra(out):
    """(bio_electra, task) loaded from the import directory by fairseq itself."""
    from fairseq import checkpoint_utils

    import fairseq_bio  # noqa: F401  (registration)

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(out / "model.pt")], arg_overrides={"data": str(out)}
    )
    return models[0].eval(), task


def fairseq_batch(task, out, sentences, mask_every=None):
    """fairseq ids of ``sentences`` encoded with the import's own BPE (fairseq's bert BPE over
    vocab.txt), padded; with ``mask_every``, every such token from the second is <mask>."""
    from fairseq.data import encoders

    bpe = encoders.build_bpe(
        OmegaConf.create({"_name": "bert", "bpe_vocab_file": str(out / "vocab.txt")})
    )
    dictionary = task.source_dictionary
    rows = [
        dictionary.encode_line(
            f"<s> {bpe.encode(s)} </s>", append_eos=False, add_if_not_exist=False
        ).long()
        for s in sentences
    ]
    batch = torch.full((len(rows), max(map(len, rows))), dictionary.pad())
    for i, row in enumerate(rows):
        if mask_every:
            row = row.clone()
            row[1 : len(row) - 1 : mask_every] = dictionary.index("<mask>")
        batch[i, : len(row)] = row
    return batch


def hf_batch(tokenizer, sentences, mask_every=None):
    encoded = tokenizer(sentences, padding=True, return_tensors="pt")
    if mask_every:
        for i, n in enumerate(encoded["attention_mask"].sum(1).tolist()):
            encoded["input_ids"][i, 1 : n - 1 : mask_every] = tokenizer.mask_token_id
    return encoded


def worst_differences(hf_dirs, electra, task, out, sentences, hf_to_fs):
    """Largest |difference| of (hidden states, discriminator logits, generator logits) between the
    HF pair and the bio_electra on ``sentences``, batched with padding; the generator also on masked
    copies."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dirs[0]))
    disc = transformers.ElectraForPreTraining.from_pretrained(str(hf_dirs[0])).eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(str(hf_dirs[1])).eval()
    worst = {"hidden": 0.0, "discriminator": 0.0, "generator": 0.0}
    for mask_every in (None, 4):
        encoded, tokens = hf_batch(tokenizer, sentences, mask_every), fairseq_batch(
            task, out, sentences, mask_every
        )
        lengths = encoded["attention_mask"].sum(1).tolist()
        assert tokens.shape == encoded["input_ids"].shape
        with torch.no_grad():
            outputs = {
                "discriminator": disc(**encoded, output_hidden_states=True),
                "generator": gen(**encoded, output_hidden_states=True),
            }
            ours = {
                part: getattr(electra, part)(tokens, return_all_hiddens=True) for part in outputs
            }
            features = {
                part: ours[part]["encoder_out"][0].transpose(0, 1) for part in outputs
            }  # B x T x C
            logits = {
                "discriminator": electra.discriminator_head(features["discriminator"]),
                "generator": electra.generator_head(features["generator"]),
            }
        for row, n in enumerate(lengths):
            assert hf_to_fs[encoded["input_ids"][row, :n]].tolist() == tokens[row, :n].tolist()
            for part in ("discriminator", "generator") if mask_every is None else ("generator",):
                for a, b in zip(outputs[part].hidden_states, ours[part]["encoder_states"]):
                    worst["hidden"] = max(
                        worst["hidden"], (a[row, :n] - b[:n, row]).abs().max().item()
                    )
                ours_logits = logits[part][row, :n]
                if part == "generator":
                    ours_logits = ours_logits[:, hf_to_fs]
                worst[part] = max(
                    worst[part], (outputs[part].logits[row, :n] - ours_logits).abs().max().item()
                )
    return worst


@pytest.mark.parametrize("style", sorted(STYLES))
def test_imported_pair_equals_transformers_on_pubmed(style, pairs, imported, pubmed_corpus):
    out, printed = imported[style]
    assert sorted(p.name for p in out.iterdir()) == [
        "bpe.json",
        "dict.txt",
        "import_info.json",
        "model.pt",
        "vocab.txt",
    ]
    info = json.loads((out / "import_info.json").read_text())
    width = STYLES[style][0]["embedding_size"]
    assert (
        info["model"]["embedding_dim"] == width
        and info["model"]["generator_embed_dim"] == STYLES[style][1]["hidden_size"]
    )
    assert (
        info["check"]["logits_max_abs_diff"] <= TOL and info["check"]["hidden_max_abs_diff"] <= TOL
    )
    assert f"++model.embedding_dim={width}" in info["hydra_overrides"]
    assert "checked on 5 real sentences: token ids equal HF's; hidden states max |diff| " in printed
    if style == "base":
        assert (
            f"wrote {out}/model.pt (ELECTRA pair as bio_electra: discriminator 2 x 32, generator 2 x 16, "
            in printed
        )
        assert (
            f"--config-name bio_electra_base task.data=<data-bin encoded with --vocab {out}> "
            in printed
        )
        assert f"checkpoint.restore_file={out}/model.pt checkpoint.reset_optimizer=true" in printed

    state = checkpoints.load_checkpoint(out / "model.pt")
    assert {state["cfg"][k]["_name"] for k in ("model", "task", "criterion")} == {"bio_electra"}
    assert (
        "generator.embed_tokens.weight" not in state["model"]
        and "generator_head.weight" not in state["model"]
    )
    assert ("discriminator.embed_proj.weight" in state["model"]) == (style == "small")
    assert state["model"]["discriminator.embed_tokens.weight"].shape == (3000, width)

    electra, task = load_electra(out)
    gen, disc = electra.generator, electra.discriminator
    assert gen.embed_tokens.weight is disc.embed_tokens.weight is electra.generator_head.weight
    assert gen.embed_positions.weight is disc.embed_positions.weight
    assert gen.layernorm_embedding.weight is disc.layernorm_embedding.weight
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(pairs[style][0]))
    hf_tokens = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    hf_to_fs = torch.tensor(
        fairseq_ids_of_hf_tokens(task.source_dictionary, hf_tokens, BERT_SPECIALS)
    )
    assert sorted(hf_to_fs.tolist()) == list(range(len(task.source_dictionary)))
    sentences = real_sentences(pubmed_corpus, 24, start=300)
    worst = worst_differences(pairs[style], electra, task, out, sentences, hf_to_fs)
    print(f"{style}: max |diff| vs transformers on {len(sentences)} PubMed sentences: {worst}")
    assert max(worst.values()) <= TOL, worst


@pytest.mark.parametrize("style", sorted(STYLES))
def test_export_gives_back_the_original_pair(
    style, pairs, imported, pubmed_corpus, tmp_path, capsys
):
    out, _ = imported[style]
    export_main(["--checkpoint", str(out / "model.pt"), "--out", str(tmp_path / "hf")])
    printed = capsys.readouterr().out
    assert printed.startswith(
        f"wrote {tmp_path / 'hf'} (discriminator/ ElectraForPreTraining + generator/ "
        "ElectraForMaskedLM, PreTrainedTokenizerFast); checked on 5 real sentences"
    )
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["discriminator", "generator"]
    for part in ("discriminator", "generator"):
        assert sorted(p.name for p in (tmp_path / "hf" / part).iterdir()) == [
            "README.md",
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "vocab.txt",
        ]
    config = json.loads((tmp_path / "hf" / "generator" / "config.json").read_text())
    assert (
        config["architectures"] == ["ElectraForMaskedLM"] and config["tie_word_embeddings"] is True
    )
    assert (config["embedding_size"], config["hidden_size"]) == (
        STYLES[style][1]["embedding_size"],
        STYLES[style][1]["hidden_size"],
    )

    # The exported pair against the original one: the same outputs, HF ids renumbered in fairseq's
    # order.
    original_tok = transformers.AutoTokenizer.from_pretrained(str(pairs[style][0]))
    exported_tok = transformers.AutoTokenizer.from_pretrained(
        str(tmp_path / "hf" / "discriminator")
    )
    classes = {
        "discriminator": transformers.ElectraForPreTraining,
        "generator": transformers.ElectraForMaskedLM,
    }
    sentences = real_sentences(pubmed_corpus, 16, start=500)
    hf_to_fs = None
    worst = 0.0
    for i, part in enumerate(("discriminator", "generator")):
        original = classes[part].from_pretrained(str(pairs[style][i])).eval()
        exported = classes[part].from_pretrained(str(tmp_path / "hf" / part)).eval()
        if part == "generator":
            assert (
                exported.generator_lm_head.weight
                is exported.electra.embeddings.word_embeddings.weight
            )
        if hf_to_fs is None:
            hf_to_fs = torch.empty(len(original_tok), dtype=torch.long)
            for token, hf_id in original_tok.get_vocab().items():
                hf_to_fs[hf_id] = exported_tok.convert_tokens_to_ids(token)
            assert sorted(hf_to_fs.tolist()) == list(range(len(hf_to_fs)))
        for mask_every in (None, 4) if part == "generator" else (None,):
            a, b = hf_batch(original_tok, sentences, mask_every), hf_batch(
                exported_tok, sentences, mask_every
            )
            assert torch.equal(
                hf_to_fs[a["input_ids"]] * a["attention_mask"], b["input_ids"] * b["attention_mask"]
            )
            with torch.no_grad():
                x, y = original(**a).logits, exported(**b).logits
            if part == "generator":
                y = y[..., hf_to_fs]
            keep = a["attention_mask"].bool()
            worst = max(worst, (x[keep] - y[keep]).abs().max().item())
    print(f"{style}: round trip max |logit diff| {worst:.2e}")
    assert worst <= TOL

    if style == "base":  # the exported pair imports back into the same bio_electra
        again = import_electra_pair(
            tmp_path / "hf" / "discriminator",
            tmp_path / "hf" / "generator",
            tmp_path / "again",
            log=lambda line: None,
        )
        assert again["check"]["logits_max_abs_diff"] <= TOL
        first, second = (
            checkpoints.load_checkpoint(d / "model.pt")["model"] for d in (out, tmp_path / "again")
        )
        assert set(first) == set(second) and all(torch.equal(first[k], second[k]) for k in first)


def test_continued_electra_pretraining_from_the_import(
    imported, pubmed_corpus, tmp_path, monkeypatch
):
    """The import restored by fairseq-hydra-train (bio_electra_tiny recipe, the import's model
    options, reset optimizer) on a PubMed slice encoded with the import's vocabulary: it loads at
    update 0, its losses are finite and fall, and the weights move away from the import's only a
    little."""
    from fairseq_bio_preprocess.binarize import binarize
    from fairseq_bio_preprocess.encode import encode_files

    out, _ = imported["base"]
    info = json.loads((out / "import_info.json").read_text())
    inputs = []
    for split, lines in (("train", 3000), ("valid", 300)):
        text = (
            (pubmed_corpus / f"{split}.txt")
            .read_text(encoding="utf-8")
            .splitlines(keepends=True)[:lines]
        )
        (tmp_path / f"{split}.txt").write_text("".join(text), encoding="utf-8")
        inputs.append(tmp_path / f"{split}.txt")
    encoded = [tmp_path / "train.bpe", tmp_path / "valid.bpe"]
    encode_files(out, inputs, encoded, workers=1, progress=False)
    data = binarize(out, encoded[0], encoded[1], tmp_path / "data-bin", workers=1)
    save, log = tmp_path / "ckpt", tmp_path / "train.log"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = run_cli(
        runs.hydra_train(
            "bio_electra_tiny",
            f"task.data={data}",
            f"checkpoint.restore_file={out / 'model.pt'}",
            "checkpoint.reset_optimizer=true",
            "checkpoint.reset_dataloader=true",
            "checkpoint.reset_meters=true",
            "checkpoint.reset_lr_scheduler=true",
            *info["hydra_overrides"],
            "task.tokens_per_sample=64",
            "dataset.batch_size=8",
            "optimization.max_update=40",
            "optimization.lr=[0.001]",
            "lr_scheduler.warmup_updates=5",
            "dataset.disable_validation=true",
            "checkpoint.save_interval_updates=40",
            "checkpoint.no_save_optimizer_state=true",
            "common.log_interval=10",
            "common.tensorboard_logdir=null",
            save_dir=save,
            log=log,
        ),
        cwd=tmp_path,
    )
    assert (
        f"Loaded checkpoint {out / 'model.pt'} (epoch 1 @ 0 updates)"
        in result.stdout + result.stderr
    )
    inner = logged(log, "train_inner")
    assert sorted(inner) == [10, 20, 30, 40]
    losses = {u: (float(e["gen_loss"]), float(e["disc_loss"])) for u, e in inner.items()}
    print("gen_loss / disc_loss per 10 updates:", losses)
    assert all(torch.isfinite(torch.tensor(v)).all() for v in losses.values())
    assert losses[40][0] < losses[10][0] and float(inner[40]["loss"]) < float(inner[10]["loss"])
    before = checkpoints.load_checkpoint(out / "model.pt")["model"]
    after = checkpoints.load_checkpoint(save / "checkpoint_last.pt")["model"]
    assert set(before) == set(after)
    for name in ("discriminator.layers.1.fc1.weight", "generator.layers.1.fc1.weight"):
        change = (after[name] - before[name]).norm() / before[name].norm()
        assert 0 < change < 0.2, (
            name,
            change,
        )  # trained from the import's weights, not from scratch


def _perturb_generator_embeddings(pair):
    from safetensors.torch import load_file, save_file

    path = pair[1] / "model.safetensors"
    state = load_file(str(path))
    state["electra.embeddings.word_embeddings.weight"][5, 0] += 1e-3
    save_file(state, str(path), metadata={"format": "pt"})


def _swap_two_tokens(pair):
    (pair[1] / "tokenizer.json").unlink()
    tokens = (pair[1] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens[100], tokens[101] = tokens[101], tokens[100]
    (pair[1] / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def _set_config(part, **fields):
    def edit(pair):
        path = pair[part] / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))

    return edit


REFUSED = {
    "embeddings not shared": (
        _perturb_generator_embeddings,
        "embeddings.word_embeddings.weight differs from the "
        "discriminator's (max |diff| 1.00e-03); bio_electra shares the embeddings",
    ),
    "directories swapped": (
        lambda pair: None,
        "parameter 'discriminator_predictions.dense.weight' is missing (the "
        "discriminator is an ElectraForPreTraining)",
    ),
    "gelu_new": (
        _set_config(0, hidden_act="gelu_new"),
        "field \"hidden_act\": 'gelu_new'; bio_electra applies one " "activation",
    ),
    "other tokenizer": (
        _swap_two_tokens,
        "the generator's tokenizer differs from the discriminator's",
    ),
    "other positions": (
        _set_config(1, max_position_embeddings=256),
        'field "max_position_embeddings": 256, but the ' "discriminator's is 512",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_pairs_bio_electra_cannot_hold_are_refused_in_one_line(case, pairs, tmp_path):
    pair = tuple(tmp_path / part for part in ("discriminator", "generator"))
    for source, copy in zip(pairs["base"], pair):
        shutil.copytree(source, copy)
    breaker, message = REFUSED[case]
    breaker(pair)
    if case == "directories swapped":
        pair = pair[::-1]
    out = tmp_path / "out" / "imported"
    with pytest.raises(SystemExit) as exit_info:
        import_main(["--checkpoint", str(pair[0]), "--out", str(out), "--generator", str(pair[1])])
    error = str(exit_info.value.code)
    assert (
        error.startswith("fairseq-bio-import-hf: ") and "\n" not in error and message in error
    ), error
    assert not (tmp_path / "out").exists()


def test_the_token_types_reach_the_extracted_discriminator_and_the_export(
    pairs, imported, tmp_path
):
    """The pair import keeps ELECTRA's token-type table (type 0 in the positions, as before, the
    others as differences); continued pretraining never reads it (single texts), the extracted
    discriminator reads pairs as BERT's rows with it, equal to HF's ElectraModel with its
    token_type_ids; the export writes it back."""
    from fairseq_bio.cli.extract_encoder import extract_encoder
    from fairseq_bio.hf.verify import CHECK_PAIRS
    from fairseq_bio.models.bio_roberta import BioRobertaModel

    out, _ = imported["base"]
    state = checkpoints.load_checkpoint(out / "model.pt")
    assert state["cfg"]["model"]["token_types"] == 2
    hf = transformers.ElectraForPreTraining.from_pretrained(str(pairs["base"][0]))
    table = hf.electra.embeddings.token_type_embeddings.weight.detach()
    assert torch.equal(state["model"]["discriminator.segment_embeddings.weight"], table - table[0])
    assert "generator.segment_embeddings.weight" not in state["model"]  # stored once

    extract_encoder(out / "model.pt", tmp_path / "disc" / "model.pt")
    hub = BioRobertaModel.from_pretrained(str(tmp_path / "disc"), "model.pt").eval()
    assert hub.model.args.token_types == 2 and hub.pair_format.segments
    worst = pair_differences(pairs["base"][0], hub, CHECK_PAIRS, "ElectraModel")
    print(f"extracted discriminator, pairs: every layer's states max |diff| {worst:.2e}")
    assert worst <= TOL

    export_main(["--checkpoint", str(out / "model.pt"), "--out", str(tmp_path / "hf")])
    exported = transformers.ElectraForPreTraining.from_pretrained(
        str(tmp_path / "hf" / "discriminator")
    )
    assert exported.config.type_vocab_size == 2
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf" / "discriminator"))
    assert tokenizer(*CHECK_PAIRS[0])["token_type_ids"][-1] == 1


def test_electra_small_discriminator_alone_still_points_at_the_pair_import(
    pairs, imported, tmp_path
):
    from fairseq_bio.cli.extract_encoder import extract_encoder
    from fairseq_bio.errors import BioError

    with pytest.raises(SystemExit) as exit_info:
        import_main(["--checkpoint", str(pairs["small"][0]), "--out", str(tmp_path / "out")])
    assert (
        'field "embedding_size": 16 != hidden_size 32; bio_roberta has no embedding projection'
        in str(exit_info.value.code)
        and "--generator" in str(exit_info.value.code)
    )
    # The base-style discriminator alone still imports as a bio_roberta encoder (a new MLM head, the
    # head dropped).
    info = import_hf(pairs["base"][0], tmp_path / "encoder", log=lambda line: None)
    assert info["model"]["encoder_embed_dim"] == 32 and info["dropped"] == [
        "ELECTRA discriminator head"
    ]
    # An imported ELECTRA-small discriminator reads its embeddings through a projection: no
    # bio_roberta form.
    with pytest.raises(
        BioError,
        match="the discriminator is 32 wide behind a projection from the 16-wide shared "
        "embeddings, which bio_roberta cannot hold; export the pair",
    ):
        extract_encoder(imported["small"][0] / "model.pt", tmp_path / "disc.pt")
    assert not (tmp_path / "disc.pt").exists()


def test_export_refusals(imported, tmp_path):
    out, _ = imported["base"]
    state = checkpoints.load_checkpoint(out / "model.pt")
    # pre-LN: each encoder also has its final LayerNorm (at the layers' width)
    final_norms = {
        f"{part}.layer_norm.{p}": torch.ones(width)
        for part, width in (("discriminator", 32), ("generator", 16))
        for p in ("weight", "bias")
    }
    cases = [
        (
            {"activation_fn": "relu"},
            {},
            "activation_fn 'relu': HF's ELECTRA generator head always applies gelu",
        ),
        (
            {"encoder_normalize_before": True},
            final_norms,
            "pre-LN bio_electra: HF's ELECTRA is post-LN only",
        ),
    ]
    for i, (fields, weights, message) in enumerate(cases):
        edited = {
            **state,
            "cfg": {**state["cfg"], "model": {**state["cfg"]["model"], **fields}},
            "model": {**state["model"], **weights},
        }
        torch.save(edited, tmp_path / f"edited{i}.pt")
        with pytest.raises(SystemExit) as exit_info:
            export_main(
                [
                    "--checkpoint",
                    str(tmp_path / f"edited{i}.pt"),
                    "--out",
                    str(tmp_path / "hf"),
                    "--vocab",
                    str(out),
                ]
            )
        assert message in str(exit_info.value.code) and "\n" not in str(exit_info.value.code)
    with pytest.raises(SystemExit) as exit_info:
        export_main(
            ["--checkpoint", str(out / "model.pt"), "--out", str(tmp_path / "hf"), "--head", "x"]
        )
    assert "--head x: a bio_electra checkpoint has no classification heads" in str(
        exit_info.value.code
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edited0.pt", "edited1.pt"]


def test_embedding_dim_is_off_by_default_and_projects_both_encoders_when_set():
    """bio_electra's embedding_dim: unset, the checkpoint keys are those of every earlier
    bio_electra (the discriminator has no projection; an old config without the field builds the
    same model); narrower, both encoders project the shared embeddings and the generator head maps
    back to their width."""
    from helpers.small_models import DictionaryTask, make_dictionary

    from fairseq_bio.models.bio_electra import BioElectraConfig, BioElectraModel

    dictionary, _ = make_dictionary([f"w{i}" for i in range(24)])
    sizes = dict(
        encoder_layers=2,
        encoder_embed_dim=32,
        encoder_ffn_embed_dim=64,
        encoder_attention_heads=4,
        generator_embed_dim=16,
        generator_ffn_embed_dim=32,
        generator_attention_heads=2,
        max_positions=16,
    )

    def build(cfg):
        torch.manual_seed(0)
        return BioElectraModel.build_model(cfg, DictionaryTask(dictionary))

    default = build(OmegaConf.structured(BioElectraConfig(**sizes)))
    assert default.cfg.embedding_dim == 32 and default.discriminator.embed_proj is None
    assert not any("discriminator.embed_proj" in key for key in default.state_dict())
    saved = OmegaConf.to_container(OmegaConf.structured(BioElectraConfig(**sizes)))
    del saved["embedding_dim"]  # a config saved before the field existed
    old = build(OmegaConf.create(saved))
    assert old.state_dict().keys() == default.state_dict().keys()
    assert all(torch.equal(old.state_dict()[k], v) for k, v in default.state_dict().items())

    narrow = build(OmegaConf.structured(BioElectraConfig(**sizes, embedding_dim=8)))
    assert narrow.discriminator.embed_tokens.weight.shape == (len(dictionary), 8)
    assert narrow.discriminator.embed_proj.weight.shape == (32, 8)
    assert narrow.generator.embed_proj.weight.shape == (16, 8)
    assert narrow.generator_head.dense.weight.shape == (
        8,
        16,
    )  # back to the embeddings' width (tied output)
    assert narrow.discriminator_head.dense.weight.shape == (32, 32)
    tokens = torch.tensor([[0, 5, 6, 7, 2]])
    masked = torch.tensor([[False, True, False, True, False]])
    out = narrow(tokens, original_tokens=tokens, masked_tokens=masked)
    assert out["generator_logits"].shape == (2, len(dictionary)) and out[
        "discriminator_logits"
    ].shape == (1, 5)
