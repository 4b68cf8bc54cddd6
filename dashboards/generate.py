"""Write vgpumon's Grafana dashboards (dashboards/grafana/*.json) from vgpumon_dashboards/.

Run ``python dashboards/generate.py`` after editing a dashboard module (needs the ``dev`` extra:
the Grafana Foundation SDK). tests/dashboards checks that the committed JSON is exactly what this
writes, decodes every panel with the SDK's typed models and checks every metric name against
vgpumon's metric table; tests/e2e runs every query against a real Prometheus scraping simulated
hosts. The committed JSON is the product: Grafana users import it without the SDK.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "grafana"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from vgpumon_dashboards import DASHBOARDS  # noqa: E402 - found through the path set above


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for board in DASHBOARDS:
        path = OUT / board.file_name
        path.write_text(board.render(), encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
