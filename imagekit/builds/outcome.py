"""What a build run ends with: its report, whether it was interrupted, the verifications after it."""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.report.store import BuildReport
from imagekit.report.verification import Verification


@dataclass(frozen=True)
class BuildOutcome:
    report: BuildReport
    interrupted: bool
    verifications: tuple[Verification, ...] = ()
    external_bases: tuple[tuple[str, str], ...] = ()  # (name, image id) of each pulled base

    @property
    def failed(self) -> bool:
        return self.report.failed or any(v.verdict == "failed" for v in self.verifications)
