"""Stage 5: publish the cells that pass the matrix's policy, staged first, then promoted by digest.

Order of work, chosen so that a failure leaves nothing half-done:

1. decide, from the build report alone, which cells may be published (policy, freshness, the
   verified image is the built one) before anything is pushed;
2. check the registry answers; push every admitted image to a per-run staging tag (docker moves
   the layers, once), reading the manifest digest from the push stream;
3. only when every staging push succeeded: promote each by digest (GET the staged manifest by
   digest, PUT the same bytes under each final tag). No layer moves and the digest is identical,
   so a tag can only ever name an image that passed.

A registry that stays down stops the run at step 2 with exit 3 and no final tag written.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import docker
import requests
from docker.errors import APIError, DockerException

from imagekit import naming
from imagekit.clock import timestamp
from imagekit.engine import connect, inspect_image, unreachable
from imagekit.errors import EnvironmentProblem
from imagekit.lockfile import ChecksSummary, LockEntry, VerifiedBy, merge_lock
from imagekit.matrix import Cell, Plan
from imagekit.registry import USER_ENV, Backoff, Manifest, Registry, RegistryError, find_credentials
from imagekit.render import Renderer
from imagekit.store import BuildReport, CellResult, Verification

Level = Literal["validated", "checked", "built"]
# What a policy admits, by what the image actually passed.
ADMITS: Mapping[str, frozenset[str]] = {
    "gpu-validated": frozenset({"validated"}),
    "checked": frozenset({"validated", "checked"}),
    "built": frozenset({"validated", "checked", "built"}),
}
# Whole words and status phrases only: a bare "500" or "eof" would match inside a digest, a
# size ("5001 bytes") or a word ("thereof") and retry a push that can never succeed.
_TRANSIENT_PUSH = re.compile(
    r"\b(?:(?:status(?: code)?|http(?:/\d(?:\.\d)?)?|error)[: ]*(?:500|502|503|504|429)\b"
    r"|(?:500|502|503|504|429) (?:internal server error|bad gateway|service unavailable"
    r"|gateway time-?out|too many requests)"
    r"|internal server error|service unavailable|bad gateway|gateway time-?out|too many requests"
    r"|connection refused|connection reset(?: by peer)?|broken pipe"
    r"|i/o timeout|tls handshake timeout|timeout exceeded|timed out|(?:unexpected )?eof"
    r"|context deadline exceeded|no such host|temporary failure in name resolution)\b",
    re.IGNORECASE,
)


def transient_push_error(text: str) -> bool:
    """Whether a push error reads like the registry or network having a bad moment."""
    return _TRANSIENT_PUSH.search(text) is not None


@dataclass(frozen=True)
class Candidate:
    """A cell admitted for publishing, with its final tags."""

    cell: str
    image_id: str
    input_digest: str
    level: Level
    tags: tuple[str, ...]
    verification: Verification | None


@dataclass(frozen=True)
class Refusal:
    cell: str
    reason: str


@dataclass(frozen=True)
class Published:
    entry: LockEntry
    staged_as: str
    duration_s: float


@dataclass(frozen=True)
class PublishOptions:
    registry: str
    repository: str  # without the registry
    lock_path: Path
    dry_run: bool = False
    backoff: Backoff = field(default_factory=Backoff)


def level_of(result: CellResult) -> Level | None:
    """How far this image was verified; None when it must never be published."""
    if result.status not in ("built", "skipped") or not result.image_id:
        return None
    verification = result.verification
    if verification is None:
        return "built"
    if verification.verdict == "failed":
        return None
    return verification.verdict


def _refusal_reason(result: CellResult | None, policy: str, input_digest: str) -> str | None:
    if result is None:
        return "not in the build report; run `imagekit build` first"
    if result.status not in ("built", "skipped") or not result.image_id:
        return f"its build {result.status}"
    if result.input_digest != input_digest:
        return (
            f"the report's image was built from other inputs ({(result.input_digest or '-')[:12]},"
            f" now {input_digest[:12]}); run `imagekit build` and `imagekit verify` again"
        )
    verification = result.verification
    if verification is not None and verification.image not in (result.image_id, *result.tags):
        return f"its verification ran on {verification.image}, not the built {result.image_id}; verify again"
    level = level_of(result)
    if level is None:
        assert verification is not None
        return f"it failed verification ({verification.error or _failed_names(verification)})"
    if level not in ADMITS[policy]:
        what = "never verified" if level == "built" else "checked without a GPU"
        return (
            f"publish policy {policy} needs {' or '.join(sorted(ADMITS[policy]))}; it was {what}"
            " (run `imagekit verify --gpus all`, or set publish.policy explicitly)"
        )
    return None


def _failed_names(verification: Verification) -> str:
    return ", ".join(c.name for c in verification.failed_checks()[:4]) or "no checks ran"


def final_tags(result: CellResult, level: Level) -> tuple[str, ...]:
    """The build's tags (readable first, the dated one with the build's date), suffixed by level."""
    tags = [tag for ref in result.tags if (tag := naming.split_reference(ref)[1])]
    return naming.published_tags(tags, level, result.id)


def select(plan: Plan, cells: Sequence[Cell], report: BuildReport) -> tuple[list[Candidate], list[Refusal]]:
    """Decide per cell, from the report alone, before anything is pushed."""
    renderer = Renderer(plan)
    by_id = {r.id: r for r in report.cells}
    policy = plan.matrix.publish.policy
    admitted: list[Candidate] = []
    refused: list[Refusal] = []
    for cell in cells:
        result = by_id.get(cell.id)
        reason = _refusal_reason(result, policy, renderer.render(cell).input_digest)
        if reason is not None:
            refused.append(Refusal(cell.id, reason))
            continue
        assert result is not None and result.image_id and result.input_digest
        level = level_of(result)
        assert level is not None
        admitted.append(
            Candidate(
                cell.id, result.image_id, result.input_digest, level, final_tags(result, level),
                result.verification,
            )
        )  # fmt: skip
    return admitted, refused


# -- pushing and promoting ------------------------------------------------------------------------------


def _verified_by(verification: Verification | None) -> VerifiedBy | None:
    if verification is None:
        return None
    checks = verification.checks
    return VerifiedBy(
        verdict=verification.verdict,
        gpus=verification.gpus,
        gpu_requested=verification.gpu_requested,
        gpu_visible=verification.gpu_visible,
        verified_at=verification.finished_at,
        duration_s=verification.duration_s,
        checks=ChecksSummary(
            passed=sum(1 for c in checks if c.status == "pass"),
            failed=sum(1 for c in checks if c.status == "fail"),
            skipped=sum(1 for c in checks if c.status == "skip"),
            failed_names=tuple(c.name for c in checks if c.status == "fail"),
            metrics=dict(verification.metrics),
        ),
    )


class Publisher:
    def __init__(
        self,
        api: docker.APIClient,
        registry: Registry,
        options: PublishOptions,
        policy: str,
        say: Callable[[str], None],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.registry = registry
        self.options = options
        self.policy = policy
        self.say = say
        self.sleep = sleep
        self.target = naming.repository(options.registry, options.repository)

    def _auth_config(self) -> dict[str, str] | None:
        # docker-py reads the Docker config's auths itself; the environment's pair it cannot see.
        if os.environ.get(USER_ENV):
            found = find_credentials(self.options.registry)
            if found:
                return {"username": found.username, "password": found.password}
        return None

    def present(self, candidates: Sequence[Candidate]) -> tuple[list[Candidate], list[Refusal]]:
        """Split off the cells whose image the engine no longer has (pruned since the build)."""
        here: list[Candidate] = []
        gone: list[Refusal] = []
        for candidate in candidates:
            if inspect_image(self.api, candidate.image_id) is None:
                gone.append(Refusal(candidate.cell, f"image {candidate.image_id} is gone; build again"))
            else:
                here.append(candidate)
        return here, gone

    def stage(self, candidate: Candidate) -> str:
        """Push the image under its staging tag; returns the manifest digest docker reports."""
        tag = naming.staging_tag(candidate.input_digest)
        self.api.tag(candidate.image_id, self.target, tag)
        try:
            delays = self.options.backoff.delays()
            while True:
                try:
                    return self._push(tag)
                except _PushFailed as failed:
                    if not failed.transient or not delays:
                        where = naming.reference(self.target, tag)
                        raise EnvironmentProblem(
                            f"pushing {candidate.cell} to {where} failed: {failed}"
                        ) from None
                    delay = delays.pop(0)
                    self.say(f"push {candidate.cell}: {failed}; retrying in {delay:g}s")
                    self.sleep(delay)
        finally:
            # The staging tag exists only to push; the local engine keeps just the build's tags.
            try:
                self.api.remove_image(naming.reference(self.target, tag), noprune=True)
            except (APIError, DockerException):
                self.say(f"could not remove the local tag {naming.reference(self.target, tag)}")

    def _push(self, tag: str) -> str:
        digest: str | None = None
        try:
            stream = self.api.push(
                self.target, tag=tag, stream=True, decode=True, auth_config=self._auth_config()
            )
            for line in stream:
                if not isinstance(line, dict):
                    continue
                if line.get("error"):
                    text = " ".join(str(line["error"]).split())
                    raise _PushFailed(text, transient_push_error(text))
                aux = line.get("aux")
                if isinstance(aux, dict) and aux.get("Digest"):
                    digest = str(aux["Digest"])
        except APIError as exc:
            text = " ".join(str(exc.explanation or exc).split())
            raise _PushFailed(text, exc.is_server_error()) from None
        except (requests.ConnectionError, ConnectionError) as exc:
            raise unreachable(exc) from None
        if digest is None:
            raise _PushFailed("the engine reported no manifest digest", False)
        return digest

    def promote(self, candidate: Candidate, digest: str) -> Manifest:
        """Every final tag -> the staged manifest, by digest; the bytes (and digest) never change."""
        repository = self.options.repository
        manifest = self.registry.get_manifest(repository, digest)
        config = _config_digest(manifest)
        if config is not None and config != candidate.image_id:
            raise RegistryError(
                f"{naming.by_digest(self.target, digest)} holds image {config}, not the verified"
                f" {candidate.image_id};"
                " nothing promoted for this cell"
            )
        # Immutable tags first, the moving readable tag last: it moves only once the rest exist.
        for tag in (*candidate.tags[1:], candidate.tags[0]):
            self.registry.put_manifest(repository, tag, manifest)
        return manifest

    def entry(self, candidate: Candidate, digest: str) -> LockEntry:
        image = inspect_image(self.api, candidate.image_id) or {}
        labels: Mapping[str, str] = (image.get("Config") or {}).get("Labels") or {}
        expect = naming.expectations(labels)
        return LockEntry(
            cell=candidate.cell,
            registry=self.options.registry,
            repository=self.target,
            digest=digest,
            tags=candidate.tags,
            image_id=candidate.image_id,
            input_digest=candidate.input_digest,
            policy=self.policy,
            level=candidate.level,
            published_at=timestamp(),
            verification=_verified_by(candidate.verification),
            expect=expect,
            check_script=labels.get(naming.CHECK_SCRIPT_LABEL),
            frontend=labels.get(naming.FRONTEND_LABEL),
        )

    def run(
        self, candidates: Sequence[Candidate], on_published: Callable[[Published], None] = lambda _: None
    ) -> list[Published]:
        self.registry.ping()
        staged: list[tuple[Candidate, str, float]] = []
        for candidate in candidates:
            started = time.monotonic()
            digest = self.stage(candidate)
            self.say(f"staged {candidate.cell} as {naming.by_digest(self.target, digest)}")
            staged.append((candidate, digest, time.monotonic() - started))
        published: list[Published] = []
        for candidate, digest, push_s in staged:
            started = time.monotonic()
            try:
                self.promote(candidate, digest)
            except RegistryError as exc:
                raise EnvironmentProblem(str(exc)) from None
            entry = self.entry(candidate, digest)
            # After each cell, so the lock names every tag that exists even if a later cell fails.
            merge_lock(self.options.lock_path, {candidate.cell: entry})
            done = Published(
                entry, naming.staging_tag(candidate.input_digest), push_s + time.monotonic() - started
            )
            published.append(done)
            on_published(done)
        return published


class _PushFailed(Exception):
    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def _config_digest(manifest: Manifest) -> str | None:
    """The image id (config digest) a single-image manifest names; None for an index."""
    try:
        data: Any = json.loads(manifest.body)
    except ValueError:
        return None
    config = data.get("config") if isinstance(data, dict) else None
    return str(config["digest"]) if isinstance(config, dict) and config.get("digest") else None


def connect_registry(host: str, backoff: Backoff, say: Callable[[str], None]) -> Registry:
    return Registry(host, find_credentials(host), backoff=backoff, on_retry=say)


@dataclass(frozen=True)
class PublishRun:
    """What one ``imagekit publish`` did (or, dry, would do)."""

    candidates: tuple[Candidate, ...]
    published: tuple[Published, ...]
    refused: tuple[Refusal, ...]


def publish_cells(
    plan: Plan,
    cells: Sequence[Cell],
    report: BuildReport,
    options: PublishOptions,
    say: Callable[[str], None],
    on_retry: Callable[[str], None],
    on_refused: Callable[[Refusal], None],
    on_published: Callable[[Published], None],
) -> PublishRun:
    """Decide from the report, then (unless dry) push, stage and promote what was admitted.

    ``say`` hears progress, ``on_retry`` each retried registry request, ``on_refused`` and
    ``on_published`` each cell's outcome as it is known.
    """
    candidates, refused = select(plan, cells, report)
    for refusal in refused:
        on_refused(refusal)
    if options.dry_run or not candidates:
        return PublishRun(tuple(candidates), (), tuple(refused))
    api = connect()
    client = connect_registry(options.registry, options.backoff, on_retry)
    try:
        publisher = Publisher(api, client, options, plan.matrix.publish.policy, say)
        candidates, missing = publisher.present(candidates)
        for refusal in missing:
            on_refused(refusal)
        published = publisher.run(candidates, on_published)
    finally:
        client.close()
    return PublishRun(tuple(candidates), tuple(published), (*refused, *missing))
