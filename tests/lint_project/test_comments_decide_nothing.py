"""A comment never decides a finding: the words the prefilter looks for (`DDP`, `accelerator`) count
in code and in strings (a setting such as `strategy="ddp"`), not in comments. The same loop, handed
the same model by the same caller, gets the same findings whatever its comments say."""

from __future__ import annotations

import textwrap

from click.testing import CliRunner

from gradcheck_accum.cli import main

LOOP = '''
def run_epoch(model, data, optimizer, accum):
    for i, batch in enumerate(data):
        loss = model(batch) / accum
        loss.backward(){comment}
        if (i + 1) % accum == 0 or i + 1 == len(data):
            optimizer.step()
            optimizer.zero_grad()
'''

RUNNER = '''
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from epoch import run_epoch


class Runner:
    def __init__(self, net, data, accum):
        self._net, self.data, self.accum = net, data, accum
        self.optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)

    {model}

    def train(self, epochs):
        for _ in range(epochs):
            run_epoch({argument}, self.data, self.optimizer, self.accum)
'''

LAZY = '''@property
    def model(self):
        return DDP(self._net, device_ids=[0])'''


def findings(tmp_path, comment: str, model: str, argument: str) -> list[str]:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "epoch.py").write_text(textwrap.dedent(LOOP.format(comment=comment)))
    (tmp_path / "runner.py").write_text(textwrap.dedent(RUNNER).format(model=model, argument=argument))
    result = CliRunner().invoke(main, ["lint", "--no-cache", "--select", "ALL", "--format", "concise",
                                       str(tmp_path / "epoch.py")], catch_exceptions=False)
    return [line.split(": ", 1)[1].split(" ", 1)[0] for line in result.stdout.splitlines() if ": ACC" in line]


def test_a_comment_naming_the_wrapper_changes_nothing(tmp_path):
    plain = findings(tmp_path, "", LAZY, "self.model")
    commented = findings(tmp_path, "  # the DDP model", LAZY, "self.model")
    assert plain == commented


def test_the_wrapper_at_the_call_is_read_in_code(tmp_path):
    # control: the caller wraps the model in the call it makes, so the evidence is code
    assert "ACC501" in findings(tmp_path, "", "", "DDP(self._net, device_ids=[0])")
    assert "ACC501" in findings(tmp_path, "  # the DDP model", "", "DDP(self._net, device_ids=[0])")
