"""A frozen dataclass that hashes its fields once (the model's memo keys hash a GPU, a kernel and the factors on
every prediction: 0.3-0.45 us each, recomputed from their 6-24 fields each time)."""
from __future__ import annotations

import dataclasses

__all__ = ["hash_once"]


def hash_once(cls):
    """Give the frozen dataclass ``cls`` a `__hash__` equal to the generated one (the hash of the tuple of its
    hashed fields) but computed once per instance and kept in its ``__dict__``, and a `__getstate__` that
    leaves it out: string hashes differ from process to process, so a pickled copy computes its own."""
    if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
        raise TypeError(f"hash_once needs a frozen dataclass, got {cls!r}")
    names = tuple(f.name for f in dataclasses.fields(cls) if (f.compare if f.hash is None else f.hash))

    def __hash__(self):
        state = self.__dict__
        try:
            return state["_hash"]
        except KeyError:
            value = hash(tuple([getattr(self, name) for name in names]))
            state["_hash"] = value             # the instance's dict: frozen forbids setattr, not this
            return value

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    return cls
