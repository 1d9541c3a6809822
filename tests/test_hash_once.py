"""`simcore._frozen.hash_once`: the GPU, kernel and factors hash as their generated dataclass hash would, once, and
a pickled copy (another process: other string hashes) computes its own."""
import copy
import dataclasses
import os
import pickle
import subprocess
import sys

import pytest

import analytic
import simcore
import traces
from simcore._frozen import hash_once


def _objects():
    return [simcore.gpu("v100"), dataclasses.replace(simcore.gpu("a100"), sms=54), traces.KernelConfig(),
            traces.KernelConfig(op="dgrad", tile_m=64, dtype="fp16"), analytic.ReuseFactors()]


def _generated_hash(obj):
    names = [f.name for f in dataclasses.fields(obj) if (f.compare if f.hash is None else f.hash)]
    return hash(tuple(getattr(obj, name) for name in names))


@pytest.mark.parametrize("obj", _objects(), ids=lambda o: type(o).__name__)
def test_hash_is_the_fields_hash_and_survives_copies(obj):
    assert hash(obj) == _generated_hash(obj)
    assert hash(obj) == hash(obj)                      # the kept value
    for other in (pickle.loads(pickle.dumps(obj)), copy.copy(obj), copy.deepcopy(obj), dataclasses.replace(obj)):
        assert other == obj and hash(other) == hash(obj)
    assert "_hash" not in pickle.loads(pickle.dumps(obj)).__dict__
    assert {obj: 1}[dataclasses.replace(obj)] == 1


def test_a_pickled_copy_hashes_in_its_own_process():
    """Unpickled under another hash seed, each object equals and hashes as one built there (a carried hash
    would not: its fields' strings hash otherwise)."""
    code = ("import pickle, sys, dataclasses, simcore, traces, analytic\n"
            "objs = pickle.loads(sys.stdin.buffer.read())\n"
            "fresh = [simcore.gpu('v100'), dataclasses.replace(simcore.gpu('a100'), sms=54), traces.KernelConfig(),\n"
            "         traces.KernelConfig(op='dgrad', tile_m=64, dtype='fp16'), analytic.ReuseFactors()]\n"
            "print(all(hash(a) == hash(b) and a == b for a, b in zip(objs, fresh)))\n")
    objs = _objects()
    for obj in objs:
        hash(obj)                                      # kept before pickling
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(objs), capture_output=True, env=env,
                         check=True)
    assert out.stdout.decode().strip() == "True"


def test_only_frozen_dataclasses():
    @dataclasses.dataclass
    class Loose:
        x: int = 0
    with pytest.raises(TypeError, match="frozen dataclass"):
        hash_once(Loose)
