"""Every shell script the project ships or runs, and every `run:` step of its workflows: no pipeline
whose reader may stop before its writer.

Under `set -o pipefail` (every script here, and GitHub's `bash -eo pipefail` for `run:` steps) a
reader that exits early (`head`, `grep -q`, `grep -m`, awk's `exit`, sed's `q`, `read`) leaves its
writer writing into a closed pipe: the writer dies of SIGPIPE and the pipeline's status is 141, at
random, depending on who is faster. scripts/engine.sh's `apt-cache show | awk '... exit'` failed so
on 2 of 3 fresh machines, and nowhere else: CI's warm machine never ran it. Read the writer's output
whole first (`out=$(cmd)`, then parse `<<<"$out"`), or let the reader read to the end.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

# What separates one command from the next; a lone `|` (or `|&`) joins a writer to its reader.
_PUNCTUATION = ";&|()<>\n"
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
# `${...}` and `$#` hold `#`, which the tokenizer would take for a comment
_EXPANSION = re.compile(r"\$\{[^{}]*\}|\$#")
_AWK_EXIT = re.compile(r"\bexit\b")
_SED_QUIT = re.compile(r"(^|[;{}\s\d/$])[qQ]\d*\s*($|[;}])")
_GREP_EARLY_LONG = {"--quiet", "--silent", "--max-count", "--files-with-matches", "--files-without-match"}
# Words before a command's name that are not the command (`! cmd`, `{ cmd; }`, `time cmd`, `X=1 cmd`).
_PREFIX_WORDS = {"!", "{", "then", "do", "else", "time", "exec", "command", "env", "nohup", "setsid"}


def _without_heredocs(text: str) -> str:
    kept: list[str] = []
    terminator: str | None = None
    for line in text.splitlines():
        if terminator is not None:
            if line.strip() == terminator:
                terminator = None
            continue
        kept.append(line)
        found = _HEREDOC.search(line.replace("<<<", "   "))
        if found:
            terminator = found.group(2)
    return "\n".join(kept)


def _commands(text: str) -> list[list[list[str]]]:
    """Pipelines, each a list of stages, each a list of words (quotes removed)."""
    text = _EXPANSION.sub("X", _without_heredocs(text).replace("\\\n", " "))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCTUATION)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = "#"
    pipelines: list[list[list[str]]] = [[[]]]
    for token in lexer:
        if token and all(c in _PUNCTUATION for c in token):
            bare = token.replace("\n", "")
            if bare in ("|", "|&"):
                pipelines[-1].append([])
            elif bare in ("(", "{") and len(pipelines[-1]) > 1 and not pipelines[-1][-1]:
                continue  # `cmd | (reader ...)`: the subshell is the reader
            else:
                pipelines.append([[]])
            continue
        pipelines[-1][-1].append(token)
    return [[stage for stage in p if stage] for p in pipelines if sum(1 for s in p if s) > 1]


def _command_name(stage: list[str]) -> tuple[str, list[str]]:
    words = list(stage)
    while words and (words[0] in _PREFIX_WORDS or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0])):
        words.pop(0)
    if not words:
        return "", []
    return Path(words[0]).name, words[1:]


def _stops_early(stage: list[str]) -> str | None:
    """Why this reader may exit before its input ends, or None."""
    name, args = _command_name(stage)
    if name == "head":
        return "head stops after its lines"
    if name == "read":
        return "read takes one line"
    if name in ("grep", "egrep", "fgrep"):
        for arg in args:
            if arg.split("=")[0] in _GREP_EARLY_LONG:
                return f"grep {arg} stops at the first match"
            if re.fullmatch(r"-[A-Za-z]*[qmlL][A-Za-z0-9]*", arg):
                return f"grep {arg} stops at the first match"
    if name in ("awk", "gawk", "mawk") and any(_AWK_EXIT.search(a) for a in args if not a.startswith("-")):
        return "awk's exit stops reading"
    if name == "sed" and any(_SED_QUIT.search(a) for a in args if not a.startswith("-")):
        return "sed's q stops reading"
    return None


def early_readers(text: str) -> list[str]:
    """Each pipeline in a shell text whose reader (any stage after the first) may stop early."""
    found = []
    for pipeline in _commands(text):
        for stage in pipeline[1:]:
            why = _stops_early(stage)
            if why:
                found.append(f"{' | '.join(' '.join(s) for s in pipeline)}: {why}")
    return found


def shell_texts() -> dict[str, str]:
    """Every tracked shell script (by name or shebang) and every workflow's `run:` steps."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    texts: dict[str, str] = {}
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        if not path.is_file() or path.is_symlink():
            continue
        if name.endswith(".sh") or name == ".ci/run":
            texts[name] = path.read_text()
        elif path.suffix in ("", ".bash") and path.read_bytes()[:64].startswith(b"#!"):
            head = path.read_bytes()[:64].split(b"\n")[0]
            if re.search(rb"\b(ba)?sh\b", head):
                texts[name] = path.read_text()
        elif name.startswith(".github/workflows/") and name.endswith((".yml", ".yaml")):
            steps = [
                step["run"]
                for job in (yaml.safe_load(path.read_text()) or {}).get("jobs", {}).values()
                for step in job.get("steps", [])
                if isinstance(step.get("run"), str)
            ]
            texts[name] = "\n".join(steps)
    return texts


def test_the_shell_scripts_are_all_read() -> None:
    texts = shell_texts()
    for expected in ("scripts/engine.sh", "scripts/test.sh", "scripts/demo.sh", ".ci/run"):
        assert expected in texts
    assert any(name.startswith(".github/workflows/") for name in texts)
    assert any(name.startswith("examples/") for name in texts)


@pytest.mark.parametrize("name", sorted(shell_texts()))
def test_no_pipeline_reader_stops_before_its_writer(name: str) -> None:
    assert early_readers(shell_texts()[name]) == [], (
        'read the writer\'s output whole first (out=$(cmd); parse <<<"$out"), '
        "or let the reader read to the end"
    )


@pytest.mark.parametrize(
    "text",
    [
        # the line that failed 2 times in 3 on a fresh machine
        """arch=$(apt-cache "${opts[@]}" show "$pkg=$version" | awk '/^Architecture:/ {print $2; exit}')""",
        """! ldd "$bb" 2>&1 | grep -q '=>'""",
        """binfmt_line() { grep -v '^[[:space:]]*\\(#\\|$\\)' "$BINFMT_CONF" | head -n1; }""",
        "docker images |\n    grep -m1 imagekit",
        "cmd \\\n  | sed -n '1p;q'",
        "printf 'a\\nb\\n' | read first",
        "x=1 list --all | grep --quiet needle || true",
        "if docker info 2>/dev/null | grep -qi cdi; then echo yes; fi",
        "out=$(seq 100 | (head -n 3))",
    ],
)
def test_an_early_reader_is_found(text: str) -> None:
    assert early_readers(text), text


@pytest.mark.parametrize(
    "text",
    [
        """arch=$(awk '/^Architecture:/ && a == "" {a = $2} END {print a}' <<<"$show")""",
        """awk '!/^[[:space:]]*(#|$)/ {print; exit}' "$conf\"""",
        "du -sh /x | cut -f1",
        "grep -v pattern file | sort | uniq -c",
        "cmd || head -n1 file",
        'mounts | while read -r m; do umount "$m"; done',
        "pip install x 2>&1 | { grep -v 'is ignored' || true; }",
        "cat > f <<EOF\nfoo | head -n1\nEOF\necho done",
        "echo '| head' # a comment | head",
        'echo "${#missing[@]}" | cut -c1',
    ],
)
def test_a_reader_that_reads_to_the_end_is_not(text: str) -> None:
    assert early_readers(text) == [], text


def test_why_it_matters_an_early_reader_kills_its_writer_under_pipefail() -> None:
    # The premise of the rule, on this machine's bash: the writer dies of SIGPIPE (128 + 13).
    result = subprocess.run(["bash", "-c", "set -o pipefail; yes | head -n1 >/dev/null"], check=False)
    assert result.returncode == 141
