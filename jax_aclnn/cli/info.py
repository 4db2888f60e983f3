"""``python -m jax_aclnn info``: JAX version and platforms, which platforms
have jax_aclnn handlers, the NPU platform name, whether CANN was found and
where (or what was searched), the host provider library and the build."""

from __future__ import annotations

import argparse
import platform
import sysconfig
from typing import TYPE_CHECKING

import jax

import jax_aclnn as aclnn
from jax_aclnn.cli.common import jax_devices

if TYPE_CHECKING:
    from rich.console import Console


def collect() -> dict[str, object]:
    """The facts ``info`` prints, as a dict."""
    try:
        cann = f"found: {aclnn.load_cann()}"
    except RuntimeError as e:
        cann = f"not found ({e})"
    platforms = sorted({d.platform for d in jax_devices()})
    build = aclnn.build_info()
    return {
        "jax_aclnn": aclnn.__version__,
        "jax / jaxlib": f"{jax.__version__} / {jax.lib.__version__}",
        "JAX platforms (devices)": ", ".join(f"{p} ({len(jax.devices(p))})" for p in platforms),
        "platforms with aclnn handlers": ", ".join(build["handler_platforms"]),
        "NPU platform name": f"{build['npu_platform']} ($JAX_ACLNN_NPU_PLATFORM overrides)",
        "CANN": cann,
        "CPU aclnn provider": aclnn.runtime_stats()["provider"],
        "host provider library": build["host_provider_library"],
        "build": build["build"],
        "jaxlib this build runs on": f"{build['jaxlib']} (XLA FFI API {build['ffi_api']} headers)",
        "host kernels (chosen at run time)": build["host_kernel_target"],
        "host float16 conversions": build["host_half_conversions"],
        "machine": f"{platform.machine()}, {platform.system()}, Python {sysconfig.get_python_version()}",
    }


def run(args: argparse.Namespace) -> None:
    from rich.console import Console

    print_table(collect(), Console())


def print_table(facts: dict[str, object], console: Console) -> None:
    """The facts as a table on ``console``, never abridged: long values (the
    CANN search paths, the library path) fold onto more lines in a terminal;
    into a file or a pipe the table takes the width it needs, so each path
    stays on one line."""
    from rich.measure import Measurement
    from rich.table import Table

    table = Table(title="jax_aclnn info", show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in facts.items():
        table.add_row(key, str(value))
    if not console.is_terminal:
        width = Measurement.get(console, console.options.update_width(1 << 16), table).maximum
        console.width = max(console.width, width)
    console.print(table)
