"""Name lists the static guard judges Python code (and the native sources' torch:: calls) by.

Kept apart from the checking logic so that a false refusal is fixed by editing data, not code: every
list says what it is *for*. Qualified names are written as the candidate's imports resolve them
(`nn.Linear` -> `torch.nn.Linear`, `F.relu` -> `torch.nn.functional.relu`).
"""

from __future__ import annotations

# torch.* functions that allocate a tensor without computing on any tensor's values; torch:: and at::
# in native code have the same allocators (engine.guard.native), less `as_tensor`.
TORCH_ALLOCATION_CALLS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "tensor",
        "scalar_tensor",
    }
)

# torch.* functions whose result is not a tensor (queries, dtypes, devices, grad-mode context
# managers): the hot-path type inference treats their results as Python values.
TORCH_NON_TENSOR_CALLS = frozenset(
    {
        "is_tensor",
        "is_floating_point",
        "is_complex",
        "numel",
        "Size",
        "device",
        "get_default_dtype",
        "promote_types",
        "result_type",
        "can_cast",
        "finfo",
        "iinfo",
        "no_grad",
        "inference_mode",
        "enable_grad",
        "is_grad_enabled",
        "is_inference_mode_enabled",
        "broadcast_shapes",
        "_assert",
    }
)

# torch.* functions that allocate, describe or view tensors without computing on their values.
# Anything else under `torch.` called on the hot path is PyTorch compute.
TORCH_ALLOWED_CALLS = frozenset(
    {
        # allocation of outputs and scratch buffers
        *TORCH_ALLOCATION_CALLS,
        "as_tensor",
        # views and layout glue (no arithmetic)
        "reshape",
        "flatten",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "permute",
        "transpose",
        "t",
        "narrow",
        "select",
        "split",
        "chunk",
        "unbind",
        "movedim",
        "moveaxis",
        "swapaxes",
        "swapdims",
        "broadcast_to",
        "as_strided",
        "view_as_real",
        "view_as_complex",
        # queries, dtypes, devices, grad mode
        *TORCH_NON_TENSOR_CALLS,
        "nn.Parameter",
        "nn.parameter.Parameter",
        "jit.is_scripting",
        "jit.is_tracing",
        "compiler.is_compiling",
        "autograd.graph.saved_tensors_hooks",
        # torch.cuda: device queries and the current stream (reading it is how an honest kernel launches)
        "cuda.is_available",
        "cuda.current_device",
        "cuda.device",
        "cuda.device_of",
        "cuda.device_count",
        "cuda.get_device_properties",
        "cuda.get_device_capability",
        "cuda.get_device_name",
        "cuda.current_stream",
        "cuda.default_stream",
        "cuda.synchronize",
        "cuda.set_device",
        "cuda.is_initialized",
        "cuda.nvtx.range_push",
        "cuda.nvtx.range_pop",
        "cuda.nvtx.range",
        "cpu.current_device",
    }
)

# torch.* calls the whole-file scan reports under other rules; the hot-path scan leaves them to it.
TORCH_LEFT_TO_WHOLE_FILE_PREFIXES = (
    "compile",
    "jit.",
    "_dynamo",
    "_inductor",
    "export",
    "fx.",
    "cuda.Stream",
    "cuda.stream",
    "cuda.set_stream",
    "cuda.StreamContext",
    "cuda.ExternalStream",
    "cuda.Event",
    "Stream",
    "Event",
    "save",
    "load",
    "hub.",
    "distributed.",
    "futures.",
    "set_",
    "use_deterministic_algorithms",
    "backends.",
    "multiprocessing.",
)

# Tensor methods that are glue: views, layout, dtype/device moves, copies into buffers, allocation.
TENSOR_GLUE_METHODS = frozenset(
    {
        "contiguous",
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "permute",
        "transpose",
        "t",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "expand",
        "expand_as",
        "narrow",
        "select",
        "split",
        "chunk",
        "unbind",
        "movedim",
        "swapaxes",
        "swapdims",
        "as_strided",
        "float",
        "half",
        "bfloat16",
        "double",
        "int",
        "long",
        "short",
        "bool",
        "to",
        "type",
        "cuda",
        "cpu",
        "clone",
        "detach",
        "detach_",
        "requires_grad_",
        "copy_",
        "zero_",
        "fill_",
        "new_empty",
        "new_zeros",
        "new_ones",
        "new_full",
        "new_tensor",
        "new_empty_strided",
        "pin_memory",
        "unfold_view",
        "resize_",
        "set_",
        "record_stream",
        "retain_grad",
        "register_hook",
    }
)

# Tensor methods that answer a question and return a Python value (never a tensor).
TENSOR_QUERY_METHODS = frozenset(
    {
        "size",
        "numel",
        "nelement",
        "dim",
        "ndimension",
        "stride",
        "data_ptr",
        "element_size",
        "storage_offset",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "is_pinned",
        "is_set_to",
        "get_device",
        "item",
        "tolist",
        "untyped_storage",
        "storage",
        "has_names",
        "is_shared",
        "dim_order",
    }
)

# Tensor attributes that are not tensors (so arithmetic on them is Python arithmetic).
TENSOR_NON_TENSOR_ATTRS = frozenset(
    {
        "shape",
        "dtype",
        "device",
        "ndim",
        "is_cuda",
        "is_cpu",
        "is_sparse",
        "is_quantized",
        "is_meta",
        "layout",
        "requires_grad",
        "names",
        "itemsize",
        "nbytes",
        "is_leaf",
        "grad_fn",
        "is_mkldnn",
        "is_nested",
    }
)

# Tensor attributes that are tensors (views of the same data).
TENSOR_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag", "data", "grad"})

# Method names that are PyTorch compute whatever they are called on (unless the receiver is the
# compiled extension, whose functions may legitimately be called `matmul`).
COMPUTE_METHOD_NAMES = frozenset(
    {
        "matmul",
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "addbmm",
        "mv",
        "einsum",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "softmax",
        "log_softmax",
        "relu",
        "relu_",
        "gelu",
        "sigmoid",
        "sigmoid_",
        "tanh",
        "tanh_",
        "logsumexp",
        "layer_norm",
        "batch_norm",
        "group_norm",
        "linear",
        "cumsum",
        "cumprod",
        "amax",
        "amin",
        "argmax",
        "argmin",
        "logsigmoid",
        "hardtanh",
        "softplus",
        "silu",
        "masked_fill",
        "masked_fill_",
        "index_select",
        "gather",
        "scatter",
        "scatter_add",
        "topk",
        "clamp",
        "clamp_",
    }
)


# torch::/at:: free functions the native scan allows in an extension: they only allocate or describe
# tensors, or run the extension's own loops (at::parallel_for); anything else in those namespaces is
# ATen compute.
NATIVE_NS_ALLOWED = frozenset(
    {
        *TORCH_ALLOCATION_CALLS,
        "from_blob",
        "TensorOptions",
        "dtype",
        "device",
        "layout",
        "requires_grad",
        "Device",
        "DeviceGuard",
        "OptionalDeviceGuard",
        "Scalar",
        "ScalarType",
        "IntArrayRef",
        "TensorArg",
        "Tensor",
        "parallel_for",
        "get_num_threads",
        "get_thread_num",
        "in_parallel_region",
        "globalContext",
        "elementSize",
        "toString",
        "typeMetaToScalarType",
        "MemoryFormat",
        "Half",
        "BFloat16",
        "Generator",
        "NoGradGuard",
        "AutoDispatchBelowADInplaceOrView",
        "InferenceMode",
        "device_of",
        "ceil_div",
        "scalarTypeToTypeMeta",
        "toScalarType",
        "ArrayRef",
        "OptionalIntArrayRef",
        "SymInt",
        "accumulate",
    }
)

# Tensor methods (`.name(` or `->name(`) that are ATen compute when an extension calls them. Not the
# same list as COMPUTE_METHOD_NAMES, which judges Python calls: C++ tensor methods are matched by name
# alone, whatever the receiver.
NATIVE_COMPUTE_METHODS = frozenset(
    {
        "matmul",
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "mv",
        "dot",
        "einsum",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "convolution",
        "linear",
        "softmax",
        "log_softmax",
        "relu",
        "relu_",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "sum",
        "mean",
        "logsumexp",
        "layer_norm",
        "batch_norm",
        "group_norm",
        "cumsum",
        "amax",
        "amin",
        "argmax",
        "argmin",
        "norm",
        "var",
        "std",
        "prod",
        "topk",
        "sort",
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
    }
)

# torch.nn classes that do nothing when called (so calling them is not compute).
NN_NON_COMPUTE_MODULES = frozenset({"Identity", "Flatten", "Unflatten"})
NN_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
NN_NON_MODULE_CLASSES = frozenset({"Parameter", "ParameterList", "ParameterDict", "Buffer", "Module"})

# torch.ops namespaces that are ATen itself (anything else is an op the candidate registered).
ATEN_OP_NAMESPACES = frozenset(
    {"aten", "prims", "quantized", "_quantized", "c10d", "_c10d_functional", "inductor"}
)

# Python builtins that compute on a tensor argument (iterating it or calling its dunder methods).
BUILTIN_COMPUTE = frozenset({"sum", "max", "min", "abs", "pow", "round", "divmod", "any", "all", "sorted"})

# Imports, by rule: a module (or a parent of it) in one of these sets fires the rule wherever it is imported.
IMPORT_RULES: dict[str, frozenset[str]] = {
    "threads-or-processes": frozenset(
        {
            "threading",
            "_thread",
            "multiprocessing",
            "concurrent",
            "subprocess",
            "torch.multiprocessing",
            "pty",
            "joblib",
            "dask",
            "ray",
        }
    ),
    "async-tricks": frozenset({"asyncio", "trio", "anyio", "atexit", "signal", "torch.futures"}),
    "network-access": frozenset(
        {
            "socket",
            "ssl",
            "urllib",
            "http",
            "requests",
            "httpx",
            "aiohttp",
            "ftplib",
            "smtplib",
            "poplib",
            "imaplib",
            "telnetlib",
            "xmlrpc",
            "websocket",
            "websockets",
            "paramiko",
            "grpc",
            "zmq",
            "torch.distributed",
            "torch.hub",
            "urllib3",
        }
    ),
    "file-access": frozenset(
        {
            "shutil",
            "tempfile",
            "pathlib",
            "glob",
            "pickle",
            "shelve",
            "marshal",
            "dbm",
            "sqlite3",
            "mmap",
            "fileinput",
            "zipfile",
            "tarfile",
            "h5py",
            "safetensors",
            "dill",
            "cloudpickle",
        }
    ),
    "runtime-tampering": frozenset(
        {"gc", "inspect", "ctypes", "importlib", "builtins", "cffi", "code", "codeop"}
    ),
    "foreign-compiler": frozenset(
        {
            "triton",
            "torch._dynamo",
            "torch._inductor",
            "torch.export",
            "torch.fx",
            "jax",
            "cupy",
            "numba",
            "pycuda",
            "tvm",
            "tilelang",
            "tensorrt",
            "torch_tensorrt",
            "onnxruntime",
            "cutlass",
            "cuda.bindings",
            "thunderkittens",
        }
    ),
    "tensor-subclass": frozenset({"torch.overrides", "torch.utils._python_dispatch", "torch._subclasses"}),
    "timing-access": frozenset({"time", "timeit"}),
}

# Calls, by rule, anywhere in the file (qualified names; a trailing "." means "anything under").
CALL_RULES: dict[str, tuple[str, ...]] = {
    "file-access": (
        "builtins.open",
        "io.open",
        "io.FileIO",
        "os.open",
        "os.read",
        "os.write",
        "os.remove",
        "os.unlink",
        "os.rename",
        "os.renames",
        "os.replace",
        "os.listdir",
        "os.scandir",
        "os.walk",
        "os.makedirs",
        "os.mkdir",
        "os.rmdir",
        "os.removedirs",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.symlink",
        "os.truncate",
        "os.stat",
        "os.path.exists",
        "os.path.isfile",
        "os.path.isdir",
        "os.path.getsize",
        "os.path.getmtime",
        "os.fdopen",
        "torch.save",
        "torch.load",
        "torch.from_file",
        "torch.utils.cpp_extension.load",
        "numpy.save",
        "numpy.savez",
        "numpy.load",
        "numpy.fromfile",
        "numpy.savetxt",
        "numpy.loadtxt",
        "numpy.genfromtxt",
        "numpy.memmap",
    ),
    "threads-or-processes": (
        "os.system",
        "os.popen",
        "os.fork",
        "os.forkpty",
        "os.spawnl",
        "os.spawnv",
        "os.spawnve",
        "os.spawnlp",
        "os.execv",
        "os.execve",
        "os.execl",
        "os.execvp",
        "os.posix_spawn",
        "os.kill",
        "os.killpg",
    ),
    "network-access": ("torch.hub.", "torch.distributed."),
    "async-tricks": ("torch.jit.fork", "torch.jit.wait", "torch.futures.", "sys.settrace", "sys.setprofile"),
    "foreign-compiler": (
        "torch.compile",
        "torch.jit.",
        "torch._dynamo.",
        "torch._inductor.",
        "torch.export.",
        "torch.fx.",
        "torch.cuda.make_graphed_callables",
        "torch.cuda.graph",
        "torch.cuda.CUDAGraph",
    ),
    "stream-swap": (
        "torch.cuda.Stream",
        "torch.cuda.stream",
        "torch.cuda.set_stream",
        "torch.cuda.StreamContext",
        "torch.cuda.ExternalStream",
        "torch.Stream",
        "torch.cuda.streams.",
        "torch.cuda.use_mem_pool",
    ),
    "timing-access": ("time.", "timeit.", "torch.cuda.Event", "torch.Event", "torch.cuda.events."),
    "torch-global-state": (
        "torch.set_float32_matmul_precision",
        "torch.set_default_dtype",
        "torch.set_default_tensor_type",
        "torch.set_default_device",
        "torch.set_flush_denormal",
        "torch.set_num_threads",
        "torch.set_num_interop_threads",
        "torch.use_deterministic_algorithms",
        "torch.cuda.set_per_process_memory_fraction",
        "torch.cuda.set_sync_debug_mode",
    ),
    "runtime-tampering": (
        "builtins.eval",
        "builtins.exec",
        "builtins.compile",
        "builtins.__import__",
        "builtins.globals",
        "sys._getframe",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
    ),
}

# Attribute names whose mere use means reaching into frames, closures or the module table.
TAMPER_ATTRS = frozenset(
    {
        "_getframe",
        "f_back",
        "f_locals",
        "f_globals",
        "gi_frame",
        "__globals__",
        "__code__",
        "__closure__",
        "__subclasses__",
        "__builtins__",
    }
)

# Qualified names that reach into the interpreter's module table or the builtins.
TAMPER_QUALNAMES = ("sys.modules", "builtins.__dict__", "sys._getframe", "builtins.vars", "builtins.globals")

# Attribute names whose use means building a tensor subclass by hand.
SUBCLASS_ATTRS = frozenset(
    {
        "_make_subclass",
        "_make_wrapper_subclass",
        "as_subclass",
        "__torch_function__",
        "__torch_dispatch__",
    }
)

# Decorator names (last segment) that memoise a function.
MEMO_DECORATORS = frozenset({"lru_cache", "cache", "cached", "memoize", "memoized", "cached_property"})
