"""Publishing without an engine: policy decisions, tags, the lock file, credentials, the registry
client's auth and retry logic (against a tiny local HTTP server), and Kubernetes Jobs."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.errors import EnvironmentProblem, InputError
from imagekit.k8s import Claim, JobOptions, Toleration, job_name, parse_node_selector, render_jobs
from imagekit.lockfile import ChecksSummary, LockEntry, VerifiedBy, merge_lock, read_lock, render_lock
from imagekit.publish import ADMITS, final_tags, level_of
from imagekit.registry import Backoff, Credentials, Registry, find_credentials, is_local
from imagekit.report import CellResult
from imagekit.verify import CheckRecord, Verification

DIGEST = "sha256:" + "ab" * 32


def result(verdict: str | None, status: str = "built") -> CellResult:
    verification = None
    if verdict is not None:
        checks = (CheckRecord("torch_import", "pass" if verdict != "failed" else "fail", True),)
        verification = Verification("c", "sha256:img", "none", verdict, False, False, checks, 1.0)  # type: ignore[arg-type]
    return CellResult(
        id="c",
        kind="cell",
        status=status,  # type: ignore[arg-type]
        image_id="sha256:img",
        tags=(
            "acme/pytorch:2.1.2-cu121",
            "acme/pytorch:2.1.2-cu121-20261129",
            "acme/pytorch:2.1.2-cu121-abc",
        ),
        size=1,
        input_digest="f" * 64,
        base_image="b",
        base_digest=None,
        duration_s=1.0,
        log=None,
        error=None,
        verification=verification,
    )


def test_levels_and_policies() -> None:
    assert level_of(result("validated")) == "validated"
    assert level_of(result("checked")) == "checked"
    assert level_of(result(None)) == "built"
    assert level_of(result("failed")) is None  # never published, whatever the policy
    assert level_of(result(None, status="failed")) is None
    assert ADMITS["gpu-validated"] == {"validated"}
    assert "checked" in ADMITS["checked"] and "built" not in ADMITS["checked"]


def test_tags_say_how_far_an_image_was_verified() -> None:
    assert final_tags(result("validated"), "validated")[0] == "2.1.2-cu121"
    assert final_tags(result("checked"), "checked") == (
        "2.1.2-cu121-checked",
        "2.1.2-cu121-20261129-checked",
        "2.1.2-cu121-abc-checked",
    )
    assert all(t.endswith("-unverified") for t in final_tags(result(None), "built"))


def test_local_registries_speak_http() -> None:
    assert is_local("127.0.0.1:5000") and is_local("localhost:5000") and is_local("127.1.2.3")
    assert is_local("[::1]:5000") and is_local("[::1]") and is_local("::1")
    assert not is_local("[2001:db8::1]:5000")
    assert not is_local("ghcr.io") and not is_local("10.0.0.1:5000")
    assert Backoff(4, 0.5, 2).delays() == [0.5, 1.0, 2.0]


def test_credentials_from_env_then_docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    auth = base64.b64encode(b"robot:hunter2").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"https://ghcr.io": {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    found = find_credentials("ghcr.io", environ={})
    assert found == Credentials("robot", "hunter2")
    assert "hunter2" not in repr(found)
    assert find_credentials("quay.io", environ={}) is None
    env = {"IMAGEKIT_REGISTRY_USER": "u", "IMAGEKIT_REGISTRY_PASSWORD": "p"}
    assert find_credentials("ghcr.io", environ=env) == Credentials("u", "p")


class Stub:
    """A registry-shaped HTTP server on 127.0.0.1: bearer auth, a token endpoint, N failures."""

    def __init__(self, fail: int = 0, status: int = 503) -> None:
        self.fail, self.status = fail, status
        self.manifests: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def reply(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def handle_any(self) -> None:
                auth = self.headers.get("Authorization")
                stub.requests.append((self.command, self.path, auth))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if stub.fail > 0:
                    stub.fail -= 1
                    return self.reply(stub.status)
                if self.path.startswith("/token"):
                    ok = auth == "Basic " + base64.b64encode(b"u:p").decode()
                    return self.reply(200 if ok else 401, json.dumps({"token": "T0K"}).encode())
                if auth != "Bearer T0K":
                    realm = f"http://{stub.host}/token"
                    challenge = f'Bearer realm="{realm}",service="stub",scope="repository:r:pull"'
                    return self.reply(401, b"{}", {"WWW-Authenticate": challenge})
                if self.command == "PUT":
                    import hashlib

                    digest = "sha256:" + hashlib.sha256(body).hexdigest()
                    stub.manifests[self.path.rsplit("/", 1)[1]] = body
                    stub.manifests[digest] = body
                    return self.reply(201, b"", {"Docker-Content-Digest": digest})
                if "/tags/list" in self.path:
                    return self.reply(200, json.dumps({"tags": sorted(stub.manifests)}).encode())
                if "/manifests/" in self.path:
                    data = stub.manifests.get(self.path.rsplit("/", 1)[1])
                    if data is None:
                        return self.reply(404, b"{}")
                    ctype = "application/vnd.docker.distribution.manifest.v2+json"
                    return self.reply(200, data, {"Content-Type": ctype})
                return self.reply(200, b"{}")

            do_GET = do_PUT = do_HEAD = handle_any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    yield server
    server.close()


def client(host: str, attempts: int = 4) -> tuple[Registry, list[float]]:
    slept: list[float] = []
    registry = Registry(host, Credentials("u", "p"), Backoff(attempts, 0.1, 2), sleep=slept.append)
    return registry, slept


def test_bearer_flow_and_promotion_by_digest(stub: Stub) -> None:
    registry, _ = client(stub.host)
    from imagekit.registry import Manifest

    body = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:cfg"}}).encode()
    import hashlib

    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    manifest = Manifest(digest, "application/vnd.docker.distribution.manifest.v2+json", body)
    assert registry.put_manifest("r", "staging", manifest) == digest
    fetched = registry.get_manifest("r", digest)
    assert fetched.body == body and fetched.digest == digest
    registry.put_manifest("r", "2.1.2", fetched)
    assert stub.manifests["2.1.2"] == body
    assert "2.1.2" in registry.tags("r")
    assert registry.head_manifest("r", "nope") is None
    # The password only ever went to the token endpoint, as Basic auth.
    sent = [auth for _, path, auth in stub.requests if auth and auth.startswith("Basic")]
    assert sent and all(path.startswith("/token") for _, path, auth in stub.requests if auth in sent)


def test_transient_errors_are_retried_with_backoff() -> None:
    server = Stub(fail=3)
    try:
        registry, slept = client(server.host)
        registry.ping()
        assert slept == [0.1, 0.2, 0.4] and registry.retries == 3
    finally:
        server.close()


def test_a_registry_that_stays_down_is_an_environment_problem() -> None:
    server = Stub(fail=100)
    try:
        registry, slept = client(server.host, attempts=3)
        with pytest.raises(EnvironmentProblem, match="kept answering HTTP 503"):
            registry.ping()
        assert len(slept) == 2
    finally:
        server.close()
    registry, _ = client(server.host, attempts=2)  # now closed
    with pytest.raises(EnvironmentProblem, match="unreachable after 2 attempts"):
        registry.ping()


def entry(cell: str = "torch2.1.2-cu121", digest: str = DIGEST, verified: bool = True) -> LockEntry:
    verification = VerifiedBy(
        "validated", "all", True, True, "2026-11-29T12:00:00Z", 42.0, ChecksSummary(12, 0, 1, (), {"x": 1.0})
    )
    return LockEntry(
        cell=cell,
        registry="ghcr.io",
        repository="ghcr.io/acme/pytorch",
        digest=digest,
        tags=("2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04", "2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04-20261129"),
        image_id="sha256:" + "cd" * 32,
        input_digest="e" * 64,
        policy="gpu-validated",
        level="validated",
        published_at="2026-11-29T12:01:00Z",
        verification=verification if verified else None,
        expect={"torch": "2.1.2", "cuda": "12.1", "cudnn": "8", "python": "3.10", "flavour": "devel"},
        check_script="/opt/imagekit/check.py",
    )


def test_lock_merges_per_cell_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a": entry("a")})
    merge_lock(path, {"b": entry("b", verified=False)})
    merge_lock(path, {"a": entry("a", digest="sha256:" + "00" * 32)})
    lock = read_lock(path)
    assert sorted(lock) == ["a", "b"] and lock["a"].digest.endswith("00" * 32)
    assert lock["b"] == entry("b", verified=False) and lock["a"].verification == entry().verification
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    env = render_lock(lock, "env")
    assert "IMAGEKIT_IMAGE_A=ghcr.io/acme/pytorch@sha256:" in env
    assert yaml.safe_load(render_lock(lock, "yaml"))["images"]["b"]["verification"] is None
    with pytest.raises(InputError):
        render_lock(lock, "toml")
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a readable lock file"):
        read_lock(path)


def test_k8s_options_are_checked() -> None:
    assert Toleration.parse("nvidia.com/gpu:NoSchedule").as_json()["operator"] == "Exists"
    assert Toleration.parse("dedicated=gpu:NoExecute").as_json()["value"] == "gpu"
    assert Claim.parse("ckpt") == Claim("ckpt", "/data")
    assert parse_node_selector(["nvidia.com/gpu.present=true"]) == (("nvidia.com/gpu.present", "true"),)
    for bad in (
        lambda: Toleration.parse("key=v:Sometimes"),
        lambda: Claim.parse("Bad_Name"),
        lambda: Claim.parse("ok:relative"),
        lambda: parse_node_selector(["novalue"]),
    ):
        with pytest.raises(InputError):
            bad()
    long = job_name("x" * 80)
    assert len(long) <= 63 and long != job_name("x" * 81)


@pytest.mark.parametrize(
    "options",
    [
        JobOptions(),
        JobOptions(gpus=0),
        JobOptions(
            gpus=8,
            node_selector=(("nvidia.com/gpu.product", "NVIDIA-H200"),),
            tolerations=(Toleration.parse("nvidia.com/gpu:NoSchedule"), Toleration.parse("a=b:NoExecute")),
            runtime_class="nvidia",
            claims=(Claim.parse("data"), Claim.parse("ckpt:/checkpoints")),
            command=("torchrun", "--nproc-per-node=8", "train.py"),
            cpu="32",
            memory="256Gi",
            namespace="ml",
            ttl_s=None,
        ),
    ],
)
def test_every_job_manifest_is_valid_kubernetes(options: JobOptions) -> None:
    files = render_jobs({"a": entry("a"), "b": entry("b" * 70)}, options)
    assert len(files) == 2
    for text in files.values():
        manifest: dict[str, Any] = yaml.safe_load(text)
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
        pod = manifest["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert container["image"] == f"ghcr.io/acme/pytorch@{DIGEST}"  # by digest, never a tag
        assert pod["restartPolicy"] == "Never"
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        limits = container["resources"]["limits"]
        assert limits.get("nvidia.com/gpu", 0) == options.gpus
        if not options.command:
            assert container["command"][:2] == ["python3", "/opt/imagekit/check.py"]
            assert ("--require-gpu" in container["command"]) == (options.gpus > 0)
            assert container["command"][container["command"].index("--expect-torch") + 1] == "2.1.2"
        claims = [
            v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
        ]
        assert claims == [c.name for c in options.claims]


def test_credentials_never_go_to_a_plain_http_realm_on_another_host() -> None:
    registry = Registry("registry.example.org:5000", Credentials("u", "p"))
    try:
        with pytest.raises(EnvironmentProblem, match="refusing to send the credentials"):
            registry._bearer({"realm": "http://tokens.example.com/token", "service": "s"}, "")
        registry._check_realm("https://tokens.example.com/token")  # https: fine
        registry._check_realm("http://registry.example.org:5001/token")  # the registry's own host
    finally:
        registry.close()
    local = Registry("[::1]:5000", Credentials("u", "p"))
    try:
        local._check_realm("http://127.0.0.2:9000/token")  # a local registry's own set-up
    finally:
        local.close()


def test_transient_push_errors_match_whole_words() -> None:
    from imagekit.publish import transient_push_error

    for text in (
        "received unexpected HTTP status: 503 Service Unavailable",
        "toomanyrequests: too many requests",
        "Patch https://r/v2/x/blobs/uploads/1: EOF",
        "dial tcp 1.2.3.4:443: connect: connection refused",
        "net/http: TLS handshake timeout",
    ):
        assert transient_push_error(text), text
    for text in (
        "manifest invalid: sha256:5000abc blob unknown",
        "denied: requested access to the resource is denied",
        "blob upload invalid: size 5001 exceeds the limit",
        "name unknown: repository thereof",
    ):
        assert not transient_push_error(text), text


def test_publish_closes_its_registry_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from imagekit import engine
    from imagekit import publish as publishing
    from imagekit import report as reports
    from tests.conftest import REPO, run_cli

    closed: list[bool] = []

    class FakeRegistry:
        def close(self) -> None:
            closed.append(True)

    class FakePublisher:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def present(self, candidates: Any) -> Any:
            raise EnvironmentProblem("registry down")

    candidate = publishing.Candidate("c", "sha256:img", "f" * 64, "validated", ("t",), None)
    monkeypatch.setattr(reports, "read_report", lambda _: None)
    monkeypatch.setattr(publishing, "select", lambda *_: ([candidate], []))
    monkeypatch.setattr(publishing, "connect_registry", lambda *_: FakeRegistry())
    monkeypatch.setattr(publishing, "Publisher", FakePublisher)
    monkeypatch.setattr(engine, "connect", lambda **_: object())
    result = run_cli(
        "publish", "-m", str(REPO / "matrix.yaml"), "--registry", "127.0.0.1:5000",
        "--state-dir", str(tmp_path), "--lock", str(tmp_path / "lock.json"),
    )  # fmt: skip
    assert result.exit_code == 3, result.stderr
    assert closed == [True]
