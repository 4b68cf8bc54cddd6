"""vgpumon / Exporter health: the exporter itself."""

from __future__ import annotations

from .common import (
    HOST,
    OK_FAILED,
    RED_ABOVE_ZERO,
    SAMPLE_AGE,
    SCOPE,
    SCOPE_VARIABLES,
    UP_DOWN,
    VGPU,
    WHO,
    YES_BAD,
    Board,
    Column,
    q,
    state_panel,
    table_panel,
    timeseries_panel,
)

BOARD = Board(
    "vgpumon-exporter",
    "vgpumon / Exporter health",
    "The exporter itself: scrape up, NVML up, wedged sampler, cycle duration and dispatch, "
    "per-collector success and duration, NVML errors by function, sampling cadences, the HTTP "
    "server's connections, refusals and answers, versions.",
    SCOPE_VARIABLES,
    (
        state_panel(
            "Scrape up",
            "Whether Prometheus could scrape each exporter (red: down; its GPUs are unwatched).",
            q(f"up{{{SCOPE}}}", "{{instance}}"),
            mappings=(UP_DOWN,),
            width=8,
        ),
        state_panel(
            "NVML up",
            "Whether the exporter reads the NVIDIA driver (red: NVML down or no cycle finished).",
            q(f"vgpumon_up{{{HOST}}}", WHO),
            mappings=(UP_DOWN,),
            width=8,
        ),
        state_panel(
            "Sampler wedged",
            "Red while sampling cycles overrun their deadline and are abandoned: an NVML call "
            "hangs and the served data gets old.",
            q(f"vgpumon_sampler_wedged{{{HOST}}}", WHO),
            mappings=(YES_BAD,),
            width=8,
        ),
        timeseries_panel(
            "Sampling cycle duration",
            "How long the last sampling cycle took.",
            q(f"vgpumon_sampler_last_cycle_duration_seconds{{{HOST}}}", WHO),
            unit="s",
        ),
        timeseries_panel(
            "Age of the served sample",
            "Seconds since the sample the exporter serves was taken (the stale alert fires "
            "past 120 s).",
            q(f"time() - vgpumon_last_sample_timestamp_seconds{{{HOST}}}", WHO),
            unit="s",
            thresholds=SAMPLE_AGE,
        ),
        timeseries_panel(
            "Cycles per second",
            "Sampling cycles finished and abandoned per second (abandoned above 0 is bad).",
            q(f"rate(vgpumon_sampler_cycles_total{{{HOST}}}[$__rate_interval])", WHO),
            q(
                f"rate(vgpumon_sampler_cycles_abandoned_total{{{HOST}}}[$__rate_interval])",
                f"{WHO} abandoned",
            ),
        ),
        state_panel(
            "Collector success",
            "Whether each collector read every GPU in the last cycle (red: failed; the "
            "collector-failing alert fires after 15 minutes).",
            q(f"vgpumon_scrape_collector_success{{{HOST}}}", f"{WHO} {{{{collector}}}}"),
            mappings=(OK_FAILED,),
        ),
        timeseries_panel(
            "Collector duration",
            "Time each collector took in the last cycle, summed over GPUs.",
            q(f"vgpumon_scrape_collector_duration_seconds{{{HOST}}}", f"{WHO} {{{{collector}}}}"),
            unit="s",
        ),
        timeseries_panel(
            "NVML errors by function",
            "Failed NVML calls per interval (an unsupported call counts once per GPU).",
            q(
                "sum by (instance, host, function, error) "
                f"(increase(vgpumon_nvml_errors_total{{{HOST}}}[$__rate_interval]))",
                f"{WHO} {{{{function}}}} {{{{error}}}}",
                VGPU,
            ),
            thresholds=RED_ABOVE_ZERO,
        ),
        table_panel(
            "Sampling cadences",
            "The cycle interval and how often each costly reading is taken (between reads the "
            "last value stands; averages such as GPM cover one cadence).",
            q(f"vgpumon_sampler_interval_seconds{{{HOST}}}", "interval", instant=True),
            q(f"vgpumon_sampler_cadence_seconds{{{HOST}}}", "cadence", instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("Value #A", "Cycle interval s"),
                Column("reading", "Reading"),
                Column("Value #B", "Read every s"),
            ),
        ),
        timeseries_panel(
            "HTTP connections",
            "Connections open now (TLS handshakes included) and accepted per second; the cap is "
            "--web.max-connections (docs/reliability.md, who gets a slot).",
            q(f"vgpumon_http_connections{{{SCOPE}}}", "{{instance}} open"),
            q(
                f"rate(vgpumon_http_connections_accepted_total{{{SCOPE}}}[$__rate_interval])",
                "{{instance}} accepted/s",
            ),
        ),
        timeseries_panel(
            "Connections refused, evicted and timed out",
            "Refused (every slot busy answering: red, the refusing alert fires), closed at the "
            "cap to make room (by state) and closed by each timeout, per second.",
            q(
                f"rate(vgpumon_http_connections_refused_total{{{SCOPE}}}[$__rate_interval])",
                "{{instance}} refused",
            ),
            q(
                f"rate(vgpumon_http_connections_evicted_total{{{SCOPE}}}[$__rate_interval])",
                "{{instance}} evicted {{state}}",
            ),
            q(
                f"rate(vgpumon_http_connection_timeouts_total{{{SCOPE}}}[$__rate_interval])",
                "{{instance}} timeout {{timeout}}",
            ),
            thresholds=RED_ABOVE_ZERO,
        ),
        timeseries_panel(
            "HTTP answers and auth refusals",
            "Answers per second by status code, and requests basic auth refused by reason "
            "(0 where no basic auth is configured; a flood of wrong passwords shows here).",
            q(
                "sum by (instance, code) "
                f"(rate(vgpumon_http_requests_total{{{SCOPE}}}[$__rate_interval]))",
                "{{instance}} {{code}}",
            ),
            q(
                "sum by (instance, reason) "
                f"(rate(vgpumon_http_auth_refusals_total{{{SCOPE}}}[$__rate_interval])) "
                f"or sum by (instance) (0 * vgpumon_http_connections{{{SCOPE}}})",
                "{{instance}} auth refused {{reason}}",
            ),
        ),
        table_panel(
            "Collectors the driver cannot serve",
            "Per collector, on how many GPUs it read nothing because the driver (or the NVML "
            "module) lacks its calls, and why: function_not_found is a driver older than the "
            "call, not_supported a GPU or mode without it. Their series are absent there, "
            "never 0.",
            q(f"vgpumon_scrape_collector_unsupported_gpus{{{HOST}}}", WHO, VGPU, instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("collector", "Collector"),
                Column("reason", "Why"),
                Column("Value", "GPUs"),
            ),
            width=24,
        ),
        table_panel(
            "Versions",
            "NVIDIA driver, NVML and CUDA driver versions, vgpumon's version and Python, the "
            "NVML module read (the simulator says sim:SCENARIO) and how the last cycle read "
            "the GPUs (serial or parallel).",
            q(f"vgpumon_driver_info{{{HOST}}}", WHO, instant=True),
            q(f"vgpumon_build_info{{{SCOPE}}}", "build", instant=True),
            q(f"vgpumon_nvml_module_info{{{HOST}}}", "module", instant=True),
            q(f"vgpumon_sampler_dispatch{{{HOST}}} == 1", "dispatch", instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("driver_version", "Driver"),
                Column("nvml_version", "NVML"),
                Column("cuda_driver_version", "CUDA driver"),
                Column("version", "vgpumon"),
                Column("python_version", "Python"),
                Column("module", "NVML module"),
                Column("mode", "Dispatch"),
            ),
            width=24,
        ),
    ),
)
