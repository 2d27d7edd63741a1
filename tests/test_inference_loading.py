"""One way to a model for inference: fairseq-bio-predict's loader, the hub interface behind
export-hf and import-hf's check, and ``BioRobertaModel.from_pretrained`` load the same model from
the same checkpoint, and find its vocabulary where a user left it."""

import shutil

import pytest
import torch

from fairseq_bio.files import InputError


def _same_parameters(a, b) -> None:
    left, right = a.state_dict(), b.state_dict()
    assert left.keys() == right.keys()
    for key in left:
        assert torch.equal(left[key], right[key]), key


def test_a_fine_tuned_checkpoint_loads_the_same_every_way(ner_model):
    from fairseq_bio.hub import hub_interface
    from fairseq_bio.inference.loading import load_fine_tuned
    from fairseq_bio.models.bio_roberta import BioRobertaModel

    save_dir = ner_model[0]
    checkpoint = save_dir / "checkpoint_last.pt"
    task, model = load_fine_tuned(str(checkpoint), cpu=True)
    hub = hub_interface(checkpoint)
    pretrained = BioRobertaModel.from_pretrained(str(save_dir), "checkpoint_last.pt")
    assert not model.training and not hub.model.training
    assert type(hub.task) is type(task) and task.labels == hub.task.labels
    _same_parameters(model, hub.model)
    _same_parameters(model, pretrained.model)
    tokens = hub.encode("BRCA1 mutations cause breast cancer.")
    assert tokens[0] == task.source_dictionary.bos() and len(tokens) > 4
    assert torch.equal(tokens, pretrained.encode("BRCA1 mutations cause breast cancer."))


def test_a_pretraining_checkpoint_reads_its_vocabulary_from_its_data(tiny_encoder, tmp_path):
    from fairseq_bio.hub import hub_interface

    alone = tmp_path / "checkpoint_last.pt"  # nothing beside it: the data-bin it records is used
    shutil.copy(tiny_encoder, alone)
    hub = hub_interface(alone)
    features = hub.extract_features(hub.encode("Aspirin inhibits platelet aggregation."))
    assert features.shape[-1] == hub.model.args.encoder_embed_dim


def test_a_fine_tuned_checkpoint_apart_from_its_vocabulary_finds_it_through_its_encoder(
    ner_model, tmp_path
):
    from fairseq_bio.inference.loading import load_fine_tuned

    alone = tmp_path / "checkpoint_last.pt"
    shutil.copy(ner_model[0] / "checkpoint_last.pt", alone)
    task, _ = load_fine_tuned(str(alone), cpu=True)
    assert task.vocab_dir != str(tmp_path)
    assert (ner_model[0] / "dict.txt").read_text() == open(f"{task.vocab_dir}/dict.txt").read()


def test_a_pretraining_checkpoint_is_refused_where_a_fine_tuned_one_is_asked(tiny_encoder):
    from fairseq_bio.inference.loading import load_fine_tuned

    with pytest.raises(InputError, match=r"a bio_masked_lm checkpoint, not a bio_tagging or "):
        load_fine_tuned(str(tiny_encoder), cpu=True)
