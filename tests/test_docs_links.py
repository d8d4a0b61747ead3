"""Every relative link in the repository's Markdown files resolves to a file or directory of the repository."""

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[1]

# [text](target) and ![alt](target), the target optionally in <...> and followed by a "title"
_LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)')
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+(<[^>]*>|\S+)")  # [label]: target
_CODE_SPAN = re.compile(r"(`+).*?\1")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, file:, ...


def extract_links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside fenced code blocks and code spans, in order."""
    targets, fence = [], None
    for line in text.splitlines():
        stripped = line.lstrip()
        marker = stripped[:3]
        if fence is None and marker in ("```", "~~~"):
            fence = marker
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        line = _CODE_SPAN.sub("", line)
        found = [m.group(1) for m in _LINK.finditer(line)]
        reference = _REFERENCE.match(line)
        if reference:
            found.append(reference.group(1))
        targets.extend(t[1:-1] if t.startswith("<") and t.endswith(">") else t for t in found)
    return targets


def local_path(target: str) -> str | None:
    """The path part of a relative link target, or None for an external link or a bare #anchor."""
    if _EXTERNAL.match(target) or target.startswith("#"):
        return None
    return unquote(target.split("#", 1)[0].split("?", 1)[0]) or None


def markdown_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
        names = [line for line in listed.stdout.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an unpacked archive)
        names = [str(p.relative_to(REPO)) for p in REPO.rglob("*.md")
                 if not any(part.startswith(".") or part in ("node_modules", "build", "dist") for part in
                            p.relative_to(REPO).parts)]
    return [REPO / name for name in sorted(names) if (REPO / name).is_file()]


def test_extract_links_finds_links_and_images_but_not_code():
    text = "\n".join([
        "See [the docs](docs/README.md) and ![a picture](img/a.png \"title\").",
        "A [nested [label]](../README.md#tests), <x> [angle](<dir with space/f.md>).",
        "Not `[in code](nope.md)`; [external](https://example.com/x.md), [anchor](#here).",
        "```",
        "[in a fence](fenced.md)",
        "```",
        "[ref]: results/gpu/README.md",
    ])
    assert extract_links(text) == ["docs/README.md", "img/a.png", "../README.md#tests", "dir with space/f.md",
                                   "https://example.com/x.md", "#here", "results/gpu/README.md"]
    assert [local_path(t) for t in extract_links(text)] == [
        "docs/README.md", "img/a.png", "../README.md", "dir with space/f.md", None, None, "results/gpu/README.md"]


def test_every_relative_markdown_link_resolves_inside_the_repository():
    files = markdown_files()
    assert REPO / "README.md" in files
    broken = []
    for md in files:
        for target in extract_links(md.read_text(encoding="utf-8")):
            path = local_path(target)
            if path is None:
                continue
            resolved = (REPO / path.lstrip("/")) if path.startswith("/") else (md.parent / path)
            resolved = resolved.resolve()
            inside = resolved == REPO or REPO in resolved.parents
            if not inside or not resolved.exists():
                why = "outside the repository" if not inside else "no such file or directory"
                broken.append(f"{md.relative_to(REPO)}: ({target}): {why}")
    assert not broken, "broken Markdown links:\n" + "\n".join(broken)


def test_the_results_page_stays_within_300_lines():
    """docs/results.md is read whole: a finding that does not fit replaces an older one (git keeps it)."""
    lines = (REPO / "docs" / "results.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"docs/results.md has {len(lines)} lines; at most 300"
