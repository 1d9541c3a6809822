"""Redraw the figures in docs/ (linked from README.md): run from the repository root,

    python docs/make_figures.py [--cache-dir .simcache]

Each figure is the output of the CLI command printed beside it, reduced to a 256-colour palette
(about a third of the size; the plots use far fewer colours). The compare figure simulates every
layer of resnet50 at batch 4 on an a100 (about two minutes on two cores; ``--cache-dir`` keeps the
results for the next run).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile

FIGURES = {
    "roofline_batch.png": "analytic.roofline vgg16 --gpu h100 --batch 1,8,64 -o {out}",
    "roofline_sms.png": "analytic.roofline resnet50 --gpu a100 --dtype fp16 --batch 32 --vary sms -o {out}",
    "scaling.png": "analytic.scaling resnet50 --gpu a100 --dtype fp16 --batch 32 --scale l2_bytes=2 "
                   "--scale sms=2 --scale dram_gbps=2 --scale l2_gbps=2 --plot {out}",
    "compare.png": "validation.compare resnet50 --gpu a100 --batch 4 --quiet --plot {out}",
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Redraw the figures in docs/.")
    parser.add_argument("--cache-dir", help="simulation cache of validation.compare (--cache-dir)")
    args = parser.parse_args(argv)
    import importlib
    from contextlib import redirect_stdout

    from PIL import Image

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))          # this checkout's packages, not an installed copy
    for name, command in FIGURES.items():
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, name)
            module, *cli = shlex.split(command.format(out=raw))
            if module == "validation.compare" and args.cache_dir:
                cli += ["--cache-dir", args.cache_dir]
            print(f"python -m {command.format(out='docs/' + name)}", file=sys.stderr)
            with open(os.devnull, "w") as quiet, redirect_stdout(quiet):
                status = importlib.import_module(module).main(cli)
            if status:
                return status
            image = Image.open(raw).convert("RGB")
            image.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(
                os.path.join(here, name), optimize=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
