"""A fake Hugging Face Hub behind huggingface_hub's own HTTP client (an httpx2 MockTransport).

Everything above the HTTP layer is the real library: ``HfApi.create_repo``, ``create_commit`` and ``upload_folder``
build and send their requests as they would to the Hub; this fake answers the endpoints a push uses and records what
arrived. It tells the client to send every file as a "regular" blob, so a commit carries each file's bytes (base64)
and the test can compare them with what was meant to be sent.
"""

from __future__ import annotations

import base64
import contextlib
import json
from dataclasses import dataclass, field

import httpx2
import yaml

ENDPOINT = "https://huggingface.co"


@dataclass
class Commit:
    repo_type: str
    repo_id: str
    revision: str
    summary: str
    files: dict[str, bytes]


@dataclass
class FakeHub:
    """Records requests; answers repo creation, YAML validation, preupload and commit."""

    requests: list[tuple[str, str]] = field(default_factory=list)
    created: list[dict] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    validated: list[dict] = field(default_factory=list)
    authorization: set[str] = field(default_factory=set)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        self.requests.append((request.method, path))
        self.authorization.add((path, request.headers.get("authorization", "")))
        if request.method == "POST" and path == "/api/repos/create":
            body = json.loads(request.content)
            self.created.append(body)
            repo_id = f"{body.get('organization') or 'user'}/{body['name']}"
            prefix = "" if body.get("type") in (None, "model") else f"{body['type']}s/"
            return httpx2.Response(200, json={"url": f"{ENDPOINT}/{prefix}{repo_id}"})
        if request.method == "POST" and path == "/api/validate-yaml":
            body = json.loads(request.content)
            self.validated.append(body)
            front = body["content"].split("---")[1]
            yaml.safe_load(front)  # what the Hub would reject first: front matter that is not YAML
            return httpx2.Response(200, json={"errors": [], "warnings": []})
        parts = path.split("/")
        # /api/{type}s/{owner}/{name}/preupload/{revision} and /commit/{revision}
        if request.method == "POST" and len(parts) >= 7 and parts[5] in ("preupload", "commit"):
            repo_type, repo_id, action, revision = parts[2][:-1], f"{parts[3]}/{parts[4]}", parts[5], "/".join(parts[6:])
            if action == "preupload":
                files = json.loads(request.content)["files"]
                return httpx2.Response(200, json={"files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]})
            lines = [json.loads(line) for line in request.content.splitlines() if line.strip()]
            header = next(item["value"] for item in lines if item["key"] == "header")
            files = {item["value"]["path"]: base64.b64decode(item["value"]["content"])
                     for item in lines if item["key"] == "file"}
            assert not [item for item in lines if item["key"] == "lfsFile"], "the fake Hub asked for regular files"
            self.commits.append(Commit(repo_type, repo_id, revision, header["summary"], files))
            prefix = "" if repo_type == "model" else f"{repo_type}s/"
            return httpx2.Response(200, json={"commitUrl": f"{ENDPOINT}/{prefix}{repo_id}/commit/abc123",
                                              "commitOid": "abc123", "pullRequestUrl": None})
        return httpx2.Response(404, json={"error": f"the fake Hub does not serve {request.method} {path}"})

    def commit(self, repo_id: str) -> Commit:
        (found,) = [c for c in self.commits if c.repo_id == repo_id]
        return found


@contextlib.contextmanager
def fake_hub(monkeypatch):
    """Route huggingface_hub's HTTP client to a ``FakeHub`` (online mode, a token) for the duration."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    hub = FakeHub()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_fake_token")
    huggingface_hub.set_client_factory(lambda: httpx2.Client(
        transport=httpx2.MockTransport(hub.handle),
        event_hooks={"request": [_http.hf_request_event_hook]},
        follow_redirects=True,
    ))
    try:
        yield hub
    finally:
        huggingface_hub.set_client_factory(_http.default_client_factory)
