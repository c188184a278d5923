"""Runs PyTorch's own examples (a checkout of the pytorch/examples repository) on tpu and on
CPU with the repository's own commands, and writes a markdown table: per command, whether it
ran on tpu, whether its printed losses match the CPU run's, and how long it took.

    .venv/bin/python tools/pytorch_examples.py --examples ~/pytorch-examples \
        [--only mnist,gcn] [--full] [--timeout 600] [--no-cpu] [--out docs/pytorch_examples.md]
        [--log FILE]   # every run's whole output
    .venv/bin/python tools/pytorch_examples.py --render --out docs/pytorch_examples.md
        # writes the report again from its JSON

--full adds the commands that take minutes (word_language_model evaluates all of wikitext-2);
--only runs the examples whose names start with the words given, long ones included. With
--out, the rows go to the JSON beside the report too, and a later run of some examples
replaces their rows and keeps the others'.

The commands are those of the checkout's run_python_examples.sh and
run_distributed_examples.sh with USE_ACCEL=True, invoked one by one (so one failure does not
stop the rest) with this interpreter in place of `uv run` and without installing the
examples' requirements: the environment is this one (`bash scripts/setup.sh examples`).
The CPU run is the same script's USE_ACCEL=False command, plus the example's own switch off
the accelerator where it picks one by itself (`--no-accel`). Distributed examples run under
torchrun with 2 processes through their own run_example.sh; each process owns one chip,
`tpu:LOCAL_RANK`, and reports LOCAL_WORLD_SIZE devices (docs/guide/distributed.md), so the
examples' `device_count() >= 2` checks pass with the CPU plugin's default of one device per
process. They have no CPU run: their code needs an accelerator.

The data the examples download is written in the examples' own formats before they run, so
nothing is fetched: MNIST's idx files where torchvision's MNIST finds them, Cora's
cora.content/cora.cites (gcn downloads its archive on every run: the request is answered from
a local cora.tgz by a sitecustomize module put on PYTHONPATH for that example alone), image
folders for imagenet and super_resolution, a fast_neural_style model saved from the example's
own TransformerNet, and word_language_model's train.txt where a checkout lacks it. These
files are synthetic, so the losses say nothing about the models' quality: the point is that
the tpu run matches the CPU run.

Losses are the numbers on printed lines that name a loss; they are compared with the CPU run's
where the example draws no random numbers on the device (dropout, noise, sampling draw from
the device's generator, whose stream differs from the CPU's) and seeds its host random
numbers. Examples that write an image are compared on that image's pixels.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "pytorch_examples.md"
PY = "python"  # a command's first word: replaced by this interpreter
DEVICE_RANDOM = "draws random numbers on the device"
# What an example prints when it exits with status 0 without running (too few devices).
NOT_RUN = re.compile(r"Unable to locate sufficient .*")


@dataclasses.dataclass
class Example:
    """One command of an example, as the repository's run scripts give it."""

    name: str
    folder: str  # relative to the checkout
    command: list[str]  # the USE_ACCEL=True command
    cpu_command: list[str] | None  # its CPU form; None: no CPU run
    prepare: Callable[[Path], dict[str, str]] | None = None  # writes data; returns env to add
    no_compare: str = ""  # why the CPU run's numbers cannot match, where they cannot
    output_image: str = ""  # an image the command writes, compared with the CPU run's
    note: str = ""
    skip: str = ""  # why the tool does not run it
    long: bool = False  # minutes: runs with --full, or when --only names it


@dataclasses.dataclass
class Run:
    ok: bool
    seconds: float
    output: str
    losses: list[float]
    image: bytes | None = None


@dataclasses.dataclass
class Row:
    example: Example
    tpu: Run
    cpu: Run | None
    match: str


# ---- losses and comparison ----------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)
_LOSS_LINE = re.compile(r"\b(loss|nll|ppl|error|psnr)\b", re.IGNORECASE)
_TIMING = re.compile(r"\btime\b|ms/batch|\bs/it\b", re.IGNORECASE)


def loss_values(output: str) -> list[float]:
    """The numbers after the word "loss" (or a similar measure) on each line that has one, up
    to a timing that follows on the same line; warnings are not read."""
    values: list[float] = []
    for line in output.splitlines():
        match = _LOSS_LINE.search(line)
        if match is None or "Warning" in line:
            continue
        measures = _TIMING.split(line[match.end() :])[0]
        values.extend(float(token) for token in _NUMBER.findall(measures))
    return values


def compare_losses(tpu: Sequence[float], cpu: Sequence[float], rtol: float = 1e-3) -> str:
    if not tpu and not cpu:
        return "— (prints no loss)"
    if len(tpu) != len(cpu):
        return f"no: {len(tpu)} values on tpu, {len(cpu)} on CPU"
    worst = 0.0
    for a, b in zip(tpu, cpu, strict=True):
        if math.isnan(a) and math.isnan(b):
            continue
        if math.isnan(a) or math.isnan(b):
            return f"no: NaN on {'tpu' if math.isnan(a) else 'CPU'}"
        worst = max(worst, abs(a - b) / max(abs(b), 1e-6))
    verdict = "yes" if worst <= rtol else "no"
    return f"{verdict} ({len(tpu)} values, max rel. diff {worst:.1e})"


def compare_images(tpu: bytes | None, cpu: bytes | None) -> str:
    if tpu is None or cpu is None:
        return "no: image missing"
    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(tpu)), dtype=np.int16)
    b = np.asarray(Image.open(io.BytesIO(cpu)), dtype=np.int16)
    if a.shape != b.shape:
        return f"no: image {a.shape} on tpu, {b.shape} on CPU"
    worst = int(np.abs(a - b).max())
    if worst == 0:
        return "yes (image bit for bit)"
    return f"{'yes' if worst <= 1 else 'no'} (image pixels differ by up to {worst}/255)"


# ---- running ------------------------------------------------------------------------------


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        env.pop(name, None)  # a run from inside torchrun must not look like a rank
    # torchrun and `python` found by run_example.sh are this environment's.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    for name, value in extra.items():
        if name == "PYTHONPATH" and env.get("PYTHONPATH"):
            value = f"{value}{os.pathsep}{env['PYTHONPATH']}"
        env[name] = value
    return env


def run_command(
    example: Example, command: list[str], folder: Path, env: dict[str, str], timeout: float
) -> Run:
    argv = [sys.executable if word == PY else word for word in command]
    image = folder / example.output_image if example.output_image else None
    if image is not None and image.exists():
        image.unlink()  # a stale image must not pass for this run's
    start = time.monotonic()
    # Its own session, so that a timeout ends the whole group: torchrun's workers, the
    # examples' DataLoader workers and rpc processes too.
    process = subprocess.Popen(
        argv,
        cwd=folder,
        env=_environment(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        ok = process.returncode == 0
        if not ok:
            output += f"\n[exit status {process.returncode}]"
        elif (refused := NOT_RUN.search(output)) is not None:
            ok, output = False, output + f"\n[exited without running: {refused.group(0)}]"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        ok, output = False, output + f"\n[timed out after {timeout:.0f} s]"
    seconds = time.monotonic() - start
    data = image.read_bytes() if image is not None and image.exists() else None
    return Run(ok, seconds, output, loss_values(output), data)


def run_example(
    example: Example, checkout: Path, timeout: float, cpu: bool, log: Path | None
) -> Row:
    folder = checkout / example.folder
    if example.skip:
        return Row(example, Run(False, 0.0, f"[not run: {example.skip}]", []), None, "—")
    env = example.prepare(checkout) if example.prepare else {}
    tpu_run = run_command(example, example.command, folder, env, timeout)
    cpu_run = None
    if cpu and example.cpu_command is not None:
        cpu_run = run_command(example, example.cpu_command, folder, env, timeout)
    if log is not None:
        with log.open("a") as f:
            f.write(f"==== {example.name} (tpu): {' '.join(example.command)}\n{tpu_run.output}\n")
            if cpu_run is not None:
                f.write(f"==== {example.name} (CPU)\n{cpu_run.output}\n")
    if cpu_run is None:
        match = "— (no CPU run)" if example.cpu_command is None else "— (not run)"
    elif not (tpu_run.ok and cpu_run.ok):
        match = "— (CPU run failed)" if tpu_run.ok else "—"
    elif example.no_compare:
        match = f"n/a: {example.no_compare}"
    elif example.output_image:
        match = compare_images(tpu_run.image, cpu_run.image)
    else:
        match = compare_losses(tpu_run.losses, cpu_run.losses)
    return Row(example, tpu_run, cpu_run, match)


def failure_summary(output: str) -> str:
    """The line that says why a run failed: the last exception or error line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b|^\[(timed out|exited without)", line):
            return line[:160]
    return lines[-1][:160] if lines else "no output"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


HEADINGS = ["example", "command", "tpu", "CPU match", "seconds (tpu / CPU)", "note"]


def row_cells(row: Row) -> list[str]:
    e = row.example
    if e.skip:
        result = f"not run: {e.skip}"
    elif row.tpu.ok:
        result = "runs"
    else:
        result = f"fails: {failure_summary(row.tpu.output)}"
    seconds = f"{row.tpu.seconds:.0f}"
    if row.cpu is not None:
        seconds += f" / {row.cpu.seconds:.0f}"
    return [e.name, f"`{shlex.join(e.command)}`", result, row.match, seconds, e.note]


def markdown_table(rows: Sequence[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADINGS) + " |", "|" + " --- |" * len(HEADINGS)]
    lines += ["| " + " | ".join(_cell(c) for c in cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


# ---- data in the examples' own formats ----------------------------------------------------


def _rng(seed: int):  # type: ignore[no-untyped-def]
    import numpy as np

    return np.random.default_rng(seed)


def _write_idx(path: Path, magic: int, shape: tuple[int, ...], data: bytes) -> None:
    """An MNIST idx file: big-endian magic (dtype and rank), the sizes, then the bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", n) for n in shape)
    path.write_bytes(header + data)


def fake_mnist(root: Path, train: int = 640, test: int = 320) -> dict[str, str]:
    """MNIST's four raw idx files in <root>/MNIST/raw, where torchvision's datasets.MNIST(root)
    looks before it downloads: each digit a blob whose place depends on its label, so the
    examples' losses fall as they would on the real images."""
    import numpy as np

    raw = root / "MNIST" / "raw"
    rng = _rng(0)
    for prefix, count in (("train", train), ("t10k", test)):
        labels = np.arange(count, dtype=np.uint8) % 10
        rng.shuffle(labels)
        images = rng.integers(0, 40, size=(count, 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):
            row, col = 4 + 2 * (label // 5) * 5, 4 + (label % 5) * 4
            images[i, row : row + 8, col : col + 6] = 255
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", 0x803, (count, 28, 28), images.tobytes())
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", 0x801, (count,), labels.tobytes())
    return {}


_CORA_URL = "https://linqs-data.soe.ucsc.edu/public/lbc/cora.tgz"

# Answers the examples' requests.get for the URLs in PYTORCH_EXAMPLES_LOCAL_URLS from local
# files: gcn downloads Cora on every run, with no way to point it at data on disk.
_SITECUSTOMIZE = """\
import json, os
_LOCAL = json.loads(os.environ.get("PYTORCH_EXAMPLES_LOCAL_URLS", "{}"))
if _LOCAL:
    import requests

    class _LocalResponse:
        def __init__(self, path):
            self.raw = open(path, "rb")
            self.status_code = 200
            self.content = self.raw.read()
            self.raw.seek(0)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.raw.close()

        def raise_for_status(self):
            pass

    _get = requests.get

    def _local_get(url, *args, **kwargs):
        return _LocalResponse(_LOCAL[url]) if url in _LOCAL else _get(url, *args, **kwargs)

    requests.get = _local_get
"""


def fake_cora(
    checkout: Path, folder: str, nodes: int = 2000, features: int = 128
) -> dict[str, str]:
    """Cora's cora.content (id, binary features, class name) and cora.cites (cited, citing),
    in <folder>/cora and as the cora.tgz the example downloads; the env to serve it."""
    rng = _rng(1)
    classes = ["Case_Based", "Genetic_Algorithms", "Neural_Networks", "Probabilistic_Methods"]
    classes += ["Reinforcement_Learning", "Rule_Learning", "Theory"]
    ids = rng.choice(10**6, size=nodes, replace=False) + 35
    labels = rng.integers(0, len(classes), size=nodes)
    bits = rng.random((nodes, features)) < 0.05
    for i, label in enumerate(labels):  # class-dependent features
        bits[i, label * 8 : label * 8 + 8] |= rng.random(8) < 0.5
    content = "\n".join(
        f"{ids[i]}\t" + "\t".join("1" if b else "0" for b in bits[i]) + f"\t{classes[labels[i]]}"
        for i in range(nodes)
    )
    edges = []
    for i in range(nodes):  # mostly within a class, as citations are
        same = [j for j in rng.integers(0, nodes, size=12) if labels[j] == labels[i]][:2]
        edges += [(ids[j], ids[i]) for j in [*same, int(rng.integers(0, nodes))] if j != i]
    cites = "\n".join(f"{a}\t{b}" for a, b in edges)
    data = checkout / ".offline"
    out = checkout / folder / "cora"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cora.content").write_text(content + "\n")
    (out / "cora.cites").write_text(cites + "\n")
    data.mkdir(exist_ok=True)
    archive = data / "cora.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("cora.content", "cora.cites"):
            tar.add(out / name, arcname=f"cora/{name}")
    (data / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return {
        "PYTHONPATH": str(data),
        "PYTORCH_EXAMPLES_LOCAL_URLS": json.dumps({_CORA_URL: str(archive)}),
    }


def _write_image(path: Path, size: tuple[int, int], seed: int) -> None:
    """A smooth RGB picture (gradients and a few discs) saved as JPEG."""
    import numpy as np
    from PIL import Image

    rng = _rng(seed)
    w, h = size
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    picture = np.stack([x / w, y / h, (x + y) / (w + h)], axis=-1) * 200
    for _ in range(4):
        cx, cy, r = rng.integers(0, w), rng.integers(0, h), rng.integers(10, 60)
        picture[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.integers(0, 255, size=3)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(picture.clip(0, 255).astype(np.uint8)).save(path, quality=95)


def fake_imagenet(checkout: Path) -> dict[str, str]:
    """imagenet's sample/train/n and sample/val/n, one picture each, as its run script makes."""
    for split in ("train", "val"):
        _write_image(checkout / "imagenet" / "sample" / split / "n" / "socks.jpg", (256, 320), 2)
    return {}


def fake_bsds300(checkout: Path) -> dict[str, str]:
    """super_resolution's dataset/BSDS300/images/{train,test} (481x321 JPEGs, 16077.jpg among
    the test images, which super_resolve.py reads); data.py downloads only when it is absent."""
    images = checkout / "super_resolution" / "dataset" / "BSDS300" / "images"
    for i in range(8):
        _write_image(images / "train" / f"{100 + i}.jpg", (481, 321), 10 + i)
    for i, name in enumerate(["16077", "3096", "8023", "19021"]):
        _write_image(images / "test" / f"{name}.jpg", (481, 321), 20 + i)
    return {}


def fake_style_model(checkout: Path) -> dict[str, str]:
    """fast_neural_style's saved_models/candy.pth: a state dict of the example's own
    TransformerNet, initialised under a fixed seed (the real ones are downloaded)."""
    folder = checkout / "fast_neural_style"
    model = folder / "saved_models" / "candy.pth"
    if not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        code = (
            "import sys, torch; sys.path.insert(0, 'neural_style');"
            "from transformer_net import TransformerNet; torch.manual_seed(0);"
            f"torch.save(TransformerNet().state_dict(), {str(model)!r})"
        )
        env = _environment({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
        subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, check=True)
    return {}


def wikitext_train(checkout: Path) -> dict[str, str]:
    """word_language_model/data/wikitext-2/train.txt, where the checkout lacks it (a partial
    clone): the validation text stands in, in the same tokenised format."""
    data = checkout / "word_language_model" / "data" / "wikitext-2"
    if not (data / "train.txt").exists() and (data / "valid.txt").exists():
        shutil.copyfile(data / "valid.txt", data / "train.txt")
    return {}


def tiny_shakespeare(checkout: Path) -> dict[str, str]:
    """A text in tinyshakespeare's place (the config reads it over HTTP) for minGPT-ddp's
    shortened run, and no snapshot of an earlier run (it would resume from it)."""
    folder = checkout / "distributed" / "minGPT-ddp"
    words = "the king and queen of the realm spoke to all who would hear them now".split()
    lines = (" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12)) for i in range(3000))
    (folder / MINGPT_TEXT).write_text("\n".join(lines))
    (folder / "gpt_snapshot.pt").unlink(missing_ok=True)
    return {}


MINGPT_TEXT = "tinyshakespeare_stand_in.txt"
# The example's own config trains an 8-layer, 512-wide GPT for 10 epochs at batch 216 (hours on
# the CPU plugin); its hydra overrides, passed through run_example.sh's script argument, shrink
# the model and the data and keep everything it exercises: DDP, float16 autocast with a
# GradScaler, a DistributedSampler, a snapshot saved each epoch.
MINGPT_SHORT = [
    f"data_config.path={MINGPT_TEXT}",
    "data_config.truncate=0.1",
    "gpt_config.n_layer=2",
    "gpt_config.n_head=2",
    "gpt_config.n_embd=64",
    "trainer_config.max_epochs=2",
    "trainer_config.batch_size=32",
    "trainer_config.data_loader_workers=0",
    "trainer_config.save_every=1",
]


# ---- the examples -------------------------------------------------------------------------


def _mnist(checkout: Path) -> dict[str, str]:
    return fake_mnist(checkout / "data")  # the examples read '../data'


# generate.py feeds the Transformer its whole sequence again for each new word: every word is a
# new length, and eager ops compile once per length (size buckets cover fills, copies and
# elementwise ops, not attention's matrix products).
GROWING = (
    "; the Transformer reruns its whole, growing sequence for each word: its ops run at the "
    "length's bucket (docs/design/buckets.md, Sequences rerun whole)"
)


def examples() -> list[Example]:
    """The commands of run_python_examples.sh and run_distributed_examples.sh for the examples
    that use torch.accelerator, USE_ACCEL=True."""
    dropout = f"dropout {DEVICE_RANDOM}"
    table = [
        Example(
            "dcgan",
            "dcgan",
            [PY, "main.py", "--dataset", "fake", "--accel", "--dry-run"],
            [PY, "main.py", "--dataset", "fake", "--dry-run"],
            no_compare=f"its noise {DEVICE_RANDOM}",
        ),
        Example(
            "fast_neural_style",
            "fast_neural_style",
            [
                PY,
                "neural_style/neural_style.py",
                "eval",
                "--content-image",
                "images/content-images/amber.jpg",
                "--model",
                "saved_models/candy.pth",
                "--output-image",
                "images/output-images/amber-candy.jpg",
                "--accel",
            ],
            [
                PY,
                "neural_style/neural_style.py",
                "eval",
                "--content-image",
                "images/content-images/amber.jpg",
                "--model",
                "saved_models/candy.pth",
                "--output-image",
                "images/output-images/amber-candy.jpg",
            ],
            prepare=fake_style_model,
            output_image="images/output-images/amber-candy.jpg",
            note="model: the example's TransformerNet, seeded (the real ones are downloaded)",
        ),
        Example(
            "imagenet",
            "imagenet",
            [PY, "main.py", "--epochs", "1", "sample/"],
            [PY, "main.py", "--epochs", "1", "sample/", "--no-accel"],
            prepare=fake_imagenet,
            no_compare="the command sets no --seed: weights differ run to run",
        ),
        Example(
            "imagenet --gpu 0",
            "imagenet",
            [PY, "main.py", "--epochs", "1", "--gpu", "0", "sample/"],
            [PY, "main.py", "--epochs", "1", "--gpu", "0", "sample/", "--no-accel"],
            prepare=fake_imagenet,
            no_compare="the command sets no --seed: weights differ run to run",
        ),
        Example(
            "mnist",
            "mnist",
            [PY, "main.py", "--epochs", "1", "--dry-run"],
            [PY, "main.py", "--epochs", "1", "--dry-run", "--no-accel"],
            prepare=_mnist,
            no_compare=dropout,
        ),
        Example(
            "mnist_forward_forward",
            "mnist_forward_forward",
            [PY, "main.py", "--epochs", "1"],
            [PY, "main.py", "--epochs", "1", "--no_accel"],
            prepare=lambda checkout: fake_mnist(checkout / "mnist_forward_forward" / "data"),
            note="the run script passes --no_accel even with USE_ACCEL=True; tpu runs without it",
        ),
        Example(
            "mnist_rnn",
            "mnist_rnn",
            [PY, "main.py", "--epochs", "1", "--dry-run", "--accel"],
            [PY, "main.py", "--epochs", "1", "--dry-run"],
            prepare=_mnist,
            no_compare=dropout,
            note="the run script passes no --accel (the example's switch on); added for tpu",
        ),
        Example(
            "siamese_network",
            "siamese_network",
            [PY, "main.py", "--epochs", "1", "--dry-run"],
            [PY, "main.py", "--epochs", "1", "--dry-run", "--no-accel"],
            prepare=_mnist,
            no_compare="its pairs are drawn with Python's random, never seeded",
        ),
        Example(
            "super_resolution",
            "super_resolution",
            [
                PY,
                "main.py",
                "--upscale_factor",
                "3",
                "--batchSize",
                "4",
                "--testBatchSize",
                "100",
                "--nEpochs",
                "1",
                "--lr",
                "0.001",
                "--accel",
            ],
            [
                PY,
                "main.py",
                "--upscale_factor",
                "3",
                "--batchSize",
                "4",
                "--testBatchSize",
                "100",
                "--nEpochs",
                "1",
                "--lr",
                "0.001",
            ],
            prepare=fake_bsds300,
            note="left out of the run script's run_all as flaky; run here",
        ),
        Example(
            "super_resolution (upscale)",
            "super_resolution",
            [
                PY,
                "super_resolve.py",
                "--input_image",
                "dataset/BSDS300/images/test/16077.jpg",
                "--model",
                "model_epoch_1.pth",
                "--output_filename",
                "out.png",
                "--accel",
            ],
            [
                PY,
                "super_resolve.py",
                "--input_image",
                "dataset/BSDS300/images/test/16077.jpg",
                "--model",
                "model_epoch_1.pth",
                "--output_filename",
                "out.png",
            ],
            prepare=fake_bsds300,
            output_image="out.png",
            note="both runs upscale with the model the CPU training run saved",
        ),
        Example(
            "vae",
            "vae",
            [PY, "main.py", "--epochs", "1"],
            [PY, "main.py", "--epochs", "1", "--no-accel"],
            prepare=_mnist,
            no_compare=f"its reparameterisation noise {DEVICE_RANDOM}",
        ),
        Example(
            "gcn",
            "gcn",
            [PY, "main.py", "--epochs", "1", "--dry-run"],
            [PY, "main.py", "--epochs", "1", "--dry-run", "--no-accel"],
            prepare=lambda checkout: fake_cora(checkout, "gcn"),
            no_compare=dropout,
        ),
        Example(
            "gat",
            "gat",
            [PY, "main.py", "--epochs", "1", "--dry-run"],
            [PY, "main.py", "--epochs", "1", "--dry-run", "--no-accel"],
            prepare=lambda checkout: fake_cora(checkout, "gat"),
            no_compare=dropout,
        ),
    ]
    for model in ["default (LSTM)", "RNN_TANH", "RNN_RELU", "LSTM", "GRU", "Transformer"]:
        flags = [] if model.startswith("default") else ["--model", model]
        table.append(
            Example(
                f"word_language_model {model}",
                "word_language_model",
                [PY, "main.py", *flags, "--epochs", "1", "--dry-run", "--accel"],
                [PY, "main.py", *flags, "--epochs", "1", "--dry-run"],
                prepare=wikitext_train,
                no_compare=dropout,
                long=True,
                note="evaluates all of wikitext-2's valid and test text: minutes",
            )
        )
        table.append(
            Example(
                f"word_language_model generate ({model})",
                "word_language_model",
                [PY, "generate.py", "--accel"],
                [PY, "generate.py"],
                no_compare=f"sampling {DEVICE_RANDOM}",
                note="generates from the model.pt the command before it saved"
                + (GROWING if model == "Transformer" else ""),
                long=True,
            )
        )
    for folder, script, nproc in [
        ("distributed/tensor_parallelism", "tensor_parallel_example.py", 2),
        ("distributed/tensor_parallelism", "sequence_parallel_example.py", 2),
        # A 2-D mesh (data x tensor parallel) that asks for 4 devices: the run script's default.
        ("distributed/tensor_parallelism", "fsdp_tp_example.py", 4),
        ("distributed/ddp", "example.py", 2),
        ("distributed/FSDP2", "example.py", 2),
    ]:
        table.append(
            Example(
                f"{folder.split('/')[-1]} {script}",
                folder,
                ["bash", "run_example.sh", script, str(nproc)],
                None,
                note=f"torchrun, {nproc} processes"
                + (" (its 2-D mesh needs 4)" if nproc == 4 else ""),
            )
        )
    table.append(
        Example(
            "minGPT-ddp mingpt/main.py",
            "distributed/minGPT-ddp",
            ["bash", "run_example.sh", "mingpt/main.py", "2"],
            None,
            skip="its config reads tinyshakespeare over HTTP (fsspec) and trains an 8-layer, "
            "512-wide GPT for 10 epochs at batch 216: hours on the CPU plugin (the row below "
            "runs it shortened)",
        )
    )
    table.append(
        Example(
            "minGPT-ddp shortened mingpt/main.py",
            "distributed/minGPT-ddp",
            ["bash", "run_example.sh", " ".join(["mingpt/main.py", *MINGPT_SHORT]), "2"],
            None,
            prepare=tiny_shakespeare,
            long=True,
            note="torchrun, 2 processes; the config shrunk by hydra overrides through "
            "run_example.sh (2 layers, 64 wide, 2 epochs, a local text): DDP, float16 autocast "
            "and GradScaler, snapshots",
        )
    )
    # These start their processes themselves (mp.spawn), not under torchrun: each process sees
    # the host's devices, as a CUDA process does, and picks tpu:rank. On the CPU plugin that
    # is TORCH_TPU_CPU_DEVICE_COUNT=2 (rpc/rnn places nothing on a device by rank).
    for folder in ["distributed/rpc/ddp_rpc", "distributed/rpc/rnn"]:
        table.append(
            Example(
                folder.split("/", 1)[1],
                folder,
                [PY, "main.py"],
                None,
                prepare=lambda checkout: {"TORCH_TPU_CPU_DEVICE_COUNT": "2"},
                note="mp.spawn, 2 processes, TORCH_TPU_CPU_DEVICE_COUNT=2",
            )
        )
    return table


# ---- command line -------------------------------------------------------------------------


def checkout_commit(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "log", "-1", "--format=%h %cs"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def write_report(rows: Sequence[Row], out: Path, command: str | None) -> None:
    """Writes the table to `out` and its rows to the JSON beside it; the rows of examples this
    run left out are kept from the JSON, so a run of some examples updates their rows. With no
    rows and no command, it only writes the report again from the JSON."""
    store = out.with_suffix(".json")
    previous = json.loads(store.read_text()) if store.exists() else {"commands": [], "rows": {}}
    table: dict[str, list[str]] = previous["rows"]
    table.update({row.example.name: row_cells(row) for row in rows})
    order = {e.name: i for i, e in enumerate(examples())}
    first_seen = {name: i for i, name in enumerate(table)}
    names = sorted(table, key=lambda name: (order.get(name, len(order)), first_seen[name]))
    commands = [c for c in previous["commands"] if c != command]
    commands += [command] if command is not None else []
    store.write_text(json.dumps({"commands": commands, "rows": table}, indent=1) + "\n")
    shown = "\n".join(f"    {c}" for c in commands)
    header = f"""# PyTorch's own examples on tpu

The examples of the pytorch/examples repository that use `torch.accelerator`, run by
`tools/pytorch_examples.py` with the repository's own commands (those of
`run_python_examples.sh` and `run_distributed_examples.sh` with `USE_ACCEL=True`, one at a
time) on tpu (the XLA CPU plugin) and in their CPU form. The table comes from these commands
(each row from its latest run; `--examples` named a pytorch/examples checkout):

{shown}

- **Data.** Nothing is downloaded: the tool writes what each example would fetch, in the
  example's own format (MNIST's idx files, Cora's `cora.content`/`cora.cites`, image folders, a
  fast_neural_style model saved from the example's own `TransformerNet`). The data is
  synthetic, so the losses say nothing about the models; they say whether tpu computes what
  CPU computes.
- **CPU match** compares the losses each run prints (or the image it writes). Where the example
  draws random numbers on the device (dropout, noise, sampling) the two runs' random streams
  differ and the numbers cannot match; where it draws host random numbers without a seed, two
  CPU runs differ too. The column says which.
- **Devices under torchrun.** Each torchrun process drives one chip, numbers it `LOCAL_RANK`
  and reports `LOCAL_WORLD_SIZE` devices, as a process on a host with that many GPUs does
  ([Devices under torchrun](guide/distributed.md#devices-under-torchrun)): the examples'
  `torch.accelerator.device_count() >= 2` checks and their `tpu:LOCAL_RANK` work unchanged,
  with no setting. Examples that start their own processes (`mp.spawn`, the rpc ones) see the
  host's devices instead, which on the CPU plugin is `TORCH_TPU_CPU_DEVICE_COUNT=2`.
- **torchvision** is the registry's 0.28.0 (a CUDA build, the `examples` extra): its Python
  parts run beside the CPU torch and its C++ operators, which no example here calls, do not
  load ([the extras](guide/installing.md#the-extras)).

"""
    out.write_text(header + markdown_table([table[name] for name in names]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=Path, help="a pytorch/examples checkout")
    parser.add_argument("--only", default="", help="comma-separated example names or prefixes")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per command")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU runs")
    parser.add_argument("--out", type=Path, default=None, help=f"report (e.g. {DEFAULT_OUT})")
    parser.add_argument("--log", type=Path, default=None, help="every run's whole output")
    parser.add_argument("--full", action="store_true", help="also the examples that take minutes")
    parser.add_argument("--render", action="store_true", help="rewrite --out from its JSON")
    args = parser.parse_args(argv)
    if args.render and args.out is not None:
        write_report([], args.out, None)
        return 0
    if args.examples is None:
        parser.error("--examples is required")
    checkout = args.examples.resolve()
    wanted = [w for w in args.only.split(",") if w]
    chosen = [e for e in examples() if not wanted or any(e.name.startswith(w) for w in wanted)]
    if not (args.full or wanted):
        chosen = [e for e in chosen if not e.long]
    if args.log is not None:
        args.log.write_text("")
    words = list(argv if argv is not None else sys.argv[1:])
    if "--log" in words:  # a local file: not part of how the table was made
        del words[words.index("--log") : words.index("--log") + 2]
    shown = shlex.join(["tools/pytorch_examples.py", *words])  # as typed, quotes included
    rows = []
    for example in chosen:
        row = run_example(example, checkout, args.timeout, not args.no_cpu, args.log)
        status = "ok" if row.tpu.ok else failure_summary(row.tpu.output)
        print(
            f"{example.name}: {status}; CPU match {row.match}; {row.tpu.seconds:.0f} s", flush=True
        )
        rows.append(row)
        if args.out is not None:  # after every row: a long run stopped halfway keeps its rows
            commit = checkout_commit(checkout)
            write_report([row], args.out, f".venv/bin/python {shown}  # examples at {commit}")
    if args.out is None:
        print(markdown_table([row_cells(row) for row in rows]))
    return 0 if all(row.tpu.ok for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
