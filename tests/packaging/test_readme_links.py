"""The README tells the truth about installing and links every dashboard and packaging path."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_does_not_promise_an_install_from_pypi() -> None:
    # "pip install vgpumon" (a PyPI name) cannot work before a release; a path or "." can.
    assert not re.search(r"pip install vgpumon(\s|$|\[)", README)


def test_readme_links_every_dashboard_and_packaging_path() -> None:
    links = set(re.findall(r"\]\(([^)#]+)\)", README))
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), f"README links a missing path: {link}"
    wanted = [p.relative_to(ROOT).as_posix() for p in (ROOT / "dashboards/grafana").glob("*.json")]
    wanted += [
        "packaging/prometheus/vgpumon.rules.yml",
        "packaging/systemd/vgpumon.service",
        "packaging/container/Containerfile",
        "packaging/kubernetes/",
        "packaging/README.md",
        "docs/runbooks.md",
        "LICENSE",
    ]
    assert len(wanted) >= 12
    assert sorted(set(wanted) - links) == []
