"""LinearChainCRF against brute-force enumeration of every tag path on tiny inputs; gradients,
training on a task where transitions matter, half precision, BIO/BIOES constraints, bad input."""

import itertools

import pytest
import torch

from fairseq_bio.modules.crf import DISALLOWED, LinearChainCRF, bio_constraints

BIO = ["O", "B-Disease", "I-Disease", "B-Chemical", "I-Chemical"]
BIOES = [
    "O",
    "B-Disease",
    "I-Disease",
    "E-Disease",
    "S-Disease",
    "B-Chemical",
    "I-Chemical",
    "E-Chemical",
    "S-Chemical",
]


def random_crf(k, seed, allowed_start=None, allowed=None):
    """A CRF with parameters far from their small init, so transitions decide paths."""
    g = torch.Generator().manual_seed(seed)
    crf = LinearChainCRF(k).double()
    with torch.no_grad():
        for p in (crf.transitions, crf.start, crf.end):
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    crf.set_constraints(allowed_start, allowed)
    return crf


def random_batch(k, length, seed, rows=5):
    """Emissions B x T x K, mask B x T with one empty row and one full row, tags with -100 where
    masked off."""
    g = torch.Generator().manual_seed(seed)
    emissions = torch.randn(rows, length, k, generator=g, dtype=torch.float64) * 2
    lengths = torch.randint(0, length + 1, (rows,), generator=g)
    lengths[0], lengths[1] = 0, length
    mask = torch.arange(length) < lengths.unsqueeze(1)
    tags = torch.randint(0, k, (rows, length), generator=g).masked_fill(~mask, -100)
    return emissions, mask, tags


def brute_force(crf, emissions, length):
    """Every path (N x L) of one row and its score (N), written independently of the module's own
    scoring."""
    k = crf.num_tags
    start, transitions, end = crf.start.detach(), crf.transitions.detach(), crf.end.detach()
    if crf.allowed_start is not None:
        start = start + DISALLOWED * (~crf.allowed_start).double()
    if crf.allowed is not None:
        transitions = transitions + DISALLOWED * (~crf.allowed).double()
    paths = torch.tensor(
        list(itertools.product(range(k), repeat=length)), dtype=torch.long
    ).reshape(-1, length)
    scores = []
    for path in paths.tolist():
        s = start[path[0]] + end[path[-1]] + sum(emissions[t, y] for t, y in enumerate(path))
        s = s + sum(transitions[a, b] for a, b in zip(path, path[1:]))
        scores.append(s)
    return paths, torch.stack(scores)


def path_score(crf, emissions, path):
    """Score of one path via the enumeration above (so the decoded path is scored independently)."""
    paths, scores = brute_force(crf, emissions, len(path))
    return scores[(paths == torch.tensor(path)).all(1)].item()


def random_constraints(k, seed):
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(k, k, generator=g) < 0.5
    allowed[torch.arange(k), torch.randint(0, k, (k,), generator=g)] = (
        True  # every tag has a successor
    )
    allowed_start = torch.rand(k, generator=g) < 0.5
    allowed_start[0] = True
    return allowed_start, allowed


CASES = [(k, length) for k in (3, 4) for length in range(1, 6)]


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
@pytest.mark.parametrize("k,length", CASES)
def test_matches_brute_force(k, length, constrained):
    seed = 10 * k + length
    crf = random_crf(k, seed, *(random_constraints(k, seed) if constrained else (None, None)))
    emissions, mask, tags = random_batch(k, length, seed)
    log_z = crf.log_partition(emissions, mask)
    nll = crf(emissions, tags, mask)
    decoded = crf.decode(emissions, mask)
    assert log_z.shape == nll.shape == (emissions.shape[0],) and decoded.shape == mask.shape
    for b, n in enumerate(mask.sum(1).tolist()):
        if n == 0:
            assert log_z[b] == 0 and nll[b] == 0 and (decoded[b] == -1).all()
            continue
        paths, scores = brute_force(crf, emissions[b], n)
        expected_log_z = torch.logsumexp(scores, 0)
        assert log_z[b].item() == pytest.approx(expected_log_z.item(), abs=1e-9)
        gold = tags[b, :n]
        gold_score = scores[(paths == gold).all(1)].item()
        assert nll[b].item() == pytest.approx(expected_log_z.item() - gold_score, abs=1e-9)
        assert (decoded[b, n:] == -1).all()
        best = decoded[b, :n].tolist()
        assert path_score(crf, emissions[b], best) == pytest.approx(scores.max().item(), abs=1e-9)
        if constrained:  # a legal path exists, so the best one is legal
            assert crf.allowed_start[best[0]] and all(
                crf.allowed[i, j] for i, j in zip(best, best[1:])
            )


def test_rows_are_independent_of_their_batch():
    crf = random_crf(4, 1)
    emissions, mask, tags = random_batch(4, 5, 2, rows=6)
    nll, decoded = crf(emissions, tags, mask), crf.decode(emissions, mask)
    for b in range(6):
        n = int(mask[b].sum())
        alone = (emissions[b : b + 1, :n], tags[b : b + 1, :n], mask[b : b + 1, :n])
        assert crf(*alone).item() == pytest.approx(nll[b].item(), abs=1e-9)
        assert crf.decode(alone[0], alone[2])[0].tolist() == decoded[b, :n].tolist()


def test_ties_are_broken_deterministically():
    crf = LinearChainCRF(3)
    with torch.no_grad():
        for p in (crf.transitions, crf.start, crf.end):
            p.zero_()
    emissions = torch.zeros(2, 4, 3)  # every path scores 0
    mask = torch.ones(2, 4, dtype=torch.bool)
    assert crf.decode(emissions, mask).tolist() == [[0, 0, 0, 0]] * 2


def test_gradients_flow_and_gradcheck():
    crf = random_crf(3, 5)
    emissions, mask, tags = random_batch(3, 4, 6, rows=4)
    emissions.requires_grad_(True)
    crf(emissions, tags, mask).sum().backward()
    for p in (emissions, crf.transitions, crf.start, crf.end):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    assert (emissions.grad[~mask] == 0).all()  # padding gets no gradient

    def nll(e, transitions, start, end):
        params = {"transitions": transitions, "start": start, "end": end}
        return torch.func.functional_call(crf, params, (e, tags, mask))

    inputs = [emissions.detach().clone().requires_grad_(True)]
    inputs += [
        p.detach().clone().requires_grad_(True) for p in (crf.transitions, crf.start, crf.end)
    ]
    assert torch.autograd.gradcheck(nll, inputs)


def test_nll_is_log_probability():
    """exp(-NLL) over every path of a row sums to one (with constraints, illegal paths get ~0)."""
    crf = random_crf(3, 7, *bio_constraints(["O", "B-X", "I-X"]))
    emissions = torch.randn(
        1, 4, 3, generator=torch.Generator().manual_seed(8), dtype=torch.float64
    )
    mask = torch.ones(1, 4, dtype=torch.bool)
    paths = torch.tensor(list(itertools.product(range(3), repeat=4)))
    nll = crf(emissions.expand(len(paths), -1, -1), paths, mask.expand(len(paths), -1))
    assert torch.exp(-nll).sum().item() == pytest.approx(1.0, abs=1e-9)
    illegal = ((paths[:, 1:] == 2) & (paths[:, :-1] == 0)).any(1) | (paths[:, 0] == 2)
    assert (nll[illegal] > 1e3).all() and torch.isfinite(nll).all()


def markov_task(rows, seed, k=4, length=20, noise=1.0):
    """Tags from a sticky cyclic Markov chain (t -> t+1, sometimes t), emissions = one-hot(tag) +
    heavy noise."""
    g = torch.Generator().manual_seed(seed)
    tags = torch.empty(rows, length, dtype=torch.long)
    tags[:, 0] = torch.randint(0, k, (rows,), generator=g)
    for t in range(1, length):
        step = (torch.rand(rows, generator=g) < 0.9).long()
        tags[:, t] = (tags[:, t - 1] + step) % k
    emissions = torch.nn.functional.one_hot(tags, k).float() + noise * torch.randn(
        rows, length, k, generator=g
    )
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=g)
    mask = torch.arange(length) < lengths.unsqueeze(1)
    return emissions, tags.masked_fill(~mask, -100), mask


def test_training_learns_transitions():
    torch.manual_seed(0)
    k = 4
    crf = LinearChainCRF(k)
    train, test = markov_task(256, 0, k), markov_task(256, 1, k)
    optimizer = torch.optim.Adam(crf.parameters(), lr=0.1)
    for _ in range(60):
        optimizer.zero_grad()
        loss = crf(*train).mean()
        loss.backward()
        optimizer.step()
    emissions, tags, mask = test
    crf_accuracy = (crf.decode(emissions, mask) == tags)[mask].float().mean().item()
    argmax_accuracy = (emissions.argmax(-1) == tags)[mask].float().mean().item()
    # learned: from every tag, the best next tag is the next one round the cycle
    assert crf.transitions.argmax(1).tolist() == [(i + 1) % k for i in range(k)]
    assert crf_accuracy > argmax_accuracy + 0.2, (crf_accuracy, argmax_accuracy)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gives_finite_float32(dtype):
    crf = LinearChainCRF(len(BIO), allowed=bio_constraints(BIO)[1])
    g = torch.Generator().manual_seed(0)
    emissions = (torch.randn(3, 300, len(BIO), generator=g) * 30).to(dtype).requires_grad_(True)
    mask = torch.arange(300) < torch.tensor([300, 17, 0]).unsqueeze(1)
    tags = torch.randint(
        0, len(BIO), (3, 300), generator=g
    )  # mostly illegal paths: large but finite losses
    nll = crf(emissions, tags, mask)
    assert nll.dtype == torch.float32 and torch.isfinite(nll).all() and nll[2] == 0
    nll.sum().backward()
    assert emissions.grad.dtype == dtype and torch.isfinite(emissions.grad.float()).all()
    assert crf.decode(emissions, mask).shape == (3, 300)
    crf.to(dtype)  # fairseq's --fp16 halves the whole model, CRF parameters included
    nll_half_params = crf(emissions, tags, mask)
    assert nll_half_params.dtype == torch.float32 and torch.isfinite(nll_half_params).all()


def test_constraints_are_not_saved():
    allowed_start, allowed = bio_constraints(BIO)
    crf = LinearChainCRF(len(BIO))
    crf.set_constraints(allowed_start, allowed)
    assert set(crf.state_dict()) == {"transitions", "start", "end"}
    fresh = LinearChainCRF(len(BIO))
    fresh.load_state_dict(crf.state_dict())
    assert fresh.allowed is None and torch.equal(fresh.transitions, crf.transitions)
    assert "constrained=True" in repr(crf) and "constrained=False" in repr(fresh)


def test_bio_constraints_tables():
    allowed_start, allowed = bio_constraints(BIO)
    index = {label: i for i, label in enumerate(BIO)}

    def ok(a, b):
        return bool(allowed[index[a], index[b]])

    assert allowed_start.tolist() == [True, True, False, True, False]
    assert ok("B-Disease", "I-Disease") and ok("I-Disease", "I-Disease") and ok("O", "B-Disease")
    assert ok("I-Disease", "O") and ok("B-Disease", "B-Chemical") and ok("B-Disease", "B-Disease")
    assert (
        not ok("O", "I-Disease")
        and not ok("B-Chemical", "I-Disease")
        and not ok("I-Chemical", "I-Disease")
    )
    assert allowed.sum() == 25 - 2 * 3  # each I-X forbids O and both tags of the other type

    allowed_start, allowed = bio_constraints(BIOES)
    index = {label: i for i, label in enumerate(BIOES)}
    assert [label for label, a in zip(BIOES, allowed_start.tolist()) if not a] == [
        "I-Disease",
        "E-Disease",
        "I-Chemical",
        "E-Chemical",
    ]
    assert (
        ok("B-Disease", "E-Disease")
        and ok("I-Disease", "E-Disease")
        and ok("E-Disease", "S-Chemical")
    )
    assert ok("S-Disease", "O") and ok("O", "B-Chemical") and ok("E-Disease", "B-Disease")
    assert (
        not ok("B-Disease", "O")
        and not ok("I-Disease", "B-Chemical")
        and not ok("B-Disease", "S-Disease")
    )
    assert (
        not ok("E-Disease", "I-Disease")
        and not ok("S-Disease", "E-Disease")
        and not ok("O", "E-Chemical")
    )
    assert not ok("B-Disease", "E-Chemical")

    # BIOUL is BIOES with other letters
    bioul = [label.replace("E-", "L-").replace("S-", "U-") for label in BIOES]
    assert all(torch.equal(a, b) for a, b in zip(bio_constraints(bioul), bio_constraints(BIOES)))
    # IO constrains nothing
    allowed_start, allowed = bio_constraints(["O", "I-Disease", "I-Chemical"])
    assert allowed_start.all() and allowed.all()


def legal(labels, path):
    """True if a path of label strings obeys the scheme (written from the rules, not from the
    tables)."""
    bioes = any(label[0] in "ES" for label in labels)
    continues = ("I", "E") if bioes else ("I",)
    previous = ("O", None)
    for label in path:
        current = tuple(label.split("-", 1)) if label != "O" else ("O", None)
        is_open = previous[0] in ("B", "I")
        if current[0] in continues and not (is_open and previous[1] == current[1]):
            return False
        if bioes and is_open and current[0] not in continues:
            return False
        previous = current
    return True


@pytest.mark.parametrize("labels", [BIO, BIOES], ids=["BIO", "BIOES"])
def test_decoded_paths_obey_constraints(labels):
    k = len(labels)
    crf = LinearChainCRF(k)
    crf.set_constraints(*bio_constraints(labels))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        crf.transitions.copy_(
            torch.randn(k, k, generator=g) * 3
        )  # pull towards illegal transitions too
    emissions = torch.randn(64, 12, k, generator=g) * 5
    mask = torch.arange(12) < torch.randint(0, 13, (64,), generator=g).unsqueeze(1)
    decoded = crf.decode(emissions, mask)
    unconstrained = LinearChainCRF(k)
    unconstrained.load_state_dict(crf.state_dict())
    free = unconstrained.decode(emissions, mask)
    paths = [[labels[i] for i in row[row >= 0].tolist()] for row in decoded]
    assert all(legal(labels, path) for path in paths)
    # the test has teeth: without constraints the same scores decode illegal paths
    assert not all(legal(labels, [labels[i] for i in row[row >= 0].tolist()]) for row in free)


def test_bad_input_is_refused_in_one_line():
    crf = LinearChainCRF(3)
    emissions = torch.zeros(2, 4, 3)
    mask = torch.tensor([[True, True, False, False], [True, False, True, False]])
    with pytest.raises(ValueError, match="mask row 1 is not left-aligned"):
        crf.decode(emissions, mask)
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    tags = torch.tensor([[0, 1, -100, -100], [0, 3, 2, -100]])
    with pytest.raises(
        ValueError, match=r"tags\[1, 1\] = 3 at an unmasked position is not a tag in \[0, 3\)"
    ):
        crf(emissions, tags, mask)
    with pytest.raises(ValueError, match="emissions must be B x T x 3"):
        crf.log_partition(torch.zeros(2, 4, 5), mask)
    with pytest.raises(ValueError, match="mask must be a bool"):
        crf.decode(emissions, mask.long())
    with pytest.raises(ValueError, match="allowed must be a bool tensor of shape"):
        crf.set_constraints(None, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="label 1 'Disease': expected O or B-"):
        bio_constraints(["O", "Disease"])
    # zero-length batches are not an error
    empty = torch.zeros(2, 0, 3)
    no_mask = torch.zeros(2, 0, dtype=torch.bool)
    assert crf(empty, torch.zeros(2, 0, dtype=torch.long), no_mask).tolist() == [0, 0]
    assert crf.decode(empty, no_mask).shape == (2, 0)
