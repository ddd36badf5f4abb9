"""kiln from Python: ONNX inference and training on kiln's CPU and CUDA backends.

    import numpy as np, kiln
    sess = kiln.Session("model.onnx", device="cpu")
    y = sess.run({"x": np.zeros((1, 3, 32, 32), np.float32)})["y"]
    print(y.numpy())

Arrays come in through DLPack (NumPy, PyTorch, CuPy, JAX, anything with ``__dlpack__``)
and are bound without a copy; outputs are ``kiln.Tensor``, which go back out the same way
(``torch.from_dlpack(y)`` and ``np.from_dlpack(y)`` share its memory). A failed call
raises ``kiln.Error`` (or its subclass for the status, e.g. ``kiln.ShapeError``) with
kiln's message. docs/python.md is the guide; kiln.h the reference for every option.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from . import _kiln
from ._kiln import (DeviceError, DTypeError, Error, GraphError, InternalError, InvalidArgumentError,
                    IOError, OutOfMemoryError, ParseError, ShapeError, UnsupportedError)

__all__ = ["Session", "Model", "Trainer", "Tensor", "IOInfo", "version", "from_dlpack", "empty", "set_log",
           "Error", "InvalidArgumentError", "OutOfMemoryError", "ParseError", "ShapeError", "DTypeError",
           "UnsupportedError", "GraphError", "DeviceError", "InternalError", "PASSES"]
# kiln.IOError (KILN_ERR_IO) is left out of __all__ so that `from kiln import *` keeps the builtin.

__version__ = _kiln.version()

# kiln_dtype codes (ONNX's numbering) and their NumPy names.
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
           10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}
_DTYPE_CODES = {v: k for k, v in _DTYPES.items()}
_CPU, _CUDA = 0, 1
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3

#: The graph passes and techniques ``disable=`` takes by name (kiln's --disable names).
PASSES: Dict[str, int] = dict(_kiln.PASSES)

Array = Any  # anything with __dlpack__, a kiln.Tensor, or what numpy.asarray takes


def version() -> str:
    """The library's version (kiln_version())."""
    return _kiln.version()


_LOG_LEVELS = {"error": 0, "warn": 1, "info": 2, "debug": 3}
_LOG_NAMES = {v: k for k, v in _LOG_LEVELS.items()}


def set_log(fn: Optional[Any] = None, level: str = "warn") -> None:
    """kiln's log (kiln_context_set_log): fn(level, message) receives every message up to
    `level` ("error": each failed call's message, "warn", "info": plans built, "debug":
    each graph pass), level one of those names, on the thread of the call that logs.
    fn None: no log (the default). For Python's logging:
    ``kiln.set_log(lambda lv, m: logging.getLogger("kiln").log(getattr(logging, lv.upper(),
    logging.DEBUG) if lv != "warn" else logging.WARNING, m), "info")``."""
    if level not in _LOG_LEVELS:
        raise _fail(InvalidArgumentError, 1, f"kiln: log level '{level}': one of {', '.join(_LOG_LEVELS)}")
    if fn is None:
        _kiln.set_log(None, _LOG_LEVELS[level])
    else:
        _kiln.set_log(lambda lv, msg: fn(_LOG_NAMES.get(lv, str(lv)), msg), _LOG_LEVELS[level])


def _fail(cls: type, status: int, message: str) -> Exception:
    e = cls(message)
    e.status = status
    return e


def _parse_device(device: str) -> Tuple[int, int]:
    d = str(device)
    if d == "cpu":
        return _CPU, 0
    if d == "cuda":
        return _CUDA, 0
    if d.startswith("cuda:") and d[5:].isdigit():
        return _CUDA, int(d[5:])
    raise _fail(InvalidArgumentError, 1, f"kiln: device '{device}': one of cpu, cuda, cuda:N")


def _device_name(dev: Tuple[int, int]) -> str:
    return "cpu" if dev[0] == _CPU else f"cuda:{dev[1]}"


def _disable_bits(disable: Union[str, Iterable[str], None]) -> int:
    if not disable:
        return 0
    names = disable.split(",") if isinstance(disable, str) else list(disable)
    bits = 0
    for n in names:
        if n == "all":
            bits |= 0xFFFFFFFF
        elif n in PASSES:
            bits |= PASSES[n]
        else:
            raise _fail(InvalidArgumentError, 1, f"kiln: unknown pass '{n}'; one of: all, {', '.join(PASSES)}")
    return bits


def _stream_ptr(stream: Any) -> int:
    """A cudaStream_t as an int from an int, a torch.cuda.Stream or a cupy Stream."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise _fail(InvalidArgumentError, 1, f"kiln: stream {stream!r}: an int (cudaStream_t), a torch.cuda.Stream "
                "or a cupy Stream")


class IOInfo(NamedTuple):
    """A model input or output: its name, dtype (NumPy's name) and shape, where a
    symbolic dim is its name (str) when the model names it, else None."""
    name: str
    dtype: Optional[str]
    shape: Optional[Tuple[Union[int, str, None], ...]]


def _io(items: List[tuple]) -> List[IOInfo]:
    return [IOInfo(n, _DTYPES.get(d) if d else None, s) for n, d, s in items]


class Tensor:
    """A kiln tensor (a session's output, or an array bound through DLPack).

    ``torch.from_dlpack(t)``, ``np.from_dlpack(t)`` and ``cupy.from_dlpack(t)`` view its
    memory without a copy; ``numpy()`` gives a NumPy array (a view on the host, a copy of
    a CUDA tensor)."""
    __slots__ = ("_h", "_src", "__weakref__")

    def __init__(self, handle: Any, src: Any = None) -> None:
        if not isinstance(handle, _kiln.Tensor):
            raise TypeError("kiln.Tensor wraps a handle; use kiln.from_dlpack(array) or kiln.empty(...)")
        self._h = handle
        self._src = src  # the producer's object, kept for as long as this view

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._h.shape

    @property
    def dtype(self) -> str:
        return _DTYPES.get(self._h.dtype, "undefined")

    @property
    def device(self) -> str:
        return _device_name(self._h.device)

    @property
    def data_ptr(self) -> int:
        """Address of the first element (host or device memory)."""
        return self._h.data_ptr

    @property
    def nbytes(self) -> int:
        return self._h.nbytes

    def __dlpack_device__(self) -> Tuple[int, int]:
        dev, index = self._h.device
        return (_DL_CPU, 0) if dev == _CPU else (_DL_CUDA, index)

    def __dlpack__(self, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Optional[bool] = None) -> Any:
        # A "dltensor" capsule (DLPack 0.x, which consumers asking for max_version (1, 0)
        # accept). kiln's outputs are complete when run returns unless the session was
        # given a stream: then the caller orders work on that stream, and `stream` here
        # needs no wait.
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"kiln: tensor is on {self.device}; no copy to device {tuple(dl_device)}")
        if copy:
            return Tensor(self._h.to_host()).__dlpack__() if self._h.device[0] == _CPU else self._copy_err()
        return self._h.to_dlpack()

    def _copy_err(self) -> Any:
        raise BufferError("kiln: copy=True of a CUDA tensor through DLPack is not supported")

    def numpy(self) -> Any:
        """A NumPy array: a view of a host tensor, a copy of a CUDA one."""
        import numpy as np
        if self._h.device[0] == _CPU:
            return np.from_dlpack(self)
        return np.from_dlpack(Tensor(self._h.to_host()))

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Any:
        import numpy as np
        a = self.numpy()
        if copy:
            a = a.copy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"kiln.Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"


def from_dlpack(x: Array, stream: int = 0) -> Tensor:
    """Bind an array as a kiln.Tensor without a copy: anything with ``__dlpack__`` (CUDA
    arrays on kiln's device builds), or what numpy.asarray takes (copied once into a
    contiguous array). ``stream``: the CUDA stream the consumer reads on (a CUDA
    producer orders its pending work before it)."""
    if isinstance(x, Tensor):
        return x
    if not hasattr(x, "__dlpack__"):
        import numpy as np
        x = np.ascontiguousarray(x)
    else:
        flags = getattr(x, "flags", None)  # NumPy: DLPack 0.x has no read-only flag
        if flags is not None and hasattr(flags, "writeable") and hasattr(x, "copy"):
            if not flags.writeable or not flags.c_contiguous:
                import numpy as np
                x = np.array(x, copy=True, order="C")
        if getattr(x, "requires_grad", False) and hasattr(x, "detach"):
            x = x.detach()  # torch refuses to export tensors that require grad
    dev = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else _DL_CPU
    if dev == _DL_CUDA:
        cap = x.__dlpack__(stream=stream if stream else None)
    else:
        cap = x.__dlpack__()
    return Tensor(_kiln.from_dlpack(cap), x)


def empty(shape: Sequence[int], dtype: str = "float32", device: str = "cpu") -> Tensor:
    """A zeroed tensor owned by kiln (host or device memory)."""
    if dtype not in _DTYPE_CODES:
        raise _fail(InvalidArgumentError, 1, f"kiln: dtype '{dtype}': one of {', '.join(_DTYPE_CODES)}")
    dev, index = _parse_device(device)
    return Tensor(_kiln.empty(_DTYPE_CODES[dtype], list(shape), dev, index))


class Model:
    """An ONNX model (a path or the file's bytes), or a model kiln builds (Model.mnist_net)."""

    def __init__(self, source: Union[str, "os.PathLike[str]", bytes, bytearray, memoryview],
                 base_dir: Optional[str] = None) -> None:
        if isinstance(source, _kiln.Model):
            self._h = source
        elif isinstance(source, (bytes, bytearray, memoryview)):
            self._h = _kiln.load_onnx_bytes(bytes(source), base_dir)
        else:
            self._h = _kiln.load_onnx(os.fspath(source))

    @classmethod
    def mnist_net(cls, batch: int = -1, seed: int = 0, dropout: bool = True) -> "Model":
        """pytorch/examples' MNIST network (kiln_models.h): inputs "image" (batch,1,28,28)
        f32 and "label" (batch,) i64; outputs "logprobs" and "loss"."""
        return cls(_kiln.mnist_net(batch, seed, dropout))

    @property
    def inputs(self) -> List[IOInfo]:
        return _io(self._h.inputs)

    @property
    def outputs(self) -> List[IOInfo]:
        return _io(self._h.outputs)

    @property
    def num_nodes(self) -> int:
        return self._h.num_nodes

    def __repr__(self) -> str:
        return f"kiln.Model(inputs={[i.name for i in self.inputs]}, outputs={[o.name for o in self.outputs]})"


_PRECISIONS = {"fp32": 0, "fp16": 1, "bf16": 2}


def _bind(names: List[str], given: Union[Mapping[str, Array], Sequence[Array]], what: str,
          stream: int) -> Tuple[List[Tensor], List[Any]]:
    """Tensors in model order from a dict by name or a list in order."""
    if isinstance(given, Mapping):
        unknown = [k for k in given if k not in names]
        if unknown:
            raise _fail(InvalidArgumentError, 1, f"kiln: no model {what} named {', '.join(map(repr, unknown))}; "
                        f"the model's {what}s: {', '.join(names)}")
        missing = [n for n in names if n not in given]
        if missing:
            raise _fail(InvalidArgumentError, 1, f"kiln: {what} {', '.join(map(repr, missing))} not given")
        objs = [given[n] for n in names]
    else:
        objs = list(given)
        if len(objs) != len(names):
            raise _fail(InvalidArgumentError, 1, f"kiln: {len(objs)} {what}s given, the model has {len(names)} "
                        f"({', '.join(names)})")
    return [from_dlpack(o, stream) for o in objs], objs


class Session:
    """Inference on one device: ``Session(path_or_bytes_or_Model, device="cpu"|"cuda"|"cuda:N",
    precision="fp32"|"fp16"|"bf16", threads=0, deterministic=False, strict_fp32=False,
    no_fold=False, disable=[pass names], stream=None)`` (kiln_session_options)."""

    def __init__(self, model: Union[str, "os.PathLike[str]", bytes, Model], device: str = "cpu",
                 precision: str = "fp32", *, threads: int = 0, deterministic: bool = False,
                 strict_fp32: bool = False, no_fold: bool = False,
                 disable: Union[str, Iterable[str], None] = None, stream: Any = None) -> None:
        self.model = model if isinstance(model, Model) else Model(model)
        dev, index = _parse_device(device)
        if precision not in _PRECISIONS:
            raise _fail(InvalidArgumentError, 1, f"kiln: precision '{precision}': one of fp32, fp16, bf16")
        opts = {"device": dev, "device_index": index, "precision": _PRECISIONS[precision],
                "threads": int(threads), "deterministic": int(bool(deterministic)),
                "strict_fp32": int(bool(strict_fp32)), "no_fold": int(bool(no_fold)),
                "disable_passes": _disable_bits(disable), "stream": _stream_ptr(stream)}
        self.device = _device_name((dev, index))
        self._h = _kiln.Session(self.model._h, opts)
        self._inputs = self.model.inputs
        self._outputs = self.model.outputs
        self._in_names = [i.name for i in self._inputs]
        self._out_names = [o.name for o in self._outputs]

    @property
    def inputs(self) -> List[IOInfo]:
        return self._inputs

    @property
    def outputs(self) -> List[IOInfo]:
        return self._outputs

    @property
    def stream(self) -> int:
        """The cudaStream_t kiln's runs are ordered on (0 on the CPU)."""
        return self._h.stream

    def run(self, inputs: Union[Mapping[str, Array], Sequence[Array]],
            outputs: Optional[Mapping[str, Array]] = None) -> Dict[str, Any]:
        """Run the model. inputs: a dict by name or a list in model order. outputs (IO
        binding): arrays by output name that receive the outputs in place (no allocation);
        the result maps those names to the same objects and the others to new kiln.Tensor."""
        stream = self._h.stream
        ins, _keep = _bind(self._in_names, inputs, "input", stream)
        outs: List[Optional[Tensor]] = [None] * len(self._out_names)
        given: Dict[str, Any] = dict(outputs or {})
        for name, arr in given.items():
            if name not in self._out_names:
                raise _fail(InvalidArgumentError, 1, f"kiln: no model output named '{name}'; the model's outputs: "
                            f"{', '.join(self._out_names)}")
            outs[self._out_names.index(name)] = from_dlpack(arr, stream)
        res = self._h.run([t._h for t in ins], [t._h if t is not None else None for t in outs])
        return {n: (given[n] if n in given else Tensor(h)) for n, h in zip(self._out_names, res)}

    def stats(self) -> Dict[str, int]:
        """The last run's plan statistics (kiln_plan_stats)."""
        return self._h.stats()


_OPTIMIZERS = {"sgd": 0, "adam": 1, "adamw": 2, "adadelta": 3, "lars": 4, "lamb": 5}
_SCHEDULES = {"constant": 0, "step": 1, "cosine": 2, "poly": 3}
_AMP = {None: 0, "off": 0, "fp32": 0, "fp16": 1, "bf16": 2}


class Trainer:
    """Training (kiln_trainer): ``Trainer(model, loss="loss", device="cpu", optimizer="adam",
    lr=0, ...)``; every kiln_train_options field is a keyword (schedule, amp, accumulate,
    seed, momentum, nesterov, weight_decay, beta1, beta2, eps, rho, step_size, gamma,
    total_steps, warmup_steps, threads, strict_fp32, deterministic, disable, lars_eta,
    clip_grad_norm, no_decay_bn_bias)."""

    _FIELDS = ("lr", "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps", "rho", "step_size",
               "gamma", "total_steps", "warmup_steps", "accumulate", "seed", "threads", "strict_fp32",
               "deterministic", "lars_eta", "clip_grad_norm", "no_decay_bn_bias")

    def __init__(self, model: Union[str, "os.PathLike[str]", bytes, Model], loss: str = "loss",
                 device: str = "cpu", optimizer: str = "adam", schedule: str = "constant",
                 amp: Optional[str] = None, disable: Union[str, Iterable[str], None] = None,
                 **options: Any) -> None:
        self.model = model if isinstance(model, Model) else Model(model)
        dev, index = _parse_device(device)
        for k in options:
            if k not in self._FIELDS:
                raise _fail(InvalidArgumentError, 1, f"kiln: unknown training option '{k}'; one of: "
                            f"{', '.join(self._FIELDS)}")
        for name, table, v in (("optimizer", _OPTIMIZERS, optimizer), ("schedule", _SCHEDULES, schedule),
                               ("amp", _AMP, amp)):
            if v not in table:
                raise _fail(InvalidArgumentError, 1, f"kiln: {name} '{v}': one of "
                            f"{', '.join(str(k) for k in table if k is not None)}")
        opts: Dict[str, Any] = {k: (int(v) if isinstance(v, bool) else v) for k, v in options.items()}
        opts.update(device=dev, device_index=index, optimizer=_OPTIMIZERS[optimizer], schedule=_SCHEDULES[schedule],
                    amp=_AMP[amp], disable_passes=_disable_bits(disable))
        self._h = _kiln.Trainer(self.model._h, loss, opts)
        self._in_names = [i.name for i in self.model.inputs]

    def step(self, inputs: Union[Mapping[str, Array], Sequence[Array]]) -> float:
        """One micro-batch (forward, backward, and the optimizer every `accumulate`
        calls); returns its loss."""
        ins, _keep = _bind(self._in_names, inputs, "input", 0)
        return self._h.step([t._h for t in ins])

    def train_epoch(self, images: Array, labels: Array, batch: int, seed: int = 0, epoch: int = 0,
                    start_step: int = 0, end_step: int = -1) -> float:
        """Steps [start_step, end_step) of an epoch over a whole data set (images f32 (N, ...),
        labels int64 (N,)), shuffled by (seed, epoch); returns the last step's loss."""
        im, lb = from_dlpack(images), from_dlpack(labels)
        return self._h.train_epoch(im._h, lb._h, batch, seed, epoch, start_step, end_step)

    def warmup(self, images: Array, labels: Array, batch: int) -> None:
        im, lb = from_dlpack(images), from_dlpack(labels)
        self._h.warmup(im._h, lb._h, batch)

    def save(self, path: Union[str, "os.PathLike[str]"], epoch: int = 0, step_in_epoch: int = 0) -> None:
        """A safetensors checkpoint (weights, optimizer state, counters, the loader position)."""
        self._h.save(os.fspath(path), epoch, step_in_epoch)

    def load(self, path: Union[str, "os.PathLike[str]"]) -> Tuple[int, int]:
        """Load a checkpoint; returns (epoch, step_in_epoch) as saved."""
        return self._h.load(os.fspath(path))

    def export(self, output: str) -> Model:
        """An inference model computing `output` with the current weights."""
        return Model(self._h.export(output))

    @property
    def stats(self) -> Dict[str, Any]:
        """micro_steps, steps, skipped_steps, lr, loss_scale, params, param_count."""
        return self._h.stats()
