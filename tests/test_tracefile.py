"""HDF5 trace files (traces.tracefile) and the dump CLI (traces.dump)."""
import dataclasses
import json
import os

import h5py
import numpy as np
import pytest

import simcore
from traces import ConvLayer, KernelConfig, network
from traces.dump import check_arguments, create_parser, main
from traces.stream import RequestChunk
from traces.tracefile import FORMAT_NAME, FORMAT_VERSION, read_trace, replay, write_trace

V100 = simcore.gpu("v100")
KERNEL = KernelConfig()
LAYER = ConvLayer(1, 16, 14, 14, 32, 3, 3, pad=1, name="small")
FIELDS = RequestChunk._fields


def synthetic_chunk(rng, requests, sms=80, packed=True):
    """A random chunk: requests with 1..8 distinct ascending sectors each."""
    count = rng.integers(1, 9, requests).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)[:requests]
    total = int(count.sum())
    base = np.repeat(rng.integers(0, 1 << 20, requests), count)
    steps = np.repeat(rng.integers(1, 4, requests), count)
    flat = (base + steps * (np.arange(total) - np.repeat(starts, count))) * 32
    parts = [flat[f:f + c] for f, c in zip(starts, count)]
    if packed:
        sectors = np.concatenate(parts + [np.zeros(0, np.int64)])
        first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)[:requests]
    else:  # requests out of order in the sector buffer, with junk between them
        order = rng.permutation(requests)
        pieces, first, at = [], np.zeros(requests, np.int64), 0
        for i in order:
            junk = np.full(rng.integers(0, 3), -7, np.int64)
            pieces += [junk, parts[i]]
            first[i] = at + len(junk)
            at += len(junk) + len(parts[i])
        sectors = np.concatenate(pieces + [np.full(5, -9, np.int64)])
    return RequestChunk(round=np.sort(rng.integers(0, 1000, requests)).astype(np.int64),
                        sm=rng.integers(0, sms, requests).astype(np.int32),
                        cta=rng.integers(0, 500, requests).astype(np.int64),
                        operand=rng.integers(0, 3, requests).astype(np.uint8),
                        is_store=rng.integers(0, 2, requests).astype(np.uint8),
                        kstep=rng.integers(0, 50, requests).astype(np.int32),
                        first=first, count=count, sectors=sectors)


def request_sectors(chunk):
    return [chunk.sectors[f:f + c].tolist() for f, c in zip(chunk.first, chunk.count)]


def concat(chunks):
    """Concatenate chunks into one (first re-based)."""
    arrays = {f: np.concatenate([getattr(c, f) for c in chunks]) for f in FIELDS if f not in ("first", "sectors")}
    sectors = [s for c in chunks for s in request_sectors(c)]
    count = np.array([len(s) for s in sectors], np.int32)
    arrays["first"] = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)[:len(count)]
    arrays["sectors"] = np.array([a for s in sectors for a in s], np.int64)
    return RequestChunk(**arrays)


def assert_same(a, b):
    for field in FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype, field
        np.testing.assert_array_equal(x, y, err_msg=field)


def leftovers(directory):
    return sorted(p for p in os.listdir(directory) if p.endswith(".tmp"))


# ---- round trip ----------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["lzf", "gzip"])
def test_round_trip_synthetic(tmp_path, compression):
    rng = np.random.default_rng(1)
    chunks = [synthetic_chunk(rng, n) for n in (50, 1, 300, 0, 77)]
    path = tmp_path / "t.h5"
    trace = write_trace(path, iter(chunks), LAYER, KERNEL, V100, compression=compression)
    expected = concat(chunks)
    assert (trace.n_requests, trace.n_sectors) == (428, len(expected.sectors))
    assert trace.compression == compression
    with h5py.File(path) as fh:                      # stored layout: global first, chunked, compressed
        np.testing.assert_array_equal(fh["first"][:], expected.first)
        assert fh["sectors"].compression == compression and fh["sectors"].maxshape == (None,)
    assert_same(read_trace(path).load(), expected)
    for max_requests in (1, 7, 428, 10_000):
        got = list(trace.iter_chunks(max_requests=max_requests))
        assert len(got) == -(-428 // max_requests)
        assert all(len(c.first) <= max_requests and c.first[0] == 0 for c in got)
        assert_same(concat(got), expected)
    assert leftovers(tmp_path) == []


def test_round_trip_unpacked_and_reused_buffers(tmp_path):
    # chunks whose requests are not back to back in `sectors`, yielded from one reused buffer set
    rng = np.random.default_rng(2)
    chunks = [synthetic_chunk(rng, n, packed=False) for n in (20, 33, 5)]
    expected = concat(chunks)

    def reused():
        buf = {f: np.zeros(1000, getattr(chunks[0], f).dtype) for f in FIELDS}
        for c in chunks:
            views = {}
            for f in FIELDS:
                n = len(getattr(c, f))
                buf[f][:n] = getattr(c, f)
                views[f] = buf[f][:n]
            yield RequestChunk(**views)
            for f in FIELDS:
                buf[f][:] = 0xFF            # scribble over the buffers after the consumer has them

    trace = write_trace(tmp_path / "u.h5", reused(), LAYER, KERNEL, V100)
    assert_same(trace.load(), expected)


def test_metadata_round_trip(tmp_path):
    layer = ConvLayer(3, 8, 10, 12, 4, 3, 2, stride=(2, 1), pad=(1, 0), dilation=(1, 2), name="odd")
    kernel = KernelConfig(tile_m=64, tile_n=32, tile_k=16, threads=128, layout="nchw", dtype="fp16",
                          ctas_per_sm=3, swizzle_log=1)
    gpu = dataclasses.replace(V100, name="v100-big", sms=160, l2_bytes=12 << 20)
    trace = write_trace(tmp_path / "m.h5", [], layer, kernel, gpu)
    again = read_trace(str(tmp_path / "m.h5"))
    for t in (trace, again):
        assert t.layer == layer and t.kernel == kernel and t.gpu == gpu
        assert (t.n_requests, t.n_sectors) == (0, 0)
        assert t.format_version == FORMAT_VERSION
        assert t.package_version not in ("", "unknown")
    assert len(again.load().first) == 0 and list(again.iter_chunks()) == []
    with h5py.File(tmp_path / "m.h5") as fh:
        assert fh.attrs["format"] == FORMAT_NAME
        assert json.loads(fh.attrs["layer"]) == layer.as_dict()
        assert json.loads(fh.attrs["gpu"])["sms"] == 160
    assert "v100-big" in repr(again)


# ---- bad files -----------------------------------------------------------------------------------

@pytest.fixture
def good(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "good.h5"
    # enough sectors for several HDF5 chunks, so damage in the middle hits compressed data
    write_trace(path, [synthetic_chunk(rng, 40_000)], LAYER, KERNEL, V100)
    return path


def one_line_error(exc_info, path):
    text = str(exc_info.value)
    assert str(path) in text and "\n" not in text
    return text


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found") as info:
        read_trace(tmp_path / "nope.h5")
    one_line_error(info, tmp_path / "nope.h5")
    with pytest.raises(ValueError, match="directory"):
        read_trace(tmp_path)


def test_not_hdf5(tmp_path):
    path = tmp_path / "text.h5"
    path.write_text("hello, this is not HDF5\n" * 100)
    with pytest.raises(ValueError, match="not an HDF5 file") as info:
        read_trace(path)
    one_line_error(info, path)
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="not an HDF5 file"):
        read_trace(empty)


def test_truncated(good, tmp_path):
    data = good.read_bytes()
    for keep in (len(data) // 2, len(data) - 100, 600):
        path = tmp_path / f"cut{keep}.h5"
        path.write_bytes(data[:keep])
        with pytest.raises(ValueError) as info:
            trace = read_trace(path)
            list(trace.iter_chunks())
        one_line_error(info, path)


def test_corrupt_data(good, tmp_path):
    data = bytearray(good.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = os.urandom(4096)
    path = tmp_path / "bad.h5"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError) as info:
        trace = read_trace(path)
        list(trace.iter_chunks())
    one_line_error(info, path)


def test_foreign_and_other_version(good, tmp_path):
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as fh:
        fh["x"] = np.arange(10)
    with pytest.raises(ValueError, match="not a deltasim trace file") as info:
        read_trace(foreign)
    one_line_error(info, foreign)
    with h5py.File(foreign, "a") as fh:
        fh.attrs["format"] = "someone-else"
    with pytest.raises(ValueError, match="someone-else"):
        read_trace(foreign)

    with h5py.File(good, "a") as fh:
        fh.attrs["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(ValueError, match=f"version {FORMAT_VERSION + 1} is not supported") as info:
        read_trace(good)
    one_line_error(info, good)


def test_damaged_structure(good):
    with h5py.File(good, "a") as fh:
        del fh["kstep"]
    with pytest.raises(ValueError, match="dataset 'kstep' missing"):
        read_trace(good)
    with h5py.File(good, "a") as fh:
        fh.create_dataset("kstep", data=np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="'kstep'.*expected"):
        read_trace(good)
    with h5py.File(good, "a") as fh:
        del fh["kstep"]
        fh.create_dataset("kstep", data=np.zeros(40_000, np.int32))
        fh.attrs["gpu"] = "{not json"
    with pytest.raises(ValueError, match="bad 'gpu' attribute"):
        read_trace(good)
    with h5py.File(good, "a") as fh:
        fh.attrs["gpu"] = json.dumps(dataclasses.asdict(V100))
        fh["count"][5] = 0
    with pytest.raises(ValueError, match="inconsistent"):
        list(read_trace(good).iter_chunks())


# ---- no partial files ----------------------------------------------------------------------------

def test_no_partial_file_on_error(tmp_path):
    rng = np.random.default_rng(4)
    path = tmp_path / "out.h5"

    def failing():
        yield synthetic_chunk(rng, 100)
        yield synthetic_chunk(rng, 100)
        raise RuntimeError("generator died")

    with pytest.raises(RuntimeError, match="generator died"):
        write_trace(path, failing(), LAYER, KERNEL, V100)
    assert os.listdir(tmp_path) == []

    def interrupted():
        yield synthetic_chunk(rng, 100)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_trace(path, interrupted(), LAYER, KERNEL, V100)
    assert os.listdir(tmp_path) == []

    bad = synthetic_chunk(rng, 10)._replace(sm=np.full(10, 80, np.int32))       # v100 has SMs 0..79
    with pytest.raises(ValueError, match=r"chunk 1: request 0: sm=80 must be in \[0, 80\)"):
        write_trace(path, [synthetic_chunk(rng, 10), bad], LAYER, KERNEL, V100)
    assert os.listdir(tmp_path) == []

    # a failed rewrite leaves the previous file untouched
    write_trace(path, [synthetic_chunk(rng, 10)], LAYER, KERNEL, V100)
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        write_trace(path, failing(), LAYER, KERNEL, V100)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["out.h5"]


def test_write_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_trace(tmp_path / "no" / "t.h5", [], LAYER, KERNEL, V100)
    with pytest.raises(TypeError, match="ConvLayer"):
        write_trace(tmp_path / "t.h5", [], "layer", KERNEL, V100)
    with pytest.raises(ValueError, match="compression"):
        write_trace(tmp_path / "t.h5", [], LAYER, KERNEL, V100, compression="zstd")
    with pytest.raises(ValueError, match="max_requests"):
        list(write_trace(tmp_path / "t.h5", [], LAYER, KERNEL, V100).iter_chunks(0))
    assert os.listdir(tmp_path) == ["t.h5"]


# ---- the real generator and the CLI --------------------------------------------------------------

# resnet50 layer4.0.conv1: C=1024, K=512, 14x14 at batch 1 -> 2 x 4 CTA tiles of 128 k-steps (~65k requests)
DUMP_ARGS = ["resnet50", "--layer", "layer4.0.conv1", "--gpu", "v100", "--tile", "128x128x8"]


def test_dump_read_replay(tmp_path, capsys):
    out = tmp_path / "l4.h5"
    assert main(DUMP_ARGS + ["-o", str(out)]) == 0
    summary = capsys.readouterr().out.strip().splitlines()
    assert len(summary) == 1 and "requests" in summary[0] and "sectors" in summary[0]
    trace = read_trace(out)
    layer = {l.name: l for l in network("resnet50")}["layer4.0.conv1"]
    assert trace.layer == layer and trace.gpu == V100 and trace.kernel == KernelConfig()
    assert f"{trace.n_requests} requests" in summary[0]

    # the file holds exactly the generator's stream
    from traces.stream import iter_request_chunks
    direct = concat([RequestChunk(*(np.array(a) for a in c))
                     for c in iter_request_chunks(layer, V100, KernelConfig(), max_sectors=1 << 14)])
    assert_same(trace.load(), direct)

    hierarchy = pytest.importorskip("simcore.hierarchy")
    simulate = pytest.importorskip("traces.simulate")
    expected = simulate.simulate_layer(layer, V100, KernelConfig())
    assert expected[simcore.metrics.L1_LD_REQUESTS] + expected[simcore.metrics.L1_ST_REQUESTS] \
        == trace.n_requests
    assert replay(out) == expected
    assert replay(trace, max_requests=1000) == expected
    h = hierarchy.Hierarchy.for_gpu(V100, KernelConfig().l1_config(V100))
    assert replay(str(out), h) == expected


def test_dump_json_layers(tmp_path, capsys):
    spec = tmp_path / "mine.json"
    spec.write_text(json.dumps({"layers": [{"name": "tiny", "n": 1, "c": 8, "h": 9, "w": 9, "k": 16,
                                             "r": 3, "s": 3, "pad": 1}]}))
    out = tmp_path / "tiny.h5"
    assert main([str(spec), "--layer", "tiny", "--batch", "2", "--tile", "64x64x8", "--layout", "nchw",
                 "--compression", "gzip", "--no-progress", "-o", str(out)]) == 0
    trace = read_trace(out)
    assert trace.layer.n == 2 and trace.kernel.layout == "nchw" and trace.kernel.tile_m == 64
    assert trace.n_requests > 0 and trace.compression == "gzip"


@pytest.mark.parametrize("op", ["dgrad", "wgrad"])
def test_dump_backward_ops(tmp_path, capsys, op):
    """--op: the file records the op and holds that op's stream (replay == simulate_layer)."""
    spec = tmp_path / "strided.json"
    spec.write_text(json.dumps({"layers": [{"name": "s2", "n": 1, "c": 32, "h": 14, "w": 14, "k": 64,
                                             "r": 3, "s": 3, "stride": 2, "pad": 1}]}))
    out = tmp_path / f"{op}.h5"
    assert main([str(spec), "--layer", "s2", "--op", op, "--no-progress", "-o", str(out)]) == 0
    assert f" {op} on v100" in capsys.readouterr().out
    trace = read_trace(out)
    assert trace.kernel == KernelConfig(op=op)
    simulate = pytest.importorskip("traces.simulate")
    expected = simulate.simulate_layer(trace.layer, V100, trace.kernel)
    assert replay(out) == expected
    assert expected != simulate.simulate_layer(trace.layer, V100, KernelConfig())


def test_trace_without_op_reads_as_fprop(tmp_path):
    """Files written before the op existed (no 'op' in the kernel attribute) read as fprop."""
    from traces.stream import iter_request_chunks
    layer = ConvLayer(1, 8, 6, 6, 16, 3, 3, pad=1)
    path = tmp_path / "old.h5"
    write_trace(path, iter_request_chunks(layer, V100, KernelConfig()), layer, KernelConfig(), V100)
    with h5py.File(path, "r+") as fh:
        kernel = json.loads(fh.attrs["kernel"])
        assert kernel.pop("op") == "fprop"
        fh.attrs["kernel"] = json.dumps(kernel)
    assert read_trace(path).kernel == KernelConfig() and read_trace(path).kernel.op == "fprop"


@pytest.mark.parametrize("args, pattern", [
    (["vgg16", "--layer", "conv1_1", "--op", "dgrad", "--layout", "nchw"], "is defined for layout 'nhwc' only"),
    (["vgg16", "--layer", "conv1_1", "--op", "bprop"], "argument --op: invalid choice: 'bprop'"),
    (["vgg99", "--layer", "conv1_1"], "unknown network 'vgg99'; known networks: vgg16, resnet50"),
    (["vgg16", "--layer", "conv6_1"], "unknown layer 'conv6_1' in vgg16; its layers: conv1_1, conv1_2"),
    (["vgg16", "--layer", "conv1_1", "--gpu", "k80"], "unknown GPU 'k80'; known GPUs: titanxp"),
    (["vgg16", "--layer", "conv1_1", "--tile", "128x128"], "tile must look like MxNxK"),
    (["vgg16", "--layer", "conv1_1", "--tile", "128x100x8"], "bad kernel"),
    (["vgg16", "--layer", "conv1_1", "--batch", "0"], "--batch must be a positive integer"),
    (["vgg16", "--layer", "conv1_1", "--batch", "two"], "--batch must be a positive integer"),
    (["vgg16", "--layer", "conv1_1", "--layout", "chwn"], "layout must be one of"),
    (["vgg16", "--layer", "conv1_1", "--dtype", "fp64"], "dtype must be one of"),
    (["vgg16", "--layer", "conv1_1", "--tile", "256x256x32"], "does not fit"),
    (["vgg16"], "the following arguments are required: --layer"),
    (["missing.json", "--layer", "x"], "missing.json: layer file not found"),
])
def test_dump_bad_input(tmp_path, capsys, args, pattern):
    out = tmp_path / "bad.h5"
    assert main(args + ["-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert pattern in err[0]
    assert os.listdir(tmp_path) == []


def test_dump_bad_output_dir(tmp_path, capsys):
    assert main(["alexnet", "--layer", "conv5", "-o", str(tmp_path / "no" / "x.h5")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["alexnet", "--layer", "conv5", "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_dump_check_arguments():
    parser = create_parser()
    resolved = check_arguments(parser.parse_args(["googlenet", "--layer", "inception_4a/5x5", "--batch", "4",
                                                  "--gpu", "A100", "-o", "x.h5"]))
    assert resolved.layer.name == "inception_4a/5x5" and resolved.layer.n == 4
    assert resolved.gpu.name == "a100" and resolved.kernel == KernelConfig()
    with pytest.raises(ValueError, match="unknown layer"):
        check_arguments(parser.parse_args(["alexnet", "--layer", "fc6", "-o", "x.h5"]))


def test_dump_interrupted(tmp_path, capsys, monkeypatch):
    import signal

    import traces.stream
    real = traces.stream.iter_request_chunks

    def interrupted(layer, gpu, kernel, max_sectors=1 << 20):
        for i, chunk in enumerate(real(layer, gpu, kernel, max_sectors=4096)):
            if i == 2:
                os.kill(os.getpid(), signal.SIGINT)     # as if the user pressed Ctrl-C
            yield chunk

    monkeypatch.setattr(traces.stream, "iter_request_chunks", interrupted)
    handler = signal.getsignal(signal.SIGINT)
    assert main(DUMP_ARGS + ["--no-progress", "-o", str(tmp_path / "x.h5")]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
    assert signal.getsignal(signal.SIGINT) is handler


def test_atomic_write_leaves_nothing_on_error_and_keeps_the_extension(tmp_path):
    from traces.files import atomic_write
    target = tmp_path / "out.json"
    seen = []

    def failing(tmp):
        seen.append(tmp)
        with open(tmp, "w") as fh:
            fh.write("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, failing)
    assert not target.exists() and list(tmp_path.iterdir()) == []
    assert seen[0].endswith(".json")             # matplotlib and h5py pick formats by extension
    atomic_write(target, lambda tmp: open(tmp, "w").write("{}"))
    assert target.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["out.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask    # as open(path, "w") would make it
