"""Every relative link and anchor of the README and the manual resolves, and every page of the
manual can be reached from its index."""

from __future__ import annotations

from pathlib import Path

from .markdown import DOCS, INDEX, ROOT, anchors, links, pages


def _target(page: Path, link: str) -> tuple[Path, str]:
    path, _, anchor = link.partition("#")
    return ((page.parent / path).resolve() if path else page), anchor


def _relative(link: str) -> bool:
    return not link.startswith(("http://", "https://", "mailto:"))


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in pages():
        for link in filter(_relative, links(page)):
            target, anchor = _target(page, link)
            where = f"{page.relative_to(ROOT)}: {link}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif not target.is_relative_to(ROOT):
                broken.append(f"{where} (outside the repository)")
            elif anchor and (target.suffix != ".md" or anchor not in anchors(target)):
                broken.append(f"{where} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_every_page_is_reachable_from_the_index() -> None:
    reached, todo = {INDEX}, [INDEX]
    while todo:
        page = todo.pop()
        for link in filter(_relative, links(page)):
            target, _ = _target(page, link)
            if target.suffix == ".md" and target.is_relative_to(DOCS) and target not in reached:
                reached.add(target)
                todo.append(target)
    orphans = sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if p not in reached)
    assert not orphans, f"pages no link from docs/index.md reaches: {orphans}"


def test_the_readme_leads_to_the_manual() -> None:
    readme = ROOT / "README.md"
    targets = {_target(readme, link)[0] for link in links(readme)}
    assert INDEX in targets and DOCS / "getting-started.md" in targets
    assert len(readme.read_text().splitlines()) <= 250  # a newcomer reads it in five minutes


def test_the_checker_sees_a_broken_anchor(tmp_path: Path) -> None:
    """The checks above read what they should (a page with a bad anchor is seen as one)."""
    page = tmp_path / "page.md"
    page.write_text("# A `title`: here\n\n[ok](#a-title-here) [bad](#nowhere)\n```sh\n# no\n```\n")
    assert anchors(page) == {"a-title-here"}
    assert links(page) == ["#a-title-here", "#nowhere"]
