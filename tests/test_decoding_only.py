"""A decoding-only install (`pip install hf-jacobi`, without the `train` extra): Jacobi decoding, the embedded model
with the shipped adapter and the command line work without trl, peft, datasets or accelerate, and what needs them says
in one line what to install. Simulated in a fresh interpreter whose import system cannot find those packages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_jacobi.adapters import merge_plain_lora
from tiny_models import fresh_tiny_model

HIDE = """
import importlib.machinery, sys
HIDDEN = {"trl", "peft", "datasets", "accelerate"}
class WithoutTrainingExtra(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)
sys.meta_path = [WithoutTrainingExtra if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def _without_training_extra(code: str) -> dict:
    tests = Path(__file__).parent
    out = subprocess.run([sys.executable, "-c", HIDE + code], capture_output=True, text=True, timeout=600,
                         cwd=tests, env=None)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_jacobi_decoding_and_the_command_line_need_no_training_extra() -> None:
    found = _without_training_extra("""
import contextlib, io, json, sys, torch
from tiny_models import tiny_model
import hf_jacobi
import hf_jacobi.integrations.merged, hf_jacobi.integrations.vllm_drafts  # the vLLM proposer's side of the package
from hf_jacobi import cli
model = hf_jacobi.enable_jacobi(tiny_model("llama"))
ids = torch.tensor([[1, 5, 9, 12]])
greedy = model.generate(ids, max_new_tokens=12, do_sample=False)
jacobi = model.generate(ids, max_new_tokens=12, do_sample=False, decoding="jacobi", jacobi_block_size=4)
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = cli.main(["train", "--trajectories", "x"])
try:
    hf_jacobi.JacobiForcingTrainer
    said = None
except ModuleNotFoundError as error:
    said = str(error)
blocked = [name for name in ("trl", "peft", "datasets", "accelerate") if name in sys.modules]
print(json.dumps({"same": bool(torch.equal(greedy, jacobi)), "code": code, "err": err.getvalue(), "said": said,
                  "imported": blocked}))
""")
    assert found["same"] and found["imported"] == []
    assert (
        found["code"] == 1
        and "hf-jacobi train needs" in found["err"]
        and "pip install 'hf-jacobi[train]'" in found["err"]
    )
    assert "hf_jacobi.JacobiForcingTrainer needs" in found["said"] and "hf-jacobi[train]" in found["said"]


def test_a_plain_lora_merges_without_peft_exactly_as_peft_merges_it(tmp_path) -> None:
    from peft import LoraConfig, PeftModel, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    get_peft_model(fresh_tiny_model("llama"), config).save_pretrained(tmp_path / "adapter")
    by_peft = PeftModel.from_pretrained(fresh_tiny_model("llama"), str(tmp_path / "adapter")).merge_and_unload()
    here = merge_plain_lora(fresh_tiny_model("llama"), tmp_path / "adapter")
    theirs, ours = by_peft.state_dict(), here.state_dict()
    assert theirs.keys() == ours.keys()
    changed = [k for k in ours if not torch.equal(ours[k], fresh_tiny_model("llama").state_dict()[k])]
    assert len(changed) == 3 * 2  # q, v and down projections of both layers
    assert all(torch.equal(theirs[k], ours[k]) for k in ours)


def test_an_adapter_beyond_a_plain_lora_asks_for_peft(tmp_path) -> None:
    from peft import LoraConfig, get_peft_model

    from hf_jacobi.gguf_cache import ModelNotAvailableError

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], use_dora=True)
    get_peft_model(fresh_tiny_model("llama"), config).save_pretrained(tmp_path / "dora")
    with pytest.raises(ModelNotAvailableError, match=r"uses \['use_dora'\], which only peft merges: pip install"):
        merge_plain_lora(fresh_tiny_model("llama"), tmp_path / "dora")


@pytest.mark.integration
def test_the_shipped_adapter_loads_without_peft_as_with_it() -> None:
    found = _without_training_extra("""
import json, torch
from hf_jacobi import load_default_model
model, _ = load_default_model(jacobi_forcing=True)
torch.save(model.state_dict(), "/tmp/hf_jacobi_decoding_only_merge.pt")
print(json.dumps({"ok": True}))
""")
    assert found["ok"]
    from hf_jacobi import load_default_model

    with_peft = load_default_model(jacobi_forcing=True)[0].state_dict()
    without = torch.load("/tmp/hf_jacobi_decoding_only_merge.pt")
    assert with_peft.keys() == without.keys()
    assert all(torch.equal(with_peft[k], without[k]) for k in with_peft)
