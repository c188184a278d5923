"""tools/pytorch_examples.py on a small example folder made here (CI has no pytorch/examples
checkout and no network): the tool runs an example's command on tpu and its CPU form, fakes
MNIST in the idx format torchvision reads, compares the printed losses and writes the table.
The real checkout's run is a separate command (docs/pytorch_examples.md)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "pytorch_examples", ROOT / "tools" / "pytorch_examples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pytorch_examples"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


tool = _tool()

# An example as pytorch/examples writes them: the device from torch.accelerator unless
# --no-accel, MNIST from '../data' through torchvision, the loss printed every step.
TINY_EXAMPLE = """
import argparse
import torch
from torchvision import datasets, transforms

parser = argparse.ArgumentParser()
parser.add_argument("--no-accel", action="store_true")
args = parser.parse_args()
use_accel = not args.no_accel and torch.accelerator.is_available()
device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
print(f"Using {device}")
torch.manual_seed(0)
data = datasets.MNIST("../data", train=True, download=True, transform=transforms.ToTensor())
loader = torch.utils.data.DataLoader(data, batch_size=64)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"Train step {step} Loss: {loss.item():.6f}")
    if step == 3:
        break
"""


def test_loss_values_reads_the_numbers_after_loss() -> None:
    text = "Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.305\n"
    text += "Test set: Average loss: 0.1562, Accuracy: 16/32\n"
    assert tool.loss_values(text) == [2.305, 0.1562, 16.0, 32.0]
    # A timing after the loss, and a warning that says "error", are not losses.
    text = "| epoch 1 | loss 5.50 | ppl 244.69 | time: 12.3s\nUserWarning: error 3 times\n"
    assert tool.loss_values(text) == [5.50, 244.69]
    assert tool.compare_losses([1.0, 2.0], [1.0, 2.0000001]).startswith("yes")
    assert tool.compare_losses([1.0], [1.5]).startswith("no")
    assert tool.compare_losses([1.0], []).startswith("no: 1 values on tpu, 0 on CPU")


def test_fake_mnist_is_what_torchvision_reads(tmp_path: Path) -> None:
    datasets = pytest.importorskip("torchvision.datasets")
    tool.fake_mnist(tmp_path, train=50, test=20)
    train = datasets.MNIST(str(tmp_path), train=True, download=True)  # found: no download
    test = datasets.MNIST(str(tmp_path), train=False)
    assert (len(train), len(test)) == (50, 20)
    assert sorted({int(label) for label in train.targets}) == list(range(10))
    assert tuple(train.data.shape[1:]) == (28, 28)


def test_runs_an_example_on_tpu_and_cpu_and_writes_the_table(tmp_path: Path) -> None:
    pytest.importorskip("torchvision")
    checkout = tmp_path / "examples"
    (checkout / "tiny").mkdir(parents=True)
    (checkout / "tiny" / "main.py").write_text(textwrap.dedent(TINY_EXAMPLE))
    (checkout / "broken").mkdir()
    (checkout / "broken" / "main.py").write_text("raise ValueError('no such layer')\n")
    (checkout / "slow").mkdir()
    (checkout / "slow" / "main.py").write_text(
        "import time\nprint('Loss: 1.0', flush=True)\ntime.sleep(60)\n"
    )
    py = tool.PY
    tiny = tool.Example(
        "tiny", "tiny", [py, "main.py"], [py, "main.py", "--no-accel"], prepare=tool._mnist
    )
    broken = tool.Example("broken", "broken", [py, "main.py"], None)
    slow = tool.Example("slow", "slow", [py, "main.py"], None)

    row = tool.run_example(tiny, checkout, timeout=120, cpu=True, log=None)
    assert row.tpu.ok and row.cpu is not None and row.cpu.ok, row.tpu.output + str(row.cpu)
    assert "Using tpu" in row.tpu.output and "Using cpu" in row.cpu.output
    assert len(row.tpu.losses) == 4
    assert row.match.startswith("yes (4 values"), row.match

    failed = tool.run_example(broken, checkout, timeout=60, cpu=True, log=None)
    assert not failed.tpu.ok and failed.cpu is None
    timed_out = tool.run_example(slow, checkout, timeout=5, cpu=True, log=None)
    assert not timed_out.tpu.ok and "timed out after 5 s" in timed_out.tpu.output
    assert timed_out.tpu.losses == [1.0]  # what it printed before the limit is kept

    out = tmp_path / "report.md"
    tool.write_report([row, failed, timed_out], out, "tools/pytorch_examples.py --examples X")
    lines = out.read_text().splitlines()
    table = [line for line in lines if line.startswith("| ") and "---" not in line]
    assert table[0].startswith("| example | command | tpu | CPU match |")
    assert table[1].startswith("| tiny | `python main.py` | runs | yes (4 values")
    assert (
        "| broken | `python main.py` | fails: ValueError: no such layer | — (no CPU run) |"
        in table[2]
    )
    assert "fails: [timed out after 5 s]" in table[3]

    # A later run of one example replaces its row and keeps the others'.
    failed.example.note = "rerun"
    tool.write_report([failed], out, "tools/pytorch_examples.py --only broken")
    text = out.read_text()
    assert "tools/pytorch_examples.py --examples X" in text and "--only broken" in text
    table = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(table) == 4 and table[2].endswith("| rerun |")
