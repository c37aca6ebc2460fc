"""Input values for evaluation: read from `NAME=VALUE` specs, checked, or made up (seeded).

    VALUE is   x.npy          a NumPy array file
               data.npz       the member named like the input
               data.npz:key   member `key`
               0.5            a number, filled to the input's shape and dtype

A bare `data.npz` (no NAME=) gives every input its member of that name; a member that
names no input is an error (a typo, or the wrong file), never dropped. A NAME=VALUE spec
overrides an archive's member of that name. Inputs given neither way take `defaults` (an
imported ONNX model's own weights), then random values if asked.

Arrays must match the input's shape and dtype exactly (no silent casts: a float64 array
fed to a float32 input is a mistake worth hearing about); numbers are converted, refusing
ones the dtype cannot hold. Files are read with allow_pickle=False: they are data, never code.
"""

from __future__ import annotations

import math
import zlib
from typing import Iterable, Mapping

from ..errors import EvaluationError
from ..core.uop import UOp


def type_text(node: UOp) -> str:
    """`float32[16,8]`, `float32[]` for a scalar."""
    return f"{node.dtype.name}[{','.join(map(str, node.shape))}]"


def split_spec(spec: str) -> tuple[str | None, str]:
    """`NAME=VALUE` -> (NAME, VALUE); a whole archive `data.npz` -> (None, "data.npz")."""
    name, sep, value = spec.partition("=")
    if not sep and spec.endswith(".npz"):
        return None, spec
    if not sep or not name or not value:
        raise EvaluationError(f"input value {spec!r} must look like NAME=VALUE (a .npy, .npz, file.npz:key or a "
                              f"number), or be a whole data.npz")
    return name, value


def read_archive(path: str, nodes: Mapping[str, UOp]) -> dict:
    """{input name: array} from every member of the .npz at `path`, each checked against its
    input; a member that names no input is an error listing them all."""
    import numpy as np
    try:
        with np.load(_starts_with(path, ZIP_MAGIC, ".npz", "a zip archive's"), allow_pickle=False) as archive:
            unknown = [m for m in archive.files if m not in nodes]
            if unknown:
                raise EvaluationError(f"{path}: member{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                                      f"name{'' if len(unknown) > 1 else 's'} no input; inputs: "
                                      f"{', '.join(nodes) or 'none'}")
            for m in archive.files:  # every member's header before any member's data
                check_header(m, nodes[m], *_member_header(archive, m), f"{path}:{m}")
            arrays = {}
            for m in archive.files:
                try:
                    arrays[m] = archive[m]
                except MemoryError:
                    raise EvaluationError(_out_of_memory(m, nodes[m], f"reading {path}:{m}")) from None
    except EvaluationError:
        raise
    except OSError as e:
        raise EvaluationError(f"{e.filename or path}: cannot read: {e.strerror or e}") from None
    except Exception as e:  # noqa: BLE001 - zipfile's and numpy's refusals of a damaged file
        raise EvaluationError(f"{path}: cannot read: {' '.join(str(e).split())}") from None
    return {name: check_value(name, nodes[name], array, f"{path}:{name}") for name, array in arrays.items()}


def read_value(name: str, value: str, node: UOp):
    """The array for input `node` (named `name`) from a VALUE text; checked against the node."""
    import numpy as np
    path, key = _npz_member(value, name)
    if path is None and not value.endswith(".npy"):
        return _filled(name, value, node)
    where = value if path is None else f"{path}:{key}"
    try:  # the header's shape and dtype checked first: a file claiming 37 GiB is the wrong shape, not a read
        if path is not None:
            with np.load(_starts_with(path, ZIP_MAGIC, ".npz", "a zip archive's"), allow_pickle=False) as archive:
                if key not in archive.files:
                    raise EvaluationError(f"input {name!r}: {path} has no member {key!r}; "
                                          f"members: {', '.join(archive.files) or 'none'}")
                check_header(name, node, *_member_header(archive, key), where)
                array = archive[key]
        else:
            with open(_starts_with(value, (NPY_MAGIC,), ".npy", "numpy's magic"), "rb") as f:
                check_header(name, node, *_npy_header(f), where)
            array = np.load(value, allow_pickle=False)
    except EvaluationError:
        raise
    except MemoryError:
        raise EvaluationError(_out_of_memory(name, node, f"reading {where}")) from None
    except OSError as e:
        raise EvaluationError(f"input {name!r}: cannot read {e.filename or value}: {e.strerror or e}") from None
    except ValueError as e:
        raise EvaluationError(f"input {name!r}: cannot read {path or value}: {e}") from None
    except Exception as e:  # noqa: BLE001 - zipfile's and numpy's header parser's refusals of a damaged file
        raise EvaluationError(f"input {name!r}: cannot read {path or value}: a damaged file "
                              f"({type(e).__name__}: {' '.join(str(e).split())})") from None
    return check_value(name, node, array, where)


def given_shapes(specs: Iterable[str]) -> dict:
    """{input name: shape} of the arrays the specs give (numbers fill any shape: none), read
    from the files' headers alone: what sizes an imported model's symbolic dimensions
    before the values are read (gather_inputs, which then checks them). A NAME=VALUE spec
    wins over an archive's member, as there."""
    named, from_archives = {}, {}
    for spec in specs:
        name, value = split_spec(spec)
        if name is None:
            for member, shape in _archive_shapes(value).items():
                from_archives.setdefault(member, shape)
            continue
        path, key = _npz_member(value, name)
        if path is not None:
            shape = _archive_shapes(path, key, name).get(key)
        elif value.endswith(".npy"):
            shape = _npy_shape(value, name)
        else:
            continue  # a number: it fills whatever shape the input has
        if shape is not None:
            named[name] = shape
    return {**from_archives, **named}


def _npy_shape(path: str, name: str) -> tuple:
    import numpy as np
    try:
        return tuple(np.load(_starts_with(path, (NPY_MAGIC,), ".npy", "numpy's magic"), mmap_mode="r",
                             allow_pickle=False).shape)
    except OSError as e:
        raise EvaluationError(f"input {name!r}: cannot read {e.filename or path}: {e.strerror or e}") from None
    except Exception as e:  # noqa: BLE001 - numpy's refusals of a damaged header
        raise EvaluationError(f"input {name!r}: cannot read {path}: {' '.join(str(e).split())}") from None


def _archive_shapes(path: str, key: str | None = None, name: str | None = None) -> dict:
    """{member: shape} of the .npz at `path` (only `key`'s, if given), from each member's
    .npy header: nothing is decompressed past it."""
    try:
        headers = npz_headers(path)
    except EvaluationError as e:
        raise EvaluationError(f"input {name!r}: {e}" if name else str(e)) from None
    return {member: shape for member, (shape, _) in headers.items() if key is None or member == key}


def npz_headers(path: str) -> dict[str, tuple[tuple[int, ...], object]]:
    """{member: (shape, dtype)} of the .npz at `path`, from each member's .npy header alone:
    np.load of an .npz reads only the zip directory, and a member's header is its first
    bytes, so checking a large data set reads almost none of it."""
    import numpy as np
    headers = {}
    try:
        with np.load(_starts_with(path, ZIP_MAGIC, ".npz", "a zip archive's"), allow_pickle=False) as archive:
            stored = set(archive.zip.namelist())
            for name in archive.files:
                headers[name] = _member_header(archive, name, stored)
    except OSError as e:
        raise EvaluationError(f"{e.filename or path}: cannot read: {e.strerror or e}") from None
    except Exception as e:  # noqa: BLE001 - zipfile's and numpy's refusals of a damaged file
        raise EvaluationError(f"{path}: cannot read: {' '.join(str(e).split())}") from None
    return headers


def _member_header(archive, name: str, stored: set | None = None) -> tuple[tuple[int, ...], object]:
    """(shape, dtype) of member `name` of an open np.load archive, from its .npy header:
    only the member's first bytes are decompressed."""
    stored = set(archive.zip.namelist()) if stored is None else stored
    with archive.zip.open(f"{name}.npy" if f"{name}.npy" in stored else name) as member:
        return _npy_header(member)


def _npy_header(stream) -> tuple[tuple[int, ...], object]:
    """(shape, dtype) from the .npy header at the start of `stream`."""
    import numpy as np
    version = np.lib.format.read_magic(stream)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(stream)
    return tuple(shape), dtype


def check_header(name: str, node: UOp, shape: tuple, dtype, where: str) -> None:
    """check_value's refusal from an array file's header alone, before its data is read."""
    import numpy as np
    dtype = np.dtype(dtype)
    if not dtype.isnative and dtype.newbyteorder("=") == node.dtype.np:
        dtype = dtype.newbyteorder("=")  # the other byte order of the right dtype: check_value converts it
    if tuple(shape) != node.shape or dtype != node.dtype.np:
        raise EvaluationError(f"input {name!r} is {type_text(node)} but {where} is "
                              f"{dtype.name}[{','.join(map(str, shape))}]")


def _out_of_memory(name: str, node: UOp, doing: str) -> str:
    """`input 'x' (float32[100000,100000], 37.3 GiB): out of memory reading x.npy`."""
    size = math.prod(node.shape) * node.dtype.itemsize
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            break
        size /= 1024
    text = f"{size:.0f} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
    return f"input {name!r} ({type_text(node)}, {text}): out of memory {doing}"


NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip archive's first entry, or an empty one's end record


def _starts_with(path: str, magics: tuple, kind: str, what: str) -> str:
    """`path`, once its first bytes are one of `magics`: numpy reads any other file as a
    pickle, and refuses it as 'pickled (object) data', which misleads."""
    with open(path, "rb") as f:
        head = f.read(max(map(len, magics)))
    if not any(head.startswith(magic) for magic in magics):
        raise ValueError(f"not a {kind} file (it does not start with {what} bytes)")
    return path


def _npz_member(value: str, name: str) -> tuple[str | None, str | None]:
    if value.endswith(".npz"):
        return value, name
    head, sep, key = value.rpartition(":")
    if sep and head.endswith(".npz") and key:
        return head, key
    return None, None


def _filled(name: str, value: str, node: UOp):
    import numpy as np
    dtype = node.dtype
    text = value.strip().lower()
    try:
        if dtype.is_bool:
            if text not in ("0", "1", "true", "false"):
                raise ValueError
            number = text in ("1", "true")
        elif dtype.is_int:
            number = int(text)
        else:
            number = float(text)
    except ValueError:
        kind = "a bool (0, 1, true, false)" if dtype.is_bool else "an integer" if dtype.is_int else "a number"
        raise EvaluationError(f"input {name!r} ({type_text(node)}): {value!r} is not a .npy or .npz file "
                              f"nor {kind}") from None
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        if not info.min <= number <= info.max:
            raise EvaluationError(f"input {name!r}: {number} does not fit {dtype.name}")
    elif dtype.is_float and math.isfinite(number) and abs(number) > (largest := float(np.finfo(dtype.np).max)):
        with np.errstate(over="ignore"):
            rounded = np.array(number).astype(dtype.np)
        if not np.isfinite(rounded):  # beyond the margin that rounds down to the largest
            raise EvaluationError(f"input {name!r}: {value} does not fit {dtype.name} (largest magnitude "
                                  f"{largest:.6g}; give inf or -inf for infinity)")
    try:
        return np.full(node.shape, number, dtype=dtype.np)
    except MemoryError:
        raise EvaluationError(_out_of_memory(name, node, f"filling it with {value}")) from None


def not_finite(outputs: Mapping) -> tuple[str, ...]:
    """The names of the float arrays of `outputs` ({name: array or None}) that hold a nan or
    an infinity."""
    import numpy as np
    return tuple(name for name, value in outputs.items()
                 if value is not None and np.asarray(value).dtype.kind == "f" and not np.isfinite(value).all())


def check_value(name: str, node: UOp, array, where: str = "the value"):
    """`array` if it is the input's value (shape and dtype exactly; an array of the other
    byte order comes back in this machine's), else EvaluationError."""
    import numpy as np
    if not isinstance(array, np.ndarray):
        raise EvaluationError(f"input {name!r}: {where} is not an array")
    if not array.dtype.isnative and array.dtype.newbyteorder("=") == node.dtype.np:
        array = array.astype(node.dtype.np)  # a big-endian .npy of the right dtype: same values
    if tuple(array.shape) != node.shape or array.dtype != node.dtype.np:
        got = f"{array.dtype.name}[{','.join(map(str, array.shape))}]"
        raise EvaluationError(f"input {name!r} is {type_text(node)} but {where} is {got}")
    return array


def random_value(node: UOp, seed: int, ranges: Mapping[str, int] | None = None):
    """Seeded values for input `node`: the same (seed, name, shape, dtype) always gives the
    same array, whichever other inputs there are, so a forward file and its gradient file
    see the same random inputs. Floats are standard normal, integers 0..9 (below n where
    `ranges` gives the input n: the classes it indexes, index_range.py), bools fair."""
    import numpy as np
    rng = np.random.default_rng([seed, zlib.crc32(node.arg.encode())])
    dtype = node.dtype
    if dtype.is_float:
        return rng.standard_normal(node.shape).astype(dtype.np)
    if dtype.is_bool:
        return rng.random(node.shape) < 0.5
    return rng.integers(0, min(10, (ranges or {}).get(node.arg, 10)), node.shape).astype(dtype.np)


def index_ranges_for(roots: Iterable[UOp] | None, drawn: Iterable[UOp]) -> dict[str, int]:
    """The classes each integer input of `drawn` indexes in the graph of `roots`
    (index_range.index_ranges), walked only when one of them is an integer."""
    if roots is None or not any(node.dtype.is_int for node in drawn):
        return {}
    from .index_range import index_ranges
    return index_ranges(roots)


def gather_inputs(inputs: Iterable[UOp], specs: Iterable[str], random_seed: int | None = None,
                  defaults: Mapping | None = None, roots: Iterable[UOp] | None = None) -> dict:
    """Every input's array from `NAME=VALUE` specs, then whole .npz files, then `defaults`;
    missing ones random when `random_seed` is given (an integer index of the graph of
    `roots` below the number of classes it picks from), else an error listing each
    missing input with its shape and dtype."""
    nodes: Mapping[str, UOp] = {n.arg: n for n in inputs}
    values, from_archive = {}, {}
    for spec in specs:
        name, value = split_spec(spec)
        if name is None:
            for member, array in read_archive(value, nodes).items():
                if member in from_archive:
                    raise EvaluationError(f"input {member!r} is in both {from_archive[member][0]} and {value}")
                from_archive[member] = (value, array)
            continue
        if name not in nodes:
            raise EvaluationError(f"-i {name}: no input named {name!r}; inputs: {', '.join(nodes) or 'none'}")
        if name in values:
            raise EvaluationError(f"input {name!r} is given twice")
        values[name] = read_value(name, value, nodes[name])
    for name, (_, array) in from_archive.items():
        values.setdefault(name, array)  # NAME=VALUE wins over an archive's member
    for name, array in (defaults or {}).items():
        if name in nodes and name not in values:
            values[name] = check_value(name, nodes[name], array, "the model's own value")
    missing = [node for name, node in nodes.items() if name not in values]
    if missing and random_seed is None:
        listed = ", ".join(f"{n.arg} {type_text(n)}" for n in missing)
        raise EvaluationError(f"missing input value{'s' if len(missing) > 1 else ''}: {listed} "
                              f"(give -i NAME=VALUE, or --random)")
    ranges = index_ranges_for(roots, missing)
    for node in missing:
        try:
            values[node.arg] = random_value(node, random_seed, ranges)
        except MemoryError:
            raise EvaluationError(_out_of_memory(node.arg, node, "drawing its random values")) from None
    return {name: values[name] for name in nodes}


def stored_elements(results: Mapping) -> dict:
    """Outputs one array each, as `eval -o` and `--map` store them: a TUPLE, FUNCTION or CALL
    output (a tuple; None for a NOOP element) gives one entry per element, `t[0]`, `t[1]`, ...
    EvaluationError when two outputs would be stored under one name (a tuple `t` and an
    output named `t[0]`): one would silently replace the other."""
    flat, owner = {}, {}
    for name, value in results.items():
        items = [(f"{name}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, tuple) else [(name, value)]
        for key, element in items:
            if key in owner:
                raise EvaluationError(f"outputs {owner[key]!r} and {name!r} would both be stored as {key!r}: "
                                      f"rename one of them")
            flat[key], owner[key] = element, name
    return flat


def npz_bytes(arrays: Mapping) -> bytes:
    """An .npz archive of `arrays` (what numpy.savez writes), deterministic: fixed
    timestamps, members in output order, no pickles."""
    import io
    import zipfile

    import numpy as np
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()
