"""Containers: Sequential, ModuleList, ModuleDict."""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Iterable, Iterator, Mapping, Optional, Union

from .module import Module

__all__ = ["Sequential", "ModuleList", "ModuleDict"]


def _check_module(m, where: str) -> Module:
    if not isinstance(m, Module):
        raise TypeError(f"{where}: expected a Module, got {type(m).__name__}")
    return m


class _Indexed(Module):
    """Children named "0", "1", ... (or by the user's keys in Sequential), addressable by index."""

    def _items(self) -> list[tuple[str, Module]]:
        return list(self._modules.items())

    def _index(self, idx: int) -> int:
        n = len(self._modules)
        i = operator.index(idx)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for {type(self).__name__} of length {n}")
        return i % n

    def _reset(self, mods: Iterable[Module]) -> None:
        """Re-register children as "0".."n-1" (after an insert or a deletion)."""
        for name in list(self._modules):
            delattr(self, name)
        for i, m in enumerate(mods):
            setattr(self, str(i), _check_module(m, type(self).__name__))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))


class Sequential(_Indexed):
    """Calls its children in order. `Sequential(a, b)` names them "0", "1";
    `Sequential(OrderedDict(name=module))` keeps the given names."""

    def __init__(self, *modules: Union[Module, Mapping[str, Module]]):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            for k, m in modules[0].items():
                setattr(self, str(k), _check_module(m, f"Sequential['{k}']"))
        else:
            for i, m in enumerate(modules):
                setattr(self, str(i), _check_module(m, f"Sequential[{i}]"))

    def __getitem__(self, idx):
        items = self._items()
        if isinstance(idx, slice):  # keeps the original names, as torch does
            return Sequential(OrderedDict(items[idx]))
        return items[self._index(idx)][1]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, self._items()[self._index(idx)][0], _check_module(module, "Sequential[]"))

    def __delitem__(self, idx) -> None:
        items = self._items()
        drop = {k for k, _ in (items[idx] if isinstance(idx, slice) else [items[self._index(idx)]])}
        self._reset(m for k, m in items if k not in drop)

    def append(self, module: Module) -> "Sequential":
        setattr(self, str(len(self)), _check_module(module, "Sequential.append"))
        return self

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_Indexed):
    """A list of modules, registered as "0", "1", ...; not callable itself."""

    def __init__(self, modules: Optional[Iterable[Module]] = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        items = self._items()
        if isinstance(idx, slice):
            return ModuleList(m for _, m in items[idx])
        return items[self._index(idx)][1]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, str(self._index(idx)), _check_module(module, "ModuleList[]"))

    def __delitem__(self, idx) -> None:
        mods = list(self)
        del mods[idx]
        self._reset(mods)

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def append(self, module: Module) -> "ModuleList":
        setattr(self, str(len(self)), _check_module(module, "ModuleList.append"))
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        mods = list(self)
        mods.insert(index, _check_module(module, "ModuleList.insert"))
        self._reset(mods)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList is a container; iterate over it and call its items")


class ModuleDict(Module):
    """A dict of modules under string keys, in insertion order."""

    def __init__(self, modules: Optional[Mapping[str, Module]] = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        try:
            return self._modules[key]
        except KeyError:
            raise KeyError(f"ModuleDict has no key '{key}'; keys are {list(self._modules)}") from None

    def __setitem__(self, key: str, module: Module) -> None:
        setattr(self, str(key), _check_module(module, f"ModuleDict['{key}']"))

    def __delitem__(self, key: str) -> None:
        delattr(self, key)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def keys(self):
        return list(self._modules.keys())

    def values(self):
        return list(self._modules.values())

    def items(self):
        return list(self._modules.items())

    def update(self, modules: Mapping[str, Module]) -> None:
        for k, m in modules.items():
            self[k] = m

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict is a container; index it and call its items")
