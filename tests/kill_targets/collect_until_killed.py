"""Collects trajectories with a tiny random model in child processes that SIGKILL themselves at chosen points.

Run as `python collect_until_killed.py SPEC.json`. The spec gives the prompts, the collection settings and a list of
runs, each a folder and a kill point; runs execute one after the other (several runs may share a folder: a resumed run
killed again). Python, torch and the model load once here; each run is a forked child, a real process that dies by
SIGKILL exactly as a killed job would, with no chance to clean up. Prints, per run, the signal that ended the child.

Kill points, for the k-th batch of the run (1-based):
  decoding:k  while the batch is being decoded (nothing of it is written)
  writing:k   in the middle of writing its shard file: half the bytes are on disk, fsynced
  written:k   just after its shard file is written and renamed
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for tiny_models

from hf_jacobi.data import collection
from hf_jacobi.data.collection_batches import BatchCollector
from tiny_models import tiny_model, tiny_tokenizer


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(kill_point: str) -> None:
    """Patches this (child) process so that it kills itself at `kill_point`."""
    stage, k = kill_point.split(":")
    calls = {"decoding": 0, "writing": 0, "written": 0}

    def counted(name: str) -> bool:
        calls[name] += 1
        return stage == name and calls[name] == int(k)

    collect_rows, write_shard, write_table = BatchCollector.rows, collection.write_shard, pq.write_table

    def decoding(self, *args, **kwargs):
        if counted("decoding"):
            die()
        return collect_rows(self, *args, **kwargs)

    def written(table, path):
        write_shard(table, path)
        if counted("written"):
            die()

    def writing(table, sink, **kwargs):
        if not counted("writing"):
            return write_table(table, sink, **kwargs)
        whole = io.BytesIO()
        write_table(table, whole, **kwargs)
        sink.write(whole.getvalue()[: len(whole.getvalue()) // 2])
        sink.flush()
        os.fsync(sink.fileno())
        die()

    BatchCollector.rows, collection.write_shard, pq.write_table = decoding, written, writing


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(1)  # no thread pool is started in this parent, so forking is safe
    prompts = datasets.Dataset.from_list(spec["prompts"])
    model, tokenizer = tiny_model(spec["family"]), tiny_tokenizer()
    endings = []
    for run in spec["runs"]:
        pid = os.fork()
        if pid == 0:  # the child: collect until the kill point; reaching the end is reported as exit code 3
            arm(run["kill"])
            collection.collect_trajectories(model, tokenizer, prompts, run["folder"], **spec["settings"])
            os._exit(3)
        _, status = os.waitpid(pid, 0)
        endings.append(os.WTERMSIG(status) if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}")
    print(json.dumps(endings))


if __name__ == "__main__":
    main(sys.argv[1])
