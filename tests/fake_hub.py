"""An in-process stand-in for the Hugging Face Hub HTTP API, for tests that upload (and read back) without network.

`FakeHub` is a `ThreadingHTTPServer` on 127.0.0.1 that implements the part of the Hub API that huggingface_hub 2.4
uses to create a repo, create a branch, upload a folder and download a file, keeps repos in memory, and records every
request. Anything else is answered 404 (and listed in `FakeHub.unhandled`), so a client call the fake does not know
fails the test instead of silently passing.

Endpoints served (`{type}` is models, datasets or spaces; `{repo}` is "name" or "namespace/name"; revisions are
percent-encoded by the client, e.g. refs%2Fpr%2F1):

- POST /api/repos/create                      create_repo (409 if it exists; exist_ok=True swallows that)
- POST /api/validate-yaml                     README.md front-matter check done by upload_folder/create_commit
- GET  /api/whoami-v2                         whoami
- GET  /api/{type}/{repo}[/revision/{rev}]    repo_info / model_info (id, sha, private, siblings)
- GET  /api/{type}/{repo}/refs                list_repo_refs
- POST /api/{type}/{repo}/branch/{branch}     create_branch (409 if it exists)
- POST /api/{type}/{repo}/preupload/{rev}     upload modes: always "regular", so contents come inline in the commit
- POST /api/{type}/{repo}/commit/{rev}        NDJSON commit (header, file, deletedFile, deletedFolder); ?create_pr=1
- POST /api/{type}/{repo}/discussions         create_pull_request / create_discussion
- GET  /api/{type}/{repo}/discussions/{num}   discussion details (create_pull_request reads them back)
- GET  /api/{type}/{repo}/tree/{rev}[/{path}]  list_repo_tree (transformers lists a repo's files and chat templates)
- HEAD/GET /[datasets/|spaces/]{repo}/resolve/{rev}/{path}   hf_hub_download

Because every file is "regular", no LFS or Xet transfer ever happens: with hf_xet installed, upload_folder still runs
its Xet pipeline, but it only opens a local XetSession and never contacts a CAS server.

Writes (POST) need an Authorization header (401 otherwise); a private repo is invisible (404) without one. Pass
`token=` to FakeHub to also require that exact token.

Use the `fake_hub` fixture: it starts a hub and points huggingface_hub at it for the test (see `use_fake_hub`).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

__all__ = ["FakeCommit", "FakeHub", "FakeRepo", "RecordedRequest", "fake_hub", "use_fake_hub"]

USER = "fake-user"
_REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
# Path segments that follow the repo id in /api/{type}/{repo}/...: they tell "name/action" from "namespace/name".
_REPO_ACTIONS = {"revision", "refs", "branch", "preupload", "commit", "discussions", "tree", "paths-info"}


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob: what the Hub reports as a regular file's oid (and what the client compares)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


@dataclass
class RecordedRequest:
    """One request as the fake hub received it. `headers` has lower-cased names; `body` is the parsed JSON, the list
    of NDJSON items for a commit, raw bytes for anything else, or None when empty."""

    method: str
    path: str  # percent-decoded, without the query string
    raw_path: str  # as sent, without the query string
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    status: int | None = None  # the status the fake answered with

    def __str__(self) -> str:
        return f"{self.method} {self.path} -> {self.status}"


@dataclass
class FakeCommit:
    """A commit received by the fake hub. `added` maps paths to the bytes sent in this commit; `tree` is the whole
    content of the revision after it."""

    repo_id: str
    revision: str
    oid: str
    summary: str
    description: str
    parent_commit: str | None
    added: dict[str, bytes]
    deleted: list[str]
    tree: dict[str, bytes]


@dataclass
class FakeRepo:
    repo_id: str
    repo_type: str
    private: bool
    visibility: str | None
    refs: dict[str, str] = field(default_factory=dict)  # "main", "v1", "refs/pr/1" -> commit oid
    discussions: list[dict[str, Any]] = field(default_factory=list)


class _Reply(Exception):
    """Raised by route handlers to answer with an HTTP error (or any non-200 status)."""

    def __init__(self, status: int, message: str, error_code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_code = error_code
        self.extra = extra  # more fields of the JSON body


class FakeHub:
    """A local Hub endpoint with in-memory repos. Thread-safe: huggingface_hub commits from a background thread."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.requests: list[RecordedRequest] = []
        self.unhandled: list[RecordedRequest] = []
        self.repos: dict[str, FakeRepo] = {}
        self.commits: list[FakeCommit] = []
        self._trees: dict[str, dict[str, bytes]] = {}  # commit oid -> full content
        self._lock = threading.RLock()
        self._counter = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.endpoint = f"http://{host}:{port}"
        # A short poll interval: shutdown() waits for the serving loop to notice, 0.5 s by default.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-hub", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------ public helpers

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """Path -> content of `revision` (branch, "refs/pr/N" or commit oid) of `repo_id`; KeyError if unknown."""
        with self._lock:
            repo = self.repos[repo_id]
            try:
                return dict(self._trees[self._resolve(repo, revision)])
            except _Reply as err:
                raise KeyError(f"{repo_id}@{revision}") from err

    def calls(self) -> list[str]:
        """Every request so far as "METHOD path", in order: handy to assert the flow of a client call."""
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ state

    def _new_oid(self, *parts: str) -> str:
        return hashlib.sha1("\0".join((*parts, str(next(self._counter)))).encode()).hexdigest()

    def _resolve(self, repo: FakeRepo, revision: str) -> str:
        """Commit oid of a branch, a "refs/heads/..." name, a PR ref or a (possibly shortened) commit oid."""
        name = revision.removeprefix("refs/heads/")
        if name in repo.refs:
            return repo.refs[name]
        if len(revision) >= 7:
            matches = [oid for oid in self._trees if oid.startswith(revision.lower())]
            if len(matches) == 1:
                return matches[0]
        raise _Reply(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def _repo_url(self, repo: FakeRepo) -> str:
        return f"{self.endpoint}/{_URL_PREFIXES[repo.repo_type]}{repo.repo_id}"

    def _get_repo(self, repo_type: str, repo_id: str, headers: dict[str, str]) -> FakeRepo:
        repo = self.repos.get(repo_id)
        if repo is None or repo.repo_type != repo_type or (repo.private and "authorization" not in headers):
            raise _Reply(404, "Repository not found", "RepoNotFound")
        return repo

    def _check_auth(self, method: str, headers: dict[str, str]) -> None:
        auth = headers.get("authorization")
        if self.token is not None and auth is not None and auth != f"Bearer {self.token}":
            raise _Reply(401, "Invalid credentials in Authorization header")
        if method not in ("GET", "HEAD") and auth is None:
            raise _Reply(401, "You must be authenticated to access this resource (no Authorization header)")

    # ------------------------------------------------------------------ routing

    def _dispatch(self, req: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        """Route a request; return (status, headers, body)."""
        with self._lock:
            try:
                self._check_auth(req.method, req.headers)
                result = self._route(req)
            except _Reply as reply:
                headers = {"Content-Type": "application/json", "X-Error-Message": reply.message}
                if reply.error_code:
                    headers["X-Error-Code"] = reply.error_code
                return reply.status, headers, json.dumps({"error": reply.message, **reply.extra}).encode()
            if result is None:
                self.unhandled.append(req)
                message = f"fake hub: no route for {req.method} {req.path}"
                return 404, {"Content-Type": "application/json"}, json.dumps({"error": message}).encode()
            if isinstance(result, tuple):  # raw response (file download)
                return result
            return 200, {"Content-Type": "application/json"}, json.dumps(result).encode()

    def _route(self, req: RecordedRequest) -> Any:
        segments = [unquote(s) for s in req.raw_path.strip("/").split("/")] if req.raw_path.strip("/") else []
        method = req.method
        if segments[:1] != ["api"]:
            return self._route_resolve(req, segments)
        rest = segments[1:]
        if method == "POST" and rest == ["repos", "create"]:
            return self._create_repo(req)
        if method == "POST" and rest == ["validate-yaml"]:
            return {"errors": [], "warnings": []}
        if method == "GET" and rest == ["whoami-v2"]:
            return self._whoami(req)
        if len(rest) >= 2 and rest[0] in _REPO_TYPES:
            repo_type = _REPO_TYPES[rest[0]]
            ids = rest[1:]
            if len(ids) >= 2 and ids[1] in _REPO_ACTIONS:
                repo_id, tail = ids[0], ids[1:]
            else:
                repo_id, tail = "/".join(ids[:2]), ids[2:]
            return self._route_repo(req, repo_type, repo_id, tail)
        return None

    def _route_repo(self, req: RecordedRequest, repo_type: str, repo_id: str, tail: list[str]) -> Any:
        method = req.method
        if method == "GET" and not tail:
            return self._repo_info(req, repo_type, repo_id, "main")
        if method == "GET" and len(tail) == 2 and tail[0] == "revision":
            return self._repo_info(req, repo_type, repo_id, tail[1])
        if method == "GET" and tail == ["refs"]:
            return self._refs(req, repo_type, repo_id)
        if method == "POST" and len(tail) == 2 and tail[0] == "branch":
            return self._create_branch(req, repo_type, repo_id, tail[1])
        if method == "POST" and len(tail) == 2 and tail[0] == "preupload":
            return self._preupload(req, repo_type, repo_id, tail[1])
        if method == "POST" and len(tail) == 2 and tail[0] == "commit":
            return self._commit(req, repo_type, repo_id, tail[1])
        if method == "POST" and tail == ["discussions"]:
            return self._create_discussion(req, repo_type, repo_id)
        if method == "GET" and len(tail) == 2 and tail[0] == "discussions":
            return self._discussion(req, repo_type, repo_id, tail[1])
        if method == "GET" and len(tail) >= 2 and tail[0] == "tree":
            return self._tree(req, repo_type, repo_id, tail[1], "/".join(tail[2:]))
        return None

    # ------------------------------------------------------------------ handlers

    def _create_repo(self, req: RecordedRequest) -> Any:
        body = req.body if isinstance(req.body, dict) else {}
        name, organization = body.get("name"), body.get("organization")
        if not isinstance(name, str) or not name:
            raise _Reply(400, "Missing repo name")
        repo_id = f"{organization}/{name}" if organization else name
        repo_type = body.get("type") or "model"
        if repo_type not in _URL_PREFIXES:
            raise _Reply(400, f"Invalid repo type {repo_type!r}")
        # huggingface_hub >= 1.x sends "visibility"; older clients sent "private": accept both.
        visibility = body.get("visibility")
        private = visibility in ("private", "protected") if visibility is not None else bool(body.get("private"))
        if repo_id in self.repos:
            # create_repo(exist_ok=True) swallows the 409 and then reads the repo URL from this very response.
            raise _Reply(409, "You already created this repo", url=self._repo_url(self.repos[repo_id]))
        repo = FakeRepo(repo_id=repo_id, repo_type=repo_type, private=private, visibility=visibility)
        initial = self._new_oid(repo_id, "initial commit")
        self._trees[initial] = {}
        repo.refs["main"] = initial
        self.repos[repo_id] = repo
        return {"url": self._repo_url(repo), "name": repo_id, "id": initial[:24]}

    def _whoami(self, req: RecordedRequest) -> Any:
        if "authorization" not in req.headers:
            raise _Reply(401, "Invalid credentials in Authorization header")
        return {
            "type": "user",
            "id": "0" * 24,
            "name": USER,
            "fullname": "Fake User",
            "email": None,
            "orgs": [],
            "isPro": False,
            "auth": {"type": "access_token", "accessToken": {"displayName": "fake", "role": "write"}},
        }

    def _repo_info(self, req: RecordedRequest, repo_type: str, repo_id: str, revision: str) -> Any:
        repo = self._get_repo(repo_type, repo_id, req.headers)
        oid = self._resolve(repo, revision)
        tree = self._trees[oid]
        return {
            "id": repo_id,
            "author": repo_id.split("/")[0] if "/" in repo_id else USER,
            "sha": oid,
            "private": repo.private,
            "disabled": False,
            "gated": False,
            "lastModified": _now(),
            "createdAt": _now(),
            "siblings": [
                {"rfilename": path, "size": len(data), "blobId": git_blob_sha1(data)}
                for path, data in sorted(tree.items())
            ],
        }

    def _refs(self, req: RecordedRequest, repo_type: str, repo_id: str) -> Any:
        repo = self._get_repo(repo_type, repo_id, req.headers)
        branches = [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": oid}
            for name, oid in repo.refs.items()
            if not name.startswith("refs/")
        ]
        prs = [
            {"name": name, "ref": name, "targetCommit": oid}
            for name, oid in repo.refs.items()
            if name.startswith("refs/pr/")
        ]
        out: dict[str, Any] = {"branches": branches, "converts": [], "tags": []}
        if req.query.get("include_prs"):
            out["pullRequests"] = prs
        return out

    def _create_branch(self, req: RecordedRequest, repo_type: str, repo_id: str, branch: str) -> Any:
        repo = self._get_repo(repo_type, repo_id, req.headers)
        if branch in repo.refs:
            raise _Reply(409, "Reference already exists")
        body = req.body if isinstance(req.body, dict) else {}
        repo.refs[branch] = self._resolve(repo, body.get("startingPoint") or "main")
        return {}

    def _preupload(self, req: RecordedRequest, repo_type: str, repo_id: str, revision: str) -> Any:
        repo = self._get_repo(repo_type, repo_id, req.headers)
        tree = self._trees[self._resolve(repo, revision)]
        files = req.body.get("files", []) if isinstance(req.body, dict) else []
        return {
            "files": [
                {
                    "path": f["path"],
                    # "regular": the content is sent base64-encoded inside the commit payload (no LFS, no Xet).
                    "uploadMode": "regular",
                    "shouldIgnore": False,
                    # The remote blob id lets the client drop unchanged files (and skip an empty commit).
                    "oid": git_blob_sha1(tree[f["path"]]) if f["path"] in tree else None,
                }
                for f in files
            ]
        }

    def _commit(self, req: RecordedRequest, repo_type: str, repo_id: str, revision: str) -> Any:
        repo = self._get_repo(repo_type, repo_id, req.headers)
        base_oid = self._resolve(repo, revision)
        items = req.body if isinstance(req.body, list) else []
        header = next((item["value"] for item in items if item.get("key") == "header"), None)
        if header is None:
            raise _Reply(400, "Commit payload has no header line")
        parent = header.get("parentCommit")
        if parent is not None and not base_oid.startswith(parent.lower()):
            raise _Reply(412, "A commit has happened since. Please refresh and try again.")

        tree = dict(self._trees[base_oid])
        added: dict[str, bytes] = {}
        deleted: list[str] = []
        for item in items:
            key, value = item.get("key"), item.get("value", {})
            if key == "header":
                continue
            if key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise _Reply(400, f"fake hub: unsupported encoding {value.get('encoding')!r}")
                data = base64.b64decode(value["content"])
                tree[value["path"]] = added[value["path"]] = data
            elif key == "deletedFile":
                if tree.pop(value["path"], None) is None:
                    raise _Reply(404, "A file with this name doesn't exist", "EntryNotFound")
                deleted.append(value["path"])
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                for path in [p for p in tree if p.startswith(prefix)]:
                    del tree[path]
                    deleted.append(path)
            else:  # lfsFile would need an LFS/Xet transfer, which the fake never asks for
                raise _Reply(422, f"fake hub: unsupported commit operation {key!r} (only regular files)")

        pr_url = None
        target = revision
        if req.query.get("create_pr") == "1":
            num = self._open_discussion(repo, title=header.get("summary", ""), description="", pull_request=True)
            target = f"refs/pr/{num}"
            pr_url = f"{self._repo_url(repo)}/discussions/{num}"
        elif revision.removeprefix("refs/heads/") in repo.refs:
            target = revision.removeprefix("refs/heads/")
        else:
            raise _Reply(400, f"Cannot commit to {revision!r}: not a branch")

        oid = self._new_oid(repo_id, target, header.get("summary", ""))
        self._trees[oid] = tree
        repo.refs[target] = oid
        self.commits.append(
            FakeCommit(
                repo_id=repo_id,
                revision=target,
                oid=oid,
                summary=header.get("summary", ""),
                description=header.get("description", ""),
                parent_commit=parent,
                added=added,
                deleted=deleted,
                tree=dict(tree),
            )
        )
        return {
            "success": True,
            "commitOid": oid,
            "commitUrl": f"{self._repo_url(repo)}/commit/{oid}",
            "hookOutput": "",
            "pullRequestUrl": pr_url,
        }

    def _open_discussion(self, repo: FakeRepo, *, title: str, description: str, pull_request: bool) -> int:
        num = len(repo.discussions) + 1
        repo.discussions.append(
            {
                "num": num,
                "title": title,
                "description": description,
                "isPullRequest": pull_request,
                "createdAt": _now(),
            }
        )
        if pull_request:
            repo.refs[f"refs/pr/{num}"] = repo.refs["main"]
        return num

    def _create_discussion(self, req: RecordedRequest, repo_type: str, repo_id: str) -> Any:
        repo = self._get_repo(repo_type, repo_id, req.headers)
        body = req.body if isinstance(req.body, dict) else {}
        pull_request = bool(body.get("pullRequest"))
        num = self._open_discussion(
            repo, title=body.get("title", ""), description=body.get("description", ""), pull_request=pull_request
        )
        return {"num": num, "pullRequest": pull_request, "url": f"{self._repo_url(repo)}/discussions/{num}"}

    def _discussion(self, req: RecordedRequest, repo_type: str, repo_id: str, num: str) -> Any:
        repo = self._get_repo(repo_type, repo_id, req.headers)
        if not num.isdigit() or not 1 <= int(num) <= len(repo.discussions):
            raise _Reply(404, "Discussion not found")
        d = repo.discussions[int(num) - 1]
        return {
            "num": d["num"],
            "title": d["title"],
            "status": "draft" if d["isPullRequest"] else "open",
            "isPullRequest": d["isPullRequest"],
            "createdAt": d["createdAt"],
            "author": {"name": USER},
            "repo": {"name": repo.repo_id, "type": repo.repo_type},
            "events": [],
            "changes": {"base": "refs/heads/main"},
            "filesWithConflicts": [],
            "diff": "",
        }

    def _tree(self, req: RecordedRequest, repo_type: str, repo_id: str, revision: str, path: str) -> Any:
        """The files and folders under `path` (the whole repo when empty), one level deep unless ?recursive=true; a
        path that holds nothing is 404 EntryNotFound, as on the Hub. One page: no pagination Link header."""
        repo = self._get_repo(repo_type, repo_id, req.headers)
        tree = self._trees[self._resolve(repo, revision)]
        prefix = f"{path.strip('/')}/" if path.strip("/") else ""
        below = {name[len(prefix) :]: data for name, data in tree.items() if name.startswith(prefix)}
        if prefix and not below:
            raise _Reply(404, f"{path} does not exist on {revision!r}", "EntryNotFound")
        recursive = req.query.get("recursive", "").lower() in ("1", "true")
        folders: set[str] = set()
        files = []
        for rest, data in sorted(below.items()):
            parts = rest.split("/")
            depth = len(parts) - 1 if recursive else min(1, len(parts) - 1)  # the folders above it that are listed
            folders.update("/".join(parts[: i + 1]) for i in range(depth))
            if recursive or len(parts) == 1:
                files.append({"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": prefix + rest})
        dirs = [
            {"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0, "path": prefix + f}
            for f in sorted(folders)
        ]
        return dirs + files

    def _route_resolve(self, req: RecordedRequest, segments: list[str]) -> Any:
        if req.method not in ("GET", "HEAD"):
            return None
        repo_type = "model"
        if segments[:1] in (["datasets"], ["spaces"]):
            repo_type, segments = _REPO_TYPES[segments[0]], segments[1:]
        for n_id in (2, 1):
            if len(segments) > n_id + 2 and segments[n_id] == "resolve":
                repo_id, revision, path = "/".join(segments[:n_id]), segments[n_id + 1], "/".join(segments[n_id + 2 :])
                break
        else:
            return None
        repo = self._get_repo(repo_type, repo_id, req.headers)
        oid = self._resolve(repo, revision)
        tree = self._trees[oid]
        if path not in tree:
            raise _Reply(404, "Entry not found", "EntryNotFound")
        data = tree[path]
        headers = {
            "Content-Type": "application/octet-stream",
            "ETag": f'"{git_blob_sha1(data)}"',
            "X-Repo-Commit": oid,
        }
        return 200, headers, data


def _make_handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
        timeout = 30

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _handle(self) -> None:
            raw = self._read_body()
            split = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            content_type = headers.get("content-type", "")
            body: Any = raw or None
            try:
                if raw and "ndjson" in content_type:
                    body = [json.loads(line) for line in raw.splitlines() if line.strip()]
                elif raw and "json" in content_type:
                    body = json.loads(raw)
            except ValueError:
                body = raw
            req = RecordedRequest(
                method=self.command,
                path=unquote(split.path),
                raw_path=split.path,
                query=dict(parse_qsl(split.query)),
                headers=headers,
                body=body,
            )
            with hub._lock:
                hub.requests.append(req)
            try:
                status, out_headers, out = hub._dispatch(req)
            except Exception as err:  # a bug in the fake: answer loudly rather than hang the client
                status, out_headers = 500, {"Content-Type": "application/json"}
                out = json.dumps({"error": f"fake hub crashed: {err!r}"}).encode()
            req.status = status
            self.send_response(status)
            for name, value in out_headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(out)

        do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def use_fake_hub(monkeypatch: pytest.MonkeyPatch, hub: FakeHub, home: str | os.PathLike) -> None:
    """Point huggingface_hub at `hub` for the rest of the test, online, anonymous and with its state under `home`.

    huggingface_hub reads its settings from the environment once, at import: the environment variables are set for
    code that reads them later (subprocesses, HfApi(endpoint=os.environ[...])), and the module constants that
    already hold the imported values are patched too.
    """
    from huggingface_hub import constants, hf_api
    from huggingface_hub.utils import close_session

    home = Path(home)
    endpoint = hub.endpoint
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_TOKEN_PATH", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_XET_CACHE", str(home / "xet"))
    for proxy_var in ("NO_PROXY", "no_proxy"):  # never send the fake's traffic through a proxy from the environment
        existing = os.environ.get(proxy_var)
        monkeypatch.setenv(proxy_var, ",".join(filter(None, ["127.0.0.1", "localhost", existing])))

    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    # Telemetry off also stops the user-agent builder from fetching {ENDPOINT}/api/agent-harnesses.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HUGGINGFACE_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_XET_CACHE", str(home / "xet"))
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / ".agent_harnesses.json"))
    # huggingface_hub.create_repo, upload_folder, ... are bound methods of one HfApi made at import, endpoint included.
    monkeypatch.setattr(hf_api.api, "endpoint", endpoint)
    # transformers keeps one HfApi of its own, made with the endpoint of its first use (it lists repo trees with it).
    try:
        from transformers.utils import hub as transformers_hub
    except ImportError:
        pass
    else:
        monkeypatch.setattr(transformers_hub, "_hf_api", None)
    # The shared HTTP client reads proxy settings when it is created: start from a fresh one.
    close_session()


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    """A running FakeHub, with huggingface_hub pointed at it (online, no stored token) for this test."""
    from huggingface_hub.utils import close_session

    with FakeHub() as hub:
        use_fake_hub(monkeypatch, hub, tmp_path_factory.mktemp("hf_home"))
        yield hub
        close_session()  # drop pooled connections to this server; the next client is built after the env is restored
