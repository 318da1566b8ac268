"""Atomic writes: a failure leaves the previous state, and a bad output path is named before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_jacobi.atomic import OutputPathError, atomic_folder, check_writable, staged_files, write_text


def test_check_writable_names_the_path_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError, match=r"--output-dir '.*file' is a file, not a folder; give a folder path"):
        check_writable(tmp_path / "file", folder=True, what="--output-dir")
    with pytest.raises(OutputPathError, match=r"'.*file' is a file, not a folder"):
        check_writable(tmp_path / "file" / "sub" / "out.json", folder=False)
    with pytest.raises(OutputPathError, match="is a folder; give a file path"):
        check_writable(tmp_path, folder=False)
    assert check_writable(tmp_path / "new" / "deeper", folder=True) == tmp_path / "new" / "deeper"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_write_text_replaces_whole_files_only(tmp_path: Path) -> None:
    target = write_text(tmp_path / "sub" / "a.json", "new")
    assert target.read_text() == "new" and oct(target.stat().st_mode & 0o777) != "0o600"
    with pytest.raises(TypeError):
        write_text(target, None)  # type: ignore[arg-type]  # fails mid-write
    assert target.read_text() == "new" and sorted(p.name for p in target.parent.iterdir()) == ["a.json"]


def test_staged_files_replace_together_or_not_at_all(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_files(out) as staging:  # a missing folder appears whole
        (staging / "a.txt").write_text("1")
        (staging / "b.txt").write_text("1")
    (out / "mine.txt").write_text("kept")
    with pytest.raises(RuntimeError), staged_files(out) as staging:
        (staging / "a.txt").write_text("2")
        raise RuntimeError("the plot failed")
    assert [(p.name, p.read_text()) for p in sorted(out.iterdir())] == [
        ("a.txt", "1"),
        ("b.txt", "1"),
        ("mine.txt", "kept"),
    ]
    with staged_files(out) as staging:
        (staging / "a.txt").write_text("2")
        (staging / "b.txt").write_text("2")
    assert [(p.name, p.read_text()) for p in sorted(out.iterdir())] == [
        ("a.txt", "2"),
        ("b.txt", "2"),
        ("mine.txt", "kept"),
    ]


def test_staged_files_replace_a_subfolder_whole_when_a_second_run_saves_into_the_first_ones_folder(
    tmp_path: Path,
) -> None:
    """`hf-jacobi train` run twice into one output_dir saves `custom_generate/` twice: rename(2) alone fails on a
    folder that is not empty (after the whole training), so the old subfolder goes aside and the new one replaces it."""
    out = tmp_path / "run"
    for run in ("1", "2"):
        with staged_files(out) as staging:
            (staging / "custom_generate").mkdir()
            (staging / "custom_generate" / "generate.py").write_text(run)
            if run == "1":
                (staging / "custom_generate" / "old_only.py").write_text(run)
            (staging / "model.safetensors").write_text(run)
    assert sorted(p.name for p in (out / "custom_generate").iterdir()) == ["generate.py"]
    assert (out / "custom_generate" / "generate.py").read_text() == "2" and (
        out / "model.safetensors"
    ).read_text() == "2"
    assert sorted(p.name for p in out.iterdir()) == ["custom_generate", "model.safetensors"]  # nothing left aside


def test_atomic_folder_appears_only_when_complete(tmp_path: Path) -> None:
    target = tmp_path / "render"
    with pytest.raises(OSError), atomic_folder(target) as staging:
        (staging / "config.json").write_text("{}")
        raise OSError("disk full halfway")
    assert list(tmp_path.iterdir()) == []
    target.mkdir()  # an empty folder may be filled
    with atomic_folder(target) as staging:
        (staging / "config.json").write_text("{}")
    assert [p.name for p in target.iterdir()] == ["config.json"]
    with pytest.raises(OutputPathError, match="is not an empty folder"), atomic_folder(target):
        pass
