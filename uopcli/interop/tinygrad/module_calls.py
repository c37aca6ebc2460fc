"""Which module's forward made each tinygrad node, recorded while tinygrad builds the graph.

tinygrad 0.14 records which Tensor function made a node (one `Metadata` per outermost call,
set in a ContextVar by a wrapper around every Tensor method) but not who called it, and a
graph alone cannot say it: `ln(enc(x))` and `enc(x).layernorm()` are the same nodes. So, as
tinygrad's own wrapper does for the function's name, `record_module_calls` wraps the two
Tensor methods every node goes through (`_apply_uop`, and `_wrap_uop` for casts) and notes
for each new node the objects whose methods are on the Python stack (a module's `__call__`,
a block's `forward`, whatever its first parameter is named), outermost first. The stack is
walked once per outermost Tensor call: the modules cannot change inside one. A node made
again by another module (tinygrad shares equal nodes: q, k and v reshape the same input)
keeps the modules both calls share.

`ModuleScopes` turns those objects into module paths at export: an object's path is where
its tensors sit in the state_dict (`attn.q.weight` of an object whose `q.weight` is that
tensor: `attn`); the innermost object on the stack that has one is the node's module. The
model itself has the empty path (the top); an object none of whose tensors are in the
state_dict (a trainer, a test runner) is skipped.

Installed when `uopcli.interop.tinygrad` is imported, if tinygrad is installed: import it
before running the model. Nodes made before that carry no record, and scopes.py then falls
back on guessing from where the state_dict's weights are used.
"""

from __future__ import annotations

import os
import sys
import weakref

from .scopes import module_of

# tinygrad UOp -> the objects (weakrefs) whose methods made it, outermost first
_made_in: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_last_call: list = [None, ()]  # tinygrad's Metadata of the outermost call last seen, its callers
_MARK = "_uopgrad_records_modules"


def record_module_calls() -> bool:
    """Wrap tinygrad's Tensor so every node it makes is noted with its callers; once per
    process. False where tinygrad is not installed."""
    try:
        import tinygrad.tensor as tensor_module
    except ImportError:
        return False
    Tensor = tensor_module.Tensor
    if getattr(Tensor._apply_uop, _MARK, False):
        return True
    from tinygrad.uop.ops import Ops, UOp
    metadata_var = getattr(tensor_module, "_METADATA", None)
    skip, const = (Tensor, UOp), Ops.CONST
    apply_uop, wrap_uop = Tensor._apply_uop, Tensor.__dict__["_wrap_uop"].__func__

    def _apply_uop(self, fxn, *x, **kwargs):
        made = apply_uop(self, fxn, *x, **kwargs)
        _note(made.uop, (self, *x), metadata_var, skip)
        return made

    def _wrap_uop(cls, u):
        made = wrap_uop(cls, u)
        if u.op is not const:  # a Python number's constant (most calls): in no module
            _note(made.uop, (), metadata_var, skip)
        return made

    setattr(_apply_uop, _MARK, True)
    Tensor._apply_uop = _apply_uop
    Tensor._wrap_uop = classmethod(_wrap_uop)
    return True


def _note(made, inputs: tuple, metadata_var, skip) -> None:
    """Note the callers on `made` and on the nodes the same Tensor method made on the way
    from `inputs` (a `sum` inside `conv2d` makes a PERMUTE and a REDUCE before its RESHAPE;
    tinygrad gives them no metadata). What was noted or has metadata was made before."""
    callers = _callers_of_this_call(metadata_var, skip)
    stack, seen = [made], {made}
    while stack:
        uop = stack.pop()
        before = _made_in.get(uop)
        _made_in[uop] = callers if before is None else _shared_start(before, callers)
        for src in uop.src:  # the common case first: a source made by an earlier call
            if src.src and src not in _made_in and not src.metadata and src not in seen \
                    and not any(src is t.uop for t in inputs):
                seen.add(src)
                stack.append(src)


def _callers_of_this_call(metadata_var, skip) -> tuple:
    call = metadata_var.get() if metadata_var is not None else None
    if call is not None and call is _last_call[0]:
        return _last_call[1]
    callers = _objects_on_stack(skip)
    if call is not None:  # the Metadata is held here, so its id is not reused while cached
        _last_call[:] = [call, callers]
    return callers


_TINYGRAD_DIR = None
_NEAREST_TENSORS = 4   # how many of an object's tensors stand for it (one may not be in the state_dict)
_SEARCH_LIMIT = 256    # objects looked at per caller: a module's tensors are near it
# a caller -> (its attribute count, its nearest tensors: ((way, weakref to the Tensor), ...)); the module objects
# themselves are not held: a model may be dropped before its outputs are exported
_tensors_of: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _objects_on_stack(skip) -> tuple:
    """The nearest tensors of the instance of each method running outside tinygrad's core
    (its nn modules count), outermost first, each once; objects without tensors left out.
    A frame is a method call on an instance when its first positional argument's class has
    that function (under any name: `def __call__(s, x)` is as much a method as `self`'s)."""
    global _TINYGRAD_DIR
    if _TINYGRAD_DIR is None:
        import tinygrad
        _TINYGRAD_DIR = os.path.dirname(tinygrad.__file__) + os.sep
    nn_dir = _TINYGRAD_DIR + "nn" + os.sep
    found: list = []
    frame = sys._getframe(3)
    while frame is not None:
        code = frame.f_code
        if code.co_argcount and (
                not code.co_filename.startswith(_TINYGRAD_DIR) or code.co_filename.startswith(nn_dir)):
            obj = frame.f_locals.get(code.co_varnames[0])
            tensors = _nearest_tensors(obj, skip[0]) \
                if obj is not None and not isinstance(obj, skip) and _is_method_of(type(obj), code) else ()
            if tensors and not (found and found[-1] is tensors):
                found.append(tensors)
        frame = frame.f_back
    return tuple(reversed(found))


_METHOD_CODES = 4096  # answers kept; past that, the cache starts again
# (class, code object, the class's attribute of the code's name) -> whether the code is a method's of the class
_method_of: dict = {}


def _is_method_of(cls: type, code) -> bool:
    """Whether `code` is a method's of `cls` (its own or inherited, reached by super(); a
    property's accessor; a decorated function's inner one; a lambda in the class body): a
    function taking the instance first, as a free function taking a module first
    (`run(block, x)`) is not. This runs for each frame as each node is built: one attribute
    lookup and one cached answer, kept with what the class's attribute of that name is (a
    test may patch a module's `__call__` and put it back)."""
    attribute = getattr(cls, code.co_name, None)
    key = (cls, code, attribute)
    try:
        known = _method_of.get(key)
    except TypeError:  # an unhashable class attribute of that name: not a function
        return _found_in(cls, code)
    if known is None:
        if len(_method_of) >= _METHOD_CODES:
            _method_of.clear()
        known = _method_of[key] = _runs(attribute, code) or _found_in(cls, code)
    return known


def _found_in(cls: type, code) -> bool:
    try:
        namespaces = [vars(klass) for klass in cls.__mro__]
    except (AttributeError, TypeError):
        return False
    name = code.co_name
    return any(_runs(ns[name], code) for ns in namespaces if name in ns) or \
        any(_runs(value, code) for ns in namespaces for value in ns.values())


def _runs(value, code) -> bool:
    """Whether the class attribute `value`, called on an instance, runs `code` first (its
    own function, a property's accessors, a `functools.wraps` decorator's inner function)."""
    if value is None:
        return False
    if isinstance(value, property):
        return any(_runs(f, code) for f in (value.fget, value.fset, value.fdel) if f is not None)
    for _ in range(8):  # decorators seldom stack deeper
        if getattr(value, "__code__", None) is code:
            return True
        value = getattr(value, "__wrapped__", None)
        if value is None:
            return False
    return False


def _nearest_tensors(obj, tensor_type) -> tuple:
    """Cached while the object has as many attributes (a module's __init__ adds its own)."""
    attributes = getattr(obj, "__dict__", None)
    if not isinstance(attributes, dict):
        return ()
    try:
        count, tensors = _tensors_of.get(obj, (-1, ()))
    except TypeError:  # not weakly referable: not a module
        return ()
    if count != len(attributes):
        tensors = _search(obj, tensor_type)
        _tensors_of[obj] = (len(attributes), tensors)
    return tensors


def _search(obj, tensor_type) -> tuple:
    """Breadth first through attributes, lists and dicts (as tinygrad's get_state_dict
    names them): the nearest tensors, each with the way there (`q.weight`)."""
    queue, seen, at, found = [(obj, "")], {id(obj)}, 0, []
    while at < len(queue) and at < _SEARCH_LIMIT and len(found) < _NEAREST_TENSORS:
        current, way = queue[at]
        at += 1
        for name, value in _members(current):
            if id(value) in seen:
                continue
            seen.add(id(value))
            sub = f"{way}.{name}" if way else name
            if isinstance(value, tensor_type):
                found.append((sub, weakref.ref(value)))
            else:
                queue.append((value, sub))
    return tuple(found[:_NEAREST_TENSORS])


def _members(obj):
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items()]
    members = getattr(obj, "__dict__", None)
    return list(members.items()) if isinstance(members, dict) else []


def _shared_start(a: tuple, b: tuple) -> tuple:
    n = 0
    while n < min(len(a), len(b)) and a[n] is b[n]:
        n += 1
    return a[:n]


class ModuleScopes:
    """Module paths of the recorded callers of tinygrad nodes, from a state_dict's keys."""

    def __init__(self, tg, state_dict: dict):
        self._keys: dict = {}  # id(Tensor) or UOp -> its state_dict keys
        self._held = list(state_dict.values())  # the ids above stay theirs
        for key, value in state_dict.items():
            handle = id(value) if isinstance(value, tg.Tensor) else value
            self._keys.setdefault(handle, []).append(key)
        self._paths: dict = {}  # id(a caller's tensors) -> its path, or None
        self.recorded = False  # whether any node looked up was made while recording

    def scope_of(self, uop) -> str | None:
        """The module path of the node's innermost caller that has one, "a/b"; None at the
        top or where no caller was recorded."""
        callers = _made_in.get(uop)
        if callers is None:
            return None
        self.recorded = True
        for tensors in reversed(callers):
            if id(tensors) not in self._paths:
                self._paths[id(tensors)] = self._path_of(tensors)
            path = self._paths[id(tensors)]
            if path is not None:
                return "/".join(path) or None
        return None

    def _path_of(self, tensors: tuple) -> tuple | None:
        """The path down which the first of the caller's tensors in the state_dict lies."""
        for way, ref in tensors:
            tensor = ref()
            keys = None if tensor is None else self._keys.get(id(tensor)) or self._keys.get(tensor.uop)
            if keys:
                return _prefix(keys, way)
        return None


def _prefix(keys: list, way: str) -> tuple | None:
    """The module path that `way` (say `q.weight`) leads down from to one of `keys`."""
    for key in keys:
        if key == way:
            return ()
        if key.endswith("." + way):
            return module_of(key[:-len(way)])
    return None  # the tensor sits elsewhere: not a module of this state_dict
