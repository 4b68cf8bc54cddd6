"""Agentless hosts: run NVIDIA's ``nvidia-smi`` over SSH and parse its XML into snapshots.

For hosts vgpumon cannot be installed on (VMware ESXi, appliances, locked-down hypervisors).
Each poll opens one SSH session (key auth, known_hosts checked), runs ``nvidia-smi -q -x`` and,
where a GPU is in host vGPU mode, ``nvidia-smi vgpu -q -x``, and parses both with
:mod:`vgpumon.smi`. A host that times out, refuses the key or answers the device report with
garbage is published as UNREACHABLE with a one-line reason. The vGPU report is optional: when it
prints nothing, exits non-zero, is not nvidia-smi XML or does not answer in time, the host is
served from its device report, the ``vgpu`` collector failed with the reason. Each change of a
host's state is logged once (not every poll). A host never delays or stops the other hosts: each
host is its own snapshot feed (:class:`SshHostFeed`, polled in its own loop), the hosts are one
fleet (:class:`SshFleet`, a :class:`~vgpumon.sources.fleet.FleetFeed` like every set of hosts), a
per-host timeout bounds every poll, and a semaphore bounds the sessions open at once.

The client is asyncssh (a maintained pure-Python SSHv2 implementation): no ``ssh`` binary, no
shell quoting of user input beyond the nvidia-smi path, and output read in bounded chunks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shlex
import time
from collections.abc import Awaitable, Callable

import asyncssh

from vgpumon.feed import HostUpdate
from vgpumon.model import CollectorStatus, Snapshot
from vgpumon.smi import ReportFailure, SmiParseError, parse_reports
from vgpumon.smi.xmlsafe import MAX_REPORT_BYTES
from vgpumon.sources.fleet import FleetFeed
from vgpumon.sources.polled import PolledFeed
from vgpumon.sources.ssh_targets import SshSettings, SshTarget

log = logging.getLogger(__name__)

SSH_COLLECTOR = "ssh"  # the collector label of the transport's own success and duration
CHUNK = 65536

# (device report, vGPU report: its bytes, None where the host has no vGPU manager, or why it could
# not be had) of one host; tests replace the SSH transport with this.
Fetch = Callable[[SshTarget], Awaitable[tuple[bytes, bytes | ReportFailure | None]]]
VGPU_COMMAND = "vgpu -q -x"
# The vGPU report is cut off this long before the poll's timeout, so a slow one costs the vGPU
# instances of that poll, never the host (the device report is already in hand).
VGPU_MARGIN_SECONDS = 0.5


class SshPollError(Exception):
    """One poll failed; ``str()`` is the one-line reason a screen or log shows."""


async def _read_capped(stream: asyncssh.SSHReader[bytes], what: str) -> bytes:
    buffer = bytearray()
    while True:
        chunk = await stream.read(CHUNK)
        if not chunk:
            return bytes(buffer)
        buffer += chunk
        if len(buffer) > MAX_REPORT_BYTES:
            raise SshPollError(f"{what} printed more than {MAX_REPORT_BYTES} bytes")


async def _run(conn: asyncssh.SSHClientConnection, command: str) -> tuple[int | None, bytes]:
    # stderr is discarded: left unread it could fill the channel window and stall the command.
    async with conn.create_process(command, encoding=None, stderr=asyncssh.DEVNULL) as proc:
        out = await _read_capped(proc.stdout, command)
        await proc.wait()
        return proc.exit_status, out


# POSIX shells' exit statuses for a command they could not start (the remote side runs the
# command through the login shell).
_SHELL_CANNOT_RUN = {126: "is not executable", 127: "not found"}


def quiet_library_log() -> None:
    """asyncssh logs every session, channel and command at INFO: several lines per host and poll,
    which buries the exporter's own lines. The rule: its logger stays at WARNING unless the log
    level is debug (vgpumon's own warning already says which host failed and why)."""
    debug = logging.getLogger().getEffectiveLevel() <= logging.DEBUG
    logging.getLogger("asyncssh").setLevel(logging.NOTSET if debug else logging.WARNING)


def _needs_vgpu_report(device_xml: bytes) -> bool:
    # Cheap pre-check; the parser decides for real. Only a vGPU host has a vGPU manager to ask.
    return b"Host VGPU" in device_xml


class SshTransport:
    """Runs the two reports on one target per call, within the settings' limits.

    The SSH connection of a host is kept open between polls and reused: ESXi writes every login
    to its auth log, and a new login every 15 s per host would flood it (and cost a key exchange
    each time). A connection that failed, or whose poll was cut off by the timeout (a command may
    still be running on it), is closed and the next poll logs in again.
    """

    def __init__(self, settings: SshSettings) -> None:
        self.settings = settings
        self._connections: dict[str, asyncssh.SSHClientConnection] = {}
        self.logins = 0  # connections opened (for tests and the benchmark)

    def _options(self, target: SshTarget) -> dict[str, object]:
        s = self.settings
        options: dict[str, object] = {
            "port": target.port,
            "preferred_auth": "publickey",  # key-based only: never a password prompt
            "connect_timeout": s.timeout_seconds,
            "keepalive_interval": max(s.interval_seconds, 15.0),
        }
        # Without USER@ and --ssh.user the option stays unset (None would crash asyncssh): then,
        # like ``ssh HOST``, the User of ~/.ssh/config applies, else the local user.
        user = target.user or s.default_user
        if user:
            options["username"] = user
        if s.identity_files:
            options["client_keys"] = list(s.identity_files)
            options["agent_path"] = None
        if s.known_hosts is not None:
            options["known_hosts"] = s.known_hosts  # never None: that would skip the check
        return options

    async def _connection(self, target: SshTarget) -> asyncssh.SSHClientConnection:
        conn = self._connections.get(target.name)
        if conn is not None and not conn.is_closed():
            return conn
        conn = await asyncssh.connect(target.host, **self._options(target))
        self.logins += 1
        self._connections[target.name] = conn
        return conn

    def _drop(self, target: SshTarget) -> None:
        conn = self._connections.pop(target.name, None)
        if conn is not None:
            conn.abort()

    async def fetch(self, target: SshTarget) -> tuple[bytes, bytes | ReportFailure | None]:
        smi = shlex.quote(self.settings.nvidia_smi)
        deadline = time.monotonic() + self.settings.timeout_seconds - VGPU_MARGIN_SECONDS
        try:
            conn = await self._connection(target)
            status, device = await _run(conn, f"{smi} -q -x")
            if status in _SHELL_CANNOT_RUN:
                raise SshPollError(
                    f"{self.settings.nvidia_smi} {_SHELL_CANNOT_RUN[status]} on the host "
                    f"(exit {status}): check --ssh.nvidia-smi"
                )
            if status != 0:
                first = device.decode(errors="replace").strip().splitlines()[:1]
                said = f": {first[0][:160]}" if first else ""
                raise SshPollError(f"nvidia-smi -q -x exited {status}{said}")
            if not _needs_vgpu_report(device):
                return device, None
            return device, await self._vgpu_report(target, conn, smi, deadline)
        except SshPollError:
            raise  # the session itself is fine: keep it
        except asyncssh.PermissionDenied:
            self._drop(target)
            raise SshPollError("SSH key refused (permission denied)") from None
        except asyncssh.HostKeyNotVerifiable as err:
            self._drop(target)
            raise SshPollError(f"host key not verifiable: {err.reason}") from None
        except asyncssh.DisconnectError as err:
            self._drop(target)
            raise SshPollError(f"SSH disconnected: {err.reason}") from None
        except OSError as err:
            self._drop(target)
            raise SshPollError(f"cannot connect: {err.strerror or err}") from None
        except BaseException:  # the timeout's cancellation included: the session's state is unknown
            self._drop(target)
            raise

    async def _vgpu_report(
        self, target: SshTarget, conn: asyncssh.SSHClientConnection, smi: str, deadline: float
    ) -> bytes | ReportFailure:
        """The vGPU report, or why there is none; its failure is never the host's."""
        budget = deadline - time.monotonic()
        what = f"nvidia-smi {VGPU_COMMAND}"
        try:
            if budget <= 0:
                raise asyncio.TimeoutError
            status, vgpu = await asyncio.wait_for(_run(conn, f"{smi} {VGPU_COMMAND}"), budget)
        except asyncio.TimeoutError:
            self._drop(target)  # the command may still run on that connection
            return ReportFailure(
                "timeout", f"{what} gave no answer within {self.settings.timeout_seconds:g} s"
            )
        except SshPollError as err:  # more than the report cap
            return ReportFailure("too_large", str(err))
        if status != 0:
            first = vgpu.decode(errors="replace").strip().splitlines()[:1]
            said = f": {first[0][:160]}" if first else ""
            return ReportFailure("exit_status", f"{what} exited {status}{said}")
        return vgpu

    def close(self) -> None:
        for name in list(self._connections):
            conn = self._connections.pop(name)
            conn.abort()


class SshHostFeed(PolledFeed):
    """One agentless host's snapshots, one poll per interval: a :class:`FallibleFeed`.

    Every poll is news: a snapshot (:meth:`on_snapshot`), or a failure with its one-line reason
    (:meth:`on_failure`, also logged). ``sessions`` is shared by the hosts of one source, so it
    bounds the SSH sessions open at once.
    """

    def __init__(
        self,
        target: SshTarget,
        settings: SshSettings,
        fetch: Fetch,
        sessions: asyncio.Semaphore,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(settings.interval_seconds, "no answer from the host yet")
        self.target = target
        self.settings = settings
        self._fetch = fetch
        self._sessions = sessions
        self._clock = clock
        self.polls = 0
        # What was last logged of this host (a failure, or the vGPU report's), so each change is
        # logged once: a host failing every 15 s for a day is one line, and one when it is back.
        self._logged_failure: str | None = None
        self._logged_vgpu: str | None = None

    @property
    def name(self) -> str:
        return f"nvidia-smi over SSH ({self.target.name})"

    async def poll(self) -> Snapshot | None:
        """Poll the host now and tell the listeners; the snapshot, or None when it failed."""
        host = self.target.name
        started = time.monotonic()
        try:
            async with self._sessions:
                device, vgpu = await asyncio.wait_for(
                    self._fetch(self.target), timeout=self.settings.timeout_seconds
                )
            fetched = time.monotonic() - started
            # A large host's reports take a good fraction of a second to parse: off the loop, so
            # the exporter keeps answering scrapes meanwhile.
            snapshot = await asyncio.to_thread(
                parse_reports, device, vgpu, timestamp=self._clock(), source=f"nvidia-smi@{host}"
            )
        except asyncio.TimeoutError:
            self._failed(f"no answer within {self.settings.timeout_seconds:g} s")
            return None
        except (SshPollError, SmiParseError) as err:
            self._failed(str(err))
            return None
        except (asyncssh.Error, ValueError) as err:  # anything else the SSH layer raises
            self._failed(f"{type(err).__name__}: {err}".splitlines()[0])
            return None
        finally:
            self.polls += 1
        ssh = CollectorStatus(SSH_COLLECTOR, True, fetched)
        snapshot = dataclasses.replace(snapshot, collectors=(ssh, *snapshot.collectors))
        self._log_answer(snapshot)
        self._tell_snapshot(snapshot)
        return snapshot

    def _log_answer(self, snapshot: Snapshot) -> None:
        host = self.target.name
        if self._logged_failure is not None:
            log.info("agentless host %s answers again", host)
            self._logged_failure = None
        vgpu = next((c for c in snapshot.collectors if c.name == "vgpu"), None)
        problem = None if vgpu is None or vgpu.success else (vgpu.detail or vgpu.failure or "")
        if problem != self._logged_vgpu:
            if problem is not None:
                log.warning(
                    "agentless host %s: no vGPU report (%s); serving its device report",
                    host,
                    problem,
                )
            elif self._logged_vgpu is not None:
                log.info("agentless host %s: its vGPU report is back", host)
            self._logged_vgpu = problem

    def _failed(self, reason: str) -> None:
        if reason != self._logged_failure:
            log.warning("agentless host %s: %s", self.target.name, reason)
            self._logged_failure = reason
        self._tell_failure(reason)


class SshFleet(FleetFeed):
    """Agentless hosts, each an :class:`SshHostFeed`, as one fleet: one SSH transport (sessions
    kept between polls, closed when the fleet stops) and one session limit for all of them.

    Build it once the command has set the log level: asyncssh's own logger is quieted here.
    """

    def __init__(
        self,
        settings: SshSettings,
        *,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        quiet_library_log()
        self.settings = settings
        self.transport = SshTransport(settings)
        sessions = asyncio.Semaphore(max(1, settings.max_sessions))
        self.host_feeds = {
            t.name: SshHostFeed(t, settings, fetch or self.transport.fetch, sessions, clock)
            for t in settings.targets
        }
        super().__init__(
            list(self.host_feeds.items()),
            name=f"nvidia-smi over SSH ({len(self.host_feeds)} hosts)",
            closers=[self.transport.close],
        )

    @property
    def polls(self) -> int:
        """Polls done, every host's together (for tests and the benchmark)."""
        return sum(feed.polls for feed in self.host_feeds.values())

    async def poll(self, host: str) -> HostUpdate:
        """Poll one host now and take the outcome (tests and the benchmark)."""
        await self.host_feeds[host].poll()
        return next(u for u in self.latest.hosts if u.host == host)


def down_snapshot(update: HostUpdate, timestamp: float) -> Snapshot:
    """What a failed host exports: not up, the SSH collector failed, no GPU series (absent)."""
    return Snapshot(
        timestamp=timestamp,
        collectors=(CollectorStatus(SSH_COLLECTOR, False, 0.0),),
        source=f"nvidia-smi@{update.host}",
    )
