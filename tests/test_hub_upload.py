"""upload_checkpoint against the in-process fake Hub: what is sent, where, with which credentials, and what is not."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import HfHubHTTPError

from hf_jacobi.hub.upload import UPLOAD_IGNORE_PATTERNS, HubUploadError, upload_checkpoint
from tiny_models import fresh_tiny_model, tiny_model

REPO = "acme/tiny-jacobi"
TOKEN = "hf_fake"
MODEL_FILES = {
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "custom_generate/generate.py",
}
LEFTOVERS = {
    "checkpoint-1/model.safetensors",
    "checkpoint-1/optimizer.pt",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state_0.pth",
    "trainer_state.json",
    "training_args.bin",
    "runs/events.out.tfevents.1",
    ".cache/huggingface/upload/config.json.metadata",
}


# Module-scoped, hence built before the function-scoped fake_hub fixture: saving must not see the fake endpoint.
@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("saved_model")
    tiny_model("llama").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def saved_adapter(tmp_path_factory) -> Path:
    from peft import LoraConfig, get_peft_model

    folder = tmp_path_factory.mktemp("saved_adapter")
    model = get_peft_model(fresh_tiny_model("llama"), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    model.save_pretrained(folder)
    return folder


@pytest.fixture
def checkpoint(saved_model, tmp_path) -> Path:
    """A Trainer-like output folder: the saved model, a card, custom generation code, and training leftovers."""
    folder = tmp_path / "output"
    shutil.copytree(saved_model, folder)
    (folder / "README.md").write_text("---\nlibrary_name: transformers\n---\n# tiny jacobi\n")
    (folder / "custom_generate").mkdir()
    (folder / "custom_generate" / "generate.py").write_text("def generate(model, *args, **kwargs):\n    pass\n")
    for leftover in LEFTOVERS:
        (folder / leftover).parent.mkdir(parents=True, exist_ok=True)
        (folder / leftover).write_bytes(b"leftover " + leftover.encode())
    return folder


def test_upload_sends_the_model_and_not_the_leftovers(fake_hub, checkpoint):
    patterns_before = list(UPLOAD_IGNORE_PATTERNS)
    url = upload_checkpoint(checkpoint, REPO, token=TOKEN, private=True)

    repo = fake_hub.repos[REPO]
    assert repo.private and repo.repo_type == "model"
    create = fake_hub.requests[0]
    assert create.body == {"name": "tiny-jacobi", "organization": "acme", "visibility": "private", "type": "model"}

    (commit,) = fake_hub.commits
    assert commit.revision == "main"
    assert commit.summary == "Upload Jacobi Forcing checkpoint"
    assert set(commit.added) == MODEL_FILES
    for path in MODEL_FILES:
        assert commit.added[path] == (checkpoint / path).read_bytes(), path
    assert fake_hub.files(REPO) == commit.added
    assert not LEFTOVERS & set(commit.tree)

    assert url == f"{fake_hub.endpoint}/{REPO}/commit/{commit.oid}"
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in fake_hub.requests)
    # The whole flow of huggingface_hub's upload_folder (hf_xet installed: the streamed pipeline, regular files only).
    assert fake_hub.calls() == [
        "POST /api/repos/create",
        "POST /api/validate-yaml",
        f"POST /api/models/{REPO}/preupload/main",
        f"POST /api/models/{REPO}/commit/main",
    ]
    assert fake_hub.unhandled == []
    assert patterns_before == UPLOAD_IGNORE_PATTERNS  # upload_folder extends the list it is given: we pass a copy


def test_uploaded_files_download_back(fake_hub, checkpoint, tmp_path):
    from huggingface_hub import hf_hub_download

    upload_checkpoint(checkpoint, REPO, token=TOKEN, private=True)
    for name in ("config.json", "custom_generate/generate.py"):
        path = hf_hub_download(REPO, name, token=TOKEN, cache_dir=tmp_path / "cache")
        assert Path(path).read_bytes() == (checkpoint / name).read_bytes()
    with pytest.raises(HfHubHTTPError):  # private: invisible without a token (and no stored token leaks in)
        hf_hub_download(REPO, "config.json", cache_dir=tmp_path / "cache2")
    assert fake_hub.unhandled == []


def test_revision_creates_the_branch_and_commits_there(fake_hub, checkpoint):
    url = upload_checkpoint(checkpoint, REPO, token=TOKEN, revision="v1")

    assert f"POST /api/models/{REPO}/branch/v1" in fake_hub.calls()
    (commit,) = fake_hub.commits
    assert commit.revision == "v1"
    assert url.endswith(f"/commit/{commit.oid}")
    assert set(fake_hub.files(REPO, "v1")) == MODEL_FILES
    assert fake_hub.files(REPO, "main") == {}
    assert not fake_hub.repos[REPO].private

    # Again, unchanged: the existing repo and branch are accepted, and nothing is committed.
    again = upload_checkpoint(checkpoint, REPO, token=TOKEN, revision="v1")
    assert len(fake_hub.commits) == 1
    assert again == url
    assert fake_hub.unhandled == []


def test_create_pr_opens_a_pull_request(fake_hub, checkpoint):
    upload_checkpoint(checkpoint, REPO, token=TOKEN, create_pr=True)

    (commit,) = fake_hub.commits
    assert commit.revision == "refs/pr/1"
    assert set(fake_hub.files(REPO, "refs/pr/1")) == MODEL_FILES
    assert fake_hub.files(REPO, "main") == {}
    assert fake_hub.repos[REPO].discussions[0]["isPullRequest"]

    with pytest.raises(ValueError, match="create_pr"):
        upload_checkpoint(checkpoint, REPO, token=TOKEN, create_pr=True, revision="v1")


def test_adapter_folder_uploads(fake_hub, saved_adapter):
    upload_checkpoint(saved_adapter, "acme/tiny-lora", token=TOKEN)

    (commit,) = fake_hub.commits
    local = {p.relative_to(saved_adapter).as_posix() for p in saved_adapter.rglob("*") if p.is_file()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= local
    assert set(commit.added) == local
    for path in local:
        assert commit.added[path] == (saved_adapter / path).read_bytes()


def test_endpoint_is_read_at_call_time(fake_hub, checkpoint, monkeypatch):
    # huggingface_hub's own endpoint constant is fixed at import; HF_ENDPOINT as set now must win.
    monkeypatch.setattr(hf_constants, "ENDPOINT", "http://127.0.0.1:9")
    upload_checkpoint(checkpoint, REPO, token=TOKEN)
    assert len(fake_hub.commits) == 1

    # An explicit endpoint wins over HF_ENDPOINT.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    upload_checkpoint(checkpoint, "acme/other", token=TOKEN, endpoint=fake_hub.endpoint + "/")
    assert [c.repo_id for c in fake_hub.commits] == [REPO, "acme/other"]


def test_no_token_no_upload(fake_hub, checkpoint):
    """The fixture hides any real token: without one the (fake) Hub refuses the write."""
    with pytest.raises(HubUploadError, match=r"refused the upload to .* \(HTTP 401: .*\); check --token or HF_TOKEN$"):
        upload_checkpoint(checkpoint, REPO)
    assert "authorization" not in fake_hub.requests[0].headers
    assert fake_hub.commits == []


@pytest.mark.parametrize("case", ["missing", "file", "no_config"])
def test_bad_folder_is_rejected_before_any_request(fake_hub, tmp_path, case):
    folder = tmp_path / "ckpt"
    if case == "file":
        folder.write_text("not a folder")
    elif case == "no_config":
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"weights")
    expected = {"missing": "does not exist", "file": "not a directory", "no_config": "adapter_config.json"}[case]
    with pytest.raises(ValueError, match=re.escape(str(folder)) + ".*" + expected):
        upload_checkpoint(folder, REPO, token=TOKEN)
    assert fake_hub.requests == []


@pytest.mark.parametrize("repo_id", ["a/b/c", "bad repo", "", "-name"])
def test_bad_repo_id_is_rejected_before_any_request(fake_hub, checkpoint, repo_id):
    with pytest.raises(ValueError, match=f"Invalid repo id {re.escape(repr(repo_id))}"):
        upload_checkpoint(checkpoint, repo_id, token=TOKEN)
    assert fake_hub.requests == []


def test_offline_mode_refuses_to_upload(fake_hub, checkpoint, monkeypatch):
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(RuntimeError, match="HF_HUB_OFFLINE"):
        upload_checkpoint(checkpoint, REPO, token=TOKEN)
    assert fake_hub.requests == []
    assert hf_constants.HF_HUB_OFFLINE is True  # reported, not flipped


def test_ignore_patterns_cover_trainer_leftovers():
    from huggingface_hub.utils import filter_repo_objects

    kept = set(filter_repo_objects([*MODEL_FILES, *LEFTOVERS], ignore_patterns=UPLOAD_IGNORE_PATTERNS))
    assert kept == MODEL_FILES


@pytest.mark.parametrize("create_pr", [False, True])
def test_upload_without_hf_xet(fake_hub, checkpoint, monkeypatch, create_pr):
    """Without hf_xet, upload_folder falls back to one create_commit (PRs via ?create_pr=1): the fake serves both."""
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
    url = upload_checkpoint(checkpoint, REPO, token=TOKEN, create_pr=create_pr)

    (commit,) = fake_hub.commits
    assert commit.revision == ("refs/pr/1" if create_pr else "main")
    assert set(commit.added) == MODEL_FILES
    assert url == f"{fake_hub.endpoint}/{REPO}/commit/{commit.oid}"
    assert fake_hub.unhandled == []
