"""
Test-only minimal XLA FFI runtime for the device-platform (NPU) handlers.
"""

from collections.abc import Sequence


def register_type(name: str, state_type: dict) -> int:
    """
    Registers an FFI type ({'type_id': capsule, 'type_info': capsule}); returns its id.
    """

class Device:
    """A fake device: its stream and counted memory."""

    def __init__(self) -> None: ...

    @property
    def stream(self) -> int: ...

    def memory_stats(self) -> dict: ...

    def set_memory_limit(self, bytes: int | None) -> None: ...

class Handler:
    """An FFI handler bundle, registered as XLA does."""

    def __init__(self, bundle: dict, api_minor_version: int = 3) -> None:
        """
        Registers a handler with the runtime of FFI API 0.`api_minor_version` (1, 2 or 3).
        """

    @property
    def api_version(self) -> tuple[int, int]: ...

    @property
    def state_type_id(self) -> int: ...

    def instantiate(self, attrs: dict) -> CallSite:
        """
        A call site with attributes {name: value}, a value (dtype, scalar), a 1-D numpy
        array or a str or bytes (a string): runs the INSTANTIATE stage.
        """

class CallSite:
    """One custom call of a compiled program."""

    def execute(self, device: Device, args: Sequence[tuple[int, str, Sequence[int]]], rets: Sequence[tuple[int, str, Sequence[int]]]) -> tuple[str, str] | None:
        """
        EXECUTE stage with buffers (address, dtype, dims); None or (code, message).
        """

    def free(self) -> None:
        """Destroys the state, as freeing the program does."""

    @property
    def has_state(self) -> bool: ...
