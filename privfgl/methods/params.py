"""`--method-param KEY=VALUE` parsing shared by the methods with their own settings (O-pFGL,
FedSpray, FedOMD): each keeps a frozen dataclass of defaults, optional named presets and a check;
this module turns the raw settings into that dataclass, naming the key and what is valid on error."""
from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Callable, TypeVar

P = TypeVar("P")
_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
_NONE_TEXT = ("none", "null", "off")


def bad_param(method: str, key: str, value, valid: str) -> ValueError:
    return ValueError(f"{method}: invalid method param {key}={value!r}; valid: {valid}")


def coerce(method: str, field: dataclasses.Field, value):
    """One value parsed to the field's type (CLI values arrive as JSON scalars or strings);
    optional fields also take none/null/off."""
    key, kind = field.name, str(field.type)
    if "None" in kind and (value is None or (isinstance(value, str) and value.lower() in _NONE_TEXT)):
        return None
    kind = kind.removesuffix(" | None")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, (str, int)) and str(value).lower() in _BOOL_TEXT:
            return _BOOL_TEXT[str(value).lower()]
        raise bad_param(method, key, value, "true or false")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise bad_param(method, key, value, "an integer")
        try:
            return int(value)
        except ValueError:
            raise bad_param(method, key, value, "an integer") from None
    if kind == "str":
        return str(value)
    if isinstance(value, bool):
        raise bad_param(method, key, value, "a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise bad_param(method, key, value, "a number") from None
    if not math.isfinite(number):
        raise bad_param(method, key, value, "a finite number")
    return number


def resolve(method: str, cls: type[P], method_params: dict, presets: dict[str, dict],
            check: Callable[[P], None]) -> P:
    """cls from `--method-param` settings: defaults < the named `preset` (when `presets` has
    any) < explicit keys; then `check`."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    given = dict(method_params)
    values: dict = {}
    if presets:
        preset = given.pop("preset", None)
        if preset is not None:
            if preset not in presets:
                raise bad_param(method, "preset", preset, ", ".join(presets))
            values.update(presets[preset])
    unknown = sorted(set(given) - set(fields))
    if unknown:
        valid = (["preset"] if presets else []) + list(fields)
        raise ValueError(f"{method}: unknown method param(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    values.update({k: coerce(method, fields[k], v) for k, v in given.items()})
    params = cls(**values)
    check(params)
    return params


# method -> (module, function) that resolves its --method-param settings from the settings alone
# (no data); each raises ValueError naming a bad or unknown key. The other methods take none.
RESOLVERS = {"opfgl": ("privfgl.methods.opfgl.params", "resolve_params"),
             "fedspray": ("privfgl.methods.fedspray.params", "resolve_params"),
             "fedomd": ("privfgl.methods.fedomd.params", "resolve_params"),
             "fedgpl": ("privfgl.methods.fedgpl.params", "resolve_params"),
             "fedlog": ("privfgl.methods.fedlog.params", "resolve_params"),
             "dp-fedavg": ("privfgl.methods.dp_fedavg", "dp_fedavg_params"),
             "dp-sgd": ("privfgl.methods.dp_sgd", "dp_sgd_params"),
             "gap": ("privfgl.methods.gap.params", "resolve_params"),
             "lapgraph": ("privfgl.methods.lapgraph.params", "resolve_params")}


def resolve_method_params(method: str, method_params: dict):
    """`method`'s params as its run will resolve them (its dataclass, or dict for the DP methods; None
    for a method that takes none), ValueError on a bad one; needs no data."""
    if method not in RESOLVERS:
        return None
    module, function = RESOLVERS[method]
    return getattr(importlib.import_module(module), function)(dict(method_params))
