"""XLA FFI handlers of jax_aclnn and the aclnn provider loader."""



def registrations() -> dict:
    """
    {platform: {stage: capsule}}: the handlers of every operator's custom-call target, for jax.ffi.register_ffi_target.
    """

def operators() -> dict:
    """
    {jax_aclnn function: aclnn operator}: the operators the host provider implements, the list of csrc/operators.h.
    """

def argument_kinds() -> dict:
    """
    {kind: (code, C parameter type, what it takes from the attributes)}: the argument kinds of the custom call's 'kinds' attribute (csrc/ffi/arguments.h).
    """

def provides(name: str, library: str = '') -> bool:
    """
    Whether the CPU platform's provider (the host provider; with `library`, that library's provider, ffi/provider.h) exports aclnn operator `name`'s two phases. Raises RuntimeError when the library cannot be loaded or exports part of a set of the aclnn ABI's functions.
    """

def library_lacks(name: str, library: str) -> list[str]:
    """
    The symbols of aclnn operator `name`'s two phases ('<name>GetWorkspaceSize', '<name>', in that order) that `library` itself does not export, whatever the platform's provider does; [] when it exports both. Raises RuntimeError as provides() does.
    """

def add_operator(name: str) -> None:
    """Lists aclnn operator `name` in stats() from now on (with zero calls)."""

def operator_prototypes() -> dict:
    """
    {jax_aclnn function: its aclnn first phase's prototype}, as csrc/operators.h declares it.
    """

def state_type() -> dict:
    """The FFI type registration of the per-call-site executor cache."""

def load_host_provider(path: str) -> None:
    """Loads the bundled host aclnn provider library."""

def load_cann(root: str | None = None) -> str:
    """Finds and loads CANN's aclnn libraries; returns the library directory."""

def default_cann_roots() -> list[str]: ...

def route_cpu_through_cann(enable: bool) -> None:
    """Testing: serve the CPU platform with the provider loaded by load_cann."""

def executor_reuse() -> bool:
    """Whether call sites keep repeatable executors."""

def set_executor_reuse(enabled: bool) -> None:
    """Turns executor reuse on or off for calls from now on."""

def cpu_provider() -> str: ...

def build_info() -> str: ...

def ffi_api_version() -> tuple[int, int]:
    """
    (major, minor): the XLA FFI API version of the headers the handlers were compiled against; they run on an XLA of that version or a newer minor one.
    """

def package_version() -> str | None:
    """
    jax_aclnn.__version__ of the sources this module was built from (None: not recorded).
    """

def stats() -> dict: ...

def reset_stats() -> None: ...
