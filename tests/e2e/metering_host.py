"""``vgpumon serve --sim`` whose metering stage sees a fake host /proc, for tests/e2e.

``serve`` never gives the metering stage a /proc under the simulator (the simulated PIDs are not
the host's), so the pod and dead-holder families are absent there. This runs the same ``serve``
with the stage pointed at a fake host tree instead: the simulated PIDs are given cgroups of two
Kubernetes containers and their runtimes' records (the real resolver reads them, as on a node),
and one PID is given no /proc entry at all (a dead holder). Everything else is ``serve`` as is.

    python tests/e2e/metering_host.py ROOT serve --sim SCENARIO --process-series \
        --web.listen-address ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vgpumon.collect.recipe import SamplerRecipe
    from vgpumon.config.serve import ServeSettings

# PID -> (cgroup file, runtime record path under ROOT, record): one containerd container on
# cgroup v2, one CRI-O container on cgroup v1 (the forms tests/collect/test_metering_pods.py
# covers one by one). A PID of the scenario that is not here has no /proc entry: a dead holder.
UID_A = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
UID_B = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
CID_A = "a" * 64
CID_B = "b" * 64
PODS = {
    7101: (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope\n",
        f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID_A}/config.json",
        {
            "annotations": {
                "io.kubernetes.cri.sandbox-namespace": "team-a",
                "io.kubernetes.cri.sandbox-name": "trainer-0",
                "io.kubernetes.cri.container-name": "main",
            }
        },
    ),
    7103: (
        f"9:memory:/kubepods/besteffort/pod{UID_B}/crio-{CID_B}.scope\n",
        f"run/containers/storage/overlay-containers/{CID_B}/userdata/config.json",
        {
            "annotations": {
                "io.kubernetes.pod.namespace": "team-b",
                "io.kubernetes.pod.name": "notebook-0",
                "io.kubernetes.container.name": "lab",
            }
        },
    ),
}


def build_host(root: Path) -> None:
    for pid, (cgroup, record_path, record) in PODS.items():
        proc = root / "proc" / str(pid)
        proc.mkdir(parents=True, exist_ok=True)
        (proc / "cgroup").write_text(cgroup)
        (proc / "stat").write_text(f"{pid} (python3) S" + " 0" * 17 + " 4242" + " 0" * 20)
        record_file = root / record_path
        record_file.parent.mkdir(parents=True, exist_ok=True)
        record_file.write_text(json.dumps(record))


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    build_host(root)
    import dataclasses

    from vgpumon.cli import main as cli_main
    from vgpumon.collect.metering import MeteringConfig
    from vgpumon.commands import serve

    made = serve.sampler_recipe

    def sampler_recipe(settings: ServeSettings) -> SamplerRecipe:
        # the sampler process builds its metering stage from this config
        config = MeteringConfig(
            interval_seconds=settings.interval_seconds,
            idle_ratio=settings.metering_idle_ratio,
            proc=str(root / "proc"),
            host_root=str(root),
            host_pid=True,
        )
        return dataclasses.replace(made(settings), metering=config)

    serve.sampler_recipe = sampler_recipe  # type: ignore[assignment]
    return cli_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
