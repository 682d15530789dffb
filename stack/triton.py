"""Triton Inference Server from PyPI's nvidia-pytriton wheel, run on CPU.

The wheel carries the real ``tritonserver`` binary and the python backend. The
python backend needs its stub beside ``libtriton_python.so``, built for the
Python version of the environment the models run in, and that interpreter's
``libpython`` on the library path. We assemble a backend folder in the state
directory rather than touching the installed wheel.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from stack.errors import StackError
from stack.service import Service
from stacksettings import ADMIN_KEY_HEADER, RESTRICTED_APIS, Settings, ensure_secret

# No periodic trace writes: Triton 2.51 aborted under them (see tritonapi.traces); a
# window of N traces is written when it is complete.
LOG_FREQUENCY = 0
INSTALL_HINT = "run ./stack/up once (it creates the Triton environment), or set STACK_TRITON_VENV"


@dataclass(frozen=True)
class Runtime:
    """Paths inside the Triton virtual environment."""

    venv: Path
    server_root: Path  # site-packages/pytriton/tritonserver
    libs: Path  # site-packages/nvidia_pytriton.libs
    python_version: str  # "3.11"

    @property
    def binary(self) -> Path:
        return self.server_root / "bin" / "tritonserver"

    @property
    def stub(self) -> Path:
        return (
            self.server_root
            / "python_backend_stubs"
            / self.python_version
            / ("triton_python_backend_stub")
        )


def find_runtime(venv: Path) -> Runtime:
    roots = sorted(glob.glob(str(venv / "lib" / "python3.*" / "site-packages" / "pytriton")))
    if not roots:
        raise StackError(f"Triton runtime not found in {venv}: {INSTALL_HINT}")
    site = Path(roots[-1]).parent
    runtime = Runtime(
        venv=venv,
        server_root=site / "pytriton" / "tritonserver",
        libs=site / "nvidia_pytriton.libs",
        python_version=site.parent.name.removeprefix("python"),
    )
    for path in (runtime.binary, runtime.stub, runtime.libs):
        if not path.exists():
            raise StackError(f"Triton runtime incomplete, {path} is missing: {INSTALL_HINT}")
    return runtime


def python_libdir(venv: Path) -> str:
    """Folder holding libpython3.X.so of the venv's interpreter (the stub embeds it)."""
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if out.returncode != 0:
        raise StackError(f"cannot run the Triton environment's python: {out.stderr.strip()}")
    return out.stdout.strip()


def assemble_backends(runtime: Runtime, target: Path) -> Path:
    """A backend folder: the wheel's python backend plus the stub for our Python."""
    python_dir = target / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    source = runtime.server_root / "backends" / "python"
    for item in ("libtriton_python.so", "triton_python_backend_utils.py"):
        link = python_dir / item
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source / item)
    stub = python_dir / "triton_python_backend_stub"
    # A stub still running from a killed Triton holds the old file busy (ETXTBSY):
    # copy beside it and rename over it, which a busy file allows.
    fresh = python_dir / f".stub.{os.getpid()}.tmp"
    shutil.copy2(runtime.stub, fresh)
    fresh.replace(stub)
    return target


def environment(runtime: Runtime, libdir: str) -> dict[str, str]:
    lib_path = [str(runtime.libs), libdir]
    if os.environ.get("LD_LIBRARY_PATH"):
        lib_path.append(os.environ["LD_LIBRARY_PATH"])
    return {
        "LD_LIBRARY_PATH": ":".join(lib_path),
        # model.py imports this environment's numpy (numpy<2, which the stub requires).
        "PATH": f"{runtime.venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "VIRTUAL_ENV": str(runtime.venv),
    }


def server_argv(runtime: Runtime, settings: Settings, backends: Path, key: str | None) -> list[str]:
    """tritonserver's command line for ``settings`` (address, ports, repository, trace
    file); its restricted APIs need ``key``, or are open with None (the fleet tests'
    foreign servers)."""
    host = settings.host
    argv = [
        str(runtime.binary),
        f"--model-repository={settings.model_repository}",
        f"--backend-directory={backends}",
        f"--http-address={host}",
        f"--http-port={settings.port('triton_http')}",
        f"--grpc-address={host}",
        f"--grpc-port={settings.port('triton_grpc')}",
        f"--metrics-address={host}",
        f"--metrics-port={settings.port('triton_metrics')}",
        # Latency summaries give the dashboard real p99s (off by default in Triton).
        "--metrics-config=summary_latencies=true",
        # Per-request traces: written to a file of ours, off until a model's setting
        # turns them on (`batchscope trace`, the dashboard's timeline). The file can
        # only be chosen at start; level, rate and count change at run time.
        f"--trace-config=triton,file={settings.trace_file}",
        "--trace-config=level=OFF",
        f"--trace-config=triton,log-frequency={LOG_FREQUENCY}",
        "--exit-timeout-secs=5",
        # Every model loads at start as before; explicit control lets the advisor load a
        # scratch copy of a model with another batching config (`advise --verify`) through
        # the repository API, which the key guards.
        "--model-control-mode=explicit",
        "--load-model=*",
    ]
    if settings.triton_model_control == "explicit":
        argv += ["--model-control-mode=explicit", "--load-model=*"]
    if settings.triton_cache_bytes > 0:
        # The wheel ships the local cache; Triton looks in /opt/tritonserver/caches by default.
        argv += [
            f"--cache-config=local,size={settings.triton_cache_bytes}",
            f"--cache-directory={runtime.server_root / 'caches'}",
        ]
    if key is not None:
        # Model loading, shared memory, tracing and logging need the stack's key
        # (CVE-2025-23319/23320/23334 are in these APIs of this Triton version).
        restricted = f"{','.join(RESTRICTED_APIS)}:{ADMIN_KEY_HEADER}={key}"
        argv += [f"--http-restricted-api={restricted}", f"--grpc-restricted-protocol={restricted}"]
    return argv


def service(settings: Settings) -> Service:
    host = settings.host
    backends = settings.state_dir / "triton" / "backends"
    svc = Service(
        name="triton",
        argv=[],  # filled by prepare(): finding the runtime may fail, and only `up` needs it
        health_url=f"{settings.url('triton_http')}/v2/health/ready",
        live_url=f"{settings.url('triton_http')}/v2/health/live",
        ports=[settings.port(p) for p in ("triton_http", "triton_grpc", "triton_metrics")],
        urls={
            "http": settings.url("triton_http"),
            "grpc": f"{host}:{settings.port('triton_grpc')}",
            "metrics": f"{settings.url('triton_metrics')}/metrics",
        },
        startup_timeout_s=120.0,
    )

    def prepare() -> None:
        runtime = find_runtime(settings.triton_venv)
        key = ensure_secret(settings.admin_key_file)
        assemble_backends(runtime, backends)
        settings.trace_file.parent.mkdir(parents=True, exist_ok=True)
        svc.env = environment(runtime, python_libdir(runtime.venv))
        svc.argv = server_argv(runtime, settings, backends, key)

    svc.prepare = prepare
    return svc
