"""The documentation a newcomer reads is true: every link resolves, the README's command reference names
exactly the options ``--help`` lists, and it opens with the two commands CI runs."""

from __future__ import annotations

import argparse
import re
import unicodedata
from pathlib import Path

import pytest

from autoscaler import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    p for p in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("policies/*.md"), *ROOT.glob("deploy/**/*.md"),
                *ROOT.glob("autoscaler/data/**/*.md"), *ROOT.glob("bench/*.md")]
    if p.is_file()
)
# [text](target) outside code spans; images too. Reference-style links are not used in this repository.
LINK = re.compile(r"(?<!`)\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = "".join(ch for ch in text if ch in " -" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    body = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", body, re.M):
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return out


def _links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


def test_the_docs_are_found() -> None:
    assert ROOT / "README.md" in DOCS
    assert len(DOCS) >= 5


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in _links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http(s), mailto: not fetched (no network in CI)
            assert target.startswith(("https://", "http://", "mailto:")), f"{doc.name}: odd link {target}"
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest} does not exist")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    """The checker itself can fail: a missing file and a missing anchor are both reported."""
    (tmp_path / "a.md").write_text("# Title here\n\n[x](b.md) [y](#nope) [z](#title-here)\n")
    assert _links(tmp_path / "a.md") == ["b.md", "#nope", "#title-here"]
    assert _anchors(tmp_path / "a.md") == {"title-here"}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no sub-commands")


def _help_options(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for a in parser._actions for opt in a.option_strings if opt not in ("-h", "--help")}


def _readme_options(command: str) -> set[str]:
    """Options the README names for ``command``: its row of the command table and its paragraph or table
    under "The CLI in detail"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    row = re.search(rf"^\| `autoscaler {command}\b[^\n]*", text, re.M)
    detail = re.search(rf"^\*\*`autoscaler {command}\b.*?(?=^\*\*`autoscaler |^## )", text, re.M | re.S)
    assert row, f"the README's command table has no row for `autoscaler {command}`"
    assert detail, f"the README has no detail section for `autoscaler {command}`"
    found = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", row.group(0) + detail.group(0)))
    return {o for o in found if o.startswith("--") or len(o) == 2}


def test_the_readme_documents_every_command() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `autoscaler (\w+)", text, re.M))
    assert documented == set(_subparsers())


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_readme_reference_matches_help(command: str) -> None:
    in_help, in_readme = _help_options(_subparsers()[command]), _readme_options(command)
    assert in_help - in_readme == set(), f"`autoscaler {command} --help` has options the README omits"
    assert in_readme - in_help == set(), f"the README names options `autoscaler {command}` does not have"


def test_readme_opens_with_the_two_commands_ci_runs() -> None:
    """The first code block: one command to run the main job, one to run the tests, each in a venv; the test
    command is what .ci/run calls."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"```(?:sh|console)\n(.*?)```", text, re.S)
    assert first
    assert text.index(first.group(0)) < text.index("\n## ")
    lines = [ln.split("#")[0].strip() for ln in first.group(1).splitlines() if ln.strip()]
    assert len(lines) == 2, lines
    assert lines == ["./scripts/simulate.sh", "./scripts/test.sh"]
    simulate_sh = (ROOT / "scripts" / "simulate.sh").read_text()
    assert re.search(r"^\. scripts/venv\.sh$", simulate_sh, re.M)
    assert re.search(r"^exec autoscaler simulate", simulate_sh, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\./scripts/test\.sh\s*$", ci, re.M)
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert re.search(r"^\. scripts/venv\.sh$", test_sh, re.M)
    assert "python3 -m venv .venv" in text  # the by-hand form is stated too
    venv_sh = (ROOT / "scripts" / "venv.sh").read_text()
    assert "-m venv .venv" in venv_sh
    assert ". .venv/bin/activate" in venv_sh
    assert re.search(r"Python\s*(≥|>=)\s*3\.11", text[: text.index("\n## ")])
