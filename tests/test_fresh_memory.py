"""The host provider's handling of output memory new to the process
(csrc/host/memory.h): a large contiguous output that no page of has been
touched gets transparent huge pages (and is prefaulted a piece at a time,
which only speed shows; the results are checked across the pieces); memory
already resident is left alone. Checked through the C ABI on private
anonymous mappings this test makes itself, as XLA's allocations are, by
the mapping's flags in /proc/self/smaps ("hg": MADV_HUGEPAGE) and by the
results against NumPy's formula."""

from __future__ import annotations

import ctypes
import mmap
import re
from pathlib import Path

import numpy as np
import pytest

from host_abi import LIB, Strided, error_message, float_scalar

pytestmark = pytest.mark.skipif(
    not Path("/sys/kernel/mm/transparent_hugepage").exists(),
    reason="the kernel has no transparent huge pages (or this is not Linux)")

HUGE = 2 << 20
PRIVATE = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS}
#: Elements of a float32 output that is new memory worth preparing (8 MiB and
#: more), not a whole number of memory.h's 2 MiB prefault pieces.
SIZE = (3 << 20) + 12345


def huge_page_advised(address: int) -> bool:
    """Whether the mapping holding ``address`` has MADV_HUGEPAGE."""
    mapping = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if m := re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line):
            mapping = int(m[1], 16) <= address < int(m[2], 16)
        elif line.startswith("VmFlags:") and mapping:
            return "hg" in line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def hardshrink_backward_into(out: np.ndarray, grad: np.ndarray, x: np.ndarray, lambd: float):
    """aclnnHardshrinkBackward of float32 vectors, its result written into ``out``."""
    tensors = [Strided(a, a.shape, (1,), 0) for a in (grad, x, out)]
    lambd_scalar = float_scalar(lambd)
    try:
        ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
        assert LIB.aclnnHardshrinkBackwardGetWorkspaceSize(
            tensors[0].handle, tensors[1].handle, lambd_scalar, tensors[2].handle,
            ctypes.byref(ws), ctypes.byref(ex)) == 0, error_message()
        assert ws.value == 0
        assert LIB.aclnnHardshrinkBackward(None, 0, ex, None) == 0, error_message()
    finally:
        LIB.aclDestroyScalar(lambd_scalar)


@pytest.fixture
def inputs():
    rng = np.random.default_rng(31)
    return rng.uniform(-3, 3, SIZE).astype(np.float32), rng.uniform(-3, 3, SIZE).astype(np.float32)


@pytest.mark.parametrize("touched", [None, 0, -1], ids=["new", "first page", "resident"])
def test_output_memory_new_to_the_process_gets_huge_pages(inputs, touched):
    grad, x = inputs
    memory = mmap.mmap(-1, SIZE * 4, **PRIVATE)  # fresh: no page touched yet
    out = np.frombuffer(memory, np.float32)
    if touched is not None:
        # its first page alone: a small temporary XLA placed at its start
        # (CrossEntropyLoss's loss in the dx of its gradient); its last
        # page too: resident, as malloc's reused heap memory is
        out[:1 if touched == 0 else SIZE] = 1.0
    first_huge_page = (out.ctypes.data + HUGE - 1) // HUGE * HUGE
    hardshrink_backward_into(out, grad, x, 0.5)
    # Advised for huge pages when new; left alone when resident (the advice
    # would outlive the call on memory that XLA owns).
    assert huge_page_advised(first_huge_page) == (touched != -1)
    expected = np.where(np.abs(x) > 0.5, grad, np.float32(0))
    np.testing.assert_array_equal(out, expected)
    del out
    memory.close()


def test_small_new_outputs_are_left_alone(inputs):
    n = HUGE // 2  # 4 MiB of float32: half the threshold, a whole huge page inside
    grad, x = (a[:n] for a in inputs)
    memory = mmap.mmap(-1, n * 4, **PRIVATE)
    out = np.frombuffer(memory, np.float32)
    hardshrink_backward_into(out, grad, x, 0.5)
    assert not huge_page_advised((out.ctypes.data + HUGE - 1) // HUGE * HUGE)
    np.testing.assert_array_equal(out, np.where(np.abs(x) > 0.5, grad, np.float32(0)))
    del out
    memory.close()
